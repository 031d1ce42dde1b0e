"""Label mapping: a pool's raw classes (folder names, manifest values, integers) -> task class indices.

By name, through ``class_map`` (task class -> raw names), or as integers; raw classes that map
nowhere are an error unless dropped with ``drop_classes`` / ``drop_unmapped: true``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from prism_plugin.errors import PrismError


def raw_class_id(value: Any) -> str:
    """The string a raw class is matched by (``3``, ``3.0`` and ``np.int64(3)`` all give ``"3"``)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    if isinstance(value, np.integer):
        value = int(value)
    return str(value)


def map_labels(pool: Any, task, class_map: dict | None, drop_unmapped: bool, drop_classes: Iterable[str]) -> np.ndarray:
    """Raw classes of a :class:`~prism_plugin.data.base.Pool` (``pool.raw``) -> task label indices (-1 =
    dropped); every unmapped raw class is an error unless dropped."""
    raw = pool.raw
    if not raw:
        return np.zeros(0, dtype=np.int64)
    bad = next((r for r in raw if not _scalar(r)), None)
    if bad is not None:
        kind = type(bad).__name__
        raise PrismError(f"task {task.name}: labels must be 1-D integers or class names, but {pool.where} has a "
                         f"{kind} label{' (one-hot or multi-label rows?)' if kind in ('list', 'tuple', 'ndarray') else ''}; "
                         "give each image one integer class index or class name")
    uniq: dict[Any, list[str]] = {}
    for r in dict.fromkeys(raw):
        ids = [raw_class_id(r)]
        if pool.label_names is not None and isinstance(r, (int, np.integer)) and 0 <= int(r) < len(pool.label_names):
            ids.append(str(pool.label_names[int(r)]))
        uniq[r] = ids
    names = list(task.class_names)
    target: dict[Any, int] = {}
    if class_map:
        table: dict[str, int] = {}
        for cname, raws in class_map.items():
            for rv in raws:
                table[raw_class_id(rv)] = names.index(cname)
        for r, ids in uniq.items():
            hit = next((table[i] for i in ids if i in table), None)
            if hit is not None:
                target[r] = hit
        found = set(target.values())
        empty = [names[c] for c in range(len(names)) if c not in found]
        if empty:
            seen = sorted({ids[-1] for ids in uniq.values()})
            raise PrismError(
                f"task {task.name}: class(es) {empty} match no images in {pool.where}: source.class_map lists "
                f"{ {c: class_map.get(c) for c in empty} } but the raw classes there are {seen}"
            )
    else:
        str_raw = not _all_ints(uniq)
        if names:
            by_name = {n: i for i, n in enumerate(names)}
            use_names = str_raw or (pool.label_names is not None and set(pool.label_names) >= set(names))
            for r, ids in uniq.items():
                if use_names:
                    hit = next((by_name[i] for i in ids if i in by_name), None)
                    if hit is not None:
                        target[r] = hit
                elif 0 <= int(r) < len(names):
                    target[r] = int(r)
        elif str_raw:
            ordered = sorted({ids[0] for ids in uniq.values()})
            if len(ordered) != task.n_classes:
                raise PrismError(f"task {task.name}: {pool.where} has {len(ordered)} classes {ordered[:20]}, "
                                 f"the task declares n_classes {task.n_classes}")
            target = {r: ordered.index(ids[0]) for r, ids in uniq.items()}
        else:
            target = {r: int(r) for r in uniq if 0 <= int(r) < task.n_classes}
    drop = set(drop_classes)
    unmapped = [ids[-1] for r, ids in uniq.items() if r not in target and not (drop & set(ids))]
    if unmapped and not drop_unmapped:
        raise PrismError(
            f"task {task.name}: raw class(es) {sorted(unmapped)[:20]} in {pool.where} are not in the task's "
            f"class_names {names or list(range(task.n_classes))}; map them with source.class_map or drop them with "
            "source.drop_classes (or drop_unmapped: true)"
        )
    lut = {r: target.get(r, -1) for r in uniq}
    return np.asarray([lut[r] for r in raw], dtype=np.int64)


def check_task_classes(task, labels: Mapping[str, Any], limit: int | None = None) -> None:
    """The task's classes against the labels its splits hold (``{"train": y, ...}``), before the per-split
    checks blame the data:

    * ``--limit N`` below the task's class count keeps fewer training examples than classes: the classes it
      left out are named with ``--limit`` and the fix (a larger one);
    * classes no split holds at all (``class_names: [a, b, c]`` on two-class data): ``class_names`` (or
      ``n_classes``) is named where it was written, with the number of classes the data has.
    """
    k = int(task.n_classes)
    seen: dict[str, set[int]] = {}
    for split, y in labels.items():
        arr = np.asarray(y)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            return  # not labels yet: the per-split checks say what is wrong
        seen[split] = set(np.unique(arr).tolist())
    names = list(getattr(task, "class_names", ()) or ())

    def shown(classes: list[int]) -> str:
        text = ", ".join(f"{c} ({names[c]})" if c < len(names) else str(c) for c in classes[:10])
        return text + (", ..." if len(classes) > 10 else "")
    train = seen.get("train")
    if limit is not None and train is not None and limit < k:
        missing = [c for c in range(k) if c not in train]
        if missing:
            raise PrismError(f"--limit {limit}: keeps {limit} example{'s' if limit != 1 else ''} per split, fewer "
                             f"than the {k} classes of task {task.name}, so class(es) {shown(missing)} have no "
                             f"training example; pass --limit {k} or more (every class needs one), or drop --limit")
    everywhere = set().union(*seen.values()) if seen else set()
    missing = [c for c in range(k) if c not in everywhere]
    if not missing or not everywhere:
        return
    key = "class_names" if names else "n_classes"
    where = (getattr(task, "origins", None) or {}).get(key) or f"{task.file} (task {task.name})"
    declared = f"lists {k} names" if names else f"is {k}"
    if min(missing) > max(everywhere):  # the last classes: the task declares more than the data has
        have = max(everywhere) + 1
        raise PrismError(f"{where}: {key} {declared} but the data has {have} classes (labels 0..{have - 1} in "
                         f"every split: {', '.join(seen)}); list {have} class names (n_classes: {have}), or point "
                         f"the task at data with {k} classes")
    raise PrismError(f"{where}: {key} {declared} but no split ({', '.join(seen)}) holds class(es) {shown(missing)}; "
                     "check the task's class list (and source.class_map) against the data")


def _scalar(value: Any) -> bool:
    """A raw class: an integer or a class name (bool and float are matched by their text)."""
    return isinstance(value, (str, int, float, np.integer, np.floating, np.str_))


def _all_ints(uniq: dict) -> bool:
    return all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in uniq)


__all__ = ["check_task_classes", "map_labels", "raw_class_id"]
