"""The typed registrar objects handed to the ``register_*`` hooks, and what they register.

Each registrar is bound to one catalogue (a :class:`~prism_plugin.registry.Registry`) and to the
plugin that is registering, so every entry records its origin. Call it like a function::

    @hookimpl
    def register_metrics(register):
        register("my_score", direction="higher", aggregation="mean", display="My score")

Objects may be given lazily as ``"package.module:attribute"`` strings: they are imported on first
use, so ``prism-run ls`` never imports a heavy library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from prism_plugin.errors import PrismError, suggest
from prism_plugin.registry import Registry

DIRECTIONS = ("higher", "lower", None)
AGGREGATIONS = ("mean", "median", "max", "min", "sum", "first")
TASK_KINDS = ("indomain", "transfer")
ADAPTATION_ROLES = ("method", "analysis", "diagnostic")


def _obj_or_lazy(obj: Any) -> dict[str, Any]:
    return {"lazy": obj} if isinstance(obj, str) else {"obj": obj}


class Registrar:
    """Base: ``registrar(name, obj, **traits)`` adds one entry to its catalogue."""

    def __init__(self, registry: Registry, origin: str, plugin: str = ""):
        self.registry = registry
        self.origin = origin
        self.plugin = plugin

    def _add(self, name: str, obj: Any, *, description: str = "", aliases: Iterable[str] = (), **meta: Any):
        return self.registry.add(name, origin=self.origin, description=description, aliases=tuple(aliases),
                                 plugin=self.plugin, **_obj_or_lazy(obj), **meta)

    def __repr__(self) -> str:  # pragma: no cover
        return f"{type(self).__name__}({self.registry.kind!r}, origin={self.origin!r})"


class AdapterRegistrar(Registrar):
    def __call__(self, name: str, factory: Any, *, description: str = "", aliases: Iterable[str] = (),
                 dim: int | None = None, preprocessing: Any = None, licence: str | None = None) -> None:
        """``factory(**model_args)`` -> Adapter. ``dim``/``preprocessing``/``licence`` for ``ls adapters``."""
        if not callable(factory) and not isinstance(factory, str):
            raise PrismError(f"adapter {name!r} (from {self.origin}): factory must be callable or 'module:attr'")
        self._add(name, factory, description=description, aliases=aliases, dim=dim, preprocessing=preprocessing,
                  licence=licence)


class HeadRegistrar(Registrar):
    def __call__(self, kind: str, factory: Any, *, description: str = "", aliases: Iterable[str] = (),
                 seed_invariant: bool = False, linear: bool = False,
                 settings: Mapping[str, Any] | None = None) -> None:
        """``factory(seed=..., **settings)`` -> head with ``fit`` and ``evaluate``; ``settings`` maps each
        setting to a :class:`~prism_plugin.heads.base.Setting` (type, default, check)."""
        for key, spec in dict(settings or {}).items():
            if not (hasattr(spec, "validate") and hasattr(spec, "default")):
                raise PrismError(f"probe head {kind!r} (from {self.origin}): setting {key!r} needs a "
                                 "prism_plugin.heads.base.Setting(type, default, ...)")
        self._add(kind, factory, description=description, aliases=aliases, seed_invariant=bool(seed_invariant),
                  linear=bool(linear), settings=None if settings is None else dict(settings))


SOURCE_KINDS = ("images", "features")


class SourceRegistrar(Registrar):
    def __call__(self, type: str, source_class: Any, *, description: str = "", aliases: Iterable[str] = (),
                 kind: str | None = None) -> None:
        """``source_class(task, **options)`` reads one dataset (``options``: the task's ``source:`` keys
        without ``type``); ``OPTIONS`` lists the keys it accepts. ``kind`` (:data:`SOURCE_KINDS`) is what
        it yields, by default its class's ``input_kind`` (give it for a lazy ``"module:Class"``)."""
        kind = kind or getattr(source_class, "input_kind", "images")
        if kind not in SOURCE_KINDS:
            raise PrismError(f"source type {type!r} (from {self.origin}): kind must be one of "
                             f"{', '.join(SOURCE_KINDS)}, got {kind!r}")
        self._add(type, source_class, description=description, aliases=aliases, kind=kind)


class _NoAdaptStep:
    """The object of an analysis or diagnostic entry: a name a plugin computes itself, no adapt step."""

    def __repr__(self) -> str:
        return "<no adapt step>"


NO_ADAPT_STEP = _NoAdaptStep()


class AdaptationRegistrar(Registrar):
    def __call__(self, name: str, method: Any = None, *, role: str = "method", default: bool = True,
                 description: str = "", aliases: Iterable[str] = (), needs_labels: bool = False) -> None:
        """A test-time adaptation ``method`` (role ``method``), or an analysis/diagnostic name."""
        if role not in ADAPTATION_ROLES:
            raise PrismError(f"adaptation {name!r} (from {self.origin}): role must be one of "
                             f"{', '.join(ADAPTATION_ROLES)}, got {role!r}")
        if role == "method" and method is None:
            raise PrismError(f"adaptation method {name!r} (from {self.origin}): give the method function")
        if "__" in name or not name.replace("_", "").isalnum():
            raise PrismError(f"adaptation {name!r} (from {self.origin}): use letters, digits and single underscores "
                             "(the name becomes part of column names)")
        self._add(name, method if method is not None else NO_ADAPT_STEP, description=description, aliases=aliases,
                  role=role, default=bool(default), needs_labels=bool(needs_labels))


#: columns that identify one run (duplicates across results directories are an error); ``probe``
#: tells apart the same model audited with two heads
DEFAULT_KEY_COLUMNS = ("model", "dataset", "src", "tgt", "pair", "hospital", "probe", "fraction", "seed", "split_seed")


#: What a table kind's runs are to the report: trained and tested on one distribution, or transfer
#: (source-trained, target-tested, source-fitted temperature).
TABLE_ROLES = ("in_distribution", "transfer")
#: How the leaderboard shows a table kind: ranked (the leaderboard's numbers and figures), shown (the
#: per-task tables and transfer figures, when one of your models has such runs), or left out ("").
LEADERBOARD_USES = ("rank", "show", "")


@dataclass(frozen=True)
class TableKind:
    """A per-run table kind: its file in the results_v2 layout, the columns it needs, and what the
    report needs to show it (see :class:`TableRegistrar`)."""

    name: str
    file: str
    required_columns: tuple[str, ...]
    renames: Mapping[str, str] = field(default_factory=dict)
    drops: tuple[str, ...] = ()
    key_columns: tuple[str, ...] = DEFAULT_KEY_COLUMNS
    description: str = ""
    role: str = "in_distribution"  # TABLE_ROLES
    setting: str = "dataset"  # the column naming a run's setting (``pair`` may be built from src/tgt)
    temperature: str = "temperature"  # the column of the T behind ece_scaled_fixed
    label: str = ""  # how the report names these runs (default: the name)
    order: int = 100  # report order (built-ins: 10, 20, ... 70)
    shift: str = ""  # the shift kind of its rows when they carry no ``shift`` column
    shift_table: bool = False  # transfer runs of tasks declaring ``shift: <shift>`` are routed here
    bands: bool = False  # the PRISM label-definition transfer bands (Table 7) apply
    variant_of: str = ""  # the runs of that kind, with T fitted elsewhere (``temperature_from``)
    temperature_from: str = ""  # where that T was fitted, in words
    grid: bool = False  # many settings (Camelyon17's hospital pairs): summarised in one line
    binary: bool = False  # two classes when ``n_classes`` is absent
    setting_prefix: str = ""  # said before a setting that is not a pair ("Camelyon17 h0")
    leaderboard: str = "show"  # LEADERBOARD_USES

    @property
    def transfer(self) -> bool:
        return self.role == "transfer"


class TableRegistrar(Registrar):
    """``register(name, file, required_columns, **report)``: ``report`` declares what the report needs
    (the :class:`TableKind` fields: ``role``, ``setting`` and ``temperature`` columns, ``label``,
    ``order``, ``shift`` / ``shift_table``, ``bands``, ``variant_of`` / ``temperature_from``, ``grid``,
    ``binary``, ``setting_prefix``, ``leaderboard``); a transfer kind defaults to ``setting="pair"``,
    ``temperature="temperature_src"``, ``binary=True``."""

    def __call__(self, name: str, file: str, required_columns: Iterable[str] = ("model", "fraction", "seed"), *,
                 renames: Mapping[str, str] | None = None, drops: Iterable[str] = (),
                 key_columns: Iterable[str] | None = None, description: str = "", **report: Any) -> None:
        if not file.endswith(".csv") or "/" in file or "\\" in file:
            raise PrismError(f"table kind {name!r} (from {self.origin}): file must be a plain '<stem>.csv' name")
        fields = set(TableKind.__dataclass_fields__) - {"name", "file", "required_columns", "renames", "drops",
                                                        "key_columns", "description"}
        for key, value in report.items():
            if key not in fields:
                raise PrismError(f"table kind {name!r} (from {self.origin}): unknown argument {key!r}"
                                 f"{suggest(key, fields)} (allowed: {', '.join(sorted(fields))})")
        for key, allowed in (("role", TABLE_ROLES), ("leaderboard", LEADERBOARD_USES)):
            if key in report and report[key] not in allowed:
                raise PrismError(f"table kind {name!r} (from {self.origin}): {key} {report[key]!r} is not one of "
                                 f"{', '.join(map(repr, allowed))}{suggest(str(report[key]), allowed)}")
        report.setdefault("label", name)
        if report.get("role") == "transfer":
            report.setdefault("setting", "pair")
            report.setdefault("temperature", "temperature_src")
            report.setdefault("binary", True)
        kind = TableKind(name, file, tuple(required_columns), dict(renames or {}), tuple(drops),
                         DEFAULT_KEY_COLUMNS if key_columns is None else tuple(key_columns), description, **report)
        self._add(name, kind, description=description)


@dataclass
class TaskKeyContext:
    """What a task-key validator sees: ``fail(key, message)`` and the rest of the task mapping."""

    fail: Callable[[str, str], Exception]
    data: Mapping[str, Any]
    n_classes: int
    class_names: tuple[str, ...] = ()
    kind: str = "indomain"
    #: the task's file (for messages)
    file: str = ""
    #: the task's own protocol settings builder, for keys that nest task keys (``sweep``)
    settings: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    #: the plugin host validating the task (its registries: e.g. adaptation method names)
    host: Any = None
    #: the schema's checker (``where(key)`` gives file:line), for validators that report nested keys
    checker: Any = None


@dataclass(frozen=True)
class TaskKey:
    """A plugin-owned task YAML key."""

    key: str
    validator: Callable[[Any, TaskKeyContext], Any]
    kinds: tuple[str, ...] = TASK_KINDS
    description: str = ""
    #: the value used when the key is absent (not validated)
    default: Any = None
    #: False: descriptive metadata (a label such as ``shift``) that changes no number; it is not part
    #: of the cells' fingerprint, so declaring it later keeps every finished run reusable
    results: bool = True
    #: ``summary(value, cells=, runs=, run_ids=, artifact_dir=, task=, cell_by=)``: what summary.json records
    #: under the key after a job (it may annotate the ``cells``); None: nothing
    summary: Callable[..., Any] | None = None


class TaskKeyRegistrar(Registrar):
    def __call__(self, key: str, validator: Callable[[Any, TaskKeyContext], Any], *,
                 kinds: Iterable[str] = TASK_KINDS, description: str = "", default: Any = None,
                 results: bool = True, summary: Callable[..., Any] | None = None) -> None:
        kinds = tuple(kinds)
        bad = [k for k in kinds if k not in TASK_KINDS]
        if bad:
            raise PrismError(f"task key {key!r} (from {self.origin}): kinds must be among {', '.join(TASK_KINDS)}")
        if not callable(validator):
            raise PrismError(f"task key {key!r} (from {self.origin}): validator must be callable")
        self._add(key, TaskKey(key, validator, kinds, description, default, bool(results), summary),
                  description=description)


@dataclass(frozen=True)
class MetricInfo:
    """What a per-run metric column means: which way is better and how runs combine."""

    column: str
    direction: str | None = None
    aggregation: str = "mean"
    display: str = ""
    description: str = ""
    #: in summary.json cells (seed mean/std per cell)
    summary: bool = True
    #: in the report's metric table
    report: bool = True
    #: in the transfer band table (in-distribution vs transfer, per fraction)
    bands: bool = False
    #: in `prism-run compare`
    compare: bool = False
    #: number format in tables
    fmt: str = ".4f"

    @property
    def label(self) -> str:
        return self.display or self.column

    @property
    def arrow(self) -> str:
        return {"higher": "↑", "lower": "↓"}.get(self.direction or "", "")

    @property
    def titled(self) -> str:
        """The label with its direction arrow (``AUROC ↑``; the label alone without a direction)."""
        return f"{self.label} {self.arrow}" if self.arrow else self.label


class MetricRegistrar(Registrar):
    def __call__(self, column: str, *, direction: str | None = None, aggregation: str = "mean", display: str = "",
                 description: str = "", summary: bool = True, report: bool = True, bands: bool = False,
                 compare: bool = False, fmt: str = ".4f") -> None:
        if direction not in DIRECTIONS:
            raise PrismError(f"metric {column!r} (from {self.origin}): direction must be 'higher', 'lower' or None, "
                             f"got {direction!r}")
        if aggregation not in AGGREGATIONS:
            raise PrismError(f"metric {column!r} (from {self.origin}): aggregation must be one of "
                             f"{', '.join(AGGREGATIONS)}, got {aggregation!r}")
        info = MetricInfo(column, direction, aggregation, display, description, bool(summary), bool(report),
                          bool(bands), bool(compare), fmt)
        self._add(column, info, description=description)


class CheckRegistrar(Registrar):
    def __call__(self, name: str, check: Any, *, description: str = "", aliases: Iterable[str] = ()) -> None:
        """``check(runs, ctx) -> list[Flag]`` (:mod:`prism_plugin.quality`): what qualifies a runs table's
        numbers (non-convergence, a temperature at its bound, ...); lazy ``"module:attr"`` allowed."""
        if not callable(check) and not isinstance(check, str):
            raise PrismError(f"quality check {name!r} (from {self.origin}): pass a function "
                             "check(runs, ctx) -> list of Flag, or a 'module:attr' string")
        self._add(name, check, description=description, aliases=aliases)


@dataclass(frozen=True)
class Perturbation:
    """A synthetic image transform of the ``perturb:`` task key (:mod:`prism_plugin.data.perturb`)."""

    name: str
    #: ``transform(img, rng, **params) -> img``: ``H x W x 3`` uint8 in and out, randomness only from ``rng``
    transform: Callable[..., Any]
    #: parameter name -> spec with ``default``, ``lo``, ``hi`` (and optionally ``integer``, ``rangeable``,
    #: ``choices``): :class:`prism_plugin.data.perturb.Param`
    params: Mapping[str, Any]
    description: str = ""


class PerturbationRegistrar(Registrar):
    def __call__(self, name: str, transform: Callable[..., Any], *, params: Mapping[str, Any] | None = None,
                 description: str = "", aliases: Iterable[str] = ()) -> None:
        """``transform(img, rng, **params)``; ``params`` maps each parameter to a
        :class:`~prism_plugin.data.perturb.Param` (default and bounds, validated in task files)."""
        if not callable(transform):
            raise PrismError(f"perturbation {name!r} (from {self.origin}): transform must be callable "
                             "transform(img, rng, **params) -> img")
        for key, spec in dict(params or {}).items():
            if not all(hasattr(spec, a) for a in ("default", "lo", "hi")):
                raise PrismError(f"perturbation {name!r} (from {self.origin}): parameter {key!r} needs a "
                                 "prism_plugin.data.perturb.Param(default, lo, hi)")
        self._add(name, Perturbation(name, transform, dict(params or {}), description), description=description,
                  aliases=aliases)


class CommandRegistrar(Registrar):
    def __call__(self, name: str, command: Any, *, help: str = "", aliases: Iterable[str] = ()) -> None:
        """``command`` has ``add_parser(subparsers)`` and ``run(args) -> int`` (lazy ``"module"`` allowed)."""
        if name.startswith("-") or not name.replace("-", "").replace("_", "").isalnum():
            raise PrismError(f"command {name!r} (from {self.origin}): use letters, digits, '-' and '_'")
        self._add(name, command, description=help, aliases=aliases)


__all__ = ["AdapterRegistrar", "AdaptationRegistrar", "CheckRegistrar", "CommandRegistrar", "HeadRegistrar", "MetricInfo",
           "Perturbation", "PerturbationRegistrar",
           "MetricRegistrar", "Registrar", "SourceRegistrar", "TableKind", "TableRegistrar", "TaskKey",
           "TaskKeyContext", "TaskKeyRegistrar", "AGGREGATIONS", "DIRECTIONS"]
