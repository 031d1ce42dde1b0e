"""Fingerprints of a split's items: blake2b over each item's key, label and content.

The fingerprint keys the embedding cache and is recorded in ``summary.json``: it changes when an
image's bytes, its label, its identity (key) or the order of the items changes, and only then.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np

from prism_plugin.data.refs import ImageRef
from prism_plugin.storage import update_from_file


def split_fingerprint(keys: Sequence[str], labels: np.ndarray, items: Sequence) -> str:
    """blake2b over each item's key, label and content (file bytes or :meth:`ImageRef.digest_bytes`)."""
    h = hashlib.blake2b(digest_size=20)
    for key, y, item in zip(keys, labels.tolist(), items):
        h.update(f"{key}|{y}|".encode())
        if isinstance(item, ImageRef):
            h.update(item.digest_bytes())
        else:
            update_from_file(h, item, chunk=1 << 20)
    return h.hexdigest()


def files_fingerprint(root: Path, paths: list[Path], labels: np.ndarray) -> str:
    """blake2b over relative paths, labels and file contents."""
    return split_fingerprint([p.relative_to(root).as_posix() for p in paths], labels, paths)


__all__ = ["split_fingerprint", "files_fingerprint"]
