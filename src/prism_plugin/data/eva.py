"""Embeddings written by eva (kaiko-eva): the feature source ``eva``.

eva's embeddings writer (``eva.core.callbacks.writers.embeddings.ClassificationEmbeddingsWriter``, run by
``eva predict``) leaves one folder per dataset::

    <root>/manifest.csv          columns origin, embeddings, target, split[, metadata keys...]
    <root>/<embeddings>          one .pt file per sample (the manifest's ``embeddings`` column, relative to root)

Each ``.pt`` file holds what ``torch.save`` wrote for that sample: a list of tensors (one for a patch, several
when several predictions share the sample's name, e.g. a slide's patches), each of shape ``[D]`` or ``[1, D]``;
eva's own reader (``EmbeddingsClassificationDataset``) also takes a bare tensor. ``target`` is the integer
class index eva's dataset gave the sample, ``split`` the name of its dataloader (``train``, ``val``,
``test``, or empty when the writer was given none).

``source: {type: eva, root: DIR}`` reads it (``manifest:`` names another manifest file inside root;
``aggregate: mean`` averages the embeddings of a multi-embedding file, which is refused otherwise). A task
maps its PRISM splits to the manifest's split names (``splits: {train: train, val: val, test: test}``); the
classes are the targets as indices into the task's ``class_names``. ``prism-run eva DIR`` writes such a task
from the folder (classes inferred from the targets) and runs it: :mod:`prism_plugin.commands.eva`.

Needs torch only (no kaiko-eva): a folder copied from the machine that ran eva reads anywhere. Every bad input
is one PrismError naming the file and the fix. The fingerprint of a split covers every row's file name,
target and vector, in manifest order.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import keyed_error, resolve_root
from prism_plugin.data.features import FeatureSource, FeatureSplit
from prism_plugin.errors import PrismError

MANIFEST = "manifest.csv"
#: the columns eva's ManifestManager writes first (metadata keys follow)
COLUMNS = ("origin", "embeddings", "target", "split")
AGGREGATES = ("none", "mean")
#: what a split column written without a dataloader name holds
NO_SPLIT = ""


@dataclass
class Manifest:
    """The rows of an eva manifest: file, target and split of each sample, in file order."""

    path: Path
    files: list[str] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.path.parent

    def split_names(self) -> list[str]:
        return list(dict.fromkeys(self.splits))

    def rows_of(self, split: str) -> list[int]:
        return [i for i, s in enumerate(self.splits) if s == split]


def manifest_path(root: Path, manifest: str | None = None) -> Path:
    """The manifest file of an eva embeddings folder (``root`` may also name the manifest itself)."""
    root = Path(root)
    if root.is_file():
        return root
    if not root.is_dir():
        raise PrismError(f"eva embeddings folder {root} does not exist; point it at the folder eva's embeddings "
                         "writer wrote (its output_dir, the one holding manifest.csv)")
    path = root / (manifest or MANIFEST)
    if not path.is_file():
        found = sorted(p.relative_to(root).as_posix() for p in root.glob("*/manifest.csv"))[:3]
        hint = (f"; manifests one level down: {', '.join(found)} (point at that folder)" if found else
                "; point at the writer's output_dir (EMBEDDINGS_ROOT/<model>/<dataset> in eva's configs), "
                "or name the file with source.manifest")
        raise PrismError(f"{path}: no eva manifest here{hint}")
    return path


def read_manifest(path: Path) -> Manifest:
    """The rows of ``path``, checked: the writer's columns, an integer target on every row, a file on every row."""
    out = Manifest(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise PrismError(f"{path}: empty file; eva writes its header (origin,embeddings,target,split) when "
                                 "predict starts: run `eva predict` to the end, or point at another folder")
            header = [h.strip() for h in header]
            missing = [c for c in ("embeddings", "target", "split") if c not in header]
            if missing:
                raise PrismError(f"{path}: not an eva embeddings manifest: no column(s) {', '.join(missing)} "
                                 f"(columns: {', '.join(header)}); eva's writer writes "
                                 f"{','.join(COLUMNS)}[,metadata...]")
            col = {name: header.index(name) for name in ("embeddings", "target", "split")}
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) < len(header):
                    raise PrismError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}; the file is "
                                     "cut short (an interrupted eva predict?): write it again")
                out.files.append(row[col["embeddings"]].strip())
                out.targets.append(_target(row[col["target"]], path, line))
                out.splits.append(row[col["split"]].strip())
                if not out.files[-1]:
                    raise PrismError(f"{path}:{line}: empty 'embeddings' file name")
    except UnicodeDecodeError:
        raise PrismError(f"{path}: not a text CSV file; point at the manifest.csv eva's writer wrote") from None
    except csv.Error as exc:
        raise PrismError(f"{path}: not a readable CSV file ({exc})") from None
    if not out.files:
        raise PrismError(f"{path}: the manifest lists no samples; eva predict wrote nothing here (run it again)")
    return out


def _target(text: str, path: Path, line: int) -> int:
    value = text.strip()
    if not value:
        raise PrismError(f"{path}:{line}: no target; PRISM probes need a class index per sample: run eva predict "
                         "on a dataset with labels (its targets are written to the 'target' column)")
    try:
        number = float(value)
    except ValueError:
        raise PrismError(f"{path}:{line}: target {value!r} is not a class index; PRISM needs the integer class "
                         "targets of a classification dataset") from None
    if not math.isfinite(number) or not number.is_integer() or number < 0:
        raise PrismError(f"{path}:{line}: target {value!r} is not a class index (a non-negative integer); "
                         "PRISM's probes need classification targets, not regression or segmentation ones")
    return int(number)


def load_vector(file: Path, aggregate: str = "none") -> np.ndarray:
    """The embedding of one sample from the ``.pt`` file eva wrote: a list of ``[D]`` / ``[1, D]`` tensors (one
    unless several predictions share the sample) or a bare tensor; several are refused unless ``aggregate`` is
    ``mean``."""
    import torch

    if not file.is_file():
        raise PrismError(f"{file}: listed in the manifest but missing; copy the whole eva embeddings folder, or "
                         "run eva predict again")
    try:
        value = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is bad input here
        raise PrismError(f"{file}: not a tensor file torch.load can read ({type(exc).__name__}); write it again "
                         "with eva predict") from None
    parts = list(value) if isinstance(value, (list, tuple)) else [value]
    if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
        kinds = sorted({type(p).__name__ for p in parts}) or ["an empty list"]
        raise PrismError(f"{file}: holds {', '.join(kinds)}, not embedding tensors; eva's writer saves a list of "
                         "tensors per sample")
    rows = []
    for p in parts:
        t = p.detach().to(torch.float32)
        if t.ndim == 2 and t.shape[0] == 1:
            t = t[0]
        if t.ndim != 1 or t.numel() == 0:
            raise PrismError(f"{file}: an embedding of shape {tuple(p.shape)}; PRISM needs one vector per sample "
                             "([D] or [1, D]): write CLS or pooled embeddings (not patch tokens or feature maps)")
        rows.append(t.numpy())
    if len(rows) > 1:
        if aggregate != "mean":
            raise PrismError(f"{file}: holds {len(rows)} embeddings (a multi-embedding sample, e.g. a slide's "
                             "patches); PRISM probes one vector per sample: set source.aggregate: mean "
                             "(prism-run eva --aggregate mean) to average them")
        if len({r.shape for r in rows}) > 1:
            raise PrismError(f"{file}: its {len(rows)} embeddings have different lengths "
                             f"{sorted({r.shape[0] for r in rows})}; they cannot be averaged")
        return np.mean(np.stack(rows), axis=0, dtype=np.float64).astype(np.float32)
    return rows[0]


def read_split(manifest: Manifest, split: str, aggregate: str = "none") -> tuple[np.ndarray, list[int], list[str]]:
    """``(X, targets, file names)`` of one manifest split, in manifest order."""
    rows = manifest.rows_of(split)
    if not rows:
        have = ", ".join(repr(s) for s in manifest.split_names())
        raise PrismError(f"{manifest.path}: no rows of split {split!r} (its splits: {have}); map the task's splits "
                         "to these names (splits: {train: NAME, ...}; prism-run eva --train/--val/--test NAME)")
    root = manifest.root.resolve()
    vectors = []
    for i in rows:
        name = manifest.files[i]
        file = (manifest.root / name)
        try:
            file.resolve().relative_to(root)
        except ValueError:
            raise PrismError(f"{manifest.path}: file name {name!r} points outside {manifest.root}; eva writes paths "
                             "relative to its output folder") from None
        vectors.append(load_vector(file, aggregate))
    dims = {v.shape[0] for v in vectors}
    if len(dims) > 1:
        first = {d: manifest.files[rows[k]] for k, d in reversed(list(enumerate(v.shape[0] for v in vectors)))}
        raise PrismError(f"{manifest.path}: split {split!r} mixes embedding lengths "
                         f"{', '.join(f'{d} ({first[d]})' for d in sorted(dims))}; were two models written into "
                         "one folder? Point at one model's output")
    return np.stack(vectors), [manifest.targets[i] for i in rows], [manifest.files[i] for i in rows]


class EvaEmbeddingsSource(FeatureSource):
    """``source: {type: eva, root: DIR[, manifest: FILE][, aggregate: mean]}``: an eva embeddings folder."""

    type_name = "eva"
    OPTIONS = frozenset({"root", "manifest", "aggregate"})
    REQUIRED = frozenset({"root"})
    LAYOUT = "<root>/manifest.csv (origin,embeddings,target,split) + one .pt file per sample, as eva's writer wrote"

    def __init__(self, task, root: Any = None, manifest: Any = None, aggregate: Any = "none", **options: Any):
        super().__init__(task, root=root, manifest=manifest, aggregate=aggregate, **options)
        self.root = resolve_root(root)
        self.manifest_name = str(manifest) if manifest else None
        self.aggregate = str(aggregate or "none")
        self._manifest: Manifest | None = None

    @staticmethod
    def check_spec(options: dict, located) -> None:
        aggregate = options.get("aggregate", "none")
        if aggregate not in (None, *AGGREGATES):
            raise keyed_error(PrismError(f"{located.where('source.aggregate')}: source.aggregate: "
                                         f"{aggregate!r}; choose one of {', '.join(AGGREGATES)}"), "source.aggregate")

    def describe(self) -> str:
        return f"eva embeddings at {self.root}"

    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._manifest = read_manifest(manifest_path(self.root, self.manifest_name))
        return self._manifest

    def all_pool_names(self) -> list[str]:
        return self.manifest().split_names()

    def features(self, name: str) -> FeatureSplit:
        manifest = self.manifest()
        X, targets, files = read_split(manifest, name, self.aggregate)
        top = max(targets)
        if top >= self.task.n_classes and not self.class_map:
            raise PrismError(f"{manifest.path}: split {name!r} has target {top}, but task {self.task.name} has "
                             f"{self.task.n_classes} classes ({self.task.file}); give one class name per target "
                             f"0..{max(manifest.targets)} (class_names, or prism-run eva --class-names)")
        keys = [f"{name}/{f}" for f in files]
        return self.rows(X, targets, keys, where=f"{manifest.path} (split {name!r})")


__all__ = ["EvaEmbeddingsSource", "Manifest", "load_vector", "manifest_path", "read_manifest", "read_split"]
