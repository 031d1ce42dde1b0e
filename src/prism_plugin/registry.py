"""One generic, typed registry: every catalogue of prism-plugin is one.

A :class:`Registry` maps names (and aliases) to entries. An entry holds either the object itself or a lazy
reference (``"package.module:attribute"``) that is imported on first use, so listing a catalogue never imports
heavy libraries. Every entry records where it came from (the plugin that registered it), a one-line description and
free-form traits (``meta``) such as a head's ``seed_invariant`` flag or an adapter's embedding dimension.

Unknown names raise :class:`~prism_plugin.errors.UnknownNameError` with the closest registered names and the list
of available ones ("unknown probe head 'logistc'; did you mean 'logistic'? (available: ...)").

The plugin host (:mod:`prism_plugin.plugins`) owns one registry per catalogue and fills it through the
``register_*`` hooks (built-ins the same way).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar

from prism_plugin.errors import PrismError, UnknownNameError

T = TypeVar("T")


def load_reference(ref: str) -> Any:
    """Import ``"package.module:attr.sub"`` (or a bare module path) and return the object."""
    module_name, _, attr = ref.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


@dataclass
class Entry(Generic[T]):
    """One registered thing: its name, where it came from, and the object (possibly lazy)."""

    name: str
    origin: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    obj: Any = None
    ref: str = ""  # lazy "module:attr", imported on first load()
    #: the name of the plugin that registered it (``--disable`` takes it)
    plugin: str = ""
    _loaded: bool = False

    def load(self) -> T:
        if not self._loaded:
            if self.ref:
                try:
                    self.obj = load_reference(self.ref)
                except Exception as exc:  # a broken plugin names itself
                    raise PrismError(f"{self.name!r} ({self.ref}, registered by {self.origin}) failed to import: "
                                     f"{type(exc).__name__}: {exc}") from exc
            self._loaded = True
        return self.obj

    @property
    def lazy(self) -> bool:
        return bool(self.ref) and not self._loaded


class Registry(Generic[T]):
    """A named catalogue with lazy entries, aliases, a type check and helpful errors.

    * ``kind``: the singular noun used in messages ("adaptation method").
    * ``base``: when given, loaded objects must be subclasses/instances of it.
    * ``check``: an extra validator ``check(entry, obj)`` raising ``PrismError``.
    * ``hint``: appended to unknown-name errors (e.g. "see `prism-run ls heads`").
    * ``prefixes``: names ending in ``:`` are families (``timm:`` matches ``timm:vit_small``).
    """

    def __init__(self, kind: str, *, base: type | tuple[type, ...] | None = None,
                 check: Callable[[Entry, Any], None] | None = None, hint: str = "", prefixes: bool = False):
        self.kind = kind
        self.base = base
        self._check = check
        self.hint = hint
        self.prefixes = prefixes
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}

    # -- filling ----------------------------------------------------------------------------
    def add(self, name: str, obj: Any = None, *, origin: str = "", description: str = "",
            aliases: tuple[str, ...] | list[str] = (), lazy: str = "", plugin: str = "", **meta: Any) -> Entry[T]:
        """Register ``obj`` (or the lazy reference ``lazy``) under ``name`` and ``aliases``."""
        if not isinstance(name, str) or not name.strip():
            raise PrismError(f"{self.kind} names must be non-empty strings, got {name!r} (from {origin or '?'})")
        if (obj is None) == (not lazy):
            raise PrismError(f"{self.kind} {name!r} (from {origin or '?'}): give the object or a lazy "
                             "'module:attribute' reference, not both or neither")
        for key in (name, *aliases):
            owner = self._owner(key)
            if owner is not None:
                raise PrismError(f"{self.kind} {key!r} registered twice: by {owner.origin} and by {origin or '?'}; "
                                 "disable one of the two plugins with --disable")
        entry: Entry[T] = Entry(name=name, origin=origin, description=description, aliases=tuple(aliases),
                                meta=dict(meta), obj=obj, ref=lazy, plugin=plugin, _loaded=not lazy)
        if not lazy:
            self._validate(entry, obj)
        self._entries[name] = entry
        for alias in aliases:
            self._aliases[alias] = name
        return entry

    def _owner(self, key: str) -> Entry[T] | None:
        if key in self._entries:
            return self._entries[key]
        return self._entries[self._aliases[key]] if key in self._aliases else None

    def _validate(self, entry: Entry, obj: Any) -> None:
        if self.base is not None:
            ok = (isinstance(obj, type) and issubclass(obj, self.base)) or isinstance(obj, self.base)
            if not ok:
                names = self.base.__name__ if isinstance(self.base, type) else "/".join(b.__name__ for b in self.base)
                raise PrismError(f"{self.kind} {entry.name!r} (from {entry.origin}) is a {type(obj).__name__}, "
                                 f"not a {names}")
        if self._check is not None:
            self._check(entry, obj)

    # -- reading ----------------------------------------------------------------------------
    def _canonical(self, name: object) -> str | None:
        if not isinstance(name, str):
            return None
        if name in self._entries:
            return name
        if name in self._aliases:
            return self._aliases[name]
        if self.prefixes and ":" in name:
            prefix = name.split(":", 1)[0] + ":"
            if prefix in self._entries:
                return prefix
        return None

    def resolve(self, name: str) -> str:
        """The canonical name of ``name`` (an alias or a family prefix resolves to its entry)."""
        canonical = self._canonical(name)
        if canonical is None:
            raise UnknownNameError(self.kind, str(name), self.names(with_aliases=True), hint=self.hint)
        return canonical

    def entry(self, name: str) -> Entry[T]:
        return self._entries[self.resolve(name)]

    def get(self, name: str) -> T:
        """The registered object (imported on first use and then type-checked)."""
        entry = self.entry(name)
        was_lazy = entry.lazy
        obj = entry.load()
        if was_lazy:
            self._validate(entry, obj)
        return obj

    def __contains__(self, name: object) -> bool:
        return self._canonical(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self, *, with_aliases: bool = False) -> list[str]:
        """Canonical names in registration order (plus aliases when asked)."""
        return list(self._entries) + (list(self._aliases) if with_aliases else [])

    def entries(self) -> list[Entry[T]]:
        return list(self._entries.values())

    def meta(self, name: str, key: str, default: Any = None) -> Any:
        """One trait of an entry (``heads.meta("logistic", "seed_invariant")``)."""
        return self.entry(name).meta.get(key, default)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Registry({self.kind!r}, {len(self)} entries)"


__all__ = ["Entry", "Registry", "load_reference"]
