"""Image and label arrays: HDF5 files (source type ``h5``, e.g. PCAM) and ``.npz`` (``npz``, MedMNIST).

Each row of an image array becomes an :class:`~prism_plugin.data.refs.ArrayImageRef`, encoded as PNG
only when read; HDF5 files are opened lazily once per process, so the refs pickle to workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import NoAll, Pool, Source, resolve_root
from prism_plugin.data.refs import ArrayImageRef
from prism_plugin.errors import PrismError


class _H5Array:
    """A picklable handle on one HDF5 dataset, opened lazily in each process."""

    _open: dict[tuple[int, str], Any] = {}

    def __init__(self, path: Path, key: str):
        self.path, self.key = Path(path), key

    def _ds(self):
        import h5py

        k = (os.getpid(), str(self.path))
        if k not in self._open:
            self._open[k] = h5py.File(self.path, "r")
        return self._open[k][self.key]

    def __len__(self) -> int:
        return len(self._ds())

    def __getitem__(self, i):
        return self._ds()[i]

    def read_all(self) -> np.ndarray:
        return self._ds()[...]


class H5Source(Source):
    """Image and label arrays in HDF5 files, one pair per split (e.g. torchvision's PCAM files).

    ``images`` / ``labels`` are file names under ``<root>`` with ``{split}``
    replaced by the split's file name (``rename`` maps task split names to
    file split names, e.g. ``{val: valid}``).
    """

    type_name = "h5"
    OPTIONS = frozenset({"root", "images", "labels", "images_key", "labels_key", "rename"})
    REQUIRED = frozenset({"root", "images", "labels"})
    LAYOUT = "<root>/<images file> and <root>/<labels file> per split"

    def __init__(self, task, root: str = "", images: str = "", labels: str = "", images_key: str = "x",
                 labels_key: str = "y", rename: dict | None = None, **options: Any):
        super().__init__(task, root=root, images=images, labels=labels, images_key=images_key,
                         labels_key=labels_key, rename=rename, **options)
        self.root = resolve_root(root, task)
        self.images, self.labels_file = images, labels
        self.images_key, self.labels_key = images_key, labels_key
        self.rename = dict(rename or {})

    def describe(self) -> str:
        return f"HDF5 arrays under {self.root}"

    def pool(self, name: str) -> Pool:
        if name == "all":
            raise NoAll
        fname = self.rename.get(name, name)
        ipath, lpath = self.root / self.images.format(split=fname), self.root / self.labels_file.format(split=fname)
        for p in (ipath, lpath):
            if not p.is_file():
                raise self.missing(f"split {name!r} file", p)
        try:
            y = np.asarray(_H5Array(lpath, self.labels_key).read_all()).reshape(-1)
            arr = _H5Array(ipath, self.images_key)
            n = len(arr)
        except (OSError, KeyError) as exc:
            raise PrismError(f"{ipath}: cannot read datasets {self.images_key!r}/{self.labels_key!r} ({exc})") from None
        if n != len(y):
            raise PrismError(f"{ipath}: {n} images but {len(y)} labels in {lpath.name}")
        items = [ArrayImageRef(arr, i, f"{ipath.name}[{i}]") for i in range(n)]
        return Pool(items, [int(v) for v in y.tolist()], [r.key for r in items], where=str(ipath))


_NPZ_CACHE: dict[str, Any] = {}


class NpzSource(Source):
    """Image and label arrays in one ``.npz`` (MedMNIST layout: ``{split}_images``, ``{split}_labels``)."""

    type_name = "npz"
    OPTIONS = frozenset({"root", "file", "images_key", "labels_key", "label_names"})
    REQUIRED = frozenset({"root", "file"})
    LAYOUT = "<root>/<file> holding {split}_images and {split}_labels arrays"

    def __init__(self, task, root: str = "", file: str = "", images_key: str = "{split}_images",
                 labels_key: str = "{split}_labels", label_names: list | None = None, **options: Any):
        super().__init__(task, root=root, file=file, images_key=images_key, labels_key=labels_key,
                         label_names=label_names, **options)
        self.file = resolve_root(root, task) / file
        self.images_key, self.labels_key = images_key, labels_key
        self.label_names = [str(n) for n in label_names] if label_names else None

    def describe(self) -> str:
        return f"arrays in {self.file}"

    def _npz(self):
        if not self.file.is_file():
            raise self.missing("file", self.file)
        key = str(self.file.resolve())
        if key not in _NPZ_CACHE:
            _NPZ_CACHE[key] = np.load(self.file, allow_pickle=False)
        return _NPZ_CACHE[key]

    def all_pool_names(self) -> list[str]:
        suffix = self.images_key.replace("{split}", "")
        found = [k[: -len(suffix)] if suffix and k.endswith(suffix) else k for k in self._npz().files
                 if k.endswith(suffix)]
        order = {"train": 0, "val": 1, "valid": 1, "validation": 1, "test": 2}
        return sorted(found, key=lambda s: (order.get(s, 3), s))

    def pool(self, name: str) -> Pool:
        if name == "all":
            raise NoAll
        npz = self._npz()
        ik, lk = self.images_key.format(split=name), self.labels_key.format(split=name)
        if ik not in npz.files or lk not in npz.files:
            raise PrismError(f"{self.file}: no arrays {ik!r}/{lk!r} (arrays: {', '.join(npz.files)})")
        images = npz[ik]
        y = np.asarray(npz[lk]).reshape(-1)
        if len(images) != len(y):
            raise PrismError(f"{self.file}: {len(images)} {ik} but {len(y)} {lk}")
        items = [ArrayImageRef(images, i, f"{self.file.name}:{ik}[{i}]") for i in range(len(y))]
        return Pool(items, [int(v) for v in y.tolist()], [r.key for r in items], where=f"{self.file} [{name}]",
                    label_names=self.label_names)


__all__ = ["H5Source", "NpzSource"]
