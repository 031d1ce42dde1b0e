"""The plugin manager: built-ins and third parties, all loaded from entry points.

* ``prism_plugin`` entry-point group: modules (or objects) with hook
  implementations. prism-plugin's own metrics, summaries, adapters and tasks are
  published there too, so they load exactly like a third party's.
* ``prism_plugin.adapters`` entry-point group: an adapter factory per entry
  point; the entry-point name is the ``--model`` name.
* Disable a plugin by its entry-point name with ``--disable NAME`` or the
  ``PRISM_DISABLE_PLUGINS`` environment variable (comma-separated).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable

import pluggy

from prism_plugin import hookspecs
from prism_plugin.errors import PrismError, UnknownNameError

PLUGIN_GROUP = "prism_plugin"
ADAPTER_GROUP = "prism_plugin.adapters"
DISABLE_ENV = "PRISM_DISABLE_PLUGINS"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    origin: str  # "module (distribution version)"
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class AdapterEntry:
    name: str
    factory: Callable[..., Any]
    origin: str
    description: str = ""


def _dist_label(ep) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ep.value
    return f"{ep.value} ({dist.metadata['Name']} {dist.version})"


def disabled_from_env() -> set[str]:
    return {p.strip() for p in os.environ.get(DISABLE_ENV, "").split(",") if p.strip()}


class PluginHost:
    """The pluggy manager plus the registries the hooks fill."""

    def __init__(self, disable: Iterable[str] = (), extra_plugins: Iterable[Any] = ()):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.disabled = set(disable) | disabled_from_env()
        eps = list(entry_points(group=PLUGIN_GROUP))
        known = {ep.name for ep in eps}
        for name in sorted(self.disabled):
            if name not in known:
                raise UnknownNameError("plugin", name, known, hint=f"from --disable / {DISABLE_ENV}")
        seen: set[str] = set()
        for ep in eps:
            if ep.name in seen or ep.name in self.disabled:
                continue
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
        self._adapters: dict[str, AdapterEntry] | None = None
        self._heads: dict[str, tuple[Callable[..., Any], str]] | None = None

    def _register(self, plugin: Any, name: str, origin: str) -> None:
        self.pm.register(plugin, name=name)
        hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
        self.infos[name] = PluginInfo(name=name, origin=origin, hooks=hooks)

    @property
    def hook(self):
        return self.pm.hook

    # -- adapters --------------------------------------------------------
    def adapters(self) -> dict[str, AdapterEntry]:
        if self._adapters is None:
            registry: dict[str, AdapterEntry] = {}

            def make_register(origin: str):
                def register(name: str, factory: Callable[..., Any], *, description: str = "",
                             aliases: Iterable[str] = ()) -> None:
                    for key in (name, *aliases):
                        if key in registry:
                            raise PrismError(
                                f"adapter {key!r} registered twice: by {registry[key].origin} and by {origin}"
                            )
                        registry[key] = AdapterEntry(key, factory, origin, description)
                return register

            for impl in self.pm.hook.register_adapters.get_hookimpls():
                impl.function(register=make_register(self.infos.get(impl.plugin_name, PluginInfo(impl.plugin_name, impl.plugin_name, ())).origin))
            for ep in entry_points(group=ADAPTER_GROUP):
                if ep.name in registry:
                    continue

                def lazy(ep=ep, **kwargs):
                    try:
                        factory = ep.load()
                    except Exception as exc:
                        raise PrismError(f"adapter {ep.name!r} ({ep.value}) failed to load: {exc}") from None
                    return factory(**kwargs)

                registry[ep.name] = AdapterEntry(ep.name, lazy, _dist_label(ep), "entry point")
            self._adapters = registry
        return self._adapters

    def adapter_factory(self, name: str) -> AdapterEntry:
        registry = self.adapters()
        if name in registry:
            return registry[name]
        prefix = name.split(":", 1)[0] + ":" if ":" in name else None
        if prefix and prefix in registry:  # generic families: "timm:<arch>"
            return registry[prefix]
        raise UnknownNameError("adapter", name, registry, hint="see `prism-run ls adapters`")

    # -- probe heads -----------------------------------------------------
    def heads(self) -> dict[str, tuple[Callable[..., Any], str]]:
        if self._heads is None:
            from prism_plugin.protocol.probe import builtin_heads

            heads = {k: (v, "prism_plugin (built in)") for k, v in builtin_heads().items()}

            for impl in self.pm.hook.probe_heads.get_hookimpls():
                origin = self.infos.get(impl.plugin_name, PluginInfo(impl.plugin_name, impl.plugin_name, ())).origin

                def register(kind: str, factory: Callable[..., Any], origin=origin) -> None:
                    if kind in heads:
                        raise PrismError(f"probe head {kind!r} registered twice (second by {origin})")
                    heads[kind] = (factory, origin)

                impl.function(register=register)
            self._heads = heads
        return self._heads

    def head_factory(self, kind: str) -> Callable[..., Any]:
        heads = self.heads()
        if kind not in heads:
            raise UnknownNameError("probe head", kind, heads)
        return heads[kind][0]


_DEFAULT: dict[frozenset, PluginHost] = {}


def get_host(disable: Iterable[str] = ()) -> PluginHost:
    """A cached host for this set of disabled plugins."""
    key = frozenset(disable) | frozenset(disabled_from_env())
    if key not in _DEFAULT:
        _DEFAULT[key] = PluginHost(disable=key)
    return _DEFAULT[key]
