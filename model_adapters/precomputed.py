"""Adapter for embeddings that already exist: ``--model precomputed``.

Its vectors skip the encoder and the extraction cache. It reads each task's splits from the task's
feature source (``source: {type: precomputed, root: DIR}``, a plugin's feature source; see
:mod:`prism_plugin.data.features`), or with ``--model-args root=DIR`` / ``path=DIR`` from the
layout of the PRISM embedding release, whatever the task's own source::

    <root>/<dataset key>/{train,val,test}_features.npy   (N x D float)
    <root>/<dataset key>/{train,val,test}_labels.npy     (N integers)
    or <root>/<dataset key>/{split}.parquet (a list column ``features``, an integer ``label``)

``root=`` points at ``embeddings/<model>/`` (the dataset key is the task's ``embeddings_key``, by
default its dataset name), ``path=`` at one dataset folder. ``name=UNI`` sets the display name
written to the ``model`` column (default: the folder name, else ``precomputed``). The splits'
fingerprints are part of the run fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_plugin.embed.adapter import Adapter
from prism_plugin.errors import PrismError


class PrecomputedAdapter(Adapter):
    """Embeddings read by a feature source: the task's, or ``precomputed`` at ``root=`` / ``path=``."""

    name = "precomputed"
    display_name = "precomputed"
    input_kind = "features"
    licence = "n/a (user's arrays)"
    #: no hub weights (``ls adapters``: gated n/a)
    gated = None

    def __init__(self, *, root: str | None = None, path: str | None = None, name: str | None = None, **base: Any):
        base.setdefault("normalize", False)
        super().__init__(**base)
        if root is not None and path is not None:
            raise PrismError("--model precomputed takes one of --model-args root=DIR (embeddings/<model>) "
                             "or path=DIR (one dataset folder with {split}_features.npy), not both")
        self.root = Path(root).expanduser() if root else None
        self.path = Path(path).expanduser() if path else None
        base_dir = self.path or self.root
        if base_dir is not None and not base_dir.is_dir():
            raise PrismError(f"--model-args {'path' if self.path else 'root'}={base_dir}: no such directory")
        folder = self.path.parent if self.path else self.root
        self.display_name = name or (folder.name if folder else "") or "precomputed"

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"root", "path", "name"}

    def feature_source(self, task):
        """``precomputed`` at ``root=`` / ``path=`` for ``task``; ``None`` without them (the task's own source)."""
        if self.root is None and self.path is None:
            return None
        from prism_plugin.data.precomputed import PrecomputedSource

        where = {"path": str(self.path.absolute())} if self.path else {"root": str(self.root.absolute())}
        return PrecomputedSource(task, **where)

    def config(self) -> dict[str, Any]:
        return {"adapter": self.name, "display_name": self.display_name, "normalize": self.normalize}


def register(register) -> None:
    register("precomputed", PrecomputedAdapter,
             description="embedding vectors of a feature source: the task's, or root=embeddings/<model> / "
                         "path=<dataset dir> ({split}_features.npy)")
