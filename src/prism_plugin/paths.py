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
#: the longest path component made from a name (file systems allow 255 bytes; cells add suffixes)
MAX_COMPONENT = 120


def safe_component(name: object) -> str:
    """A name (task, group, model, sweep variant, ...) as ONE harmless path component.

    Letters, digits and ``-_.`` are kept; every other character (``/``, ``\\``, NUL, control characters, spaces,
    ``@``, ``=``) becomes ``_``; leading and trailing dots are dropped, so ``.``, ``..`` and hidden names cannot
    occur; an empty result is ``_``. A name longer than :data:`MAX_COMPONENT` characters is cut and given a digest
    of the whole name, so two long names never share a folder. Names that are already plain (``prism_demo``,
    ``DemoViT-Tiny``) come back unchanged.
    """
    import hashlib

    text = str(name)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_"
                   for ch in text).strip(".") or "_"
    if len(safe) > MAX_COMPONENT:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = safe[:MAX_COMPONENT - 13].rstrip(".") + "-" + digest
    return safe


def confined(base: str | os.PathLike, *parts: object) -> Path:
    """``base / safe_component(part) / ...``, checked to stay inside ``base``.

    Every part is sanitised with :func:`safe_component` (so a part is never a path of its own), and the result is
    compared with ``base`` after normalising both (``..`` and ``.`` removed, made absolute): anything that would
    land outside ``base`` raises :class:`~prism_plugin.errors.PrismError` naming both.
    """
    root = Path(base)
    out = root.joinpath(*(safe_component(p) for p in parts))
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
    trailing spaces, more than 200 characters. Anything else is allowed and reaches the file system through
    :func:`safe_component`.
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
    if len(name) > 200:
        return f"is {len(name)} characters long; a {what} has at most 200"
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
