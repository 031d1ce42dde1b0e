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

from prism_plugin.errors import PrismError
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
                 seed_invariant: bool = False, linear: bool = False) -> None:
        """``factory(seed=..., **settings)`` -> head with ``fit`` and ``evaluate``."""
        self._add(kind, factory, description=description, aliases=aliases, seed_invariant=bool(seed_invariant),
                  linear=bool(linear))


class SourceRegistrar(Registrar):
    def __call__(self, type: str, source_class: Any, *, description: str = "", aliases: Iterable[str] = ()) -> None:
        """``source_class(task, **options)`` reads one dataset (``options``: the task's ``source:`` keys
        without ``type``); ``OPTIONS`` lists the keys it accepts."""
        self._add(type, source_class, description=description, aliases=aliases)


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


@dataclass(frozen=True)
class TableKind:
    """A per-run table kind: its file name in the results_v2 layout and the columns it needs."""

    name: str
    file: str
    required_columns: tuple[str, ...]
    renames: Mapping[str, str] = field(default_factory=dict)
    drops: tuple[str, ...] = ()
    key_columns: tuple[str, ...] = DEFAULT_KEY_COLUMNS
    description: str = ""


class TableRegistrar(Registrar):
    def __call__(self, name: str, file: str, required_columns: Iterable[str] = ("model", "fraction", "seed"), *,
                 renames: Mapping[str, str] | None = None, drops: Iterable[str] = (),
                 key_columns: Iterable[str] | None = None, description: str = "") -> None:
        if not file.endswith(".csv") or "/" in file or "\\" in file:
            raise PrismError(f"table kind {name!r} (from {self.origin}): file must be a plain '<stem>.csv' name")
        kind = TableKind(name, file, tuple(required_columns), dict(renames or {}), tuple(drops),
                         DEFAULT_KEY_COLUMNS if key_columns is None else tuple(key_columns), description)
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


class TaskKeyRegistrar(Registrar):
    def __call__(self, key: str, validator: Callable[[Any, TaskKeyContext], Any], *,
                 kinds: Iterable[str] = TASK_KINDS, description: str = "", default: Any = None,
                 results: bool = True) -> None:
        kinds = tuple(kinds)
        bad = [k for k in kinds if k not in TASK_KINDS]
        if bad:
            raise PrismError(f"task key {key!r} (from {self.origin}): kinds must be among {', '.join(TASK_KINDS)}")
        if not callable(validator):
            raise PrismError(f"task key {key!r} (from {self.origin}): validator must be callable")
        self._add(key, TaskKey(key, validator, kinds, description, default, bool(results)), description=description)


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
