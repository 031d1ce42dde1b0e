"""Source types by name: every lookup of a task's ``source.type`` goes through the plugin host.

The catalogue is the host's ``sources`` registry (``host.sources``), filled by the ``register_sources`` hook -- the
built-in types by :mod:`prism_plugin.data.builtin`, a third party's by its own plugin, in the same way. Each
function takes an optional ``host`` (default: the shared :func:`prism_plugin.plugins.get_host`). Each entry
declares its kind (meta ``kind``: ``images`` or ``features``): what its source yields.
"""

from __future__ import annotations

from typing import Any, Sequence

from prism_plugin.data.base import allowed_options, check_options, keyed_error
from prism_plugin.data.labels import raw_class_id
from prism_plugin.errors import PrismError, suggest


def _sources(host=None):
    from prism_plugin.plugins import host_or_shared

    host = host_or_shared(host)
    return host.sources


def _lookup(kind: Any, host=None):
    """The class registered for ``kind`` (imported on first use), or ``None`` when ``kind`` names no
    registered source type: the one registry lookup every function here goes through."""
    reg = _sources(host)
    if not isinstance(kind, str) or kind not in reg:
        return None
    cls, declared = reg.get(kind), reg.meta(kind, "kind", "images")
    if getattr(cls, "input_kind", "images") != declared:
        raise PrismError(f"source type {kind!r} (from {reg.entry(kind).origin}) is registered as kind {declared!r} "
                         f"but its class {cls.__name__} yields {getattr(cls, 'input_kind', 'images')!r}; "
                         "register it with that kind")
    return cls


def is_source_type(kind: Any, host=None) -> bool:
    """Whether ``kind`` names a registered source type (or an alias of one)."""
    return isinstance(kind, str) and kind in _sources(host)


def unknown_type_message(kind: Any, host=None) -> str:
    """``'x' is not known; did you mean 'y'? (known: a, b, ...)``."""
    reg = _sources(host)
    return (f"{kind!r} is not known{suggest(str(kind), reg.names(with_aliases=True))} "
            f"(known: {', '.join(sorted(reg.names()))})")


def source_class(kind: str, host=None):
    """The class registered for ``kind`` (imported on first use)."""
    cls = _lookup(kind, host)
    if cls is None:
        raise PrismError(f"source.type {unknown_type_message(kind, host)}")
    return cls


def accepted_options(kind: Any, host=None) -> set[str] | None:
    """The ``source.*`` keys type ``kind`` accepts (its ``OPTIONS`` plus the label-mapping keys).

    ``None`` when ``kind`` is not a registered source type. Does not include ``type`` itself.
    """
    cls = _lookup(kind, host)
    return None if cls is None else allowed_options(cls)


def check_source_spec(source: dict, task_class_names: Sequence[str], located, host=None) -> None:
    """Static checks of a task's ``source:`` mapping (used by the schema; no data is read)."""
    kind = source.get("type")
    cls = _lookup(kind, host)
    if cls is None:
        raise keyed_error(PrismError(f"{located.where('source.type')}: source.type: "
                                     f"{unknown_type_message(kind, host)}"), "source.type")
    options = {k: v for k, v in source.items() if k != "type"}
    check_options(cls, options, str(located.file), located, kind=kind)
    cmap = options.get("class_map")
    if cmap is not None:
        where = located.where("source.class_map")
        if not isinstance(cmap, dict) or not cmap:
            raise keyed_error(PrismError(f"{where}: source.class_map: must map task class names to lists of raw "
                                         "class names, e.g. {neutrophil: [NGS, NGB]}"), "source.class_map")
        seen: dict[str, str] = {}
        for cname, raws in cmap.items():
            if task_class_names and cname not in task_class_names:
                raise keyed_error(PrismError(f"{where}: source.class_map: {cname!r} is not one of the task's "
                                             f"class_names {list(task_class_names)}"
                                             f"{suggest(str(cname), task_class_names)}"), "source.class_map")
            if not isinstance(raws, list) or not raws or not all(isinstance(r, (str, int)) for r in raws):
                raise keyed_error(PrismError(f"{where}: source.class_map.{cname}: must be a non-empty list of raw "
                                             "class names (or integer labels)"), "source.class_map")
            for r in raws:
                if raw_class_id(r) in seen:
                    raise keyed_error(PrismError(f"{where}: source.class_map: raw class {r!r} is mapped to both "
                                                 f"{seen[raw_class_id(r)]!r} and {cname!r}"), "source.class_map")
                seen[raw_class_id(r)] = cname
        if not task_class_names:
            raise keyed_error(PrismError(f"{where}: source.class_map needs the task's class_names"),
                              "source.class_map")
    for key in ("drop_classes",):
        if key in options and (not isinstance(options[key], list)
                               or not all(isinstance(v, (str, int)) for v in options[key])):
            raise keyed_error(PrismError(f"{located.where('source.' + key)}: source.{key}: must be a list of raw "
                                         "class names"), f"source.{key}")
    if "drop_unmapped" in options and not isinstance(options["drop_unmapped"], bool):
        raise keyed_error(PrismError(f"{located.where('source.drop_unmapped')}: source.drop_unmapped: must be true "
                                     "or false"), "source.drop_unmapped")
    check = getattr(cls, "check_spec", None)
    if check is not None:
        check(options, located)


def open_source(task, host=None):
    """Instantiate the task's source, or fail naming the task file and the type."""
    options = dict(task.source)
    kind = options.pop("type")
    cls = _lookup(kind, host)
    if cls is None:
        raise PrismError(f"{task.file}: source.type {unknown_type_message(kind, host)}")
    try:
        return cls(task, **options)
    except TypeError as exc:
        raise PrismError(f"{task.file}: source options {sorted(options)} do not fit type {kind!r} ({exc})") from None


__all__ = ["is_source_type", "unknown_type_message", "source_class",
           "accepted_options", "check_source_spec", "open_source"]
