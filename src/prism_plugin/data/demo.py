"""A deterministic generator of synthetic, H&E-like tissue tiles (clearly not real data).

Tiles are drawn with NumPy: an eosin-pink background with fibre texture and haematoxylin-purple nuclei whose
density, size, shape and stain differ by class, with enough overlap between classes that a probe is neither perfect
nor useless. They are written once as PNG files into the data cache in the image-folder layout and then read back
from disk like any real dataset.

Variants: ``binary`` (normal vs tumour) and ``multiclass`` (adipose, stroma, lymphocytes, tumour).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from prism_plugin.data.datacache import data_cache_root
from prism_plugin.paths import cache_root
from prism_plugin.storage import as_error, check_free_space, naming
from prism_plugin.storage import honour_umask

VARIANTS = {
    "binary": ("normal", "tumour"),
    "multiclass": ("adipose", "stroma", "lymphocytes", "tumour"),
}
GENERATOR_VERSION = 1

# class -> (nuclei count range, radius range, elongation, darkness, fibres, vacuoles)
_STYLE = {
    "normal": ((6, 16), (2.5, 4.0), 1.3, 0.55, 0.35, 0),
    "tumour": ((18, 40), (3.5, 6.5), 1.7, 0.75, 0.15, 0),
    "adipose": ((1, 5), (2.0, 3.0), 1.8, 0.5, 0.05, 7),
    "stroma": ((4, 10), (2.0, 3.0), 3.0, 0.55, 0.9, 0),
    "lymphocytes": ((35, 60), (2.0, 3.0), 1.1, 0.9, 0.1, 0),
}
_EOSIN = np.array([236, 170, 200], dtype=np.float64)
_HAEM = np.array([70, 45, 125], dtype=np.float64)


def render_tile(cls: str, rng: np.random.Generator, size: int = 96) -> Image.Image:
    """One RGB tile of class ``cls`` drawn from ``rng``."""
    (n_lo, n_hi), (r_lo, r_hi), elong, dark, fibres, vacuoles = _STYLE[cls]
    # Each tile borrows a little of a random other style, so classes overlap.
    jitter = rng.uniform(0.7, 1.3)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    img = np.empty((size, size, 3))
    img[:] = _EOSIN * rng.uniform(0.9, 1.05) + rng.normal(0, 6, 3)
    # fibre texture: oriented sinusoidal streaks
    theta = rng.uniform(0, np.pi)
    phase = (xx * np.cos(theta) + yy * np.sin(theta)) / rng.uniform(3, 6)
    streak = (np.sin(phase + rng.normal(0, 0.6, (size, size))) > 0.6) * fibres * jitter
    img -= streak[..., None] * np.array([10, 45, 25])
    for _ in range(vacuoles):  # white fat vacuoles
        cx, cy, r = rng.uniform(0, size), rng.uniform(0, size), rng.uniform(10, 20)
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
        img[mask] = np.array([248, 242, 246]) + rng.normal(0, 2, 3)
    n = int(rng.integers(n_lo, n_hi + 1) * jitter)
    for _ in range(n):
        cx, cy = rng.uniform(0, size, 2)
        r = rng.uniform(r_lo, r_hi)
        e = rng.uniform(1.0, elong)
        a = rng.uniform(0, np.pi)
        # the nucleus (u^2 + v^2 < wobble <= 1.15) lies within sqrt(1.15) * r * e of its centre: the same
        # per-pixel arithmetic on that window only (the tiles are identical to whole-tile evaluation)
        reach = int(np.ceil(1.08 * r * e)) + 2
        y0, y1 = max(int(cy) - reach, 0), min(int(cy) + reach + 1, size)
        x0, x1 = max(int(cx) - reach, 0), min(int(cx) + reach + 1, size)
        dx, dy = xx[y0:y1, x0:x1] - cx, yy[y0:y1, x0:x1] - cy
        u = (dx * np.cos(a) + dy * np.sin(a)) / (r * e)
        v = (-dx * np.sin(a) + dy * np.cos(a)) / (r / np.sqrt(e))
        wobble = 1 + 0.15 * np.sin(3 * np.arctan2(v, u) + rng.uniform(0, 6.3))
        mask = u * u + v * v < wobble
        d = np.clip(dark * rng.uniform(0.8, 1.2), 0, 1)
        window = img[y0:y1, x0:x1]
        window[mask] = window[mask] * (1 - d) + _HAEM * d
    img += rng.normal(0, 5, img.shape)
    tile = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    return tile.filter(ImageFilter.GaussianBlur(radius=0.6))


#: a temporary demo folder older than this is swept whoever made it (an interrupted generation)
STALE_TMP_SECONDS = 6 * 3600
#: bytes on disk one PNG tile may take beyond its pixels (headers, the file system's block)
TILE_OVERHEAD = 4096
DEMO_FIX = "free space there, or pass --cache-dir DIR (or set PRISM_CACHE_DIR) to a folder on another disk"
DEMO_ELSEWHERE = "pass --cache-dir DIR (or set PRISM_CACHE_DIR) to another folder"


def _tmp_prefix(name: str) -> str:
    """``.<name>.<host>.<pid>.``: who is generating it, so a later start can tell an orphan."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40] or "host"
    return f".{name}.{host}.{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_tmp(parent: Path, now: float | None = None) -> list[Path]:
    """Remove temporary demo folders left by an interrupted generation; return what was removed.

    A folder ``.demo-*.<host>.<pid>.*`` goes when its process (on this host) is gone, and any
    one untouched for :data:`STALE_TMP_SECONDS` (another host's, or a reused pid) goes too.
    """
    removed: list[Path] = []
    now = time.time() if now is None else now
    host = _tmp_prefix("x").split(".")[2]
    try:
        candidates = [p for p in parent.glob(".demo-*") if p.is_dir()]
    except OSError:
        return removed
    for path in candidates:
        parts = path.name.split(".")  # ['', 'demo-binary-<digest>', host, pid, random]
        orphan = False
        if len(parts) >= 5 and parts[2] == host and parts[3].isdigit():
            orphan = int(parts[3]) != os.getpid() and not _alive(int(parts[3]))
        try:
            old = now - path.stat().st_mtime > STALE_TMP_SECONDS
        except OSError:
            continue
        if orphan or old:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
    return removed


def _estimate_bytes(per_class: dict, n_classes: int, size: int) -> int:
    """Upper estimate of the generated folder's size (a noisy tile barely compresses)."""
    tiles = sum(int(v) for v in per_class.values()) * n_classes
    return tiles * (size * size * 3 + TILE_OVERHEAD)


def ensure_demo_dataset(variant: str, per_class: dict, size: int = 96, seed: int = 0) -> Path:
    """Generate (once) and return the image-folder root of a demo dataset.

    The tiles go under the job's cache (``--cache-dir``, else ``$PRISM_CACHE_DIR`` or the default;
    see :mod:`prism_plugin.data.datacache`); complete tiles already in the default cache are used
    from there (read only: the same spec gives the same tiles). They are written into a temporary folder that is
    renamed into place when complete and removed when the generation fails or is interrupted;
    one left by a killed process is swept by the next start. A cache without room for the tiles,
    or not writable, is reported in one line naming the folder and the fix.
    """
    spec = {"variant": variant, "per_class": {k: int(v) for k, v in sorted(per_class.items())},
            "size": size, "seed": seed, "version": GENERATOR_VERSION}
    classes = VARIANTS[variant]

    def write(tmp: Path) -> None:
        for s_idx, (split, count) in enumerate(sorted(spec["per_class"].items())):
            for c_idx, cls in enumerate(classes):
                folder = tmp / split / cls
                folder.mkdir(parents=True)
                rng = np.random.default_rng([seed, s_idx, c_idx])
                for i in range(count):
                    target = folder / f"{cls}_{i:04d}.png"
                    with naming(target):
                        render_tile(cls, rng, size).save(target, optimize=False)

    return materialise(f"demo-{variant}", spec, _estimate_bytes(spec["per_class"], len(classes), size), write,
                       what="the demo tiles", note="synthetic H&E-like tiles generated by prism_plugin.data.demo\n")


def materialise(prefix: str, spec: dict, estimate_bytes: int, write, what: str, note: str) -> Path:
    """The folder ``<data cache>/datasets/<prefix>-<digest of spec>``, made by ``write(tmp)`` once.

    The shared machinery of the generated demo data sets (the PRISM tiles here, the SYNTHETIC
    hematology cells of :mod:`prism_plugin.data.hema_demo`): ``prefix`` starts with ``demo-`` so
    :func:`sweep_stale_tmp` finds orphans; ``what`` names the data in a free-space message; ``note`` is
    written to the ``COMPLETE`` marker.
    """
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    name = f"{prefix}-{digest}"
    root = data_cache_root() / "datasets" / name
    if (root / "COMPLETE").exists():
        return root
    shared = cache_root() / "datasets" / name  # complete data of the default cache are read, never written
    if shared != root and (shared / "COMPLETE").is_file():
        return shared
    tmp: Path | None = None
    try:
        with naming(root.parent):
            root.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_tmp(root.parent)
        check_free_space(root.parent, estimate_bytes, what=f"{what} {root.name}", fix=DEMO_FIX)
        with naming(root.parent):
            tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(root.name), dir=root.parent))
            honour_umask(tmp, 0o777)  # mkdtemp gives 0700: the folder gets the umask's mode
        write(tmp)
        (tmp / "SPEC.json").write_text(json.dumps(spec, indent=2))
        (tmp / "COMPLETE").write_text(note)
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished first
            if not (root / "COMPLETE").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        tmp = None
    except OSError as exc:
        raise as_error(exc, path=root, elsewhere=DEMO_ELSEWHERE) from None
    finally:
        if tmp is not None:  # failed or interrupted (Ctrl-C, SIGTERM): leave nothing behind
            shutil.rmtree(tmp, ignore_errors=True)
    return root
