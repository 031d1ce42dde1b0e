"""Dataset sources: where a task's images (or embeddings) come from.

A source turns a task's ``source:`` mapping into, per split, a list of image
items with integer labels (:class:`ImageSplit`). Sources are looked up by
``source.type`` in :data:`SOURCE_TYPES`; each has a fingerprint of its content
that keys the embedding cache and is recorded in ``summary.json``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prism_plugin.errors import PrismError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}
DATA_ROOT_ENV = "PRISM_DATA_DIR"


@dataclass
class ImageSplit:
    """Image files of one split and their integer labels."""

    paths: list[Path]
    labels: np.ndarray
    fingerprint: str

    def __len__(self) -> int:
        return len(self.paths)


def _resolve_root(raw: str, task) -> Path:
    root = Path(os.path.expandvars(str(raw))).expanduser()
    if not root.is_absolute():
        base = Path(os.environ.get(DATA_ROOT_ENV, "."))
        root = base / root
    return root


def files_fingerprint(root: Path, paths: list[Path], labels: np.ndarray) -> str:
    """blake2b over relative paths, labels and file contents."""
    h = hashlib.blake2b(digest_size=20)
    for p, y in zip(paths, labels.tolist()):
        h.update(f"{p.relative_to(root).as_posix()}|{y}|".encode())
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class ImageFolderSource:
    """``<root>/<split name>/<class name>/*.png`` (torchvision ImageFolder layout per split).

    Class folders are matched to the task's ``class_names`` (label = position
    in that list); without class names, sorted folder names give labels 0..K-1.
    """

    def __init__(self, task, root: str, **options: Any):
        if options:
            raise PrismError(f"{task.file}: source.{next(iter(options))} is not an imagefolder option (allowed: root)")
        self.task = task
        self.root = _resolve_root(root, task)

    def describe(self) -> str:
        return f"image folders under {self.root}"

    def split(self, split: str, limit: int | None = None) -> ImageSplit:
        cfg = self.task.splits[split]
        folder = self.root / cfg.name
        if not folder.is_dir():
            raise PrismError(
                f"task {self.task.name}: dataset {self.task.dataset!r} split {split!r} not found at {folder}; "
                f"place it as {self.root}/{cfg.name}/<class>/<image> or point source.root (or ${DATA_ROOT_ENV}) at it"
            )
        class_dirs = sorted(d.name for d in folder.iterdir() if d.is_dir())
        names = list(self.task.class_names) or class_dirs
        unknown = sorted(set(class_dirs) - set(names))
        if unknown:
            raise PrismError(f"{folder}: class folder(s) {unknown} are not in the task's class_names {names}")
        paths: list[Path] = []
        labels: list[int] = []
        for label, cname in enumerate(names):
            cdir = folder / cname
            if not cdir.is_dir():
                continue
            files = sorted(p for p in cdir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            paths.extend(files)
            labels.extend([label] * len(files))
        if not paths:
            raise PrismError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) found")
        y = np.asarray(labels, dtype=np.int64)
        if limit is not None:
            keep = _limit_indices(y, limit)
            paths = [paths[i] for i in keep]
            y = y[keep]
        return ImageSplit(paths, y, files_fingerprint(self.root, paths, y))


def _limit_indices(labels: np.ndarray, limit: int) -> np.ndarray:
    """First ``limit`` items, taken round-robin over classes so every class stays present."""
    by_class = [np.flatnonzero(labels == c).tolist() for c in np.unique(labels)]
    out: list[int] = []
    i = 0
    while len(out) < min(limit, len(labels)):
        for idx in by_class:
            if i < len(idx) and len(out) < limit:
                out.append(idx[i])
        i += 1
    return np.sort(np.asarray(out, dtype=np.int64))


class DemoSource(ImageFolderSource):
    """Synthetic H&E-like tiles, generated once into the data cache, then read from disk."""

    def __init__(self, task, variant: str = "binary", per_class: dict | None = None, size: int = 96,
                 seed: int = 0, **options: Any):
        from prism_plugin.data import demo

        if options:
            raise PrismError(f"{task.file}: source.{next(iter(options))} is not a demo option "
                             "(allowed: variant, per_class, size, seed)")
        if variant not in demo.VARIANTS:
            raise PrismError(f"{task.file}: source.variant must be one of {sorted(demo.VARIANTS)}, got {variant!r}")
        self.task = task
        per_class = per_class or {"train": 60, "val": 20, "test": 40}
        self.root = demo.ensure_demo_dataset(variant, per_class, int(size), int(seed))


SOURCE_TYPES: dict[str, Callable[..., Any]] = {
    "imagefolder": ImageFolderSource,
    "demo": DemoSource,
}


def open_source(task):
    """Instantiate the task's source, or fail naming the task file and the type."""
    options = dict(task.source)
    kind = options.pop("type")
    if kind == "precomputed":
        return None  # features come from the precomputed adapter
    if kind not in SOURCE_TYPES:
        from prism_plugin.errors import suggest

        raise PrismError(f"{task.file}: source.type {kind!r} is not known{suggest(kind, SOURCE_TYPES)} "
                         f"(known: {', '.join(sorted(SOURCE_TYPES))}, precomputed)")
    try:
        return SOURCE_TYPES[kind](task, **options)
    except TypeError as exc:
        raise PrismError(f"{task.file}: source options {sorted(options)} do not fit type {kind!r} ({exc})") from None
