"""What a metric plugin receives: one run (one fraction x seed of one task for one adapter)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from prism_plugin.metrics.core import neutral_temperature, probabilities_from_logits
from prism_plugin.protocol.temperature import T_BOUNDS, fit_temperature


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


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


class RunFeatures:
    """Read-only access to the features of one run, for plugins that work on embeddings.

    * ``train_X`` / ``train_y``: the training subset the head was fitted on (the run's fraction x
      seed subset of the train split; for transfer tasks the **source** train split), materialised
      on first access.
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
            self._train_X = _read_only(np.asarray(self._train.X[self._indices], dtype=np.float32))
        return self._train_X

    @property
    def train_y(self) -> np.ndarray:
        return _read_only(np.asarray(self._train.y)[self._indices])

    @property
    def val_X(self) -> np.ndarray | None:
        return None if self._val is None else _read_only(np.asarray(self._val.X))

    @property
    def val_y(self) -> np.ndarray | None:
        return None if self._val is None else _read_only(np.asarray(self._val.y))

    @property
    def test_X(self) -> np.ndarray:
        return _read_only(np.asarray(self._test.X))

    @property
    def test_y(self) -> np.ndarray:
        return _read_only(np.asarray(self._test.y))

    def make_head(self) -> Any:
        if self._make_head is None:
            raise RuntimeError("this run cannot build a fresh head")
        return self._make_head()


@dataclass
class RunContext:
    """Everything about one run that a ``run_metrics`` plugin may read.

    Arrays are read-only views shared by every plugin: do not modify them.

    * ``y_test``, ``proba_test`` (``(N, K)``, float64), ``logits_test``
      (``(N, K)``; binary problems use the convention named in
      ``binary_logits``: ``symmetric`` = ``[-d, d]`` with neutral T = 2),
      ``pred_test`` (arg-max).
    * ``calibration``: named held-out splits to fit temperatures on. ``"val"``
      is the full validation split of the data the probe was trained on (the
      protocol's temperature); ``"val_prop"`` the proportional subset, when the
      task asks for it. Never the evaluation split.
    * ``temperature(name)`` fits (once, cached) and returns T, or NaN when that
      split is absent.
    * ``meta``: task kind, dataset/pair names and anything a task adds.
    * ``features`` (optional, ``None`` when the caller has no features): a
      :class:`RunFeatures` with the run's train subset, val and test features
      and the fitted head, for plugins that adapt or probe embeddings.
    * ``artifact_dir`` (optional): a folder where a plugin may write per-run
      files (e.g. per-example predictions) beside the results; ``None`` = none.
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
    _temperatures: dict[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # read-only *views*: plugins cannot modify shared arrays, callers' arrays stay writable
        self.y_test = _readonly(self.y_test)
        self.proba_test = _readonly(self.proba_test)
        self.logits_test = _readonly(self.logits_test)
        self.pred_test = _readonly(self.proba_test.argmax(axis=1))

    @property
    def neutral_temperature(self) -> float:
        return neutral_temperature(self.n_classes, self.binary_logits)

    def temperature(self, name: str = "val") -> float:
        """T fitted on the named calibration split (bounded Brent on NLL); NaN if absent."""
        if name not in self._temperatures:
            cal = self.calibration.get(name)
            self._temperatures[name] = (
                float("nan") if cal is None else fit_temperature(cal.logits, cal.labels, self.t_bounds)
            )
        return self._temperatures[name]

    def scaled_proba(self, temperature: float) -> np.ndarray | None:
        """``softmax(logits_test / T)``; ``None`` when T is NaN."""
        if not np.isfinite(temperature):
            return None
        return probabilities_from_logits(self.logits_test, temperature)
