"""Class-folder image trees (source type ``imagefolder``) and the offline synthetic demo (``demo``).

``<root>/<split>/<class>/<image>`` (layout ``splits``) or ``<root>/<class>/<image>`` (layout
``flat``), read in torchvision ``ImageFolder`` order. ``demo`` generates H&E-like tiles once into the
data cache (:mod:`prism_plugin.data.demo`) and reads them as an image folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prism_plugin.data.base import NoAll, Pool, Source, check_pool_name, resolve_root
from prism_plugin.errors import PrismError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}


def _image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` in torchvision ImageFolder order (sorted walk, sorted names)."""
    out: list[Path] = []
    for dirpath, _dirs, fnames in sorted(os.walk(folder, followlinks=True)):
        for fname in sorted(fnames):
            if Path(fname).suffix.lower() in IMAGE_SUFFIXES:
                out.append(Path(dirpath) / fname)
    return out


class ImageFolderSource(Source):
    """Class-folder trees: ``<root>/<split>/<class>/<image>`` (layout ``splits``) or ``<root>/<class>/<image>``
    (layout ``flat``: one pool, split by the task's ``split:`` procedure).

    Items come in torchvision ``ImageFolder`` order (class folders sorted by name, files sorted). Class folders are
    matched to the task's ``class_names`` by name (or through ``class_map``); without class names, sorted folder
    names give labels 0..K-1.
    """

    type_name = "imagefolder"
    OPTIONS = frozenset({"root", "layout"})
    REQUIRED = frozenset({"root"})
    LAYOUT = "<root>/<split>/<class>/<image>"

    def __init__(self, task, root: str = "", layout: str = "splits", **options: Any):
        super().__init__(task, root=root, layout=layout, **options)
        if layout not in ("splits", "flat"):
            raise PrismError(f"{task.file}: source.layout must be 'splits' (<root>/<split>/<class>) or "
                             f"'flat' (<root>/<class>), got {layout!r}")
        self.layout = layout
        self.root = resolve_root(root, task)

    def describe(self) -> str:
        return f"image folders under {self.root}"

    def all_pool_names(self) -> list[str]:
        if not self.root.is_dir():
            raise self.missing("folder", self.root)
        return sorted(d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))

    def pool(self, name: str) -> Pool:
        if self.layout == "flat":
            if name not in ("all", "."):
                raise PrismError(f"task {self.task.name}: source layout 'flat' has one pool ('all'); split "
                                 f"{name!r} must be a part of the task's split: procedure")
            folder, layout = self.root, "<root>/<class>/<image>"
        else:
            check_pool_name(name, f"task {self.task.name} ({self.task.file})")
            if name == "all" and not (self.root / "all").is_dir():
                raise NoAll  # no folder named 'all': it stands for every split folder
            folder, layout = self.root / name, f"{self.root}/{name}/<class>/<image>"
        if not folder.is_dir():
            raise self.missing("image folder" if self.layout == "flat" else f"split {name!r}", folder, layout)
        class_dirs = sorted(d.name for d in folder.iterdir() if d.is_dir())
        items: list[Path] = []
        raw: list[str] = []
        for cname in class_dirs:
            files = _image_files(folder / cname)
            items.extend(files)
            raw.extend([cname] * len(files))
        if not items:
            raise PrismError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) found in class folders "
                             f"(expected {layout})")
        keys = [p.relative_to(self.root).as_posix() for p in items]
        return Pool(items, raw, keys, where=str(folder))


class DemoSource(ImageFolderSource):
    """Synthetic H&E-like tiles, generated once into the data cache, then read from disk."""

    type_name = "demo"
    OPTIONS = frozenset({"variant", "per_class", "size", "seed"})
    REQUIRED = frozenset()

    def __init__(self, task, variant: str = "binary", per_class: dict | None = None, size: int = 96,
                 seed: int = 0, **options: Any):
        from prism_plugin.data import demo

        Source.__init__(self, task, variant=variant, per_class=per_class, size=size, seed=seed, **options)
        if variant not in demo.VARIANTS:
            raise PrismError(f"{task.file}: source.variant must be one of {sorted(demo.VARIANTS)}, got {variant!r}")
        per_class = per_class or {"train": 60, "val": 20, "test": 40}
        self.layout = "splits"
        self.root = demo.ensure_demo_dataset(variant, per_class, int(size), int(seed))


__all__ = ["IMAGE_SUFFIXES", "ImageFolderSource", "DemoSource"]
