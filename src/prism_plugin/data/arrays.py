"""Image and label arrays: HDF5 files (source type ``h5``, e.g. PCAM) and ``.npz`` (``npz``, MedMNIST).

Each row of an image array becomes an :class:`~prism_plugin.data.refs.ArrayImageRef`, encoded as PNG
only when read; HDF5 files are opened lazily once per process, so the refs pickle to workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import NoAll, Pool, Source, check_pool_name, format_name, resolve_root
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

    ``images`` / ``labels`` are file names under ``<root>`` with ``{split}`` replaced by the split's file name
    (``rename`` maps task split names to file split names, e.g. ``{val: valid}``).
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
        where = f"task {self.task.name} ({self.task.file})"
        fname = check_pool_name(str(self.rename.get(name, name)), where)
        ipath = self.root / format_name(self.images, where, "source.images", split=fname)
        lpath = self.root / format_name(self.labels_file, where, "source.labels", split=fname)
        for p in (ipath, lpath):
            if not p.is_file():
                raise self.missing(f"split {name!r} file", p)
        try:
            raw_y = _H5Array(lpath, self.labels_key).read_all()
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise PrismError(f"{lpath}: cannot read the labels dataset {self.labels_key!r} ({type(exc).__name__}); "
                             "check source.labels_key and that the file is a complete HDF5 file") from None
        try:
            arr = _H5Array(ipath, self.images_key)
            n = len(arr)
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise PrismError(f"{ipath}: cannot read the images dataset {self.images_key!r} ({type(exc).__name__}); "
                             "check source.images_key and that the file is a complete HDF5 file") from None
        y = raw_labels(raw_y, f"{lpath} [{self.labels_key}]")
        if n != len(y):
            raise PrismError(f"{ipath}: {n} images but {len(y)} labels in {lpath.name}; they must have equal length")
        items = [ArrayImageRef(arr, i, f"{ipath.name}[{i}]") for i in range(n)]
        return Pool(items, y, [r.key for r in items], where=str(ipath))


def raw_labels(values: Any, where: str) -> list:
    """Raw classes of an image-array source: integers (``(N,)`` or ``(N, 1, ..., 1)``, the MedMNIST
    and PCAM layouts) or class-name strings; one-hot rows, floats, bools and objects are refused."""
    from prism_plugin.protocol.inputs import as_labels

    arr = np.asarray(values)
    if arr.dtype.kind in "US" and arr.ndim >= 1 and all(d == 1 for d in arr.shape[1:]):
        return [v.decode() if isinstance(v, bytes) else str(v) for v in arr.reshape(-1).tolist()]
    return as_labels(arr, where, strict=True, column_ok=True).tolist()


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
            import zipfile

            try:
                npz = np.load(self.file, allow_pickle=False)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise PrismError(f"{self.file}: not a valid .npz archive ({type(exc).__name__}); save it again with "
                                 "numpy.savez") from None
            if not hasattr(npz, "files"):
                raise PrismError(f"{self.file}: holds one array (a .npy file), not an .npz archive of "
                                 "{split}_images/{split}_labels arrays; save them with numpy.savez")
            _NPZ_CACHE[key] = npz
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
        where = f"task {self.task.name} ({self.task.file})"
        ik = format_name(self.images_key, where, "source.images_key", split=name)
        lk = format_name(self.labels_key, where, "source.labels_key", split=name)
        if ik not in npz.files or lk not in npz.files:
            raise PrismError(f"{self.file}: no arrays {ik!r}/{lk!r} (arrays: {', '.join(npz.files)})")
        images, raw_y = self._member(npz, ik), self._member(npz, lk)
        y = raw_labels(raw_y, f"{self.file} [{lk}]")
        if images.ndim < 2:
            raise PrismError(f"{self.file} [{ik}]: images must be an array of images (N x H x W [x C]), got shape "
                             f"{images.shape}")
        if len(images) != len(y):
            raise PrismError(f"{self.file}: {len(images)} {ik} but {len(y)} {lk}; they must have equal length")
        items = [ArrayImageRef(images, i, f"{self.file.name}:{ik}[{i}]") for i in range(len(y))]
        return Pool(items, y, [r.key for r in items], where=f"{self.file} [{name}]",
                    label_names=self.label_names)

    def _member(self, npz, key: str) -> np.ndarray:
        import zipfile

        try:
            return npz[key]
        except ValueError as exc:
            if "pickle" in str(exc).lower() or "object" in str(exc).lower():
                raise PrismError(f"{self.file} [{key}]: holds Python objects (dtype object), which are never read "
                                 "without pickle; save plain numeric arrays with numpy.savez") from None
            raise PrismError(f"{self.file} [{key}]: not a valid array ({type(exc).__name__}); save the archive "
                             "again with numpy.savez") from None
        except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            raise PrismError(f"{self.file} [{key}]: cannot be read ({type(exc).__name__}: truncated or corrupt "
                             "archive?); save it again with numpy.savez") from None


__all__ = ["H5Source", "NpzSource"]
