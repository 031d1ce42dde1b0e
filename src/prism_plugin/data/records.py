"""Manifests with one row per image (source type ``records``): CSV/TSV, JSON, JSON lines.

Used for MHIST (``annotations.csv``) and SPIDER (``metadata.json``); rows keep the file's order,
which the reference's ``pandas`` / ``random`` split procedures depend on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from prism_plugin.data.base import NoAll, Pool, Source, resolve_root
from prism_plugin.errors import PrismError


class RecordsSource(Source):
    """A manifest (CSV, JSON list, JSON lines) with one row per image: image path, class, split.

    ``<root>/<file>`` lists images relative to ``<root>/<image_dir>``; rows keep the file's order (the reference's
    ``pandas``/``random`` split procedures depend on it). Used for MHIST (``annotations.csv``) and SPIDER
    (``metadata.json``).
    """

    type_name = "records"
    OPTIONS = frozenset({"root", "file", "image_dir", "image_column", "label_column", "split_column"})
    REQUIRED = frozenset({"root", "file", "image_column", "label_column"})
    LAYOUT = "<root>/<file> (one row per image) and <root>/<image_dir>/<image>"

    def __init__(self, task, root: str = "", file: str = "", image_dir: str = "", image_column: str = "",
                 label_column: str = "", split_column: str | None = None, **options: Any):
        super().__init__(task, root=root, file=file, image_dir=image_dir, image_column=image_column,
                         label_column=label_column, split_column=split_column, **options)
        self.root = resolve_root(root, task)
        self.file = self.root / file
        self.image_dir = self.root / image_dir if image_dir else self.root
        self.image_column, self.label_column, self.split_column = image_column, label_column, split_column
        self._rows: list[dict] | None = None

    def describe(self) -> str:
        return f"records in {self.file}"

    def rows(self) -> list[dict]:
        if self._rows is None:
            if not self.file.is_file():
                raise self.missing("manifest", self.file)
            rows = read_records(self.file)
            for col in (self.image_column, self.label_column, self.split_column):
                if col and rows and col not in rows[0]:
                    raise PrismError(f"{self.file}: no column {col!r} (columns: {', '.join(map(str, rows[0]))}); "
                                     "set source.image_column / label_column / split_column")
            for i, r in enumerate(rows):
                for col in (self.image_column, self.label_column, self.split_column):
                    if col and (col not in r or r[col] is None or isinstance(r[col], (list, dict))):
                        what = "has no" if col not in r or r[col] is None else "has a list or mapping in"
                        raise PrismError(f"{self.file}: record {i + 1} {what} column {col!r}; every record needs one "
                                         "plain value (a path, a class name or integer, a split name) per column")
            self._rows = rows
        return self._rows

    def all_pool_names(self) -> list[str]:
        raise NoAll  # pragma: no cover - 'all' is handled by pool()

    def pool(self, name: str) -> Pool:
        rows = self.rows()
        if name == "all":
            chosen = rows
        else:
            if not self.split_column:
                raise PrismError(f"task {self.task.name}: source has no split_column, so split {name!r} cannot be "
                                 "selected; use split.from: all with a split procedure")
            chosen = [r for r in rows if str(r[self.split_column]) == name]
            if not chosen:
                values = sorted({str(r[self.split_column]) for r in rows})
                raise PrismError(f"{self.file}: no rows with {self.split_column} == {name!r} (values: {values})")
        items = [self.image_dir / str(r[self.image_column]) for r in chosen]
        missing = [p for p in items if not p.is_file()]
        if missing:
            raise self.missing(f"image {missing[0].name} ({len(missing)} of {len(items)} listed images missing)",
                               missing[0].parent)
        raw = [r[self.label_column] for r in chosen]
        raw = [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else str(v) for v in raw]
        keys = [p.relative_to(self.root).as_posix() if self.root in p.parents else str(p) for p in items]
        return Pool(items, raw, keys, where=f"{self.file} [{name}]")

    def labels(self, pool: Pool) -> np.ndarray:
        if not self.task.class_names and not self.class_map:
            # class indices come from the sorted class names of the whole manifest, not of one split
            universe = sorted({str(r[self.label_column]) for r in self.rows()})
            if len(universe) != self.task.n_classes:
                raise PrismError(f"task {self.task.name}: {self.file} has {len(universe)} classes, the task "
                                 f"declares n_classes {self.task.n_classes}")
            index = {n: i for i, n in enumerate(universe)}
            return np.asarray([index[str(r)] for r in pool.raw], dtype=np.int64)
        return super().labels(pool)


def read_records(path: Path) -> list[dict]:
    """Rows of a CSV / JSON (a list of objects, or an object holding one) / JSON-lines manifest."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            import pandas as pd

            df = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False)
            return df.to_dict("records")
        text = path.read_text(encoding="utf-8")
        if suffix in (".jsonl", ".ndjson"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise PrismError(f"{path}: cannot be read as a manifest ({type(exc).__name__}: {exc})") from None
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if len(lists) == 1:
            data = lists[0]
        elif all(isinstance(v, dict) for v in data.values()):
            data = [{"id": k, **v} for k, v in data.items()]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise PrismError(f"{path}: expected a list of records (objects), one per image")
    return data


__all__ = ["RecordsSource", "read_records"]
