"""The typed task schema: one place that turns a YAML mapping into a :class:`TaskConfig`.

Every error names the file, the line and the key, and suggests the closest known key for typos.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from prism_plugin.data.catalogue import check_source_spec
from prism_plugin.data.splits import check_split_spec
from prism_plugin.errors import PrismError, plain_name, suggest
from prism_plugin.heads.base import resolve_probe
from prism_plugin.heads.logistic import DEFAULT_PROBE
from prism_plugin.paths import name_problem, relative_key_problem, short_repr
from prism_plugin.registrars import TASK_KINDS
from prism_plugin.protocol.grid import DEFAULT_FRACTIONS, DEFAULT_SEEDS
from prism_plugin.protocol.settings import check_fractions, check_seeds, check_task_grid
from prism_plugin.tasks.loader import Located

SPLIT_NAMES = ("train", "val", "test")

#: The protocol's own keys. Every other top-level key is a plugin's: the task-key registry
#: (``register_task_keys``; built in: adaptation, priors, sweep in :mod:`prism_plugin.tasks.keys`).
CORE_KEYS = {
    "task", "description", "kind", "dataset", "embeddings_key", "n_classes", "class_names", "source",
    "splits", "label_fractions", "seeds", "probe", "ece_bins", "binary_logits", "temperature_bounds",
    "proportional_val", "tags", "columns", "reference_table", "split", "ood_stability",
    # transfer tasks
    "source_task", "target_task", "source_labels", "target_labels", "src", "tgt", "pair", "target_split",
    "ood_stability",
}
TRANSFER_ONLY = {"source_task", "target_task", "source_labels", "target_labels", "src", "tgt", "pair", "target_split",
                 "ood_stability"}
SPLIT_KEYS = {"name", "size", "class_counts"}


@dataclass(frozen=True)
class SplitConfig:
    name: str
    size: int | None = None
    class_counts: tuple[int, ...] | None = None


@dataclass
class TaskConfig:
    """A resolved, validated task."""

    name: str
    file: str
    dataset: str
    n_classes: int
    class_names: tuple[str, ...]
    source: dict[str, Any]
    splits: dict[str, SplitConfig]
    kind: str = "indomain"
    description: str = ""
    embeddings_key: str = ""
    label_fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    probe: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_PROBE))
    ece_bins: int = 15
    binary_logits: str = "symmetric"
    temperature_bounds: tuple[float, float] = (0.1, 10.0)
    proportional_val: bool = False
    tags: tuple[str, ...] = ()
    #: extra identity columns written in every row (e.g. ``hospital: 0``)
    columns: dict[str, Any] = field(default_factory=dict)
    #: which results_v2 per-run table these runs belong to (for summaries/findings)
    reference_table: str = ""
    #: how task splits are carved from the source (``split:`` procedure; prism_plugin.data.splits)
    split: dict[str, Any] | None = None
    #: adaptation plugin: methods/analyses (None = the plugin's default) and the class-prior stress test
    adaptation: tuple[str, ...] | None = None
    priors: dict[str, Any] | None = None
    #: ``sweep:`` {key, values, probes} (prism_plugin.tasks.sweep); empty once expanded into variants
    sweep: dict[str, Any] = field(default_factory=dict)
    #: grid dimensions (prism_plugin.tasks.grid_keys): the split seeds the ``split:`` procedure (for a
    #: transfer task: its source task's) runs with, and the probes run on each; () = the task's own
    #: ``split.seed`` and ``probe`` (ids, cells and runs.csv exactly as without the keys)
    split_seeds: tuple[int, ...] = ()
    probes: tuple[dict[str, Any], ...] = ()
    #: values of third-party task keys (``register_task_keys``), passed to every run as ``run.meta[key]``
    extras: dict[str, Any] = field(default_factory=dict)
    #: where keys that data problems point back to were written (``{"class_names": "x.yaml:4"}``); not resolved()
    origins: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # -- transfer tasks: train on the source task, evaluate on the target --
    source_task: str = ""
    target_task: str = ""
    source_labels: dict[str, Any] | None = None
    target_labels: dict[str, Any] | None = None
    src: str = ""
    tgt: str = ""
    pair: str = ""
    target_split: str = "test"
    source_config: "TaskConfig | None" = None
    target_config: "TaskConfig | None" = None

    def resolved(self) -> dict[str, Any]:
        """The task as plain data (for summary.json and fingerprints)."""
        out = asdict(self)
        out.pop("origins", None)  # where keys were written is no part of the task's identity
        out["splits"] = {k: asdict(v) for k, v in self.splits.items()}
        for key in ("source_config", "target_config"):
            cfg = getattr(self, key)
            out[key] = cfg.resolved() if cfg is not None else None
        return out

    @property
    def is_transfer(self) -> bool:
        return self.kind == "transfer"

    @property
    def grid_probes(self) -> tuple[dict[str, Any], ...]:
        """The probes the grid runs: ``probes``, else the one ``probe``."""
        return tuple(self.probes) or (dict(self.probe),)

    @property
    def grid_split_seeds(self) -> tuple[int | None, ...]:
        """The split seeds the grid runs: ``split_seeds``, else ``(None,)`` (the task's own splits)."""
        return tuple(self.split_seeds) or (None,)

    @property
    def n_runs(self) -> int:
        """Runs of the whole grid: split seeds x probes x label fractions x seeds."""
        return len(self.grid_split_seeds) * len(self.grid_probes) * len(self.label_fractions) * len(self.seeds)

    def grid_text(self) -> str:
        """``5 split seeds x 2 probes (logistic_std, knn1) x 1 fractions x 1 seeds = 10 runs``; without the
        grid-dimension keys ``6 fractions x 3 seeds = 18 runs``."""
        parts = []
        if self.split_seeds:
            parts.append(f"{len(self.split_seeds)} split seed{'s' if len(self.split_seeds) != 1 else ''}")
        if self.probes:
            kinds = ", ".join(str(p.get("kind")) for p in self.probes)
            parts.append(f"{len(self.probes)} probe{'s' if len(self.probes) != 1 else ''} ({kinds})")
        parts += [f"{len(self.label_fractions)} fractions", f"{len(self.seeds)} seeds"]
        return " x ".join(parts) + f" = {self.n_runs} runs"


class Checker:
    """Builds file:line errors and, while ``collecting``, gathers every independent problem.

    :meth:`attempt` runs one check: in collecting mode a problem is recorded and the
    check's fallback returned, so the next key is still checked (``prism-run validate``
    lists every problem once); otherwise the problem is raised (the ``settings``
    callback of a task key, a plugin validator).
    """

    def __init__(self, located: Located, host, collecting: bool = False):
        self.loc = located
        #: the plugin host whose registries (task keys, sources, table kinds) validate the task
        self.host = host
        self.collecting = collecting
        self.problems: list[PrismError] = []

    def fail(self, key: str, message: str) -> PrismError:
        exc = PrismError(f"{self.loc.where(key)}: {key}: {message}")
        exc.key = key  # which key path the problem is about (`validate` reports every problem)
        return exc

    def add(self, exc: PrismError) -> None:
        if self.collecting:
            self.problems.append(exc)
        else:
            raise exc

    def attempt(self, check: Callable[[], Any], fallback: Any = None) -> Any:
        if not self.collecting:
            return check()
        try:
            return check()
        except PrismError as exc:
            self.problems.append(exc)
            return fallback

    def raise_problems(self) -> None:
        if not self.problems:
            return
        lines = list(dict.fromkeys(line for e in self.problems for line in str(e).split("\n") if line.strip()))
        if len(self.problems) == 1:
            raise self.problems[0]
        exc = PrismError("\n".join(lines))
        exc.errors = list(self.problems)  # each with its .key (the task index looks past them)
        raise exc

    def unknown(self, mapping: dict, allowed: set[str], prefix: str = "") -> None:
        for key in mapping:
            if key not in allowed:
                full = f"{prefix}{key}"
                exc = PrismError(
                    f"{self.loc.where(full)}: unknown key {full!r}{suggest(str(key), allowed)} "
                    f"(allowed: {_key_list(allowed)})"
                )
                exc.key = full
                self.add(exc)

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {short_repr(value)}")
        return plain_name(value, self.loc.where(key) + f": {key}")  # a name never carries a control character

    def name(self, value: Any, key: str, what: str = "task name") -> str:
        """A name that becomes a folder name: plain text, never a path (see prism_plugin.paths.name_problem)."""
        problem = name_problem(value, what)
        if problem:
            raise self.fail(key, problem)
        return value

    def integer(self, value: Any, key: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {short_repr(value)}")
        if not lo <= value <= hi:
            raise self.fail(key, f"must be between {lo} and {hi}, got {value}")
        return value

    def number(self, value: Any, key: str, lo: float, hi: float, lo_open: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {short_repr(value)}")
        if value < lo or value > hi or (lo_open and value == lo):
            interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            raise self.fail(key, f"must be in {interval}, got {value}")
        return float(value)

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {short_repr(value)}")
        return value

    def str_list(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"must be a list of non-empty strings, got {short_repr(value)}")
        return tuple(plain_name(v, self.loc.where(key) + f": {key}") for v in value)  # no control characters


#: task keys the TaskConfig holds as attributes (the built-in plugin keys); others go to ``extras``
ATTRIBUTE_KEYS = ("adaptation", "priors", "sweep", "split_seeds", "probes")


def build_task(located: Located, host=None) -> TaskConfig:
    """Validate a resolved YAML mapping (includes applied) into a TaskConfig (``host``: whose registries
    validate it; default the shared plugin host).

    Every independent problem is collected: one raises as itself (with ``.key``), several as one
    PrismError with one line per problem (in file order of the checks, each once).
    """
    from prism_plugin.plugins import host_or_shared

    c = Checker(located, host_or_shared(host), collecting=True)
    try:
        task = _build(located, c)
    except PrismError as exc:  # a problem the rest of the checks depend on (e.g. an unknown kind)
        if exc not in c.problems:
            c.problems.append(exc)
        task = None
    c.raise_problems()
    return task


def _required(located: Located, c: Checker, keys: tuple[str, ...], what: str = "") -> None:
    for key in keys:
        if key not in located.data:
            exc = PrismError(f"{located.file}: missing required key {key!r}{what}")
            exc.key = key
            c.add(exc)


def _build(located: Located, c: Checker) -> TaskConfig:
    host = c.host
    d = located.data
    c.unknown(d, CORE_KEYS | set(host.task_keys.names()))
    kind = d.get("kind", "indomain")
    if kind not in TASK_KINDS:
        raise c.fail("kind", f"must be one of {', '.join(TASK_KINDS)}, got {short_repr(kind)}"
                             f"{suggest(str(kind), TASK_KINDS)}")
    if kind == "transfer":
        return _build_transfer(located, c)
    _required(located, c, ("task", "dataset", "source", "splits"))
    for key in TRANSFER_ONLY:
        if key in d:
            c.add(c.fail(key, "only applies to kind: transfer tasks"))
    name = c.attempt(lambda: c.name(d["task"], "task"), "") if "task" in d else ""
    dataset = c.attempt(lambda: c.string(d["dataset"], "dataset"), "") if "dataset" in d else ""
    n_classes, class_names = _classes(d, c, located)

    source: dict[str, Any] = {}
    if "source" in d:
        def check_source() -> dict[str, Any]:
            raw = d["source"]
            if not isinstance(raw, dict) or "type" not in raw:
                raise c.fail("source", "must be a mapping with a 'type' (imagefolder, hf, records, demo, "
                                       "precomputed, ...)")
            c.string(raw["type"], "source.type")
            check_source_spec(raw, class_names or (), located, host=host)
            return dict(raw)
        source = c.attempt(check_source, {})
    split_spec = c.attempt(lambda: check_split_spec(d["split"], c.fail)) if "split" in d else None
    splits = _splits(d, c, n_classes) if "splits" in d else {}
    if split_spec is not None and splits:
        used = {cfg.name for cfg in splits.values()}
        unused = [p for p in split_spec["parts"] if p not in used]
        if unused:
            c.add(c.fail("split.parts", f"part(s) {unused} are used by no split; name them in splits.<s>.name "
                         f"(e.g. splits: {{train: {unused[0]}}}) or drop them"))
    embeddings_key = dataset
    if "embeddings_key" in d and d["embeddings_key"] not in (None, ""):
        def check_key() -> str:
            problem = relative_key_problem(d["embeddings_key"])
            if problem:
                raise c.fail("embeddings_key", problem)
            return d["embeddings_key"]
        embeddings_key = c.attempt(check_key, dataset)
    elif isinstance(dataset, str) and dataset and relative_key_problem(dataset):
        # without embeddings_key the dataset name is the embeddings folder (precomputed roots, cache keys)
        c.add(c.fail("dataset", f"{relative_key_problem(dataset)}; without embeddings_key the dataset name is the "
                                "embeddings folder: set embeddings_key to a plain relative folder, or rename the dataset"))

    common = _protocol_settings(d, c, n_classes or 2)
    c.attempt(lambda: check_task_grid(common, c.fail))  # once for the task, not per sweep variant
    return TaskConfig(
        origins=_origins(located),
        name=name,
        file=str(located.file),
        dataset=dataset,
        n_classes=n_classes or 2,
        class_names=class_names or (),
        source=source,
        splits=splits,
        kind=kind,
        description=str(d.get("description", "")),
        embeddings_key=str(embeddings_key or dataset),
        split=split_spec,
        **common,
    )


def _origins(located: Located) -> dict[str, str]:
    return {k: located.where(k) for k in ("class_names", "n_classes") if k in located.data}


def _classes(d: dict, c: Checker, located: Located) -> tuple[int | None, tuple[str, ...] | None]:
    """(n_classes, class_names); None for a value that failed its check (already recorded)."""
    def names() -> tuple[str, ...]:
        out = c.str_list(d["class_names"], "class_names")
        if len(set(out)) != len(out):
            raise c.fail("class_names", "contains duplicates")
        if len(out) == 1:
            raise c.fail("class_names", "a task needs at least 2 classes")
        return out
    class_names = c.attempt(names) if "class_names" in d else ()
    n_classes = c.attempt(lambda: c.integer(d["n_classes"], "n_classes", 2, 100_000)) if "n_classes" in d else None
    if n_classes is not None and class_names and len(class_names) != n_classes:
        c.add(c.fail("n_classes", f"is {n_classes} but class_names lists {len(class_names)} names"))
    elif n_classes is None and class_names:
        n_classes = len(class_names)
    elif "n_classes" not in d and "class_names" not in d:
        c.add(PrismError(f"{located.file}: give n_classes or class_names"))
    return n_classes, class_names


def _splits(d: dict, c: Checker, n_classes: int | None) -> dict[str, SplitConfig]:
    splits_raw = d["splits"]
    if not isinstance(splits_raw, dict):
        c.add(c.fail("splits", "must map train/val/test to split names or {name, size}"))
        return {}
    c.unknown(splits_raw, set(SPLIT_NAMES), "splits.")
    for req in ("train", "test"):
        if req not in splits_raw:
            c.add(c.fail("splits", f"needs a {req!r} split"))
    splits: dict[str, SplitConfig] = {}
    for split, spec in splits_raw.items():
        if split not in SPLIT_NAMES:
            continue
        key = f"splits.{split}"

        def one(spec=spec, split=split, key=key) -> SplitConfig:
            if isinstance(spec, str):
                return SplitConfig(name=spec)
            if not isinstance(spec, dict):
                raise c.fail(key, "must be a split name or a mapping {name, size, class_counts}")
            c.unknown(spec, SPLIT_KEYS, key + ".")
            counts = spec.get("class_counts")
            if counts is not None:
                if not isinstance(counts, list) or (n_classes and len(counts) != n_classes) or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in counts
                ):
                    raise c.fail(key + ".class_counts", f"must list {n_classes or 'n_classes'} non-negative integers")
                counts = tuple(counts)
            size = spec.get("size")
            if size is not None:
                size = c.attempt(lambda: c.integer(size, key + ".size", 1, 10**9))
            if size is not None and counts is not None and sum(counts) != size:
                raise c.fail(key + ".class_counts", f"sums to {sum(counts)} but size is {size}")
            return SplitConfig(name=c.string(spec.get("name", split), key + ".name"), size=size, class_counts=counts)
        cfg = c.attempt(one)
        if cfg is not None:
            splits[split] = cfg
    return splits


def _protocol_settings(d: dict, c: Checker, n_classes: int) -> dict[str, Any]:
    """Keys shared by every task kind: grid, probe, ECE, temperature, extra columns."""
    fractions = c.attempt(lambda: check_fractions(d.get("label_fractions", DEFAULT_FRACTIONS),
                                                  lambda m: c.fail("label_fractions", m)), DEFAULT_FRACTIONS)
    seeds = c.attempt(lambda: check_seeds(d.get("seeds", DEFAULT_SEEDS), lambda m: c.fail("seeds", m)), DEFAULT_SEEDS)

    probe = c.attempt(lambda: normalise_probe(d.get("probe", {}), c), dict(DEFAULT_PROBE))

    ece_bins = c.attempt(lambda: c.integer(d.get("ece_bins", 15), "ece_bins", 1, 10_000), 15)
    binary_logits = d.get("binary_logits", "symmetric")
    if binary_logits not in ("symmetric", "natural"):
        c.add(c.fail("binary_logits", "must be 'symmetric' (reference, T = 2 neutral) or 'natural', got "
                                      f"{short_repr(binary_logits)}"))
        binary_logits = "symmetric"

    def bounds_of() -> tuple[float, float]:
        bounds = d.get("temperature_bounds", [0.1, 10.0])
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise c.fail("temperature_bounds", "must be [low, high]")
        lo = c.number(bounds[0], "temperature_bounds", 0.0, 1e6, lo_open=True)
        hi = c.number(bounds[1], "temperature_bounds", 0.0, 1e6, lo_open=True)
        if lo >= hi:
            raise c.fail("temperature_bounds", f"low {lo} must be below high {hi}")
        return lo, hi
    bounds = c.attempt(bounds_of, (0.1, 10.0))
    columns = d.get("columns", {})
    if not isinstance(columns, dict) or not all(
        isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool) for k, v in columns.items()
    ) or not all(c.attempt(lambda k=k, v=v: (plain_name(k, f"{c.loc.where('columns')}: columns key"),
                                             plain_name(str(v), f"{c.loc.where('columns')}: columns.{k}")), None)
                 for k, v in columns.items()):  # a column name or value never carries a control character
        c.add(c.fail("columns", "must map column names to plain values, e.g. {hospital: 0}"))
        columns = {}
    host = c.host
    table = d.get("reference_table", "")
    if table and table not in host.tables:
        kinds = host.tables.names()
        c.add(c.fail("reference_table", f"must be a table kind ({', '.join(kinds)}; plugins register more), got "
                                        f"{short_repr(table)}{suggest(str(table), kinds)}"))
        table = ""
    proportional_val = c.attempt(lambda: c.boolean(d.get("proportional_val", False), "proportional_val"), False)
    tags = c.attempt(lambda: c.str_list(d.get("tags", []), "tags"), ()) if d.get("tags") else ()
    plugin_keys = _plugin_keys(d, c, host, n_classes)
    return dict(
        reference_table=table,
        label_fractions=fractions,
        seeds=seeds,
        probe=probe,
        ece_bins=ece_bins,
        binary_logits=binary_logits,
        temperature_bounds=bounds,
        proportional_val=proportional_val,
        tags=tags,
        columns=dict(columns),
        **plugin_keys,
    )


def normalise_probe(raw: Any, c: Checker, key: str = "probe") -> dict[str, Any]:
    """A ``probe:`` mapping checked against its head's declared settings, defaults filled in
    (:func:`~prism_plugin.heads.base.resolve_probe`); settings a lower layer than the ``kind`` set (an
    include, the task file under ``--set``) for another head are dropped. Problems name ``key``."""
    return resolve_probe(raw, c.host.registry("heads"), c.fail, key, _inherited(c.loc, key, raw))


def _inherited(loc: Located, key: str, raw: Any) -> set[str]:
    """The settings of ``raw`` that a lower layer than its ``kind`` set (rank: --set, task file, include),
    with that layer's value (a sweep's value is its own)."""
    files = getattr(loc, "files", None) or {}
    layer = loc.data.get(key) if isinstance(getattr(loc, "data", None), Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(layer, Mapping) or f"{key}.kind" not in files:
        return set()
    own = Path(loc.file).resolve()

    def rank(path: str) -> int:
        f = files.get(path, files.get(key))
        return 0 if f is None else 3 if str(f) == "--set" else 2 if Path(f).resolve() == own else 1
    top = rank(f"{key}.kind")
    return {k for k in raw if k != "kind" and k in layer and raw[k] == layer[k] and rank(f"{key}.{k}") < top}


def _variant_settings(c: Checker, n_classes: int) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The ``settings`` callback of a task key (``sweep``): a variant's protocol settings, raising.

    Keys that already failed in the task itself are left out of the variant, so their problem is
    reported once (at the key), not again as a problem of every sweep value.
    """
    def settings(variant: Mapping[str, Any]) -> dict[str, Any]:
        bad = {str(getattr(e, "key", "") or "").split(".")[0] for e in c.problems}
        clean = {k: v for k, v in variant.items() if k not in bad}
        return _protocol_settings(clean, Checker(c.loc, c.host), n_classes)
    return settings


def _plugin_keys(d: dict, c: Checker, host, n_classes: int) -> dict[str, Any]:
    """Every registered task key: validated value, or its default when absent."""
    from prism_plugin.registrars import TaskKeyContext

    kind = d.get("kind", "indomain")
    ctx = TaskKeyContext(fail=c.fail, data=d, n_classes=n_classes,
                         class_names=tuple(d.get("class_names") or ()) if isinstance(d.get("class_names"), list) else (),
                         kind=kind, file=str(c.loc.file), settings=_variant_settings(c, n_classes),
                         host=host, checker=c)
    attrs: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for name in host.task_keys:
        spec = host.task_keys.get(name)
        if name in CORE_KEYS:
            raise PrismError(f"task key {name!r} registered by {host.task_keys.entry(name).origin} is a core task "
                             "key of prism-plugin; the plugin must choose another name")
        value = spec.default
        if name in d and kind not in spec.kinds:
            c.add(c.fail(name, f"only applies to kind: {' or '.join(spec.kinds)} tasks"))
        elif name in d:
            def validate(name=name, spec=spec):
                try:
                    return spec.validator(d[name], ctx)
                except PrismError:
                    raise
                except Exception as exc:  # a plugin's validator that crashed: name it and the key
                    raise c.fail(name, f"validator of task key {name!r} ({host.task_keys.entry(name).origin}) "
                                       f"failed: {type(exc).__name__}: {exc}") from exc
            value = c.attempt(validate, spec.default)
        (attrs if name in ATTRIBUTE_KEYS else extras)[name] = value
    return {**attrs, "extras": extras}


def _build_transfer(located: Located, c: Checker) -> TaskConfig:
    """A transfer task: probe trained on ``source_task``, evaluated on ``target_task``'s test split."""
    from prism_plugin.protocol.labels import check_label_map

    d = located.data
    _required(located, c, ("task", "source_task", "target_task"), " (kind: transfer)")
    for key in ("source", "splits", "embeddings_key", "split"):
        if key in d:
            c.add(c.fail(key, "a transfer task takes its data from source_task and target_task"))
    name = c.attempt(lambda: c.name(d["task"], "task"), "") if "task" in d else ""
    class_names = c.attempt(lambda: c.str_list(d["class_names"], "class_names"), ()) if "class_names" in d else ()
    n_classes = c.attempt(lambda: c.integer(d.get("n_classes", len(class_names) or 2), "n_classes", 2, 100_000), 2)
    if class_names and len(class_names) != n_classes:
        c.add(c.fail("n_classes", f"is {n_classes} but class_names lists {len(class_names)} names"))
    src = str(d.get("src", "")) if d.get("src") is not None else ""
    tgt = str(d.get("tgt", "")) if d.get("tgt") is not None else ""
    target_split = d.get("target_split", "test")
    if target_split not in SPLIT_NAMES:
        c.add(c.fail("target_split", f"must be one of {', '.join(SPLIT_NAMES)}, got {short_repr(target_split)}"))
        target_split = "test"
    if "ood_stability" in d:  # read by the task index when it links src/tgt to the member tasks
        c.attempt(lambda: c.boolean(d["ood_stability"], "ood_stability"))
    members = {}
    for role in ("source_task", "target_task"):
        members[role] = c.attempt(lambda role=role: c.name(d[role], role), "") if role in d else ""
    labels = {}
    for role in ("source_labels", "target_labels"):
        labels[role] = c.attempt(lambda role=role: check_label_map(d.get(role), located.where(role) + ": " + role))
    settings = _protocol_settings(d, c, n_classes)
    c.attempt(lambda: check_task_grid(settings, c.fail))
    return TaskConfig(
        origins=_origins(located),
        name=name,
        file=str(located.file),
        dataset=str(d.get("dataset", "") or d.get("pair", "") or name),
        n_classes=n_classes,
        class_names=class_names,
        source={},
        splits={},
        kind="transfer",
        description=str(d.get("description", "")),
        source_task=members["source_task"],
        target_task=members["target_task"],
        source_labels=labels["source_labels"],
        target_labels=labels["target_labels"],
        src=src,
        tgt=tgt,
        pair=str(d.get("pair", "") or ""),
        target_split=target_split,
        **settings,
    )


def _key_list(allowed: set[str], width: int = 240) -> str:
    """The allowed keys, sorted, cut to about ``width`` characters so the error stays one readable line
    (the closest names are given by the "did you mean" part)."""
    names = sorted(allowed)
    text = ", ".join(names)
    if len(text) <= width:
        return text
    shown: list[str] = []
    for name in names:
        if len(", ".join(shown + [name])) > width:
            break
        shown.append(name)
    return ", ".join(shown) + f", ... ({len(names)} in all; plugins' keys: `prism-run ls task-keys`)"

