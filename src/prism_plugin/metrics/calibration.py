"""Built-in metric plugin: calibration before and after temperature scaling.

Columns: ``brier`` (binary only), ``ece_fixed`` / ``ece_adaptive`` on raw probabilities, ``temperature`` fitted on
the full validation split (``temperature_src`` for transfer runs, where that split belongs to the source task),
``ece_scaled_fixed`` / ``ece_scaled_adaptive`` after it, ``nll`` / ``nll_scaled``; and, when the task provides the
proportional validation subset, ``temperature_prop`` / ``ece_scaled_prop``.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import brier, ece, nll

NAN = float("nan")


@hookimpl
def register_metrics(register) -> None:
    register("brier", direction="lower", display="Brier")
    register("nll", direction="lower", display="NLL")
    register("ece_fixed", direction="lower", display="ECE (fixed bins)", bands=True, compare=True)
    register("ece_adaptive", direction="lower", display="ECE (adaptive bins)")
    register("temperature", display="temperature T")
    register("ece_scaled_fixed", direction="lower", display="ECE after T (fixed)", bands=True, compare=True)
    register("ece_scaled_adaptive", direction="lower", display="ECE after T (adaptive)")
    register("temperature_src", display="source-fitted temperature", report=False)
    register("nll_scaled", direction="lower", display="NLL after T", summary=False)


@hookimpl
def run_metrics(run):
    bins = run.ece_bins
    out = {
        "brier": brier(run.y_test, run.proba_test),
        "ece_fixed": ece(run.y_test, run.proba_test, bins, "fixed"),
        "ece_adaptive": ece(run.y_test, run.proba_test, bins, "adaptive"),
        "nll": nll(run.y_test, run.proba_test),
    }
    t = run.temperature("val")
    scaled = run.scaled_proba(t)
    # transfer runs: the temperature comes from the *source* validation split
    out["temperature_src" if run.meta.get("kind") == "transfer" else "temperature"] = t
    out["ece_scaled_fixed"] = NAN if scaled is None else ece(run.y_test, scaled, bins, "fixed")
    out["ece_scaled_adaptive"] = NAN if scaled is None else ece(run.y_test, scaled, bins, "adaptive")
    out["nll_scaled"] = NAN if scaled is None else nll(run.y_test, scaled)
    if "val_prop" in run.calibration:
        t_prop = run.temperature("val_prop")
        scaled_prop = run.scaled_proba(t_prop)
        out["temperature_prop"] = t_prop
        out["ece_scaled_prop"] = NAN if scaled_prop is None else ece(run.y_test, scaled_prop, bins, "fixed")
        out["ece_scaled_adaptive_prop"] = NAN if scaled_prop is None else ece(run.y_test, scaled_prop, bins, "adaptive")
    return out
