"""What a metric plugin receives: one run (one fraction x seed of one task for one adapter)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from prism_plugin.metrics.core import neutral_temperature, probabilities_from_logits
from prism_plugin.protocol.temperature import T_BOUNDS, fit_temperature


@dataclass(frozen=True)
class CalibrationSet:
    """Logits and labels of a held-out split a temperature may be fitted on."""

    logits: np.ndarray
    labels: np.ndarray
    description: str = ""


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
    _temperatures: dict[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for arr in (self.y_test, self.proba_test, self.logits_test):
            arr.flags.writeable = False
        self.pred_test = self.proba_test.argmax(axis=1)
        self.pred_test.flags.writeable = False

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
