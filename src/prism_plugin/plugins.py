"""The plugin host: built-in plugins listed in code, third parties from entry points, the registries.

* Built-in plugins are the modules of :data:`DEFAULT_PLUGINS`, registered in that order (the order of runs.csv's
  columns is declared in :mod:`prism_plugin.metrics.descriptions`). A new built-in module is one line here; no
  reinstall.
* Third-party plugins come from the ``prism_plugin`` entry-point group; adapters may also be published in the
  ``prism_plugin.adapters`` group (the entry-point name is the ``--model`` name).
* After loading, :meth:`PluginHost.check_pending` turns a function marked ``@hookimpl`` whose name is no hook
  (``def run_metric(run)``) into an error naming the plugin, the function and the closest hook.
* Every catalogue is a :class:`~prism_plugin.registry.Registry` owned by the host and filled, on first use, by its
  ``register_*`` hook (see :data:`CATALOGUES`).
* Every hook is called through :meth:`PluginHost.call`: one failure policy (a plugin that raises becomes a
  :class:`PluginFailure` naming the plugin and the hook; ``--debug`` shows the traceback), pluggy's own call path,
  and tracing with ``PRISM_TRACE_HOOKS=1``.
* Disable a plugin by name with ``--disable NAME`` or ``PRISM_DISABLE_PLUGINS=a,b``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable

import pluggy

from prism_plugin import hookspecs
from prism_plugin.errors import PrismError, UnknownNameError
from prism_plugin.registrars import (AdapterRegistrar, AdaptationRegistrar, CheckRegistrar, CommandRegistrar,
                                     HeadRegistrar, MetricRegistrar, PerturbationRegistrar, Registrar, SourceRegistrar,
                                     TableRegistrar, TaskKeyRegistrar)
from prism_plugin.registry import Entry, Registry

PLUGIN_GROUP = "prism_plugin"
ADAPTER_GROUP = "prism_plugin.adapters"
DISABLE_ENV = "PRISM_DISABLE_PLUGINS"
TRACE_ENV = "PRISM_TRACE_HOOKS"
BUILTIN_ORIGIN = "prism_plugin (built in)"

#: The built-in plugins: (name, module), registered in this order before any third party. The
#: names are what ``--disable`` takes (runs.csv's column order: metrics.descriptions.METRIC_PLUGIN_ORDER).
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    # the core catalogues (registrations only): heads, sources, table kinds, task keys,
    # commands, run-quality checks, synthetic image perturbations
    ("builtin_heads", "prism_plugin.heads.builtin"),
    ("builtin_sources", "prism_plugin.data.builtin"),
    ("builtin_tables", "prism_plugin.tables"),
    ("builtin_task_keys", "prism_plugin.tasks.keys"),
    ("builtin_commands", "prism_plugin.commands"),
    ("builtin_checks", "prism_plugin.quality"),
    ("builtin_perturbations", "prism_plugin.data.perturb"),
    # the plugins
    ("adaptation", "prism_plugin.adaptation.plugin"),
    ("budget", "prism_plugin.summaries.budget"),
    ("builtin_adapters", "prism_plugin.model_adapters"),
    ("builtin_tasks", "prism_plugin.tasks.builtin"),
    ("calibration", "prism_plugin.metrics.calibration"),
    ("collapse", "prism_plugin.metrics.collapse"),
    ("collapse_audit", "prism_plugin.summaries.collapse_audit"),
    ("cri", "prism_plugin.summaries.cri"),
    ("decoupling", "prism_plugin.summaries.decoupling"),
    ("discrimination", "prism_plugin.metrics.discrimination"),
    ("geometry_report", "prism_plugin.report.geometry_sections"),
    ("mechanism", "prism_plugin.summaries.mechanism"),
    ("probe_sensitivity", "prism_plugin.summaries.probe_sensitivity"),
    ("reliability", "prism_plugin.metrics.reliability"),
    ("report_basic", "prism_plugin.report.basic"),
    ("report_tables", "prism_plugin.report.derived"),
    ("seeds", "prism_plugin.summaries.seeds"),
    ("temperature_counts", "prism_plugin.summaries.temperature_counts"),
    ("temperature_transfer", "prism_plugin.metrics.temperature_transfer"),
    ("audit", "prism_plugin.studies.hematology.plugin"),
    ("classwise", "prism_plugin.metrics.classwise"),
    ("classwise_report", "prism_plugin.report.classwise"),
    ("bootstrap", "prism_plugin.metrics.bootstrap"),
    ("eva", "prism_plugin.eva_plugin"),  # eva users' embeddings folders: source type + `prism-run eva`
)


#: The core catalogues cannot be disabled: without them no run validates (the PRISM probe, the
#: table kinds, the task keys, the subcommands).
REQUIRED_PLUGINS = frozenset({"builtin_heads", "builtin_sources", "builtin_tables", "builtin_task_keys",
                              "builtin_commands", "builtin_checks", "builtin_perturbations"})


@dataclass(frozen=True)
class Catalogue:
    """One registry of the host: its hook(s), registrar type, noun and ``ls`` hint."""

    hooks: tuple[str, ...]
    registrar: type[Registrar]
    kind: str
    prefixes: bool = False


#: registry name (as in ``prism-run ls NAME``) -> how it is filled
CATALOGUES: dict[str, Catalogue] = {
    "adapters": Catalogue(("register_adapters",), AdapterRegistrar, "adapter", prefixes=True),
    "heads": Catalogue(("register_heads", "probe_heads"), HeadRegistrar, "probe head"),
    "sources": Catalogue(("register_sources",), SourceRegistrar, "source type"),
    "adaptation": Catalogue(("register_adaptation",), AdaptationRegistrar, "adaptation method"),
    "tables": Catalogue(("register_tables",), TableRegistrar, "table kind"),
    "task_keys": Catalogue(("register_task_keys",), TaskKeyRegistrar, "task key"),
    "metrics": Catalogue(("register_metrics",), MetricRegistrar, "metric"),
    "commands": Catalogue(("register_commands",), CommandRegistrar, "command"),
    "checks": Catalogue(("register_checks",), CheckRegistrar, "quality check"),
    "perturbations": Catalogue(("register_perturbations",), PerturbationRegistrar, "perturbation"),
}


@dataclass(frozen=True)
class PluginInfo:
    name: str
    origin: str  # "module (distribution version)"
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class AdapterEntry:
    """An adapter as ``ls adapters`` and ``make_adapter`` see it (kept for existing callers)."""

    name: str
    factory: Callable[..., Any]
    origin: str
    description: str = ""


class PluginFailure(PrismError):
    """A plugin raised while a hook was called; names the plugin and the hook."""

    def __init__(self, plugin: str, hook: str, exc: BaseException, context: str = ""):
        where = f" on {context}" if context else ""
        super().__init__(f"plugin {plugin!r} failed in hook {hook}{where}: {type(exc).__name__}: {exc} "
                         f"(rerun with --debug for the traceback, or --disable {plugin})")
        self.plugin, self.hook, self.original = plugin, hook, exc


@dataclass
class HookResult:
    """One plugin's answer to one hook call."""

    plugin: str
    value: Any = None
    failure: PluginFailure | None = None


def _dist_label(ep) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ep.value
    return f"{ep.value} ({dist.metadata['Name']} {dist.version})"


def disabled_from_env() -> set[str]:
    return {p.strip() for p in os.environ.get(DISABLE_ENV, "").split(",") if p.strip()}


def _hook_names() -> list[str]:
    return sorted(n for n, f in vars(hookspecs).items()
                  if callable(f) and hasattr(f, f"{hookspecs.PROJECT}_spec"))


class PluginHost:
    """The pluggy manager, the plugins' origins and the registries their hooks fill."""

    def __init__(self, disable: Iterable[str] = (), extra_plugins: Iterable[Any] = (), *,
                 builtins: Iterable[tuple[str, str]] | None = None, third_party: bool = True):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.disabled = set(disable) | disabled_from_env()
        builtin_list = tuple(DEFAULT_PLUGINS if builtins is None else builtins)
        eps = list(entry_points(group=PLUGIN_GROUP)) if third_party else []
        builtin_modules = {module for _, module in builtin_list}
        # an older install of this package published its built-ins as entry points: never twice
        eps = [ep for ep in eps if ep.value.split(":")[0] not in builtin_modules]
        known = {name for name, _ in builtin_list} | {ep.name for ep in eps}
        for name in sorted(self.disabled):
            if name not in known:
                raise UnknownNameError("plugin", name, known, hint=f"from --disable / {DISABLE_ENV}")
            if name in REQUIRED_PLUGINS and builtins is None:
                raise PrismError(f"--disable {name}: this plugin holds a core catalogue of prism-plugin and cannot be "
                                 "disabled; disable the plugin that registered the entry you want gone "
                                 "(`prism-run ls plugins`)")
        for name, module in builtin_list:
            if name in self.disabled:
                continue
            self._register(importlib.import_module(module), name, BUILTIN_ORIGIN)
        seen: set[str] = {name for name, _ in builtin_list}
        for ep in eps:
            if ep.name in self.disabled:
                continue
            if ep.name in seen:
                raise PrismError(f"plugin name {ep.name!r} ({ep.value}) is taken by another plugin; "
                                 "rename the entry point")
            seen.add(ep.name)
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken third-party plugin must name itself
                raise PrismError(
                    f"plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}; "
                    f"disable it with --disable {ep.name} or {DISABLE_ENV}={ep.name}"
                ) from None
            self._register(plugin, ep.name, _dist_label(ep))
        for i, plugin in enumerate(extra_plugins):
            name = getattr(plugin, "__name__", f"extra-{i}")
            self._register(plugin, name, "passed in code")
        self.check_pending()
        self._registries: dict[str, Registry] = {}
        self._callers: dict[tuple[str, str], Any] = {}
        self._trace: Callable[[str], None] | None = None
        if os.environ.get(TRACE_ENV, "").strip() not in ("", "0"):
            self.enable_tracing()

    def _register(self, plugin: Any, name: str, origin: str) -> None:
        if self.pm.get_plugin(name) is not None:
            raise PrismError(f"plugin name {name!r} registered twice (second from {origin}); rename one")
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:  # e.g. a hook argument the hookspec does not have
            detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise PrismError(f"plugin {name!r} ({origin}): {detail}; see prism_plugin/hookspecs.py for the "
                             "hook's arguments") from None
        hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
        self.infos[name] = PluginInfo(name=name, origin=origin, hooks=hooks)

    # -- load-time checks -------------------------------------------------------------------
    def check_pending(self) -> None:
        """Hooks that would silently never run are errors: a function marked ``@hookimpl`` whose name is
        no hook (``run_metric``: the closest hook is named), and a module's own function named like a
        hook but not marked."""
        hooks = _hook_names()
        marker = f"{hookspecs.PROJECT}_impl"
        problems: list[str] = []
        for name, plugin in self.pm.list_name_plugin():
            for attr in dir(plugin):
                try:
                    fn = getattr(plugin, attr)
                except Exception:  # pragma: no cover - exotic plugin objects
                    continue
                if not callable(fn):
                    continue
                marked = hasattr(fn, marker) or hasattr(inspect.unwrap(fn), marker)
                if (not marked and attr in hooks and inspect.ismodule(plugin)
                        and getattr(fn, "__module__", None) == plugin.__name__):
                    problems.append(f"plugin {name!r}: {attr}{_where(fn)} is named like the hook {attr!r} but is "
                                    "not marked @hookimpl, so it would never run; decorate it with "
                                    "@prism_plugin.hookimpl")
                    continue
                if marked and attr not in hooks:
                    close = difflib.get_close_matches(attr, hooks, n=1, cutoff=0.6)
                    where = _where(fn)
                    problems.append(f"plugin {name!r}: {attr}{where} is marked @hookimpl but no hook is named "
                                    f"{attr!r}" + (f"; did you mean {close[0]!r}?" if close else
                                                   f" (hooks: {', '.join(hooks)})"))
        if problems:
            raise PrismError("\n".join(problems))

    # -- calling hooks ----------------------------------------------------------------------
    def enable_tracing(self, write: Callable[[str], None] | None = None) -> None:
        """Trace every hook call (pluggy's tracer) to ``write`` (default: stderr)."""
        out = write or (lambda text: sys.stderr.write(f"prism-run: trace: {text}"))
        self.pm.trace.root.setwriter(out)
        self.pm.enable_tracing()
        self._trace = out

    def implementations(self, hook: str) -> list[str]:
        """Names of the plugins implementing ``hook``, in call order (registration order)."""
        return [impl.plugin_name for impl in getattr(self.pm.hook, hook).get_hookimpls()]

    def _caller(self, hook: str, plugin: str):
        key = (hook, plugin)
        if key not in self._callers:
            keep = self.pm.get_plugin(plugin)
            others = [p for p in self.pm.get_plugins() if p is not keep]
            self._callers[key] = self.pm.subset_hook_caller(hook, remove_plugins=others)
        return self._callers[key]

    def call(self, hook: str, *, strict: bool = True, only: Iterable[str] | None = None, context: str = "",
             **kwargs: Any) -> list[HookResult]:
        """Call ``hook`` on every implementing plugin, one at a time, in registration order.

        The one failure policy: a :class:`PrismError` from a plugin (bad input it diagnosed) passes
        through unchanged; any other exception becomes a :class:`PluginFailure` naming the plugin,
        the hook and ``context``. With ``strict`` (computations) the first failure is raised; without
        it (presentation: report sections) every plugin is called and failures are returned in
        :attr:`HookResult.failure` for the caller to show. ``only`` restricts to named plugins.
        """
        wanted = None if only is None else set(only)
        return [self._call_one(hook, plugin, strict, context, kwargs) for plugin in self.implementations(hook)
                if wanted is None or plugin in wanted]

    def _call_one(self, hook: str, plugin: str, strict: bool, context: str, kwargs: dict[str, Any]) -> HookResult:
        if self._trace is not None:
            self._trace(f"{hook} -> plugin {plugin}{f' ({context})' if context else ''}\n")
        try:
            values = self._caller(hook, plugin)(**kwargs)
        except PrismError as exc:
            if strict or isinstance(exc, PluginFailure):
                raise
            return HookResult(plugin, None, PluginFailure(plugin, hook, exc, context))
        except OSError as exc:
            from prism_plugin.storage import as_error, is_storage_fault

            if is_storage_fault(exc):  # a full, read-only or over-quota disk: the storage's fault, not the plugin's
                raise as_error(exc) from exc
            failure = PluginFailure(plugin, hook, exc, context)
            if strict:
                raise failure from exc
            return HookResult(plugin, None, failure)
        except Exception as exc:
            failure = PluginFailure(plugin, hook, exc, context)
            if strict:
                raise failure from exc
            return HookResult(plugin, None, failure)
        return HookResult(plugin, values[0] if values else None)

    def origin(self, plugin: str) -> str:
        info = self.infos.get(plugin)
        return info.origin if info is not None else plugin

    # -- registries -------------------------------------------------------------------------
    def registry(self, name: str) -> Registry:
        """The named catalogue (see :data:`CATALOGUES`), filled by its hooks on first use."""
        if name not in self._registries:
            if name not in CATALOGUES:
                raise UnknownNameError("registry", name, CATALOGUES)
            spec = CATALOGUES[name]
            reg: Registry = Registry(spec.kind, hint=f"see `prism-run ls {name.replace('_', '-')}`",
                                     prefixes=spec.prefixes)
            self._registries[name] = reg  # visible to re-entrant lookups while filling
            try:
                for hook in spec.hooks:  # each plugin gets a registrar that records it as the origin
                    for plugin in self.implementations(hook):
                        if hook in hookspecs.DEPRECATED:
                            warnings.warn(f"plugin {plugin!r}: the hook {hook} is deprecated, implement "
                                          f"{hookspecs.DEPRECATED[hook]} instead", DeprecationWarning, stacklevel=2)
                        registrar = spec.registrar(reg, self.origin(plugin), plugin)
                        self._call_one(hook, plugin, True, "", {"register": registrar})
                if name == "adapters":
                    self._adapter_entry_points(reg)
            except BaseException:
                del self._registries[name]
                raise
        return self._registries[name]

    def _adapter_entry_points(self, reg: Registry) -> None:
        for ep in entry_points(group=ADAPTER_GROUP):
            if ep.name in reg:
                continue

            def lazy(ep=ep, **kwargs):
                try:
                    factory = ep.load()
                except Exception as exc:
                    raise PrismError(f"adapter {ep.name!r} ({ep.value}) failed to load: {exc}") from None
                return factory(**kwargs)

            reg.add(ep.name, lazy, origin=_dist_label(ep), description="entry point", plugin=ep.name,
                    entry_point=ep.value)  # "module:Class": what `ls adapters` reads the class's facts from

    # -- adapters and heads ----------------------------------------------------------------------
    def adapter_factory(self, name: str) -> AdapterEntry:
        entry = self.registry("adapters").entry(name)
        return AdapterEntry(entry.name, _loader(entry), entry.origin, entry.description)

    def head_factory(self, kind: str) -> Callable[..., Any]:
        return self.registry("heads").get(kind)

    def head_traits(self, kind: str) -> dict[str, Any]:
        return dict(self.registry("heads").entry(kind).meta)


# host.sources, host.tables, ...: the registry of that catalogue (adapters and heads go through the factories)
for _name in ("sources", "adaptation", "tables", "task_keys", "metrics", "commands", "checks", "perturbations"):
    setattr(PluginHost, _name, property(lambda self, _n=_name: self.registry(_n)))


def _loader(entry: Entry) -> Callable[..., Any]:
    if not entry.lazy:
        return entry.obj

    def factory(**kwargs):
        return entry.load()(**kwargs)

    return factory


def _where(fn: Any) -> str:
    try:
        target = inspect.unwrap(fn)
        return f" ({inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]})"
    except (TypeError, OSError):
        return ""


_DEFAULT: dict[frozenset, PluginHost] = {}


def host_or_shared(host: PluginHost | None = None) -> PluginHost:
    """``host``, or the shared host (:func:`get_host`) when ``None``: the default of every ``host=`` argument."""
    return get_host() if host is None else host


def get_host(disable: Iterable[str] = ()) -> PluginHost:
    """A cached host for this set of disabled plugins."""
    key = frozenset(disable) | frozenset(disabled_from_env())
    if key not in _DEFAULT:
        _DEFAULT[key] = PluginHost(disable=key)
    return _DEFAULT[key]


__all__ = ["CATALOGUES", "DEFAULT_PLUGINS", "HookResult", "PluginFailure", "PluginHost", "PluginInfo",
           "get_host", "host_or_shared"]
