"""Dataset sources: where a task's images (or embeddings) come from.

A source turns a task's ``source:`` mapping into, per split, a list of image
items with integer labels (:class:`ImageSplit`). Sources are looked up by
``source.type`` in :data:`SOURCE_TYPES`; each computes a fingerprint of the
items it returns (names, labels and content), which keys the embedding cache
and is recorded in ``summary.json``.

Every source shares three steps, implemented once in :class:`Source`:

1. **pools** -- the raw items of one source-level split (a folder, the rows of
   a manifest whose split column has a value, an HF split, ...), in the
   source's natural order (torchvision ``ImageFolder`` order for folders);
2. **labels** -- raw class names (or integers) mapped to the task's class
   indices: by name, through ``class_map`` (task class -> raw names), or as
   integers; raw classes that map nowhere are an error unless dropped with
   ``drop_classes`` / ``drop_unmapped: true``;
3. **split procedure** -- the task's optional ``split:`` key carves task
   splits out of a pool (:func:`run_split_procedure`): ``random_split``
   (torch), ``sample`` (pandas), ``shuffle`` (Python ``random``) or
   ``stratified`` (scikit-learn), reproducing how the reference made its
   splits. Task split names (``splits.<s>.name``) name a part of the
   procedure, or else a source-level split.

Items are image files (:class:`~pathlib.Path`) or :class:`ImageRef` objects
(encoded images read on demand from a parquet row, an HDF5/NPZ array, ...):
PIL opens both, so the extraction loop needs no special case.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import math
import os
import random
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from prism_plugin.errors import PrismError, suggest

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}
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


def _resolve_root(raw: str, task=None) -> Path:
    """Expand ``$VARS`` and ``~``; a relative path is taken under ``$PRISM_DATA_DIR`` (default: cwd)."""
    root = Path(os.path.expandvars(str(raw))).expanduser()
    if not root.is_absolute():
        base = Path(os.environ.get(DATA_ROOT_ENV, "."))
        root = base / root
    return root


def data_hint(option: str = "source.root") -> str:
    return f"point {option} at it (--set {option}=DIR) or set ${DATA_ROOT_ENV} to the folder that holds it"


# --------------------------------------------------------------------------------------------
# Lazily read images
# --------------------------------------------------------------------------------------------

_LIVE_BUFFERS: deque = deque()
_MAX_LIVE_BUFFERS = 32


class ImageRef:
    """An encoded image read on demand, opened by PIL like a file object.

    Subclasses implement :meth:`load_bytes` (the encoded image) and may
    override :meth:`digest_bytes` (what the fingerprint hashes; default: the
    encoded bytes). Only the most recently read images keep their bytes in
    memory, so a pass over a large dataset does not accumulate them.
    """

    key: str = ""

    def load_bytes(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def digest_bytes(self) -> bytes:
        return self.load_bytes()

    # -- the file protocol PIL uses --
    def _buffer(self) -> io.BytesIO:
        buf = self.__dict__.get("_buf")
        if buf is None:
            buf = io.BytesIO(self.load_bytes())
            self.__dict__["_buf"] = buf
            _LIVE_BUFFERS.append(weakref.ref(self))
            while len(_LIVE_BUFFERS) > _MAX_LIVE_BUFFERS:
                old = _LIVE_BUFFERS.popleft()()
                if old is not None and old is not self:
                    old.__dict__.pop("_buf", None)
        return buf

    def read(self, size: int = -1) -> bytes:
        return self._buffer().read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._buffer().seek(offset, whence)

    def tell(self) -> int:
        return self._buffer().tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_buf", None)
        return state

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    def __str__(self) -> str:
        return self.key


class ArrayImageRef(ImageRef):
    """Row ``index`` of an image array (``H x W x C`` uint8), encoded as PNG when read."""

    def __init__(self, array, index: int, key: str):
        self.array = array
        self.index = int(index)
        self.key = key

    def pixels(self) -> np.ndarray:
        a = np.asarray(self.array[self.index])
        if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
            a = np.moveaxis(a, 0, -1)  # CHW -> HWC
        if a.ndim == 3 and a.shape[-1] == 1:
            a = a[..., 0]
        if a.dtype != np.uint8:
            if np.issubdtype(a.dtype, np.floating) and a.size and float(np.nanmax(a)) <= 1.0:
                a = a * 255.0
            a = np.clip(a, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(a)

    def load_bytes(self) -> bytes:
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(self.pixels()).save(out, format="PNG", compress_level=1)
        return out.getvalue()

    def digest_bytes(self) -> bytes:
        a = self.pixels()
        return f"{a.shape}|".encode() + a.tobytes()


def split_fingerprint(keys: Sequence[str], labels: np.ndarray, items: Sequence) -> str:
    """blake2b over each item's key, label and content (file bytes or :meth:`ImageRef.digest_bytes`)."""
    h = hashlib.blake2b(digest_size=20)
    for key, y, item in zip(keys, labels.tolist(), items):
        h.update(f"{key}|{y}|".encode())
        if isinstance(item, ImageRef):
            h.update(item.digest_bytes())
        else:
            with open(item, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def files_fingerprint(root: Path, paths: list[Path], labels: np.ndarray) -> str:
    """blake2b over relative paths, labels and file contents."""
    return split_fingerprint([p.relative_to(root).as_posix() for p in paths], labels, paths)


# --------------------------------------------------------------------------------------------
# Split procedures (the task's ``split:`` key)
# --------------------------------------------------------------------------------------------

SPLIT_PROCEDURES = {
    "random_split": "torch.utils.data.random_split of the pool with a seeded generator; parts take "
                    "floor(f*N) items each, the last part the remainder (remainder: round_robin = torch's own rule)",
    "sample": "pandas DataFrame.sample(frac=f, random_state=seed) of the pool -> one part, the rest -> the other",
    "shuffle": "Python random.Random(seed).shuffle of the pool; the first floor(f*N) -> one part, the rest -> the other",
    "stratified": "scikit-learn train_test_split(stratify=labels, random_state=seed) into two parts",
}
SPLIT_KEYS = {"procedure", "from", "seed", "parts", "remainder"}


def check_split_spec(spec: Any, fail: Callable[[str, str], PrismError]) -> dict[str, Any]:
    """Validate a ``split:`` mapping; ``fail(key, message)`` builds the error (with file and line)."""
    if not isinstance(spec, dict):
        raise fail("split", "must be a mapping {procedure, seed, parts, from}")
    for key in spec:
        if key not in SPLIT_KEYS:
            raise fail(f"split.{key}", f"unknown key{suggest(str(key), SPLIT_KEYS)} (allowed: {', '.join(sorted(SPLIT_KEYS))})")
    proc = spec.get("procedure")
    if proc not in SPLIT_PROCEDURES:
        raise fail("split.procedure", f"must be one of {', '.join(SPLIT_PROCEDURES)}, got {proc!r}"
                   f"{suggest(str(proc), SPLIT_PROCEDURES)}")
    seed = spec.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise fail("split.seed", f"must be an integer in [0, 2**32), got {seed!r}")
    src = spec.get("from", "all")
    if isinstance(src, str):
        src_list = [src]
    elif isinstance(src, list) and src and all(isinstance(s, str) and s for s in src):
        src_list = list(src)
    else:
        raise fail("split.from", f"must be a source split name or a list of them (default: all), got {src!r}")
    parts = spec.get("parts")
    if not isinstance(parts, dict) or len(parts) < 2:
        raise fail("split.parts", "must map at least two part names to fractions, e.g. {train: 0.7, test: 0.3}")
    fracs: dict[str, Any] = {}
    for name, f in parts.items():
        if not isinstance(name, str) or not name:
            raise fail("split.parts", f"part names must be non-empty strings, got {name!r}")
        if f == "rest":
            fracs[name] = "rest"
            continue
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise fail(f"split.parts.{name}", f"must be a fraction in (0, 1] or 'rest', got {f!r}")
        fracs[name] = float(f)
    numeric = [v for v in fracs.values() if v != "rest"]
    n_rest = sum(v == "rest" for v in fracs.values())
    if proc in ("random_split", "stratified"):
        if n_rest:
            raise fail("split.parts", f"{proc} takes a fraction for every part ('rest' is for sample/shuffle)")
        if proc == "stratified" and len(fracs) != 2:
            raise fail("split.parts", "stratified makes exactly two parts, e.g. {train: 0.7, heldout: 0.3}")
        total = sum(numeric)
        if proc == "random_split" and abs(total - 1.0) > 1e-9:
            raise fail("split.parts", f"fractions must sum to 1, got {total:g}")
        if proc == "stratified" and total > 1 + 1e-9:
            raise fail("split.parts", f"fractions sum to {total:g} > 1")
    else:
        if len(fracs) != 2 or n_rest != 1:
            raise fail("split.parts", f"{proc} makes two parts: one fraction and one 'rest', e.g. {{val: 0.15, train: rest}}")
    remainder = spec.get("remainder", "last")
    if remainder not in ("last", "round_robin"):
        raise fail("split.remainder", f"must be 'last' or 'round_robin', got {remainder!r}")
    if "remainder" in spec and proc != "random_split":
        raise fail("split.remainder", "only applies to procedure random_split")
    out = {"procedure": proc, "seed": seed, "from": src_list if len(src_list) > 1 else src_list[0], "parts": fracs}
    if proc == "random_split":
        out["remainder"] = remainder
    return out


def random_split_lengths(n: int, fractions: Sequence[float], remainder: str = "last") -> list[int]:
    """Part sizes: floor(f*n) each; the remainder goes to the last part, or round-robin (torch's rule)."""
    lengths = [int(math.floor(n * f)) for f in fractions]
    left = n - sum(lengths)
    if remainder == "last":
        lengths[-1] += left
    else:
        for i in range(left):
            lengths[i % len(lengths)] += 1
    return lengths


def run_split_procedure(spec: dict[str, Any], labels: np.ndarray) -> dict[str, np.ndarray]:
    """Positions (into the pool, in the procedure's natural order) of every part."""
    labels = np.asarray(labels)
    n = len(labels)
    proc, seed, parts = spec["procedure"], int(spec["seed"]), spec["parts"]
    names = list(parts)
    if proc == "random_split":
        import torch
        from torch.utils.data import random_split

        lengths = random_split_lengths(n, [parts[p] for p in names], spec.get("remainder", "last"))
        subsets = random_split(range(n), lengths, generator=torch.Generator().manual_seed(seed))
        return {p: np.asarray(s.indices, dtype=np.int64) for p, s in zip(names, subsets)}
    frac_name = next(p for p in names if parts[p] != "rest") if proc in ("sample", "shuffle") else None
    if proc == "sample":
        import pandas as pd

        rest_name = next(p for p in names if p != frac_name)
        picked = pd.Series(np.arange(n)).sample(frac=parts[frac_name], random_state=seed).to_numpy()
        mask = np.ones(n, dtype=bool)
        mask[picked] = False
        return {frac_name: picked.astype(np.int64), rest_name: np.flatnonzero(mask)}
    if proc == "shuffle":
        rest_name = next(p for p in names if p != frac_name)
        order = list(range(n))
        random.Random(seed).shuffle(order)
        k = int(math.floor(parts[frac_name] * n))
        return {frac_name: np.asarray(order[:k], dtype=np.int64), rest_name: np.asarray(order[k:], dtype=np.int64)}
    if proc == "stratified":
        from sklearn.model_selection import train_test_split

        first, second = names
        f1, f2 = parts[first], parts[second]
        train_size = f1 if f1 + f2 < 1 - 1e-9 else None
        a, b = train_test_split(np.arange(n), test_size=f2, train_size=train_size, stratify=labels,
                                random_state=seed)
        return {first: np.asarray(a, dtype=np.int64), second: np.asarray(b, dtype=np.int64)}
    raise PrismError(f"unknown split procedure {proc!r}")  # pragma: no cover - validated earlier


def _limit_indices(labels: np.ndarray, limit: int) -> np.ndarray:
    """First ``limit`` items, taken round-robin over classes so every class stays present."""
    by_class = [np.flatnonzero(labels == c).tolist() for c in np.unique(labels)]
    out: list[int] = []
    i = 0
    while len(out) < min(limit, len(labels)):
        for idx in by_class:
            if i < len(idx) and len(out) < limit:
                out.append(idx[i])
        i += 1
    return np.sort(np.asarray(out, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


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
        names = [name] if isinstance(name, str) else list(name)
        if names == ["all"]:
            try:
                return self._cached("all")
            except _NoAll:
                names = self.all_pool_names()
        return Pool.concat([self._cached(n) for n in names], names)

    def _cached(self, name: str) -> Pool:
        if name not in self._pools:
            self._pools[name] = self.pool(name)
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
                if spec["procedure"] == "stratified":
                    counts = np.bincount(y)
                    if (counts[counts > 0] < 2).any():
                        raise PrismError(f"task {self.task.name}: a stratified split needs >= 2 items per class; "
                                         f"class counts {counts.tolist()} in {pool.where}")
                self._procedure = (pool, kept, y, run_split_procedure(spec, y))
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
            keep = _limit_indices(y, limit)
            idx, y = idx[keep], y[keep]
        items = [pool.items[i] for i in idx]
        keys = [pool.keys[i] for i in idx]
        y = np.asarray(y, dtype=np.int64)
        return ImageSplit(items, y, split_fingerprint(keys, y, items))


class _NoAll(Exception):
    """Raised by :meth:`Source.pool` when ``all`` is not a pool by itself."""


def _str_id(value: Any) -> str:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    if isinstance(value, np.integer):
        value = int(value)
    return str(value)


def map_labels(pool: Pool, task, class_map: dict | None, drop_unmapped: bool, drop_classes: Iterable[str]) -> np.ndarray:
    """Raw classes -> task label indices (-1 = dropped); every unmapped raw class is an error unless dropped."""
    raw = pool.raw
    if not raw:
        return np.zeros(0, dtype=np.int64)
    uniq: dict[Any, list[str]] = {}
    for r in dict.fromkeys(raw):
        ids = [_str_id(r)]
        if pool.label_names is not None and isinstance(r, (int, np.integer)) and 0 <= int(r) < len(pool.label_names):
            ids.append(str(pool.label_names[int(r)]))
        uniq[r] = ids
    names = list(task.class_names)
    target: dict[Any, int] = {}
    if class_map:
        table: dict[str, int] = {}
        for cname, raws in class_map.items():
            for rv in raws:
                table[_str_id(rv)] = names.index(cname)
        for r, ids in uniq.items():
            hit = next((table[i] for i in ids if i in table), None)
            if hit is not None:
                target[r] = hit
        found = set(target.values())
        empty = [names[c] for c in range(len(names)) if c not in found]
        if empty:
            seen = sorted({ids[-1] for ids in uniq.values()})
            raise PrismError(
                f"task {task.name}: class(es) {empty} match no images in {pool.where}: source.class_map lists "
                f"{ {c: class_map.get(c) for c in empty} } but the raw classes there are {seen}"
            )
    else:
        str_raw = not _all_ints(uniq)
        if names:
            by_name = {n: i for i, n in enumerate(names)}
            use_names = str_raw or (pool.label_names is not None and set(pool.label_names) >= set(names))
            for r, ids in uniq.items():
                if use_names:
                    hit = next((by_name[i] for i in ids if i in by_name), None)
                    if hit is not None:
                        target[r] = hit
                elif 0 <= int(r) < len(names):
                    target[r] = int(r)
        elif str_raw:
            ordered = sorted({ids[0] for ids in uniq.values()})
            if len(ordered) != task.n_classes:
                raise PrismError(f"task {task.name}: {pool.where} has {len(ordered)} classes {ordered[:20]}, "
                                 f"the task declares n_classes {task.n_classes}")
            target = {r: ordered.index(ids[0]) for r, ids in uniq.items()}
        else:
            target = {r: int(r) for r in uniq if 0 <= int(r) < task.n_classes}
    drop = set(drop_classes)
    unmapped = [ids[-1] for r, ids in uniq.items() if r not in target and not (drop & set(ids))]
    if unmapped and not drop_unmapped:
        raise PrismError(
            f"task {task.name}: raw class(es) {sorted(unmapped)[:20]} in {pool.where} are not in the task's "
            f"class_names {names or list(range(task.n_classes))}; map them with source.class_map or drop them with "
            "source.drop_classes (or drop_unmapped: true)"
        )
    lut = {r: target.get(r, -1) for r in uniq}
    return np.asarray([lut[r] for r in raw], dtype=np.int64)


def _all_ints(uniq: dict) -> bool:
    return all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in uniq)


def _image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` in torchvision ImageFolder order (sorted walk, sorted names)."""
    out: list[Path] = []
    for dirpath, _dirs, fnames in sorted(os.walk(folder, followlinks=True)):
        for fname in sorted(fnames):
            if Path(fname).suffix.lower() in IMAGE_SUFFIXES:
                out.append(Path(dirpath) / fname)
    return out


class ImageFolderSource(Source):
    """Class-folder trees: ``<root>/<split>/<class>/<image>`` (layout ``splits``) or ``<root>/<class>/<image>``
    (layout ``flat``: one pool, split by the task's ``split:`` procedure).

    Items come in torchvision ``ImageFolder`` order (class folders sorted by
    name, files sorted). Class folders are matched to the task's
    ``class_names`` by name (or through ``class_map``); without class names,
    sorted folder names give labels 0..K-1.
    """

    type_name = "imagefolder"
    OPTIONS = frozenset({"root", "layout"})
    REQUIRED = frozenset({"root"})
    LAYOUT = "<root>/<split>/<class>/<image>"

    def __init__(self, task, root: str = "", layout: str = "splits", **options: Any):
        super().__init__(task, root=root, layout=layout, **options)
        if layout not in ("splits", "flat"):
            raise PrismError(f"{task.file}: source.layout must be 'splits' (<root>/<split>/<class>) or "
                             f"'flat' (<root>/<class>), got {layout!r}")
        self.layout = layout
        self.root = _resolve_root(root, task)

    def describe(self) -> str:
        return f"image folders under {self.root}"

    def all_pool_names(self) -> list[str]:
        if not self.root.is_dir():
            raise self.missing("folder", self.root)
        return sorted(d.name for d in self.root.iterdir() if d.is_dir())

    def pool(self, name: str) -> Pool:
        if self.layout == "flat":
            if name not in ("all", "."):
                raise PrismError(f"task {self.task.name}: source layout 'flat' has one pool ('all'); split "
                                 f"{name!r} must be a part of the task's split: procedure")
            folder, layout = self.root, "<root>/<class>/<image>"
        else:
            if name == "all":
                raise _NoAll
            folder, layout = self.root / name, f"{self.root}/{name}/<class>/<image>"
        if not folder.is_dir():
            raise self.missing("image folder" if self.layout == "flat" else f"split {name!r}", folder, layout)
        class_dirs = sorted(d.name for d in folder.iterdir() if d.is_dir())
        items: list[Path] = []
        raw: list[str] = []
        for cname in class_dirs:
            files = _image_files(folder / cname)
            items.extend(files)
            raw.extend([cname] * len(files))
        if not items:
            raise PrismError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) found in class folders "
                             f"(expected {layout})")
        keys = [p.relative_to(self.root).as_posix() for p in items]
        return Pool(items, raw, keys, where=str(folder))


class DemoSource(ImageFolderSource):
    """Synthetic H&E-like tiles, generated once into the data cache, then read from disk."""

    type_name = "demo"
    OPTIONS = frozenset({"variant", "per_class", "size", "seed"})
    REQUIRED = frozenset()

    def __init__(self, task, variant: str = "binary", per_class: dict | None = None, size: int = 96,
                 seed: int = 0, **options: Any):
        from prism_plugin.data import demo

        Source.__init__(self, task, variant=variant, per_class=per_class, size=size, seed=seed, **options)
        if variant not in demo.VARIANTS:
            raise PrismError(f"{task.file}: source.variant must be one of {sorted(demo.VARIANTS)}, got {variant!r}")
        per_class = per_class or {"train": 60, "val": 20, "test": 40}
        self.layout = "splits"
        self.root = demo.ensure_demo_dataset(variant, per_class, int(size), int(seed))


class RecordsSource(Source):
    """A manifest (CSV, JSON list, JSON lines) with one row per image: image path, class, split.

    ``<root>/<file>`` lists images relative to ``<root>/<image_dir>``; rows
    keep the file's order (the reference's ``pandas``/``random`` split
    procedures depend on it). Used for MHIST (``annotations.csv``) and
    SPIDER (``metadata.json``).
    """

    type_name = "records"
    OPTIONS = frozenset({"root", "file", "image_dir", "image_column", "label_column", "split_column"})
    REQUIRED = frozenset({"root", "file", "image_column", "label_column"})
    LAYOUT = "<root>/<file> (one row per image) and <root>/<image_dir>/<image>"

    def __init__(self, task, root: str = "", file: str = "", image_dir: str = "", image_column: str = "",
                 label_column: str = "", split_column: str | None = None, **options: Any):
        super().__init__(task, root=root, file=file, image_dir=image_dir, image_column=image_column,
                         label_column=label_column, split_column=split_column, **options)
        self.root = _resolve_root(root, task)
        self.file = self.root / file
        self.image_dir = self.root / image_dir if image_dir else self.root
        self.image_column, self.label_column, self.split_column = image_column, label_column, split_column
        self._rows: list[dict] | None = None

    def describe(self) -> str:
        return f"records in {self.file}"

    def rows(self) -> list[dict]:
        if self._rows is None:
            if not self.file.is_file():
                raise self.missing("manifest", self.file)
            self._rows = read_records(self.file)
            for col in (self.image_column, self.label_column, self.split_column):
                if col and self._rows and col not in self._rows[0]:
                    raise PrismError(f"{self.file}: no column {col!r} (columns: {', '.join(map(str, self._rows[0]))}); "
                                     "set source.image_column / label_column / split_column")
        return self._rows

    def all_pool_names(self) -> list[str]:
        raise _NoAll  # pragma: no cover - 'all' is handled by pool()

    def pool(self, name: str) -> Pool:
        rows = self.rows()
        if name == "all":
            chosen = rows
        else:
            if not self.split_column:
                raise PrismError(f"task {self.task.name}: source has no split_column, so split {name!r} cannot be "
                                 "selected; use split.from: all with a split procedure")
            chosen = [r for r in rows if str(r[self.split_column]) == name]
            if not chosen:
                values = sorted({str(r[self.split_column]) for r in rows})
                raise PrismError(f"{self.file}: no rows with {self.split_column} == {name!r} (values: {values})")
        items = [self.image_dir / str(r[self.image_column]) for r in chosen]
        missing = [p for p in items if not p.is_file()]
        if missing:
            raise self.missing(f"image {missing[0].name} ({len(missing)} of {len(items)} listed images missing)",
                               missing[0].parent)
        raw = [r[self.label_column] for r in chosen]
        raw = [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else str(v) for v in raw]
        keys = [p.relative_to(self.root).as_posix() if self.root in p.parents else str(p) for p in items]
        return Pool(items, raw, keys, where=f"{self.file} [{name}]")

    def labels(self, pool: Pool) -> np.ndarray:
        if not self.task.class_names and not self.class_map:
            # class indices come from the sorted class names of the whole manifest, not of one split
            universe = sorted({str(r[self.label_column]) for r in self.rows()})
            if len(universe) != self.task.n_classes:
                raise PrismError(f"task {self.task.name}: {self.file} has {len(universe)} classes, the task "
                                 f"declares n_classes {self.task.n_classes}")
            index = {n: i for i, n in enumerate(universe)}
            return np.asarray([index[str(r)] for r in pool.raw], dtype=np.int64)
        return super().labels(pool)


def read_records(path: Path) -> list[dict]:
    """Rows of a CSV / JSON (a list of objects, or an object holding one) / JSON-lines manifest."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            import pandas as pd

            df = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False)
            return df.to_dict("records")
        text = path.read_text(encoding="utf-8")
        if suffix in (".jsonl", ".ndjson"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise PrismError(f"{path}: cannot be read as a manifest ({type(exc).__name__}: {exc})") from None
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if len(lists) == 1:
            data = lists[0]
        elif all(isinstance(v, dict) for v in data.values()):
            data = [{"id": k, **v} for k, v in data.items()]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise PrismError(f"{path}: expected a list of records (objects), one per image")
    return data


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
        self.root = _resolve_root(root, task)
        self.images, self.labels_file = images, labels
        self.images_key, self.labels_key = images_key, labels_key
        self.rename = dict(rename or {})

    def describe(self) -> str:
        return f"HDF5 arrays under {self.root}"

    def pool(self, name: str) -> Pool:
        if name == "all":
            raise _NoAll
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
        self.file = _resolve_root(root, task) / file
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
            raise _NoAll
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


#: source.type -> class, or "module:Class" imported on first use.
SOURCE_TYPES: dict[str, Any] = {
    "imagefolder": ImageFolderSource,
    "demo": DemoSource,
    "records": RecordsSource,
    "h5": H5Source,
    "npz": NpzSource,
    "hf": "prism_plugin.data.hf:HFSource",
    "camelyon17": "prism_plugin.data.camelyon17:Camelyon17Source",
}
#: Not a data source: the task's features come from ``--model precomputed``.
FEATURES_ONLY = "precomputed"


def source_class(kind: str):
    entry = SOURCE_TYPES[kind]
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
        SOURCE_TYPES[kind] = entry
    return entry


def check_options(source_cls, options: dict, where: str, located=None) -> None:
    """Every option known to the source type; the required ones present."""
    allowed = set(getattr(source_cls, "OPTIONS", ())) | COMMON_OPTIONS
    for key in options:
        if key not in allowed:
            loc = located.where(f"source.{key}") if located is not None else where
            raise _keyed(PrismError(
                f"{loc}: source.{key}: not a {source_cls.type_name} option{suggest(str(key), allowed)} "
                f"(allowed: {', '.join(sorted(allowed))})"), f"source.{key}")
    for key in getattr(source_cls, "REQUIRED", ()):
        if options.get(key) in (None, ""):
            loc = located.where("source") if located is not None else where
            raise _keyed(PrismError(f"{loc}: source.{key}: required for source type {source_cls.type_name}"),
                         "source")


def _keyed(exc: PrismError, key: str) -> PrismError:
    exc.key = key  # the key path the error is about (lets `validate` report every problem)
    return exc


def check_source_spec(source: dict, task_class_names: Sequence[str], located) -> None:
    """Static checks of a task's ``source:`` mapping (used by the schema; no data is read)."""
    kind = source.get("type")
    if kind == FEATURES_ONLY:
        extra = sorted(set(source) - {"type"})
        if extra:
            raise _keyed(PrismError(f"{located.where('source.' + extra[0])}: source.{extra[0]}: source type "
                                    "precomputed takes no options (point --model-args root=DIR at the embeddings)"),
                         f"source.{extra[0]}")
        return
    if kind not in SOURCE_TYPES:
        raise _keyed(PrismError(
            f"{located.where('source.type')}: source.type: {kind!r} is not known{suggest(str(kind), SOURCE_TYPES)} "
            f"(known: {', '.join(sorted(SOURCE_TYPES))}, {FEATURES_ONLY})"), "source.type")
    cls = source_class(kind)
    options = {k: v for k, v in source.items() if k != "type"}
    check_options(cls, options, str(located.file), located)
    cmap = options.get("class_map")
    if cmap is not None:
        where = located.where("source.class_map")
        if not isinstance(cmap, dict) or not cmap:
            raise _keyed(PrismError(f"{where}: source.class_map: must map task class names to lists of raw class "
                                    "names, e.g. {neutrophil: [NGS, NGB]}"), "source.class_map")
        seen: dict[str, str] = {}
        for cname, raws in cmap.items():
            if task_class_names and cname not in task_class_names:
                raise _keyed(PrismError(f"{where}: source.class_map: {cname!r} is not one of the task's class_names "
                                        f"{list(task_class_names)}{suggest(str(cname), task_class_names)}"),
                             "source.class_map")
            if not isinstance(raws, list) or not raws or not all(isinstance(r, (str, int)) for r in raws):
                raise _keyed(PrismError(f"{where}: source.class_map.{cname}: must be a non-empty list of raw "
                                        "class names (or integer labels)"), "source.class_map")
            for r in raws:
                if _str_id(r) in seen:
                    raise _keyed(PrismError(f"{where}: source.class_map: raw class {r!r} is mapped to both "
                                            f"{seen[_str_id(r)]!r} and {cname!r}"), "source.class_map")
                seen[_str_id(r)] = cname
        if not task_class_names:
            raise _keyed(PrismError(f"{where}: source.class_map needs the task's class_names"), "source.class_map")
    for key in ("drop_classes",):
        if key in options and (not isinstance(options[key], list)
                               or not all(isinstance(v, (str, int)) for v in options[key])):
            raise _keyed(PrismError(f"{located.where('source.' + key)}: source.{key}: must be a list of raw class "
                                    "names"), f"source.{key}")
    if "drop_unmapped" in options and not isinstance(options["drop_unmapped"], bool):
        raise _keyed(PrismError(f"{located.where('source.drop_unmapped')}: source.drop_unmapped: must be true or "
                                "false"), "source.drop_unmapped")
    check = getattr(cls, "check_spec", None)
    if check is not None:
        check(options, located)


def open_source(task):
    """Instantiate the task's source, or fail naming the task file and the type."""
    options = dict(task.source)
    kind = options.pop("type")
    if kind == FEATURES_ONLY:
        return None  # features come from the precomputed adapter
    if kind not in SOURCE_TYPES:
        raise PrismError(f"{task.file}: source.type {kind!r} is not known{suggest(kind, SOURCE_TYPES)} "
                         f"(known: {', '.join(sorted(SOURCE_TYPES))}, {FEATURES_ONLY})")
    cls = source_class(kind)
    try:
        return cls(task, **options)
    except TypeError as exc:
        raise PrismError(f"{task.file}: source options {sorted(options)} do not fit type {kind!r} ({exc})") from None


# --------------------------------------------------------------------------------------------
# Precomputed embeddings: the PRISM release layout, as .npy or parquet
# --------------------------------------------------------------------------------------------

def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


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


__all__ = [
    "ImageSplit", "ImageRef", "ArrayImageRef", "Pool", "Source", "ImageFolderSource", "DemoSource",
    "RecordsSource", "H5Source", "NpzSource", "SOURCE_TYPES", "open_source", "source_class",
    "check_source_spec", "check_split_spec", "run_split_procedure", "random_split_lengths", "map_labels",
    "split_fingerprint", "files_fingerprint", "read_embedding_split", "write_embedding_split", "_limit_indices",
]
