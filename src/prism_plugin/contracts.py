"""The plugin contract: what plugins receive and return. The ground floor of the house.

Pure data: every layer may import this module, and it imports nothing of prism-plugin but the
ground floor (:mod:`prism_plugin.errors`), also not inside functions. Behaviour that needs a
module above is given by whoever builds the object (the protocol's temperature scaling of a
:class:`RunContext`, the rows a :class:`ReportView` shows). Types:

* :class:`RunContext`, :class:`RunFeatures`, :class:`CalibrationSet` - one run, as a ``run_metrics`` hook sees it;
* :class:`RunTables` - the per-run tables by table kind, as a ``summarize`` hook sees them; :class:`SummaryOutput`
  - what it returns;
* :class:`ReportSection` and :class:`ReportView` - what a ``report_sections`` hook returns and reads (also
  importable from :mod:`prism_plugin.report.sections`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.errors import PrismError

#: the temperature search interval of PROTOCOL §2.5 (prism_plugin.protocol.temperature uses it)
T_BOUNDS = (0.1, 10.0)


def _empty_frame() -> pd.DataFrame:
    import pandas as pd
    return pd.DataFrame()


def _readonly(arr: np.ndarray) -> np.ndarray:
    view = np.asarray(arr).view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class CalibrationSet:
    """Logits and labels of a held-out split a temperature may be fitted on."""

    logits: np.ndarray
    labels: np.ndarray
    description: str = ""


class RunFeatures:
    """Read-only access to the features of one run, for plugins that work on embeddings.

    * ``train_X`` / ``train_y``: the training subset the head was fitted on (the run's fraction x seed subset of
      the train split; for transfer tasks the **source** train split), materialised on first access.
    * ``val_X`` / ``val_y``: the validation split (source val for transfer tasks) or ``None``.
    * ``test_X`` / ``test_y``: the evaluation split (the **target** for transfer tasks).
    * ``head``: the fitted probe head (``evaluate(X) -> ProbeOutput``); do not refit it.
    * ``make_head()``: a fresh, unfitted head with this run's kind, settings and seed.
    """

    def __init__(self, train, train_indices: np.ndarray, val, test, head: Any,
                 make_head: Callable[[], Any] | None = None, head_kind: str = ""):
        self._train, self._indices, self._val, self._test = train, np.asarray(train_indices), val, test
        self.head = head
        self.head_kind = head_kind
        self._make_head = make_head
        self._train_X: np.ndarray | None = None

    @property
    def train_X(self) -> np.ndarray:
        if self._train_X is None:
            self._train_X = _readonly(np.asarray(self._train.X[self._indices], dtype=np.float32))
        return self._train_X

    @property
    def train_y(self) -> np.ndarray:
        return _readonly(np.asarray(self._train.y)[self._indices])

    @property
    def val_X(self) -> np.ndarray | None:
        return None if self._val is None else _readonly(np.asarray(self._val.X))

    @property
    def val_y(self) -> np.ndarray | None:
        return None if self._val is None else _readonly(np.asarray(self._val.y))

    @property
    def test_X(self) -> np.ndarray:
        return _readonly(np.asarray(self._test.X))

    @property
    def test_y(self) -> np.ndarray:
        return _readonly(np.asarray(self._test.y))

    def make_head(self) -> Any:
        if self._make_head is None:
            raise RuntimeError("this run cannot build a fresh head")
        return self._make_head()


@dataclass
class RunContext:
    """Everything about one run that a ``run_metrics`` plugin may read.

    Arrays are read-only views shared by every plugin: do not modify them.

    * ``y_test``, ``proba_test`` (``(N, K)``, float64), ``logits_test`` (``(N, K)``; binary problems use the
      convention named in ``binary_logits``: ``symmetric`` = ``[-d, d]`` with neutral T = 2), ``pred_test``
      (arg-max).
    * ``calibration``: named held-out splits to fit temperatures on. ``"val"`` is the full validation split of the
      data the probe was trained on (the protocol's temperature); ``"val_prop"`` the proportional subset, when the
      task asks for it. Never the evaluation split.
    * ``temperature(name)`` fits (once, cached) and returns T, or NaN when that split is absent;
      ``scaled_proba(T)`` and ``neutral_temperature`` apply the same ``scaling`` (given by the grid:
      :data:`prism_plugin.protocol.grid.SCALING`).
    * ``meta``: task kind, dataset/pair names and anything a task adds.
    * ``features`` (optional, ``None`` when the caller has no features): a :class:`RunFeatures` with the run's
      train subset, val and test features and the fitted head, for plugins that adapt or probe embeddings.
    * ``artifact_dir`` (optional): a folder where a plugin may write per-run files (e.g. per-example predictions)
      beside the results; ``None`` = none.
    * ``host`` (optional): the plugin host running the grid, for registry lookups
      (``run.host.registry("adaptation")``); ``None`` means the shared host.
    * ``split_seed``: the source split seed of this run when the task has ``split_seeds`` (a grid dimension), else
      ``None``.
    * ``run_id``: the run's cell id, unique within its task: ``f<fraction>-s<seed>`` for a task without
      ``split_seeds``/``probes`` (the default), else with ``-split<S>`` and/or ``-<probe kind>`` appended
      (``f1-s0-split3-knn1``); file-safe, e.g. for per-run artifacts (``<task>--<run_id>.npz``). ``meta["probe"]``
      is the probe kind.
    """

    task: str
    adapter: str
    model: str
    dataset: str
    fraction: float
    seed: int
    n_classes: int
    n_train: int
    forced_classes: int
    y_test: np.ndarray
    proba_test: np.ndarray
    logits_test: np.ndarray
    calibration: Mapping[str, CalibrationSet] = field(default_factory=dict)
    ece_bins: int = 15
    binary_logits: str = "symmetric"
    t_bounds: tuple[float, float] = T_BOUNDS
    class_names: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    features: RunFeatures | None = None
    artifact_dir: Path | None = None
    #: the plugin host running this grid (its registries: heads, adaptation methods, ...); None = the shared one
    host: Any = field(default=None, repr=False, compare=False)
    split_seed: int | None = None
    run_id: str = ""
    #: the protocol's temperature scaling: ``fit(logits, labels, bounds) -> T``, ``apply(logits, T) -> proba``,
    #: ``neutral(n_classes, convention) -> T`` (:data:`prism_plugin.protocol.grid.SCALING`)
    scaling: Any = field(default=None, repr=False, compare=False)
    _temperatures: dict[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # read-only *views*: plugins cannot modify shared arrays, callers' arrays stay writable
        self.y_test = _readonly(self.y_test)
        self.proba_test = _readonly(self.proba_test)
        self.logits_test = _readonly(self.logits_test)
        self.pred_test = _readonly(self.proba_test.argmax(axis=1))
        if not self.run_id:
            self.run_id = f"f{float(self.fraction):g}-s{self.seed}"

    def _scaling(self) -> Any:
        if self.scaling is None:
            raise RuntimeError("this RunContext has no temperature scaling: build it with "
                               "scaling=prism_plugin.protocol.grid.SCALING")
        return self.scaling

    @property
    def neutral_temperature(self) -> float:
        return self._scaling().neutral(self.n_classes, self.binary_logits)

    def temperature(self, name: str = "val") -> float:
        """T fitted on the named calibration split (bounded Brent on NLL); NaN if absent."""
        if name not in self._temperatures:
            cal = self.calibration.get(name)
            self._temperatures[name] = (
                float("nan") if cal is None else self._scaling().fit(cal.logits, cal.labels, self.t_bounds)
            )
        return self._temperatures[name]

    def scaled_proba(self, temperature: float) -> np.ndarray | None:
        """``softmax(logits_test / T)``; ``None`` when T is NaN."""
        if not np.isfinite(temperature):
            return None
        return self._scaling().apply(self.logits_test, temperature)


# -- per-run tables and summaries ---------------------------------------------------------

class RunTables:
    """The per-run tables a summary may read, by table kind; an absent kind reads as ``None``.

    ``tables.indomain`` and ``tables["indomain"]`` are the same table. The kinds are a registry
    (``register_tables`` hook); a plugin's own kind is read the same way. A directory in the
    published layout is read by :func:`prism_plugin.tables.tables_from_reference_dir`.
    """

    def __init__(self, tables: Mapping[str, pd.DataFrame | None] | None = None, **kinds: pd.DataFrame | None):
        merged = {**dict(tables or {}), **kinds}
        object.__setattr__(self, "_tables", {k: v for k, v in merged.items()})

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tables.get(name)

    def __setattr__(self, name: str, value) -> None:
        self._tables[name] = value

    def __getitem__(self, name: str):
        return self._tables.get(name)

    def __contains__(self, name: object) -> bool:
        return self._tables.get(name) is not None  # type: ignore[call-overload]

    def get(self, name: str, default=None):
        value = self._tables.get(name)
        return default if value is None else value

    def present(self) -> list[str]:
        return [k for k, v in self._tables.items() if v is not None]

    def items(self) -> list[tuple[str, pd.DataFrame]]:
        return [(k, v) for k, v in self._tables.items() if v is not None]

    def __repr__(self) -> str:  # pragma: no cover
        return f"RunTables({', '.join(f'{k}: {len(v)} rows' for k, v in self.items())})"


@dataclass
class SummaryOutput:
    """What a ``summarize`` hook returns.

    ``tables`` maps a file stem (``rank_correlations``) to a DataFrame written as
    ``<stem>.csv``; ``headline`` holds scalars merged into ``findings.json``;
    ``notes`` say, in one line each, what could not be computed and why.
    """

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    headline: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def merge(self, other: "SummaryOutput", origin: str = "") -> None:
        for name, table in other.tables.items():
            if name in self.tables:
                raise PrismError(f"summary table {name!r} produced twice (second by {origin or 'a plugin'})")
            self.tables[name] = table
        for key, value in other.headline.items():
            if key in self.headline:
                raise PrismError(f"headline {key!r} produced twice (second by {origin or 'a plugin'})")
            self.headline[key] = value
        self.notes.extend(other.notes)


# -- report sections and the view they are built from -------------------------------------

@dataclass
class ReportSection:
    """A titled block of Markdown, optionally with PNG figures (name -> bytes).

    ``captions`` gives a caption per figure name; ``not_shown`` lists, one line each, what this section would show
    but cannot, and why (rendered as a visible note and collected in the report's "Not shown" list); ``key`` is a
    stable anchor (derived from the title when empty); ``summary`` is a one-line teaser used in the table of
    contents; ``html``, when set, is the section's body in the HTML report (``body`` stays the Markdown twin);
    ``tables`` (stem -> DataFrame) are written as ``<stem>.csv`` beside the summary tables, so the report's numbers
    can be traced to a file.
    """

    title: str
    body: str
    order: int = 100
    figures: dict[str, bytes] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    not_shown: list[str] = field(default_factory=list)
    key: str = ""
    summary: str = ""
    html: str = ""
    tables: dict[str, Any] = field(default_factory=dict)

    @property
    def anchor(self) -> str:
        raw = self.key or self.title
        slug = "".join(ch.lower() if ch.isalnum() else "-" for ch in raw)
        while "--" in slug:
            slug = slug.replace("--", "-")
        return slug.strip("-") or "section"


@dataclass
class ReportView:
    """What report plugins read (built by :func:`prism_plugin.report.sections.read_view`, or by the report builder,
    which also fills the summaries).

    * ``path``: the folder the report is written to (a results directory, or the output folder of ``prism-run
      findings``).
    * ``runs``: the per-run rows (``runs.csv`` of every source directory, concatenated; for a reference directory,
      its per-run tables).
    * ``summary``: ``summary.json`` of ``path`` (``{}`` when absent or stale); ``source_summaries``: that of every
      source results directory that has one.
    * ``table(stem)``: a summary table by file stem (``rank_correlations``), from the summaries computed for this
      report or from ``<tables_dir>/<stem>.csv``.
    * ``run_tables``: :class:`RunTables` in the reference schema (``None`` if it could not be built);
      ``summaries``: the merged :class:`SummaryOutput`; ``reliability``: the reliability artifacts of the source
      directories; ``notes``: why something could not be loaded; ``options``: the summary options used (e.g.
      ``fewshot_tolerance``, ``binary_logits``).
    * ``metrics``: the metric descriptions of the plugin host
      (:class:`~prism_plugin.metrics.descriptions.DescribedMetric`, ``register_metrics``).
    """

    path: Path
    sources: tuple[Path, ...] = ()
    tables_dir: Path | None = None
    run_tables: Any = None
    summaries: Any = None
    reliability: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    title: str = ""
    reference: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    #: the models the page is about, as labelled on it (its subtitle counts them); empty = those of ``runs``
    models: tuple[str, ...] = ()
    metrics: list[Any] = field(default_factory=list)
    runs: pd.DataFrame = field(default_factory=_empty_frame)
    summary: dict[str, Any] = field(default_factory=dict)
    source_summaries: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.sources = tuple(Path(s) for s in self.sources) or (self.path,)
        if self.tables_dir is None:
            self.tables_dir = self.path / "summaries"

    def table(self, stem: str) -> pd.DataFrame | None:
        import pandas as pd
        if self.summaries is not None and stem in getattr(self.summaries, "tables", {}):
            return self.summaries.tables[stem]
        p = Path(self.tables_dir) / f"{stem}.csv"
        return pd.read_csv(p) if p.exists() else None

    def described_metrics(self, use: str | None = None) -> list[Any]:
        """The metric descriptions (``use``: ``"report"``, ``"bands"``, ... keeps those used there)."""
        return [d for d in self.metrics if use is None or getattr(d.info, use)]

    @property
    def headline(self) -> dict[str, Any]:
        return dict(getattr(self.summaries, "headline", {}) or {})
