"""Precomputed embeddings: the PRISM release layout (``embeddings/<model>/<dataset>/``), as .npy or parquet.

:func:`read_embedding_split` reads one split's features and labels with a fingerprint of the files
(16-byte blake2b, :func:`prism_plugin.hashing.file_digest`); :func:`write_embedding_split` writes
the ``.npy`` pair atomically. ``--model precomputed`` and the Camelyon17 re-split tools use them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.hashing import file_digest


def read_embedding_split(folder: str | Path, split: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(features, labels, fingerprint) of one split of an embedding folder.

    Reads ``{split}_features.npy`` + ``{split}_labels.npy`` (the PRISM release
    layout ``embeddings/<model>/<dataset>/``), or else ``{split}.parquet`` with
    a list column ``features`` (or ``embedding``) and an integer column
    ``label`` (or ``labels``/``y``).
    """
    folder = Path(folder)
    fpath, lpath = folder / f"{split}_features.npy", folder / f"{split}_labels.npy"
    if fpath.exists() and lpath.exists():
        try:
            X = np.load(fpath, mmap_mode="r", allow_pickle=False)
            y = np.load(lpath, allow_pickle=False)
        except ValueError as exc:
            raise PrismError(f"{folder}: cannot read {split} arrays without pickle ({exc})") from None
        if len(X) != len(y):
            raise PrismError(f"{folder}: {split}_features.npy has {len(X)} rows but {split}_labels.npy has "
                             f"{len(y)}; they must have equal length")
        return X, np.asarray(y).reshape(-1), file_digest(fpath) + file_digest(lpath)[:16]
    ppath = folder / f"{split}.parquet"
    if ppath.exists():
        import pyarrow.parquet as pq

        table = pq.read_table(ppath)
        fcol = next((c for c in ("features", "embedding", "embeddings") if c in table.column_names), None)
        lcol = next((c for c in ("label", "labels", "y") if c in table.column_names), None)
        if fcol is None or lcol is None:
            raise PrismError(f"{ppath}: needs a list column 'features' and an integer column 'label' "
                             f"(columns: {', '.join(table.column_names)})")
        col = table.column(fcol).combine_chunks()
        X = np.asarray(col.flatten().to_numpy(zero_copy_only=False)).reshape(len(table), -1)
        y = table.column(lcol).to_numpy().astype(np.int64)
        return X, y, file_digest(ppath)
    raise PrismError(f"embeddings for split {split!r} not found in {folder}: expected {split}_features.npy + "
                     f"{split}_labels.npy (PRISM release layout) or {split}.parquet")


def write_embedding_split(folder: str | Path, split: str, X: np.ndarray, y: np.ndarray) -> None:
    """Write ``{split}_features.npy`` / ``{split}_labels.npy`` atomically."""
    from prism_plugin.results import atomic_write_bytes

    folder = Path(folder)
    for name, arr in ((f"{split}_features.npy", np.asarray(X)), (f"{split}_labels.npy", np.asarray(y))):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        atomic_write_bytes(folder / name, buf.getvalue())


__all__ = ["read_embedding_split", "write_embedding_split"]
