"""A feature source: ``csv_vectors`` - embedding vectors from one CSV file, no images.

A task uses it as ``source: {type: csv_vectors, file: vectors.csv}`` (a relative ``file`` is taken
under ``$PRISM_DATA_DIR``, else the working directory) and runs with ``--model precomputed``
(``--model-args name=MyEncoder`` names the ``model`` column). The file has one row per sample::

    id,split,label,v0,v1,...,vD
    s0001,train,benign,0.12,-0.40,...,0.07

``split`` is the source-level split a task's ``splits:`` (or ``split.from``) names; ``label`` is a
class name or an integer index (mapped like any source's, ``class_map`` included).

Like every feature source it subclasses :class:`prism_plugin.data.features.FeatureSource` and
implements ``features(name)``: the vectors, labels and fingerprint of one split. ``self.rows`` maps
the labels and fingerprints the rows from their ids, labels and values, so editing a value changes
the run fingerprint (resume recomputes the run) and nothing else does.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from prism_plugin.data.base import resolve_root
from prism_plugin.data.features import FeatureSource, FeatureSplit
from prism_plugin.errors import PrismError


class CsvVectorsSource(FeatureSource):
    """Vectors, labels and splits from one CSV (``id,split,label,v0..vD``)."""

    type_name = "csv_vectors"
    OPTIONS = frozenset({"file"})
    REQUIRED = frozenset({"file"})
    LAYOUT = "one CSV file with the columns id,split,label,v0,...,vD (one row per sample)"

    def __init__(self, task, file: str = "", **options: Any):
        super().__init__(task, file=file, **options)
        self.file = resolve_root(file)
        self._table = None

    def table(self):
        """The whole file, read once."""
        if self._table is None:
            import pandas as pd

            if not self.file.is_file():
                raise self.missing("vectors file", self.file, option="source.file")
            table = pd.read_csv(self.file, dtype={"id": str, "split": str})
            vectors = [c for c in table.columns if re.fullmatch(r"v\d+", str(c))]
            if not {"id", "split", "label"} <= set(table.columns) or not vectors:
                raise PrismError(f"{self.file}: needs the columns id, split, label and v0..vD "
                                 f"(columns: {', '.join(map(str, table.columns))})")
            self._table, self._vectors = table, vectors
        return self._table

    def features(self, name: str) -> FeatureSplit:
        table = self.table()
        rows = table[table["split"] == name]
        if rows.empty:
            raise PrismError(f"{self.file}: no rows with split {name!r} "
                             f"(splits there: {', '.join(sorted(table['split'].unique()))})")
        X = rows[self._vectors].to_numpy(dtype=np.float32)
        return self.rows(X, rows["label"].tolist(), rows["id"].tolist(), where=f"{self.file} (split {name})")
