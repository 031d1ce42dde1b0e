"""Pretraining exposure of each encoder x target cell (the audit's exposure table, papers/002 Sec. 4, 5.1).

An encoder declares the datasets it was pretrained on (``Adapter.pretraining_data``: a tuple of dataset names,
``()`` = none of them, ``None`` = not declared; the model-arg ``pretraining_data=NAME+NAME`` overrides it per run,
and the runner records the value of each run in its results directory's ``summary.json`` as the top-level
``pretraining_data``). A task says which dataset it is: its ``dataset`` and the task key ``dataset_aliases`` (other
names of the same data, e.g. a cohort name an encoder's paper uses: hema_mll23 is DinoBloom's "LabAnonymous"). For
a transfer task the target task's identity counts.

A cell is

* ``in_pretraining`` - a declared pretraining name equals one of the target's names (case and
  surrounding blanks ignored); ``matched`` names the pretraining entry that matched;
* ``held_out`` - the encoder declares its pretraining data and none of it is the target;
* ``unknown`` - the encoder declares nothing (``None``), or the results say nothing and the adapter
  registry has no declaration for the adapter.

Where a results directory's ``summary.json`` has no ``pretraining_data`` key (results written before it existed),
the adapter registry's class attribute for the run's adapter name is read instead.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

IN_PRETRAINING = "in_pretraining"
HELD_OUT = "held_out"
UNKNOWN = "unknown"


def as_names(value: Any) -> tuple[str, ...] | None:
    """A pretraining declaration as a tuple of names (``None`` = not declared).

    Accepts a list/tuple of strings, one ``+``-separated string (``none`` or ``""`` = empty), or ``None``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none"):
            return ()
        return tuple(p.strip() for p in text.split("+") if p.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(v).strip() for v in value if str(v).strip())
    return None


def _key(name: str) -> str:
    return " ".join(str(name).split()).casefold()


def classify(pretraining: Sequence[str] | None, identity: Iterable[str]) -> tuple[str, str]:
    """``(exposure, matched)`` of an encoder with this pretraining declaration on a dataset with these names."""
    if pretraining is None:
        return UNKNOWN, ""
    names = {_key(n) for n in identity if str(n).strip()}
    for entry in pretraining:
        if _key(entry) in names:
            return IN_PRETRAINING, str(entry)
    return HELD_OUT, ""


def task_identity(resolved: Mapping[str, Any] | None, fallback: str = "") -> dict[str, Any]:
    """The evaluated dataset of a task from its ``resolved_task`` (summary.json): the target task's
    for a transfer task. Keys: ``dataset`` (display name), ``names`` (dataset + ``dataset_aliases``),
    ``synthetic`` (the evaluated task carries ``perturb``)."""
    resolved = resolved if isinstance(resolved, Mapping) else {}
    member = resolved.get("target_config") if resolved.get("kind") == "transfer" else resolved
    if not isinstance(member, Mapping):
        member = {}
    extras = member.get("extras") if isinstance(member.get("extras"), Mapping) else {}
    dataset = str(member.get("dataset") or "") or str(fallback or "")
    aliases = extras.get("dataset_aliases") or member.get("dataset_aliases") or ()
    if isinstance(aliases, str):
        aliases = (aliases,)
    names = [dataset] + [str(a) for a in aliases]
    if fallback and fallback not in names:
        names.append(str(fallback))
    perturb = extras.get("perturb") or member.get("perturb")
    return {"dataset": dataset, "names": tuple(n for n in names if n), "synthetic": bool(perturb)}


def registry_pretraining(adapter: str, host=None) -> tuple[bool, tuple[str, ...] | None]:
    """``(found, declaration)`` of the adapter registry's class attribute ``pretraining_data`` for ``adapter``.

    ``found`` is False when the name is not registered or its factory is not a class with the attribute
    (a factory function); importing the adapter's module is all it costs (no weights are loaded).
    """
    from prism_plugin.plugins import host_or_shared

    try:
        reg = host_or_shared(host).registry("adapters")
        if not adapter or adapter not in reg:
            return False, None
        factory = reg.get(adapter)
    except Exception:  # a broken third-party adapter must not stop the audit: unknown
        return False, None
    if not isinstance(factory, type) or not hasattr(factory, "pretraining_data"):
        return False, None
    return True, as_names(getattr(factory, "pretraining_data"))
