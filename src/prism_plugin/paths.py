"""Where prism-plugin keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "PRISM_CACHE_DIR"


def cache_root() -> Path:
    """``$PRISM_CACHE_DIR``, else ``$XDG_CACHE_HOME/prism-plugin``, else ``~/.cache/prism-plugin``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "prism-plugin"


# --------------------------------------------------------------------------- names -> paths
#: the longest path component made from a name, in UTF-8 bytes (file systems allow 255 bytes per component)
MAX_COMPONENT = 120
#: the longest task, group or sweep name, in UTF-8 bytes: its folder, cell and artifact file names (name plus a
#: run id) stay below the usual 255-byte limit of one file name
MAX_NAME_BYTES = 200
#: the longest file name made from a name and a run id (cells, artifacts), in UTF-8 bytes, before the suffix
MAX_FILE_STEM = 200
#: a file system's limit of one path component when ``pathconf`` cannot say (Linux, macOS, Windows: 255)
DEFAULT_NAME_MAX = 255


def utf8_len(text: str) -> int:
    """Bytes of ``text`` on the file system (UTF-8; lone surrogates counted as their 3 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _cut_bytes(text: str, limit: int) -> str:
    """The longest prefix of ``text`` of at most ``limit`` UTF-8 bytes (never half a character)."""
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _digest(text: str, n: int) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def safe_component(name: object) -> str:
    """A name (task, group, model, sweep variant, ...) as ONE harmless path component.

    Letters, digits and ``-_.`` are kept; every other character (``/``, ``\\``, NUL, control characters, spaces,
    ``@``, ``=``) becomes ``_``; leading and trailing dots are dropped, so ``.``, ``..`` and hidden names cannot
    occur; an empty result is ``_``. A name longer than :data:`MAX_COMPONENT` bytes (UTF-8: a CJK letter is 3) is
    cut and given a digest of the whole name, so two long names never share a folder. Names that are already
    plain (``prism_demo``, ``DemoViT-Tiny``) come back unchanged.
    """
    text = str(name)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_"
                   for ch in text).strip(".") or "_"
    if utf8_len(safe) > MAX_COMPONENT:
        safe = _cut_bytes(safe, MAX_COMPONENT - 13).rstrip(".") + "-" + _digest(text, 12)
    return safe


def safe_file_stem(raw: str, limit: int = MAX_FILE_STEM) -> str:
    """``<scope>--<run id>`` as a file name stem (cells, per-run artifacts): letters, digits and ``-_.=`` kept,
    the rest ``_``; longer than ``limit`` UTF-8 bytes: cut to ``limit - 20`` bytes plus a digest of ``raw``
    (ASCII names come out exactly as they always have)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in raw)
    if utf8_len(safe) > limit:
        safe = _cut_bytes(safe, limit - 20) + "-" + _digest(raw, 16)
    return safe


def name_max(folder: str | os.PathLike) -> int:
    """The file system's limit of one path component in bytes (``PC_NAME_MAX``) at ``folder`` (its nearest
    existing parent); :data:`DEFAULT_NAME_MAX` where it cannot be asked."""
    here = Path(os.path.abspath(folder))
    for candidate in (here, *here.parents):
        if candidate.exists():
            try:
                return int(os.pathconf(candidate, "PC_NAME_MAX"))
            except (OSError, ValueError, AttributeError):
                return DEFAULT_NAME_MAX
    return DEFAULT_NAME_MAX


def check_component(folder: str | os.PathLike, component: str, what: str = "name") -> None:
    """Refuse (PrismError, before anything is written) a path component longer than ``folder``'s file system
    allows, counted in bytes."""
    from prism_plugin.errors import PrismError

    limit, size = name_max(folder), utf8_len(component)
    if size > limit:
        raise PrismError(f"{folder}: the {what} {short_repr(component)} is {size} bytes as a file name (UTF-8), "
                         f"over this file system's {limit}-byte limit; use a shorter name")


def confined(base: str | os.PathLike, *parts: object) -> Path:
    """``base / safe_component(part) / ...``, checked to stay inside ``base``.

    Every part is sanitised with :func:`safe_component` (so a part is never a path of its own), and the result is
    compared with ``base`` after normalising both (``..`` and ``.`` removed, made absolute): anything that would
    land outside ``base`` raises :class:`~prism_plugin.errors.PrismError` naming both.
    """
    root = Path(base)
    names = [safe_component(p) for p in parts]
    for name in names:  # on a file system with a lower limit than the names are cut to (eCryptfs: 143)
        check_component(root, name, "folder name")
    out = root.joinpath(*names)
    ensure_inside(root, out)
    return out


def ensure_inside(base: str | os.PathLike, path: str | os.PathLike, what: str = "output") -> Path:
    """``path`` itself if it lies inside ``base`` (lexically, after normalising both); else PrismError."""
    from prism_plugin.errors import PrismError

    root = Path(os.path.normpath(os.path.abspath(base)))
    target = Path(os.path.normpath(os.path.abspath(path)))
    if target != root and root not in target.parents:
        raise PrismError(f"{path}: lies outside the {what} folder {base}; names must not be paths "
                         "(no '/', '..' or absolute paths)")
    return Path(path)


def name_problem(name: object, what: str = "name") -> str | None:
    """Why ``name`` cannot be a task/group name (it would be a path, or unprintable), or None.

    Refused: empty or blank, ``.``/``..``, ``/`` or ``\\`` anywhere, NUL and other control characters, leading or
    trailing spaces, more than :data:`MAX_NAME_BYTES` bytes in UTF-8 (a file name holds 255 bytes, and a CJK
    letter takes 3). Anything else is allowed and reaches the file system through :func:`safe_component`.
    """
    if not isinstance(name, str) or not name.strip():
        return f"must be a non-empty {what}, got {short_repr(name)}"
    if name in (".", ".."):
        return f"{short_repr(name)} is a path, not a {what}"
    if "/" in name or "\\" in name:
        return f"{short_repr(name)} contains a path separator; a {what} is a plain name (letters, digits, -_.)"
    if any(not ch.isprintable() for ch in name):
        return f"{short_repr(name)} contains a control character; a {what} is a plain name (letters, digits, -_.)"
    if name != name.strip():
        return f"{short_repr(name)} starts or ends with spaces"
    size = utf8_len(name)
    if size > MAX_NAME_BYTES:
        chars = f" ({len(name)} characters)" if size != len(name) else ""
        return (f"is {size} bytes long in UTF-8{chars}; a {what} has at most {MAX_NAME_BYTES} bytes (it names "
                f"folders and files, and a file name holds at most {DEFAULT_NAME_MAX} bytes)")
    return None


def relative_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a relative folder key such as ``embeddings_key`` (``hematology/acevedo``), or None.

    Allowed: ``/``-separated plain parts. Refused: absolute paths (``/x``, ``~x``, ``C:``), ``.``/``..`` parts,
    empty parts, backslashes, control characters.
    """
    if not isinstance(key, str) or not key.strip():
        return f"must be a non-empty relative folder name, got {short_repr(key)}"
    if key.startswith(("/", "~")) or (len(key) > 1 and key[1] == ":") or "\\" in key:
        return f"{short_repr(key)} is an absolute path or uses '\\'; give a folder name relative to the embeddings root"
    if any(not ch.isprintable() for ch in key):
        return f"{short_repr(key)} contains a control character"
    parts = key.split("/")
    if any(p in ("", ".", "..") or p != p.strip() for p in parts):
        return f"{short_repr(key)}: every '/'-separated part must be a plain folder name (no '..', '.', empty parts)"
    return None


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: error messages never echo a long value (or a file's content)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
