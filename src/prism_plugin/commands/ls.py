"""``prism-run ls [REGISTRY]``: what is available, and where each entry comes from.

Every catalogue of prism-plugin is a registry that plugins fill (see :mod:`prism_plugin.plugins`);
``prism-run ls`` lists the registries, ``prism-run ls NAME`` one of them with each entry's origin
(the plugin's distribution, or "built in"), aliases and description, plus per registry:

* ``adapters``: embedding dimension, preprocessing (``resize/crop interpolation mean-std``) and
  licence, from what the adapter declared at registration (``dim``, ``preprocessing``,
  ``licence``) or else from the adapter class's attributes. No model is built and no heavy library
  is imported; families (``timm:<name>``) are "per model"; "at build" means the adapter learns it
  when it builds its network.
* ``heads``: traits (``seed_invariant``, ``linear``); ``adaptation``: role and whether it runs by
  default; ``metrics``: direction, aggregation and where the column is used; ``tables``: file and
  required columns; ``task-keys``: the task kinds that take the key.
* ``tasks`` / ``groups``: the task catalogue with each file; ``plugins``: every plugin and its hooks.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any, Callable

from prism_plugin.commands import host_of
from prism_plugin.errors import UnknownNameError

#: ``ls`` name -> (host registry name or None for the non-registry listings, what it holds)
LISTINGS: dict[str, tuple[str | None, str]] = {
    "adapters": ("adapters", "--model names: image encoders and embedding readers"),
    "heads": ("heads", "probe heads (--probe KIND, a task's probe.kind)"),
    "sources": ("sources", "dataset readers (a task's source.type)"),
    "adaptation": ("adaptation", "test-time adaptation methods, analyses and diagnostics (a task's adaptation:)"),
    "metrics": ("metrics", "per-run metric columns: direction, aggregation, where they are shown"),
    "tables": ("tables", "per-run table kinds of the results layout: file and required columns"),
    "task-keys": ("task_keys", "task YAML keys owned by plugins"),
    "commands": ("commands", "prism-run subcommands"),
    "tasks": (None, "--task names: the YAML catalogue and --include-path folders"),
    "groups": (None, "task groups (--task GROUP runs every member)"),
    "plugins": (None, "loaded plugins with their hooks (disable one with --disable NAME)"),
}
ALIASES = {"task_keys": "task-keys", "probe-heads": "heads", "probes": "heads", "models": "adapters"}

PER_MODEL = "per model"
AT_BUILD = "at build"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "ls", help="list a registry (adapters, heads, metrics, tasks, plugins, ...) with origins",
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
    LISTERS[what](host, args)
    return 0


# --------------------------------------------------------------------------- table printing
def print_rows(header, rows) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


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


def _load(registry, entry):
    try:
        return registry.get(entry.name)
    except Exception:  # noqa: BLE001 - a listing shows what it can; running the entry reports the error
        return None


# --------------------------------------------------------------------------- the registries
def _registries(host, args) -> int:
    rows = []
    for name, (registry, what) in LISTINGS.items():
        rows.append((name, _count(host, args, name, registry), what))
    print_rows(("registry", "entries", "holds"), rows)
    print("\n`prism-run ls REGISTRY` lists one, with where each entry comes from")
    return 0


def _count(host, args, name: str, registry: str | None) -> int:
    if registry is not None:
        return len(host.registry(registry))
    if name == "plugins":
        return len(host.infos)
    from prism_plugin.tasks.index import default_index

    index = default_index(host, args.include_path)
    return len(index.groups() if name == "groups" else index.entries())


def _plugins(host, args) -> None:
    rows = [(i.name, ", ".join(i.hooks), i.origin) for i in host.infos.values()]
    print_rows(("plugin", "hooks", "from"), rows)
    if host.disabled:
        print(f"disabled: {', '.join(sorted(host.disabled))}")


def _tasks(host, args) -> None:
    from prism_plugin.tasks.index import default_index

    index = default_index(host, args.include_path)
    rows = [(e.name, e.description[:60], str(e.file)) for e in sorted(index.entries().values(), key=lambda e: e.name)]
    print_rows(("task", "description", "file"), rows)


def _groups(host, args) -> None:
    from prism_plugin.tasks.index import default_index

    index = default_index(host, args.include_path)
    rows = [(e.name, len(e.members), e.description[:60], str(e.file))
            for e in sorted(index.groups().values(), key=lambda e: e.name)]
    print_rows(("group", "members", "description", "file"), rows)


# -- adapters ------------------------------------------------------------------------------
def adapter_facts(entry) -> dict[str, str]:
    """``dim``, ``preprocessing`` and ``licence`` of an adapter entry, as ``ls adapters`` shows them.

    Registration meta first; else the attributes of the adapter class (a FoundationAdapter's
    default pooling width and ``prism_main`` profile, a plain Adapter's ``embed_dim`` and
    ``preprocessing``); families are "per model". Nothing is built or imported.
    """
    meta = entry.meta
    family = entry.name.endswith(":")
    cls = _adapter_class(_loaded(entry))
    dim, prep, licence = meta.get("dim"), meta.get("preprocessing"), meta.get("licence")
    if cls is not None:
        if dim is None:
            dim = _class_dim(cls)
        if prep is None:
            prep = _class_preprocessing(cls)
        if licence is None:
            licence = getattr(cls, "licence", "") or None
    features = cls is not None and getattr(cls, "input_kind", "images") == "features"
    if features:
        dim = dim or "from files"
        prep = prep or "none (features)"
    return {
        "dim": str(dim) if dim else (PER_MODEL if family else AT_BUILD),
        "preprocessing": format_preprocessing(prep) if prep else (PER_MODEL if family else AT_BUILD),
        "licence": str(licence) if licence else (PER_MODEL if family else "-"),
    }


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
        return profiles.get("prism_main") or next(iter(profiles.values()))
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


def _adapters(host, args) -> None:
    reg = host.registry("adapters")
    rows = []
    for entry in sorted(reg.entries(), key=lambda e: e.name):
        facts = adapter_facts(entry)
        shown = entry.name + "<name>" if entry.name.endswith(":") else entry.name
        rows.append((shown, facts["dim"], facts["preprocessing"], facts["licence"], _aliases(entry),
                     entry.description, entry.origin))
    print_rows(("adapter", "dim", "resize/crop interp mean-std", "licence", "aliases", "description", "from"), rows)


# -- the other registries --------------------------------------------------------------------
def _heads(host, args) -> None:
    reg = host.registry("heads")
    rows = [(e.name, _yes(e.meta.get("seed_invariant")), _yes(e.meta.get("linear")), _aliases(e),
             _first_line(e.description or getattr(_loaded(e), "__doc__", "") or ""), e.origin)
            for e in reg.entries()]
    print_rows(("head", "seed_invariant", "linear", "aliases", "description", "from"), rows)


def _object_path(entry) -> str:
    if entry.ref:
        return entry.ref
    obj = entry.obj
    if inspect.ismodule(obj):
        return obj.__name__
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{getattr(obj, '__module__', '?')}:{name}"


def _sources(host, args) -> None:
    reg = host.registry("sources")
    rows = [(e.name, _aliases(e), _first_line(e.description), _object_path(e), e.origin) for e in reg.entries()]
    print_rows(("source", "aliases", "description", "class", "from"), rows)


def _adaptation(host, args) -> None:
    reg = host.registry("adaptation")
    rows = [(e.name, e.meta.get("role", "method"), _yes(e.meta.get("default", True)),
             _yes(e.meta.get("needs_labels")), _aliases(e), _first_line(e.description), e.origin)
            for e in reg.entries()]
    print_rows(("adaptation", "role", "default", "needs_labels", "aliases", "description", "from"), rows)
    if not rows:
        print("(none registered)")


def _metrics(host, args) -> None:
    reg = host.registry("metrics")
    rows = []
    for e in reg.entries():
        info = _load(reg, e)
        used = [w for w in ("summary", "report", "bands", "compare") if getattr(info, w, False)]
        rows.append((e.name, getattr(info, "direction", None) or "-", getattr(info, "aggregation", "-"),
                     ", ".join(used) or "runs.csv only", getattr(info, "display", "") or "-", _aliases(e),
                     _first_line(e.description or getattr(info, "description", "")), e.origin))
    print_rows(("metric", "direction", "aggregation", "used in", "display", "aliases", "description", "from"), rows)


def _tables(host, args) -> None:
    reg = host.registry("tables")
    rows = []
    for e in reg.entries():
        kind = _load(reg, e)
        rows.append((e.name, getattr(kind, "file", "?"), ", ".join(getattr(kind, "required_columns", ())) or "-",
                     _aliases(e), _first_line(e.description), e.origin))
    print_rows(("table", "file", "required columns", "aliases", "description", "from"), rows)


def _task_keys(host, args) -> None:
    reg = host.registry("task_keys")
    rows = []
    for e in reg.entries():
        key = _load(reg, e)
        rows.append((e.name, ", ".join(getattr(key, "kinds", ())) or "-", _aliases(e),
                     _first_line(e.description or getattr(key, "description", "")), e.origin))
    print_rows(("task key", "kinds", "aliases", "description", "from"), rows)


def _commands(host, args) -> None:
    reg = host.registry("commands")
    rows = [(e.name, _aliases(e), _first_line(e.description), _object_path(e), e.origin) for e in reg.entries()]
    print_rows(("command", "aliases", "help", "module", "from"), rows)


LISTERS: dict[str, Callable[[Any, Any], None]] = {
    "adapters": _adapters, "heads": _heads, "sources": _sources, "adaptation": _adaptation, "metrics": _metrics,
    "tables": _tables, "task-keys": _task_keys, "commands": _commands, "tasks": _tasks, "groups": _groups,
    "plugins": _plugins,
}
