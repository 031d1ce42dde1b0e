"""Precomputed embeddings: the PRISM release layout (``embeddings/<model>/<dataset>/``), as .npy or parquet.

:class:`PrecomputedSource` is the feature source ``precomputed`` (``source: {type: precomputed, root:
DIR}``, or any task under ``--model precomputed --model-args root=DIR``).
:func:`read_embedding_split` reads one split's features and labels with a fingerprint of the files
(16-byte blake2b, :func:`prism_plugin.storage.file_digest`); :func:`write_embedding_split` writes
the ``.npy`` pair atomically (the Camelyon17 re-split tools use it).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import keyed_error, resolve_root
from prism_plugin.data.features import FeatureSource, FeatureSplit
from prism_plugin.errors import PrismError
from prism_plugin.storage import file_digest


class PrecomputedSource(FeatureSource):
    """Embeddings in ``{split}_features.npy`` + ``{split}_labels.npy`` (memory-mapped) or ``{split}.parquet``
    under ``root/<the task's embeddings_key>/`` or in the folder ``path``."""

    type_name = "precomputed"
    OPTIONS = frozenset({"root", "path"})
    LAYOUT = "<root>/<embeddings_key>/{split}_features.npy + {split}_labels.npy (or {split}.parquet)"

    def __init__(self, task, root: Any = None, path: Any = None, **options: Any):
        super().__init__(task, root=root, path=path, **options)
        self.root = resolve_root(root) if root else None
        self.path = resolve_root(path) if path else None

    @staticmethod
    def check_spec(options: dict, located) -> None:
        if options.get("root") and options.get("path"):
            raise keyed_error(PrismError(f"{located.where('source.path')}: source.path: give source.root "
                                         "(embeddings/<model>) or source.path (one dataset folder), not both"),
                              "source.path")

    def folder(self) -> Path:
        """The dataset folder: ``path``, else ``root/<embeddings_key>`` (``root`` itself when it holds the arrays)."""
        if self.path is not None:
            return self.path
        if self.root is None:
            raise PrismError(f"task {self.task.name}: source type precomputed needs the embeddings folder: "
                             "--model-args root=DIR (embeddings/<model>) or path=DIR, or source.root / source.path "
                             f"in {self.task.file}")
        from prism_plugin.paths import relative_key_problem

        key = self.task.embeddings_key
        problem = relative_key_problem(key)
        if problem:  # never read outside root= (the task schema refuses such keys too)
            raise PrismError(f"precomputed embeddings: dataset key {problem}")
        folder = self.root / key
        if not folder.is_dir():
            if (self.root / "train_features.npy").exists():
                return self.root
            raise PrismError(f"precomputed embeddings: no folder {folder} for dataset {key!r}; expected "
                             f"{self.root}/<dataset>/{{train,val,test}}_features.npy (or pass path=DIR)")
        return folder

    def features(self, name: str) -> FeatureSplit:
        folder = self.folder()
        try:
            X, y, fp = read_embedding_split(folder, name)
        except OSError as exc:
            raise PrismError(f"{folder}: {name} arrays are unreadable ({exc})") from None
        if self.class_map or self.drop_classes or self.drop_unmapped:
            return self.rows(X, y.tolist(), [str(i) for i in range(len(y))], f"{folder} {name}")
        return FeatureSplit(X, y, fp)


def read_embedding_split(folder: str | Path, split: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(features, labels, fingerprint) of one split of an embedding folder.

    Reads ``{split}_features.npy`` + ``{split}_labels.npy`` (the PRISM release layout
    ``embeddings/<model>/<dataset>/``), or else ``{split}.parquet`` with a list column ``features`` (or
    ``embedding``) and an integer column ``label`` (or ``labels``/``y``). Features must be a 2-D real matrix,
    labels 1-D integers of the same length (:mod:`prism_plugin.data.npy`); every bad file is one PrismError naming
    it.
    """
    from prism_plugin.data.npy import read_features, read_labels
    from prism_plugin.protocol.inputs import check_pair_lengths

    folder = Path(folder)
    if not isinstance(split, str) or not split or "/" in split or "\\" in split or split in (".", ".."):
        raise PrismError(f"{folder}: split name {split!r} cannot name a file there; use a plain name such as test")
    fpath, lpath = folder / f"{split}_features.npy", folder / f"{split}_labels.npy"
    if fpath.exists() and lpath.exists():
        X = read_features(fpath, mmap=True)
        y = read_labels(lpath)
        check_pair_lengths(len(X), len(y), str(folder), f"rows in {fpath.name}", f"labels in {lpath.name}")
        return X, y, file_digest(fpath) + file_digest(lpath)[:16]
    ppath = folder / f"{split}.parquet"
    if ppath.exists():
        return _read_parquet(ppath)
    if fpath.exists() != lpath.exists():
        have, lack = (fpath, lpath) if fpath.exists() else (lpath, fpath)
        raise PrismError(f"{folder}: {have.name} is there but {lack.name} is missing; split {split!r} needs both")
    raise PrismError(f"embeddings for split {split!r} not found in {folder}: expected {split}_features.npy + "
                     f"{split}_labels.npy (PRISM release layout) or {split}.parquet")


def _read_parquet(ppath: Path) -> tuple[np.ndarray, np.ndarray, str]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from prism_plugin.protocol.inputs import as_labels

    try:
        table = pq.read_table(ppath)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise PrismError(f"{ppath}: not a readable parquet file ({type(exc).__name__}); write it again "
                         "(e.g. with pandas.DataFrame.to_parquet)") from None
    fcol = next((c for c in ("features", "embedding", "embeddings") if c in table.column_names), None)
    lcol = next((c for c in ("label", "labels", "y") if c in table.column_names), None)
    if fcol is None or lcol is None:
        raise PrismError(f"{ppath}: needs a list column 'features' and an integer column 'label' "
                         f"(columns: {', '.join(table.column_names)})")
    col = table.column(fcol).combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type)):
        raise PrismError(f"{ppath}: column {fcol!r} must hold one list of numbers per row, got type {col.type}")
    if col.null_count:
        raise PrismError(f"{ppath}: column {fcol!r} has {col.null_count} empty (null) rows; drop or re-extract them")
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False) if len(col) else np.zeros(0, int)
    if len(lengths) and (lengths.min() != lengths.max() or lengths.min() == 0):
        raise PrismError(f"{ppath}: column {fcol!r} rows have {int(lengths.min())} to {int(lengths.max())} values; "
                         "every embedding must have the same (non-zero) length")
    flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False))
    if flat.dtype.kind not in "fiu":
        raise PrismError(f"{ppath}: column {fcol!r} must hold numbers, got {col.type}")
    X = flat.reshape(len(table), -1) if len(table) else flat.reshape(0, 0)
    y = as_labels(table.column(lcol).to_numpy(zero_copy_only=False), f"{ppath}: column {lcol!r}", strict=True)
    return X, y, file_digest(ppath)


def write_embedding_split(folder: str | Path, split: str, X: np.ndarray, y: np.ndarray) -> None:
    """Write ``{split}_features.npy`` / ``{split}_labels.npy`` atomically."""
    from prism_plugin.storage import atomic_write_bytes

    folder = Path(folder)
    for name, arr in ((f"{split}_features.npy", np.asarray(X)), (f"{split}_labels.npy", np.asarray(y))):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        atomic_write_bytes(folder / name, buf.getvalue())


__all__ = ["PrecomputedSource", "read_embedding_split", "write_embedding_split"]
