"""The public API a data source subclasses: :class:`Source`, :class:`Pool`, :class:`ImageSplit`.

A source turns a task's ``source:`` mapping into, per split, a list of image items with integer labels
(:class:`ImageSplit`). Source types are looked up by ``source.type`` in the plugin host's ``sources`` registry
(``host.sources``), which plugins fill through the ``register_sources`` hook (the built-in types too, see
:mod:`prism_plugin.data.builtin`). This is an image source; a source that yields embedding vectors subclasses
:class:`~prism_plugin.data.features.FeatureSource` instead (worked example: docs/extending/register_sources.md).

The contract:

* **constructor** ``cls(task, **options)``: ``task`` is the :class:`~prism_plugin.tasks.schema.TaskConfig`
  (``name``, ``file``, ``dataset``, ``class_names``, ``n_classes``, ``splits``, ``split``); ``options`` are the
  task's ``source:`` keys without ``type``. Call ``super().__init__(task, **every_option)``: it checks the options
  against ``OPTIONS`` / ``REQUIRED`` (plus the label-mapping keys of :data:`COMMON_OPTIONS`, handled here) and
  stores ``class_map``, ``drop_unmapped`` and ``drop_classes``. Read no data in the constructor beyond what is
  cheap.
* ``OPTIONS`` / ``REQUIRED``: frozensets of ``source.*`` keys; a task using another key fails at validation with
  the file and line and the closest allowed key.
* optional ``check_spec(options, located)`` (a classmethod/staticmethod): extra static checks at validation time
  (no data read); raise ``PrismError`` starting with ``located.where("source.KEY")`` and pass it through
  :func:`keyed_error` so ``prism-run validate`` can report every problem.
* :meth:`Source.pool` (the one method to implement): the :class:`Pool` of one source-level split (raw items, their
  raw classes, stable keys). Raise :class:`NoAll` from ``pool("all")`` when ``all`` is not a pool by itself, and
  implement :meth:`Source.all_pool_names` then.
* :meth:`Source.split` ``(split, limit=None) -> ImageSplit`` is shared: pools -> labels
  (:func:`~prism_plugin.data.labels.map_labels`) -> the task's ``split:`` procedure
  (:mod:`prism_plugin.data.splits`) -> ``--limit`` (class-balanced) -> items, labels, fingerprint.
* **fingerprints**: :class:`ImageSplit.fingerprint` is :func:`~prism_plugin.data.fingerprints.split_fingerprint`
  over each item's key, label and content (file bytes, or :meth:`~prism_plugin.data.refs.ImageRef.digest_bytes`).
  Keys must be stable across machines (relative paths, row ids -- never absolute paths or ``id()``), so the
  embedding cache hits on another machine holding the same data and misses when any image, label or the order
  changes.
* items are image file paths or :class:`~prism_plugin.data.refs.ImageRef` objects (anything ``PIL.Image.open``
  takes that pickles to worker processes).
* **perturbation**: a task with the ``perturb`` key (:mod:`prism_plugin.data.perturb`) gets every item of
  :meth:`Source.split` wrapped in a :class:`~prism_plugin.data.perturb.PerturbedImageRef` (seeded per item key; the
  transforms enter the fingerprint): a source type needs nothing for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from prism_plugin.data.fingerprints import split_fingerprint
from prism_plugin.data.labels import map_labels
from prism_plugin.data.splits import limit_indices, run_split_procedure
from prism_plugin.errors import PrismError, suggest

DATA_ROOT_ENV = "PRISM_DATA_DIR"
#: Options every source type accepts (label mapping).
COMMON_OPTIONS = frozenset({"class_map", "drop_unmapped", "drop_classes"})


@dataclass
class ImageSplit:
    """Images of one split (files or :class:`ImageRef`) and their integer labels."""

    paths: list
    labels: np.ndarray
    fingerprint: str

    def __len__(self) -> int:
        return len(self.paths)


def resolve_root(raw: str, task=None) -> Path:
    """Expand ``$VARS`` and ``~``; a relative path is taken under ``$PRISM_DATA_DIR`` (default: cwd)."""
    root = Path(os.path.expandvars(str(raw))).expanduser()
    if not root.is_absolute():
        base = Path(os.environ.get(DATA_ROOT_ENV, "."))
        root = base / root
    return root


def data_hint(option: str = "source.root") -> str:
    return f"point {option} at it (--set {option}=DIR) or set ${DATA_ROOT_ENV} to the folder that holds it"


@dataclass
class Pool:
    """Raw items of one source-level split, in the source's natural order."""

    items: list
    raw: list                      # raw class of each item (str name or int)
    keys: list[str]                # stable identity of each item (for fingerprints and messages)
    where: str = ""                # where the items were found (for messages)
    label_names: list[str] | None = None   # names of integer raw labels (HF ClassLabel, MedMNIST, ...)

    def __len__(self) -> int:
        return len(self.items)

    @staticmethod
    def concat(pools: Sequence["Pool"], names: Sequence[str]) -> "Pool":
        if len(pools) == 1:
            return pools[0]
        names_sets = {tuple(p.label_names) if p.label_names else None for p in pools}
        return Pool(
            items=[i for p in pools for i in p.items],
            raw=[r for p in pools for r in p.raw],
            keys=[k for p in pools for k in p.keys],
            where=" + ".join(p.where for p in pools),
            label_names=list(next(iter(names_sets))) if len(names_sets) == 1 and None not in names_sets else None,
        )


class Source:
    """Base class: pools -> labels -> split procedure -> ``--limit`` -> :class:`ImageSplit`.

    A subclass sets ``type_name``, ``OPTIONS`` (accepted ``source.*`` keys
    besides ``type`` and the label-mapping keys) and ``LAYOUT`` (how data are
    placed on disk, for messages and the README), and implements
    :meth:`pool`.
    """

    type_name = ""
    OPTIONS: frozenset = frozenset()
    REQUIRED: frozenset = frozenset()
    LAYOUT = ""
    #: what the source yields: ``images`` (embedded by an adapter) or ``features``
    #: (:class:`~prism_plugin.data.features.FeatureSource`)
    input_kind = "images"

    def __init__(self, task, **options: Any):
        self.task = task
        check_options(self, options, f"{task.file}")
        self.class_map = options.pop("class_map", None)
        self.drop_unmapped = bool(options.pop("drop_unmapped", False))
        self.drop_classes = [str(c) for c in options.pop("drop_classes", None) or []]
        self.options = options
        self._pools: dict[str, Pool] = {}
        self._procedure: tuple[Pool, np.ndarray, np.ndarray, dict[str, np.ndarray]] | None = None

    # -- to implement --
    def pool(self, name: str) -> Pool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.type_name

    def all_pool_names(self) -> list[str]:
        """Source-level split names that ``all`` stands for."""
        raise PrismError(f"task {self.task.name}: source type {self.type_name} cannot enumerate its splits; "
                         "list them in split.from (e.g. from: [train, val, test])")

    # -- shared machinery --
    def missing(self, what: str, where: Any, layout: str | None = None, option: str = "source.root") -> PrismError:
        return PrismError(
            f"task {self.task.name}: dataset {self.task.dataset!r} {what} not found at {where}; place it as "
            f"{layout or self.LAYOUT} or {data_hint(option)}"
        )

    def get_pool(self, name: str | Sequence[str]) -> Pool:
        """The pool of one source-level split, or of several concatenated; ``all`` is the source's own
        ``all`` pool when it has one, else every split :meth:`all_pool_names` lists."""
        names = [name] if isinstance(name, str) else list(name)
        expanded: list[str] = []
        pools: list[Pool] = []
        for n in names:
            if n == "all":
                try:
                    pools.append(self._cached("all", own_all=True))
                    expanded.append("all")
                    continue
                except NoAll:
                    parts = [p for p in self.all_pool_names() if p != "all"]
                    if not parts:
                        raise PrismError(f"task {self.task.name}: source {self.describe()} has no splits to make "
                                         "'all' of") from None
                    for part in parts:
                        pools.append(self._cached(part))
                        expanded.append(part)
                    continue
            pools.append(self._cached(n))
            expanded.append(n)
        return Pool.concat(pools, expanded)

    def _cached(self, name: str, own_all: bool = False) -> Pool:
        if name not in self._pools:
            try:
                self._pools[name] = self.pool(name)
            except NoAll:
                if own_all:
                    raise
                raise PrismError(f"task {self.task.name}: split {name!r} of source type {self.type_name or 'custom'} "
                                 "is not a pool by itself; list the source splits it stands for in split.from "
                                 "(e.g. from: [train, val, test])") from None
        return self._pools[name]

    def labels(self, pool: Pool) -> np.ndarray:
        """Task label of every pool item; -1 for items of dropped classes."""
        return map_labels(pool, self.task, self.class_map, self.drop_unmapped, self.drop_classes)

    def _kept(self, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
        y = self.labels(pool)
        kept = np.flatnonzero(y >= 0)
        return kept, y[kept]

    def part(self, name: str) -> tuple[Pool, np.ndarray, np.ndarray]:
        """(pool, item positions, task labels) of the task split whose ``splits.<s>.name`` is ``name``."""
        spec = getattr(self.task, "split", None)
        if spec and name in spec["parts"]:
            if self._procedure is None:
                pool = self.get_pool(spec["from"])
                kept, y = self._kept(pool)
                if len(kept) == 0:
                    raise PrismError(f"task {self.task.name}: no items left in {pool.where} after label mapping")
                self._procedure = (pool, kept, y, run_split_procedure(spec, y, f"task {self.task.name}: {pool.where}"))
            pool, kept, y, parts = self._procedure
            pos = parts[name]
            return pool, kept[pos], y[pos]
        pool = self.get_pool(name)
        kept, y = self._kept(pool)
        return pool, kept, y

    def split(self, split: str, limit: int | None = None) -> ImageSplit:
        cfg = self.task.splits[split]
        pool, idx, y = self.part(cfg.name)
        if len(idx) == 0:
            raise PrismError(f"task {self.task.name}: split {split!r} ({cfg.name}) has no items in {pool.where}")
        if limit is not None:
            keep = limit_indices(y, limit)
            idx, y = idx[keep], y[keep]
        items = [pool.items[i] for i in idx]
        keys = [pool.keys[i] for i in idx]
        y = np.asarray(y, dtype=np.int64)
        perturb = (getattr(self.task, "extras", None) or {}).get("perturb")
        if perturb:  # task key perturb: each image transformed as it is read (prism_plugin.data.perturb)
            from prism_plugin.data.perturb import perturb_items

            items = perturb_items(items, keys, perturb)
        return ImageSplit(items, y, split_fingerprint(keys, y, items))


class NoAll(Exception):
    """Raised by :meth:`Source.pool` when ``all`` is not a pool by itself."""


def check_pool_name(name: Any, where: str, what: str = "split") -> str:
    """A source-level split name that becomes a file or folder name: one plain path component.

    Refuses empty names, ``.``/``..``, path separators and NUL, so a split name never reads outside the dataset's
    root and never collides with the internal ``all`` marker's folder handling (``all`` itself is a valid name).
    """
    if not isinstance(name, str) or not name.strip():
        raise PrismError(f"{where}: {what} name must be a non-empty string, got {name!r}")
    if name in (".", "..") or any(ch in name for ch in ("/", "\\", "\x00")) or os.path.isabs(name):
        raise PrismError(f"{where}: {what} name {name!r} must be one plain folder or file name (no '/', '..' or "
                         "absolute path); name the split as it is on disk under the dataset root")
    return name


def format_name(pattern: str, where: str, option: str, **values: str) -> str:
    """``pattern.format(**values)`` with a PrismError naming ``option`` for a bad pattern."""
    try:
        return str(pattern).format(**values)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        keys = ", ".join("{" + k + "}" for k in values)
        raise PrismError(f"{where}: {option} {pattern!r} is not a valid name pattern ({type(exc).__name__}: {exc}); "
                         f"it may use {keys} and no other braces") from None


def keyed_error(exc: PrismError, key: str) -> PrismError:
    """Tag ``exc`` with the task key path it is about (lets ``prism-run validate`` report every problem)."""
    exc.key = key
    return exc


def allowed_options(source_cls) -> set[str]:
    """The ``source.*`` keys a source type (class or instance) accepts: its ``OPTIONS`` plus
    :data:`COMMON_OPTIONS` (``type`` itself not included)."""
    return set(getattr(source_cls, "OPTIONS", ())) | COMMON_OPTIONS


def check_options(source_cls, options: dict, where: str, located=None, kind: str | None = None) -> None:
    """Every option known to the source type; the required ones present.

    Messages name the type by its ``type_name``, else ``kind`` (the ``source.type`` the task
    used), else the class name.
    """
    allowed = allowed_options(source_cls)
    name = (getattr(source_cls, "type_name", "") or kind
            or getattr(source_cls, "__name__", type(source_cls).__name__))
    for key in options:
        if key not in allowed:
            loc = located.where(f"source.{key}") if located is not None else where
            raise keyed_error(PrismError(
                f"{loc}: source.{key}: not a {name} option{suggest(str(key), allowed)} "
                f"(allowed: {', '.join(sorted(allowed))})"), f"source.{key}")
    for key in getattr(source_cls, "REQUIRED", ()):
        if options.get(key) in (None, ""):
            loc = located.where("source") if located is not None else where
            raise keyed_error(PrismError(f"{loc}: source.{key}: required for source type {name}"), "source")


__all__ = ["COMMON_OPTIONS", "DATA_ROOT_ENV", "ImageSplit", "Pool", "Source", "NoAll", "resolve_root", "data_hint",
           "allowed_options", "check_options", "keyed_error", "check_pool_name", "format_name"]
