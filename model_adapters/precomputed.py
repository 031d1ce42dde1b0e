"""Adapter for embeddings that already exist: ``--model precomputed``.

Reads the layout of the PRISM embedding release::

    <root>/<dataset key>/{train,val,test}_features.npy   (N x D float)
    <root>/<dataset key>/{train,val,test}_labels.npy     (N integers)
    or <root>/<dataset key>/{split}.parquet (a list column ``features``, an integer ``label``)

``--model-args root=DIR`` points at ``embeddings/<model>/`` (the dataset key is
the task's ``embeddings_key``, by default its dataset name), or
``path=DIR`` at one dataset folder directly. ``name=UNI`` sets the display name
written to the ``model`` column (default: the folder name). Arrays are
memory-mapped and read with ``allow_pickle=False``; nothing is copied into the
cache, but the arrays' checksums are part of the run fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.embed.adapter import Adapter
from prism_plugin.errors import PrismError


class PrecomputedAdapter(Adapter):
    """Embeddings read from ``{split}_features.npy`` / ``{split}_labels.npy``."""

    name = "precomputed"
    display_name = "precomputed"
    input_kind = "features"
    licence = "n/a (user's arrays)"

    def __init__(self, *, root: str | None = None, path: str | None = None, name: str | None = None, **base: Any):
        base.setdefault("normalize", False)
        super().__init__(**base)
        if (root is None) == (path is None):
            raise PrismError("--model precomputed needs exactly one of --model-args root=DIR (embeddings/<model>) "
                             "or path=DIR (one dataset folder with {split}_features.npy)")
        self.root = Path(root).expanduser() if root else None
        self.path = Path(path).expanduser() if path else None
        base_dir = self.path or self.root
        if not base_dir.is_dir():
            raise PrismError(f"--model-args {'path' if self.path else 'root'}={base_dir}: no such directory")
        self.display_name = name or (self.path.parent.name if self.path else self.root.name) or "precomputed"

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"root", "path", "name"}

    def folder(self, dataset_key: str) -> Path:
        if self.path is not None:
            return self.path
        from prism_plugin.paths import relative_key_problem

        problem = relative_key_problem(dataset_key)
        if problem:  # never read outside root= (the task schema refuses such keys too)
            raise PrismError(f"precomputed embeddings: dataset key {problem}")
        folder = self.root / dataset_key
        if not folder.is_dir():
            if (self.root / "train_features.npy").exists():
                return self.root
            raise PrismError(
                f"precomputed embeddings: no folder {folder} for dataset {dataset_key!r}; expected "
                f"{self.root}/<dataset>/{{train,val,test}}_features.npy (or pass path=DIR)"
            )
        return folder

    def has_split(self, dataset_key: str, split: str) -> bool:
        return (self.folder(dataset_key) / f"{split}_features.npy").exists()

    def load_split(self, dataset_key: str, split: str) -> tuple[np.ndarray, np.ndarray, str]:
        """(features, labels, fingerprint) of one split: ``.npy`` pairs (memory-mapped) or ``.parquet``."""
        from prism_plugin.data.sources import read_embedding_split

        folder = self.folder(dataset_key)
        try:
            return read_embedding_split(folder, split)
        except OSError as exc:
            raise PrismError(f"{folder}: {split} arrays are unreadable ({exc})") from None

    def config(self) -> dict[str, Any]:
        return {"adapter": self.name, "display_name": self.display_name, "normalize": self.normalize}



def register(register) -> None:
    register("precomputed", PrecomputedAdapter,
             description="embeddings on disk: root=embeddings/<model> or path=<dataset dir> ({split}_features.npy)")
