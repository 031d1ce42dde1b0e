"""Camelyon17 covariate-shift study (PROTOCOL §1.4): sampling, re-split, load-time normalisation.

Two published files describe the patches PRISM used, and both can also be recomputed here from the dataset itself:

* ``splits.json`` -- :func:`sample_hospitals`: per hospital, 10,000 patches per class (pandas ``sample``, seed 42),
  concatenated class 0 then class 1 and shuffled (``sample(frac=1)``, seed 42); a slide-disjoint 70/15/15 partition
  of the hospital's slides drawn with one ``numpy.random.default_rng(42)`` shared by hospitals 0..4 in order.
  ``{hospital: {train|val|test: [global row indices]}}``.
* ``resplit.json`` -- :func:`resplit_positions`: per hospital ``h``, on the label vector of ``concat(train, val,
  test)`` of ``splits.json``, with ``default_rng(42 + h)``: for class 0 then class 1, shuffle the class's
  positions, first round(0.70 n) -> train, up to round(0.85 n) -> val, rest -> test; lists sorted. 14,000 / 3,000 /
  3,000 at exactly 50 % tumour.

The global index is the row position in the dataset's splits concatenated in their stored order (for the HF
redistribution: train, validation, test).

:class:`Camelyon17Source` (``source.type: camelyon17``) serves one hospital's
re-split as a task's train/val/test. For embeddings extracted in the
``splits.json`` order (the PRISM release), :func:`resplit_features` applies the
load-time L2 normalisation (row / (norm + 1e-12)) and the re-split, and
``python -m prism_plugin.data.camelyon17 resplit-embeddings`` writes the result
in the ``{split}_features.npy`` layout that ``--model precomputed`` reads.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.data.base import Pool, Source, keyed_error, resolve_root
from prism_plugin.data.precomputed import read_embedding_split, write_embedding_split

PARTS = ("train", "val", "test")
HOSPITALS = (0, 1, 2, 3, 4)
PER_CLASS = 10_000
SEED = 42
RESPLIT_FRACTIONS = (0.70, 0.85)
SLIDE_FRACTIONS = (0.70, 0.85)
NORM_EPS = 1e-12


# --------------------------------------------------------------------------------------------
# splits.json: the sampling procedure
# --------------------------------------------------------------------------------------------

def sample_hospitals(hospital: Sequence[int], label: Sequence[int], slide: Sequence[Any], *,
                     hospitals: Sequence[int] = HOSPITALS, per_class: int = PER_CLASS, seed: int = SEED,
                     slide_order: str = "sorted") -> dict[int, dict[str, list[int]]]:
    """The ``splits.json`` procedure on per-row metadata (row position = global index).

    ``slide_order`` says how the hospital's unique slides are listed before the seeded permutation: ``sorted``
    (``numpy.unique``) or ``appearance`` (order of first appearance in the shuffled sample). The reference
    notebook's choice cannot be recovered from the published files; both give the same patch sample, only the
    abandoned slide partition differs.
    """
    import pandas as pd

    df = pd.DataFrame({"hospital": np.asarray(hospital), "y": np.asarray(label), "slide": np.asarray(slide)})
    rng = np.random.default_rng(seed)
    out: dict[int, dict[str, list[int]]] = {}
    for h in hospitals:
        hdf = df[df["hospital"] == h]
        drawn = []
        for c in (0, 1):
            cdf = hdf[hdf["y"] == c]
            drawn.append(cdf.sample(n=min(len(cdf), per_class), random_state=seed))
        sampled = pd.concat(drawn).sample(frac=1, random_state=seed)
        if slide_order == "sorted":
            slides = np.unique(sampled["slide"].to_numpy())
        elif slide_order == "appearance":
            slides = sampled["slide"].unique()
        else:
            raise PrismError(f"slide_order must be 'sorted' or 'appearance', got {slide_order!r}")
        perm = rng.permutation(slides)
        s = len(perm)
        n_train = max(1, int(math.floor(SLIDE_FRACTIONS[0] * s)))
        n_val_end = max(n_train + 1, int(math.floor(SLIDE_FRACTIONS[1] * s)))
        groups = {"train": set(perm[:n_train].tolist()), "val": set(perm[n_train:n_val_end].tolist()),
                  "test": set(perm[n_val_end:].tolist())}
        slides_of = sampled["slide"].to_numpy()
        index = sampled.index.to_numpy()
        out[h] = {part: [int(i) for i, sl in zip(index, slides_of) if sl in groups[part]] for part in PARTS}
    return out


# --------------------------------------------------------------------------------------------
# resplit.json: the balanced re-split
# --------------------------------------------------------------------------------------------

def _part_of_rank(n: int, rng: np.random.Generator, fractions=RESPLIT_FRACTIONS) -> np.ndarray:
    """For the class's k-th position (ascending), its part (0 train, 1 val, 2 test) after one ``rng.shuffle``."""
    perm = np.arange(n)
    rng.shuffle(perm)
    slot = np.empty(n, dtype=np.int64)
    slot[perm] = np.arange(n)  # where the k-th position landed in the shuffled order
    a, b = round(fractions[0] * n), round(fractions[1] * n)
    return np.where(slot < a, 0, np.where(slot < b, 1, 2)).astype(np.int8)


def resplit_positions(labels: Sequence[int], hospital: int, *, seed_base: int = SEED,
                      fractions=RESPLIT_FRACTIONS) -> dict[str, list[int]]:
    """The ``resplit.json`` procedure: positions into concat(train, val, test), per part, sorted."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed_base + int(hospital))
    out: dict[str, list[int]] = {p: [] for p in PARTS}
    for c in (0, 1):
        pos = np.flatnonzero(y == c)
        rng.shuffle(pos)
        n = len(pos)
        a, b = round(fractions[0] * n), round(fractions[1] * n)
        out["train"].extend(pos[:a].tolist())
        out["val"].extend(pos[a:b].tolist())
        out["test"].extend(pos[b:].tolist())
    return {p: sorted(int(i) for i in v) for p, v in out.items()}


def derive_labels(resplit_h: Mapping[str, Sequence[int]], hospital: int, n_per_class: tuple[int, int] = (PER_CLASS, PER_CLASS),
                  *, seed_base: int = SEED) -> np.ndarray | None:
    """A label vector for which :func:`resplit_positions` reproduces ``resplit_h`` exactly, or None.

    The seeded shuffles fix, for the k-th class-c position, the part it must land in; scanning positions 0..N-1
    with k0 = class-0 positions seen so far, a label is admissible when its rank's part equals the published part.
    Forward reachability over k0, then a backward walk, yields one consistent labelling (there are usually many).
    None means no labelling with these class sizes reproduces the file under this procedure and seed.
    """
    n0, n1 = n_per_class
    n = n0 + n1
    part = np.full(n, -1, dtype=np.int8)
    for code, name in enumerate(PARTS):
        idx = np.asarray(resplit_h[name], dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            return None
        part[idx] = code
    if (part < 0).any():
        return None
    rng = np.random.default_rng(seed_base + int(hospital))
    want0, want1 = _part_of_rank(n0, rng), _part_of_rank(n1, rng)
    reach: list[set[int]] = [{0}]
    for p in range(n):
        nxt: set[int] = set()
        for k0 in reach[-1]:
            k1 = p - k0
            if k0 < n0 and want0[k0] == part[p]:
                nxt.add(k0 + 1)
            if k1 < n1 and want1[k1] == part[p]:
                nxt.add(k0)
        if not nxt:
            return None
        reach.append(nxt)
    if n0 not in reach[-1]:
        return None
    labels = np.empty(n, dtype=np.int64)
    k0 = n0
    for p in range(n - 1, -1, -1):
        # step p went from state s to k0; prefer a class-1 step when both are possible
        k1_prev = p - k0
        if k0 in reach[p] and 0 <= k1_prev < n1 and want1[k1_prev] == part[p]:
            labels[p] = 1
        else:
            labels[p] = 0
            k0 -= 1
    return labels


# --------------------------------------------------------------------------------------------
# published files
# --------------------------------------------------------------------------------------------

def read_split_file(path: str | Path, *, kind: str) -> dict[int, dict[str, list[int]]]:
    """``splits.json`` / ``resplit.json``: ``{hospital: {train|val|test: [ints]}}``, checked."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise PrismError(f"Camelyon17 {kind} file {path} not found; copy it from the PRISM release "
                         f"(data/camelyon17/{path.name}) or set source.{kind}: procedure to recompute it") from None
    except ValueError as exc:
        raise PrismError(f"{path}: not valid JSON ({exc})") from None
    out: dict[int, dict[str, list[int]]] = {}
    if not isinstance(raw, dict):
        raise PrismError(f"{path}: expected {{hospital: {{train, val, test}}}}")
    for h, parts in raw.items():
        try:
            hi = int(h)
        except ValueError:
            raise PrismError(f"{path}: hospital key {h!r} is not an integer") from None
        if not isinstance(parts, dict) or set(parts) != set(PARTS):
            raise PrismError(f"{path}: hospital {h} must have exactly train, val, test lists")
        out[hi] = {}
        for p in PARTS:
            v = parts[p]
            if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
                raise PrismError(f"{path}: hospital {h} {p}: must be a list of non-negative integers")
            out[hi][p] = v
        allv = [i for p in PARTS for i in out[hi][p]]
        if len(set(allv)) != len(allv):
            raise PrismError(f"{path}: hospital {h}: an index appears in two parts")
    return out


# --------------------------------------------------------------------------------------------
# embeddings: load-time normalisation and the re-split
# --------------------------------------------------------------------------------------------

def l2_rows(X: np.ndarray) -> np.ndarray:
    """Row / (Euclidean norm + 1e-12), as the reference did at load time."""
    X = np.asarray(X, dtype=np.float64 if np.asarray(X).dtype == np.float64 else np.float32)
    return X / (np.linalg.norm(X, axis=1, keepdims=True) + NORM_EPS)


def resplit_features(stored: Mapping[str, tuple[np.ndarray, np.ndarray]],
                     resplit_h: Mapping[str, Sequence[int]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Concatenate the stored train/val/test arrays, L2-normalise the rows, index by the re-split."""
    X = np.concatenate([np.asarray(stored[p][0]) for p in PARTS])
    y = np.concatenate([np.asarray(stored[p][1]).reshape(-1) for p in PARTS])
    Xn = l2_rows(X)
    out = {}
    for p in PARTS:
        idx = np.asarray(resplit_h[p], dtype=np.int64)
        if idx.size and idx.max() >= len(y):
            raise PrismError(f"re-split part {p} indexes row {idx.max()} but the stored arrays have {len(y)} rows")
        out[p] = (Xn[idx], y[idx])
    return out


def materialise(stored_dir: str | Path, resplit_file: str | Path, hospital: int, out_dir: str | Path) -> dict[str, int]:
    """Write the re-split, normalised ``{split}_features.npy`` / ``_labels.npy`` for one hospital."""
    stored = {p: read_embedding_split(stored_dir, p)[:2] for p in PARTS}
    resplit = read_split_file(resplit_file, kind="resplit")
    if hospital not in resplit:
        raise PrismError(f"{resplit_file}: no hospital {hospital}")
    result = resplit_features(stored, resplit[hospital])
    for p, (X, y) in result.items():
        write_embedding_split(out_dir, p, X.astype(np.float32), y.astype(np.int64))
    return {p: len(v[1]) for p, v in result.items()}


# --------------------------------------------------------------------------------------------
# the task source
# --------------------------------------------------------------------------------------------

class Camelyon17Source(Source):
    """One hospital's Camelyon17 patches, re-split 14,000 / 3,000 / 3,000 (PROTOCOL §1.4).

    ``data`` is an ``hf`` source spec of the WILDS patches (hub id + revision, or a local parquet copy) whose
    splits, concatenated in ``data.splits`` order, define the global index. ``splits`` / ``resplit`` say whether
    the published files (``splits_file`` / ``resplit_file``) are read or the procedures recomputed (``procedure``;
    the sampling then needs the hospital, slide and label columns).
    """

    type_name = "camelyon17"
    OPTIONS = frozenset({"hospital", "data", "splits", "resplit", "splits_file", "resplit_file",
                         "hospital_column", "slide_column", "label_column", "image_column", "slide_order"})
    REQUIRED = frozenset({"data"})
    LAYOUT = ("the WILDS patches as an HF dataset (data.path: hub id or local parquet copy) plus "
              "splits.json / resplit.json under $PRISM_DATA_DIR/camelyon17/")

    def __init__(self, task, hospital: int | None = None, data: dict | None = None, splits: str = "published",
                 resplit: str = "published", splits_file: str = "camelyon17/splits.json",
                 resplit_file: str = "camelyon17/resplit.json", hospital_column: str = "center",
                 slide_column: str = "slide", label_column: str = "label", image_column: str = "image",
                 slide_order: str = "sorted", **options: Any):
        super().__init__(task, hospital=hospital, data=data, splits=splits, resplit=resplit, splits_file=splits_file,
                         resplit_file=resplit_file, hospital_column=hospital_column, slide_column=slide_column,
                         label_column=label_column, image_column=image_column, slide_order=slide_order, **options)
        if hospital is None:
            hospital = task.columns.get("hospital")
        if hospital not in HOSPITALS:
            raise PrismError(f"{task.file}: source.hospital must be one of {list(HOSPITALS)} "
                             f"(or set columns.hospital), got {hospital!r}")
        self.hospital = int(hospital)
        self.data = dict(data or {})
        self.mode = {"splits": splits, "resplit": resplit}
        self.files = {"splits": resolve_root(splits_file), "resplit": resolve_root(resplit_file)}
        self.columns = {"hospital": hospital_column, "slide": slide_column, "label": label_column,
                        "image": image_column}
        self.slide_order = slide_order
        self._state = None

    @staticmethod
    def check_spec(options: dict, located) -> None:
        for key in ("splits", "resplit"):
            if options.get(key, "published") not in ("published", "procedure"):
                raise keyed_error(PrismError(f"{located.where('source.' + key)}: source.{key}: must be 'published' "
                                             f"(read {key}.json) or 'procedure' (recompute it)"), f"source.{key}")
        data = options.get("data")
        if not isinstance(data, dict) or not data.get("path"):
            raise keyed_error(PrismError(f"{located.where('source.data')}: source.data: must be an hf source spec "
                                         "with a path (hub id + revision, or a local parquet directory)"), "source.data")
        allowed = {"path", "revision", "name", "data_files", "data_dir", "format", "splits", "cache_dir"}
        extra = sorted(set(data) - allowed)
        if extra:
            raise keyed_error(PrismError(f"{located.where('source.data.' + extra[0])}: source.data.{extra[0]}: not an "
                                         f"option (allowed: {', '.join(sorted(allowed))})"), "source.data")
        from prism_plugin.data.hf import is_hub_id, resolve_local

        if is_hub_id(str(data["path"])) and resolve_local(str(data["path"])) is None and not data.get("revision"):
            raise keyed_error(PrismError(f"{located.where('source.data')}: source.data.revision: a hub dataset needs a "
                                         f"pinned revision (a commit sha); add revision: <sha> for {data['path']}"),
                              "source.data")

    def describe(self) -> str:
        return f"Camelyon17 hospital {self.hospital} from {self.data.get('path')}"

    def _load(self):
        if self._state is not None:
            return self._state
        from prism_plugin.data.hf import HFImageRef, open_concat, resolve_local

        spec = {k: v for k, v in self.data.items() if k != "splits"}
        parts, total = open_concat(spec, self.data.get("splits"), task_name=self.task.name,
                                   dataset_name=self.task.dataset, option="source.data.path")
        offsets = np.cumsum([0] + [len(d) for _, d in parts])

        def column(name: str) -> np.ndarray:
            col = self.columns[name]
            arrays = []
            for split, d in parts:
                if col not in d.column_names:
                    raise PrismError(f"task {self.task.name}: {self.data.get('path')} [{split}] has no column {col!r} "
                                     f"(columns: {', '.join(d.column_names)}); set source.{name}_column")
                arrays.append(np.asarray(d.data.column(col).to_numpy(zero_copy_only=False)))
            return np.concatenate(arrays)

        labels = column("label").astype(np.int64)
        if self.mode["splits"] == "published":
            chosen = read_split_file(self.files["splits"], kind="splits")
            if self.hospital not in chosen:
                raise PrismError(f"{self.files['splits']}: no hospital {self.hospital}")
            hsplit = chosen[self.hospital]
        else:
            hsplit = sample_hospitals(column("hospital"), labels, column("slide"), slide_order=self.slide_order)[self.hospital]
        concat = np.asarray(hsplit["train"] + hsplit["val"] + hsplit["test"], dtype=np.int64)
        if concat.size and concat.max() >= total:
            raise PrismError(f"task {self.task.name}: split indices reach row {concat.max()} but "
                             f"{self.data.get('path')} has {total} rows; the splits must be concatenated in the "
                             "stored order (source.data.splits)")
        y_concat = labels[concat]
        if self.mode["resplit"] == "published":
            rs = read_split_file(self.files["resplit"], kind="resplit")
            if self.hospital not in rs:
                raise PrismError(f"{self.files['resplit']}: no hospital {self.hospital}")
            positions = rs[self.hospital]
        else:
            positions = resplit_positions(y_concat, self.hospital)
        base = resolve_local(str(self.data.get("path", "")))
        items = []
        for g in concat.tolist():
            k = int(np.searchsorted(offsets, g, side="right") - 1)
            split, d = parts[k]
            items.append((d, g - int(offsets[k]), split, g))
        img_cache: dict[int, Any] = {}

        def ref(entry):
            d, row, split, g = entry
            import datasets

            key = id(d)
            if key not in img_cache:
                col = self.columns["image"]
                if col not in d.column_names:
                    raise PrismError(f"task {self.task.name}: no image column {col!r}; set source.image_column")
                sub = d.select_columns([col])
                if isinstance(sub.features[col], datasets.Image):
                    sub = sub.cast_column(col, datasets.Image(decode=False))
                img_cache[key] = sub
            return HFImageRef(img_cache[key], row, self.columns["image"], f"{split}/{row} (global {g})", base)

        refs = [ref(e) for e in items]
        pool = Pool(refs, [int(v) for v in y_concat.tolist()], [r.key for r in refs],
                    where=f"Camelyon17 hospital {self.hospital}")
        self._state = (pool, {p: np.asarray(positions[p], dtype=np.int64) for p in PARTS})
        return self._state

    def part(self, name: str):
        if name not in PARTS:
            raise PrismError(f"task {self.task.name}: Camelyon17 splits are {', '.join(PARTS)}; got {name!r}")
        pool, positions = self._load()
        y = self.labels(pool)
        pos = positions[name]
        return pool, pos, y[pos]


# --------------------------------------------------------------------------------------------
# command line: python -m prism_plugin.data.camelyon17
# --------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prism_plugin.data.camelyon17",
                                description="Camelyon17 split files and re-split embeddings (PROTOCOL §1.4)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("resplit-embeddings",
                       help="apply resplit.json + L2 normalisation to embeddings stored in splits.json order")
    r.add_argument("--stored", required=True, type=Path,
                   help="folder with {train,val,test}_features.npy / _labels.npy (or .parquet) of one hospital")
    r.add_argument("--resplit", required=True, type=Path, help="resplit.json")
    r.add_argument("--hospital", required=True, type=int, choices=HOSPITALS)
    r.add_argument("--out", required=True, type=Path, help="output folder, e.g. embeddings/<model>/camelyon17_resplit/h0")
    v = sub.add_parser("verify", help="check that resplit.json is reproduced by the re-split procedure")
    v.add_argument("--resplit", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "resplit-embeddings":
            sizes = materialise(args.stored, args.resplit, args.hospital, args.out)
            print(f"wrote {args.out}: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
            return 0
        rs = read_split_file(args.resplit, kind="resplit")
        bad = 0
        for h, parts in sorted(rs.items()):
            y = derive_labels(parts, h)
            ok = y is not None and resplit_positions(y, h) == {k: sorted(v) for k, v in parts.items()}
            bad += not ok
            print(f"hospital {h}: {'reproduced' if ok else 'NOT reproduced'} "
                  f"({', '.join(f'{k} {len(v)}' for k, v in parts.items())})")
        return 1 if bad else 0
    except PrismError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
