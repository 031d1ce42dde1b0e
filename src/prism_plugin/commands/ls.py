"""``prism-run ls [REGISTRY]``: what is available, and where each entry comes from.

Every catalogue of prism-plugin is a registry that plugins fill (see :mod:`prism_plugin.plugins`); ``prism-run ls``
lists the registries, ``prism-run ls NAME`` one of them with each entry's origin (the plugin's distribution, or
"built in"), aliases and description, plus per registry:

* ``adapters``: embedding dimension, input size, preprocessing (``resize/crop interpolation mean-std``), licence
  (with ``licence_date``, the day its source was read or the licence changed), gating (``gated``: yes / no; ``n/a``
  for an adapter without hub weights) and pretraining data, from what the adapter declared at registration
  (``dim``, ``input``, ``preprocessing``, ``licence``, ``pretraining_data``) or else from the adapter class's
  attributes (``pretraining_data``: ``-`` = not declared, ``none`` = declared empty; ``gated``: ``-`` = not
  declared). No model is built and no heavy library is imported: an adapter registered
  lazily (``"module:Class"``, or a ``prism_plugin.adapters`` entry point) shows what its class declares as plain
  class attributes, read from its source (:mod:`prism_plugin.embed.class_facts`); families (``timm:<name>``) are "per
  model"; "at build" means the adapter learns it when it builds its network.
* ``heads``: traits (``seed_invariant``, ``linear``); ``adaptation``: role and whether it runs by default;
  ``metrics``: direction, aggregation and where the column is used; ``tables``: file and required columns;
  ``task-keys``: the task kinds that take the key.
* ``tasks`` / ``groups``: the task catalogue with each file; ``plugins``: every plugin and its hooks.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any, Callable, NamedTuple

from prism_plugin.commands import host_of, print_rows
from prism_plugin.errors import UnknownNameError
from prism_plugin.metrics.descriptions import USES, in_declared_order

ALIASES = {"task_keys": "task-keys", "probe-heads": "heads", "probes": "heads", "models": "adapters"}

PER_MODEL = "per model"
AT_BUILD = "at build"


# --------------------------------------------------------------------------- cell helpers
def _aliases(entry) -> str:
    return ", ".join(entry.aliases) or "-"


def _first_line(text: str, width: int = 80) -> str:
    line = (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


def _loaded(entry):
    """The entry's object when it is already in memory (never imports a lazy entry)."""
    return None if entry.lazy else entry.obj


def _object_path(entry) -> str:
    if entry.ref:
        return entry.ref
    obj = entry.obj
    if inspect.ismodule(obj):
        return obj.__name__
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{getattr(obj, '__module__', '?')}:{name}"


# -- adapters ------------------------------------------------------------------------------
def adapter_facts(entry) -> dict[str, str]:
    """``dim``, ``input``, ``preprocessing``, ``licence``, ``gated`` and ``pretraining`` of an adapter entry, as
    ``ls adapters`` shows them, and the licence's ``licence_source`` and ``licence_note`` (``""``: not declared).

    Registration meta first; else the attributes of the adapter class (a FoundationAdapter's default pooling width
    and default profile, a plain Adapter's ``embed_dim`` and ``preprocessing``, ``pretraining_data``, ``licence``
    with its ``licence_date``, ``gated``); the input size is the preprocessing's crop; families are "per model".
    Nothing is built or imported.
    """
    meta = entry.meta
    family = entry.name.endswith(":")
    cls = _adapter_class(_loaded(entry)) or _adapter_class(_lazy_class(entry))
    dim, prep, licence = meta.get("dim"), meta.get("preprocessing"), meta.get("licence")
    size = meta.get("input")
    pretraining = meta.get("pretraining_data", _UNDECLARED)
    gated = meta.get("gated", _UNDECLARED)
    record = {"licence_date": "", "licence_source": "", "licence_note": ""}
    if cls is not None:
        if dim is None:
            dim = _class_dim(cls)
        if prep is None:
            prep = _class_preprocessing(cls)
        if licence is None:
            licence = getattr(cls, "licence", "") or None
            if licence:  # the date, source and note describe the class's own licence, not a registered one
                record = {k: str(getattr(cls, k, "") or "") for k in record}
        if pretraining is _UNDECLARED:
            pretraining = getattr(cls, "pretraining_data", None)
        if gated is _UNDECLARED and _declared_below_base(cls, "gated"):
            gated = getattr(cls, "gated", None)
    features = cls is not None and getattr(cls, "input_kind", "images") == "features"
    if size is None and prep is not None and not isinstance(prep, str):
        size = _crop_of(prep)
    if features:
        dim = dim or "from files"
        prep = prep or "none (features)"
        size = size or "-"
    return {
        "dim": str(dim) if dim else (PER_MODEL if family else AT_BUILD),
        "input": str(size) if size else (PER_MODEL if family else AT_BUILD),
        "preprocessing": format_preprocessing(prep) if prep else (PER_MODEL if family else AT_BUILD),
        "licence": format_licence(licence, record["licence_date"]) if licence else (PER_MODEL if family else "-"),
        "gated": format_gated(gated, family, features),
        "pretraining": format_pretraining(pretraining, family),
        "licence_source": record["licence_source"],
        "licence_note": record["licence_note"],
    }


def format_licence(licence: Any, date: str = "") -> str:
    """``MIT`` and ``2026-12-02`` -> ``MIT (2026-12-02)``: the licence with the day its source was read (or the
    licence changed); the licence alone when no date is declared."""
    return f"{licence} ({date})" if date else str(licence)


def format_gated(value: Any, family: bool = False, features: bool = False) -> str:
    """``True`` -> ``yes``, ``False`` -> ``no``; ``None`` (no hub weights, e.g. a feature reader) -> ``n/a``;
    not declared -> ``-`` (``n/a`` for a feature reader, ``per model`` for a family)."""
    if family:
        return PER_MODEL
    if value is _UNDECLARED:
        return "n/a" if features else "-"
    if value is None:
        return "n/a"
    return _yes(value)


_UNDECLARED = object()


def _crop_of(prep) -> Any:
    if hasattr(prep, "crop"):
        return prep.crop
    return prep.get("crop") if isinstance(prep, dict) else None


def format_pretraining(value: Any, family: bool = False) -> str:
    """``("A", "B")`` -> ``A+B``; ``()`` -> ``none``; not declared -> ``-`` (``per model`` for a family)."""
    if value is _UNDECLARED or value is None:
        return PER_MODEL if family else "-"
    if isinstance(value, str):
        return value.strip() or "none"
    names = [str(v) for v in value]
    return "+".join(names) if names else "none"


def _lazy_class(entry):
    """The class a lazy entry (``"module:Class"``, or an entry point's ``module:Class``) names, as its source
    declares it; never imported (:func:`prism_plugin.embed.class_facts.class_of_ref`)."""
    ref = entry.ref if entry.lazy else entry.meta.get("entry_point", "")
    if not ref:
        return None
    from prism_plugin.embed.class_facts import class_of_ref

    return class_of_ref(ref)


def _adapter_class(obj):
    if not isinstance(obj, type):
        return None
    from prism_plugin.embed.adapter import Adapter

    return obj if issubclass(obj, Adapter) else None


def _declared_below_base(cls, attr: str) -> bool:
    """``attr`` set by the adapter class itself (or a parent other than the Adapter base)."""
    from prism_plugin.embed.adapter import Adapter

    return any(attr in vars(k) for k in cls.__mro__ if k is not Adapter and issubclass(k, Adapter))


def _class_dim(cls):
    poolings = getattr(cls, "poolings", None)
    default = getattr(cls, "default_pooling", "")
    if poolings and default in poolings:
        return poolings[default]
    dim = getattr(cls, "embed_dim", 0)
    return dim if isinstance(dim, int) and dim > 0 and _declared_below_base(cls, "embed_dim") else None


def _class_preprocessing(cls):
    profiles = getattr(cls, "profiles", None)
    if profiles:
        return (profiles.get(getattr(cls, "default_profile", "prism_main")) or profiles.get("prism_main")
                or next(iter(profiles.values())))
    if _declared_below_base(cls, "preprocessing"):
        return getattr(cls, "preprocessing", None)
    return None


def _stats_name(mean, std) -> str:
    from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD

    def close(a, b):
        try:
            return len(a) == len(b) and all(abs(float(x) - float(y)) < 1e-6 for x, y in zip(a, b))
        except (TypeError, ValueError):
            return False

    if close(mean, IMAGENET_MEAN) and close(std, IMAGENET_STD):
        return "imagenet"
    if close(mean, CLIP_MEAN) and close(std, CLIP_STD):
        return "clip"
    if close(mean, (0.5, 0.5, 0.5)) and close(std, (0.5, 0.5, 0.5)):
        return "0.5/0.5"

    def short(values):
        try:
            return ",".join(f"{float(v):.3g}" for v in values)
        except (TypeError, ValueError):
            return str(values)

    return f"mean({short(mean)})/std({short(std)})"


def format_preprocessing(prep: Any) -> str:
    """``Preprocessing(224, 224, ImageNet, bilinear)`` -> ``224/224 bilinear imagenet`` (resize/crop interp stats)."""
    if isinstance(prep, str):
        return prep
    if hasattr(prep, "describe") and callable(prep.describe):
        prep = prep.describe()
    if isinstance(prep, dict) and {"resize", "crop"} <= set(prep):
        parts = [f"{prep['resize']}/{prep['crop']}"]
        if prep.get("interpolation"):
            parts.append(str(prep["interpolation"]))
        if prep.get("mean") is not None and prep.get("std") is not None:
            parts.append(_stats_name(prep["mean"], prep["std"]))
        return " ".join(parts)
    return str(prep)


def _adapter_name(entry) -> str:
    return entry.name + "<name>" if entry.name.endswith(":") else entry.name


# --------------------------------------------------------------------------- the listings
Column = tuple[str, Callable[[Any], Any]]

ALIASES_COLUMN: Column = ("aliases", _aliases)
DESCRIPTION_COLUMN: Column = ("description", lambda e: _first_line(e.description))


class Listing(NamedTuple):
    """One ``ls`` listing: the host registry it shows (None: not a registry), what it holds, and
    its columns before "from" (a registry's rows are its entries; each column is ``(header,
    cell(entry))``). ``lister`` prints a listing that is not a registry (tasks, groups, plugins)."""

    registry: str | None
    holds: str
    columns: tuple[Column, ...] = ()
    lister: Callable[[Any, Any], None] | None = None
    by_name: bool = False  # rows sorted by name (else registration order)
    order: Callable[[list], list] | None = None  # the registry's own order of its entries


def _metric_uses(info) -> str:
    return ", ".join(w for w in USES if getattr(info, w)) or "runs.csv only"


def _adapter_columns() -> tuple[Column, ...]:
    def fact(key: str) -> Callable[[Any], str]:
        return lambda e: adapter_facts(e)[key]

    return (("adapter", _adapter_name), ("dim", fact("dim")), ("input", fact("input")),
            ("resize/crop interp mean-std", fact("preprocessing")), ("licence", fact("licence")),
            ("gated", fact("gated")), ("pretrained on", fact("pretraining")), ALIASES_COLUMN, ("description", lambda e: e.description))


def _index(host, args):
    from prism_plugin.tasks.index import default_index

    return default_index(host, args.include_path)


def _plugins(host, args) -> None:
    rows = [(i.name, ", ".join(i.hooks), i.origin) for i in host.infos.values()]
    print_rows(("plugin", "hooks", "from"), rows)
    if host.disabled:
        print(f"disabled: {', '.join(sorted(host.disabled))}")


def _tasks(host, args) -> None:
    index = _index(host, args)
    rows = [(e.name, e.description[:60], str(e.file)) for e in sorted(index.entries().values(), key=lambda e: e.name)]
    print_rows(("task", "description", "file"), rows)


def _groups(host, args) -> None:
    index = _index(host, args)
    rows = [(e.name, len(e.members), e.description[:60], str(e.file))
            for e in sorted(index.groups().values(), key=lambda e: e.name)]
    print_rows(("group", "members", "description", "file"), rows)


#: ``ls`` name -> its :class:`Listing`, in ``prism-run ls`` order
LISTINGS: dict[str, Listing] = {
    "adapters": Listing("adapters", "--model names: image encoders and embedding readers", _adapter_columns(),
                        by_name=True),
    "heads": Listing("heads", "probe heads (--probe KIND, a task's probe.kind)", (
        ("head", lambda e: e.name), ("seed_invariant", lambda e: _yes(e.meta.get("seed_invariant"))),
        ("linear", lambda e: _yes(e.meta.get("linear"))), ALIASES_COLUMN,
        ("description", lambda e: _first_line(e.description or getattr(_loaded(e), "__doc__", "") or "")))),
    "sources": Listing("sources", "dataset readers (a task's source.type): images, or features", (
        ("source", lambda e: e.name), ("kind", lambda e: e.meta.get("kind", "images")), ALIASES_COLUMN,
        DESCRIPTION_COLUMN, ("class", _object_path))),
    "adaptation": Listing(
        "adaptation", "test-time adaptation methods, analyses and diagnostics (a task's adaptation:)", (
            ("adaptation", lambda e: e.name), ("role", lambda e: e.meta.get("role", "method")),
            ("default", lambda e: _yes(e.meta.get("default", True))),
            ("needs_labels", lambda e: _yes(e.meta.get("needs_labels"))), ALIASES_COLUMN, DESCRIPTION_COLUMN)),
    "metrics": Listing("metrics", "per-run metric columns: direction, aggregation, where they are shown", (
        ("metric", lambda e: e.name), ("direction", lambda e: e.obj.direction or "-"),
        ("aggregation", lambda e: e.obj.aggregation), ("used in", lambda e: _metric_uses(e.obj)),
        ("display", lambda e: e.obj.display or "-"), ALIASES_COLUMN,
        ("description", lambda e: _first_line(e.description or e.obj.description))), order=in_declared_order),
    "tables": Listing("tables", "per-run table kinds of the results layout: file and required columns", (
        ("table", lambda e: e.name), ("file", lambda e: e.obj.file),
        ("required columns", lambda e: ", ".join(e.obj.required_columns) or "-"), ALIASES_COLUMN,
        DESCRIPTION_COLUMN)),
    "task-keys": Listing("task_keys", "task YAML keys owned by plugins", (
        ("task key", lambda e: e.name), ("kinds", lambda e: ", ".join(e.obj.kinds) or "-"), ALIASES_COLUMN,
        ("description", lambda e: _first_line(e.description or e.obj.description)))),
    "checks": Listing("checks", "run-quality checks: what qualifies a run's numbers (console, summary.json flags)", (
        ("check", lambda e: e.name), ALIASES_COLUMN, DESCRIPTION_COLUMN, ("function", _object_path))),
    "perturbations": Listing("perturbations", "synthetic image transforms of the perturb: task key", (
        ("perturbation", lambda e: e.name),
        ("parameters", lambda e: ", ".join(f"{k}={v.default}" for k, v in e.obj.params.items()) or "-"),
        ALIASES_COLUMN, ("description", lambda e: _first_line(e.description or e.obj.description)),
        ("function", lambda e: f"{e.obj.transform.__module__}:{e.obj.transform.__qualname__}"))),
    "commands": Listing("commands", "prism-run subcommands", (
        ("command", lambda e: e.name), ALIASES_COLUMN, ("help", lambda e: _first_line(e.description)),
        ("module", _object_path))),
    "tasks": Listing(None, "--task names: the YAML catalogue and --include-path folders", lister=_tasks),
    "groups": Listing(None, "task groups (--task GROUP runs every member)", lister=_groups),
    "plugins": Listing(None, "loaded plugins with their hooks (disable one with --disable NAME)", lister=_plugins),
}


def _list(host, args, name: str) -> None:
    """Print the listing ``name``: a registry's entries with their columns and origin."""
    listing = LISTINGS[name]
    if listing.lister is not None:
        listing.lister(host, args)
        return
    entries = host.registry(listing.registry).entries()
    if listing.by_name:
        entries = sorted(entries, key=lambda e: e.name)
    elif listing.order is not None:
        entries = listing.order(entries)
    header = tuple(h for h, _cell in listing.columns) + ("from",)
    rows = [tuple(cell(e) for _h, cell in listing.columns) + (e.origin,) for e in entries]
    print_rows(header, rows)
    if not rows:
        print("(none registered)")


def _registries(host, args) -> int:
    index = None  # the task index, built once for tasks and groups
    rows = []
    for name, listing in LISTINGS.items():
        if listing.registry is not None:
            count = len(host.registry(listing.registry))
        elif name == "plugins":
            count = len(host.infos)
        else:
            if index is None:
                index = _index(host, args)
            count = len(index.groups() if name == "groups" else index.entries())
        rows.append((name, count, listing.holds))
    print_rows(("registry", "entries", "holds"), rows)
    print("\n`prism-run ls REGISTRY` lists one, with where each entry comes from")
    return 0


# --------------------------------------------------------------------------- the command
def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "ls",
        description="List what is available and where each entry comes from. Without REGISTRY: the registries.",
        epilog="registries: " + ", ".join(LISTINGS))
    p.add_argument("what", nargs="?", default=None, metavar="REGISTRY",
                   help="one of " + ", ".join(LISTINGS) + " (default: list the registries)")
    return p


def run(args) -> int:
    host = host_of(args)
    if args.what is None:
        return _registries(host, args)
    what = ALIASES.get(args.what, args.what)
    if what not in LISTINGS:
        raise UnknownNameError("registry", args.what, LISTINGS, hint="`prism-run ls` lists them")
    _list(host, args, what)
    return 0
