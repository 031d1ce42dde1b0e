"""Helpers shared by the adapter tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import needs

REPO = Path(__file__).resolve().parents[2]
from tests.conftest import SHARED  # noqa: E402,F401  (re-exported for the adapter tests)

#: --model name -> display name, as in PROTOCOL §1.1
EIGHT = {"clip": "CLIP", "plip": "PLIP", "conch": "CONCH", "uni": "UNI", "virchow2": "VIRCHOW2",
         "gigapath": "GigaPath", "h_optimus_0": "H-Optimus-0", "midnight": "MIDNIGHT"}


def adapter_class(name: str):
    from prism_plugin.model_adapters import builtin_classes

    return builtin_classes("prism_main")[name]


def needs_backend(name: str) -> None:
    """Skip when the optional library a model is built with is not installed."""
    if name in ("clip", "plip", "midnight"):
        needs("transformers")
    if name == "conch":
        needs("conch.open_clip_custom")


def table_block(text: str, caption_start: str) -> list[list[str]]:
    """Tab-separated rows of the table printed just above the caption ``caption_start``."""
    lines = text.splitlines()
    idx = next(i for i, line in enumerate(lines) if line.startswith(caption_start))
    rows: list[list[str]] = []
    j = idx - 1
    while j >= 0 and (not lines[j].strip() or lines[j].strip() == "Appendix"):
        j -= 1
    while j >= 0 and "\t" in lines[j]:
        rows.insert(0, lines[j].split("\t"))
        j -= 1
    return rows


def parse_size(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)([MB])", text.strip())
    return float(m.group(1)) * (1e9 if m.group(2) == "B" else 1e6)


def extract(adapter, tiles, tmp_path):
    """Embed ``tiles`` through the real extraction loop and cache; return the features read back."""
    import numpy as np
    import torch

    from prism_plugin.data.base import ImageSplit
    from prism_plugin.embed.cache import EmbeddingCache
    from prism_plugin.embed.extract import extract_split

    split = ImageSplit(paths=list(tiles), labels=np.arange(len(tiles)) % 2, fingerprint="tiles-v1")
    entry = EmbeddingCache(tmp_path / "cache").entry(adapter.fingerprint(), split.fingerprint, "test")
    with entry.lock():
        n, _ = extract_split(adapter, split, entry, device=torch.device("cpu"), num_workers=0, progress=False)
    X, y = entry.load()
    assert n == len(tiles) and list(y) == list(split.labels)
    return np.asarray(X)
