"""The audit's label-free encoder-selection tables (``selector_regret``, ``selector_summary``):
per-run scores from the runs' ``sel_*`` columns, consensus and agreement-on-the-line from their
per-example artifacts, on the whole target and on the class-prior batches the plugin drew."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from prism_plugin.adaptation import priors as pri
from prism_plugin.adaptation import selection as sel
from prism_plugin.errors import PrismError
from prism_plugin.studies.hematology.inputs import GROUP, AuditInputs, RunKey, artifact_preds

#: priors counted as "balanced" in the selector summary; every other prior is "skewed" and the
#: whole target split (its own class prior) is "target"
BALANCED_PRIORS = {"balanced"}


def _cross_scores(preds: dict[str, dict[RunKey, dict[str, np.ndarray]]], id_acc: dict[str, float],
                  idx: np.ndarray | None = None, seeds: Sequence[RunKey] | None = None) -> dict[str, dict[str, float]]:
    """consensus and agl_acc per model, averaged over the runs ((split key, seed)) every model has."""
    common = sorted(set.intersection(*[set(v) for v in preds.values()])) if preds else []
    if seeds is not None:
        common = [s for s in common if s in seeds]
    if len(preds) < 2 or not common:
        return {}
    cons: dict[str, list[float]] = {}
    agl: dict[str, list[float]] = {}
    for s in common:
        tgt = {m: (v[s]["pred_test"] if idx is None else v[s]["pred_test"][idx]) for m, v in preds.items()}
        c = sel.consensus(tgt)
        for m, val in c.items():
            cons.setdefault(m, []).append(val)
        if all("pred_val" in v[s] for v in preds.values()):
            a = sel.agl_acc(id_acc, {m: v[s]["pred_val"] for m, v in preds.items()}, tgt)
            for m, val in a.items():
                agl.setdefault(m, []).append(val)
    out = {"consensus": {m: float(np.mean(v)) for m, v in cons.items()}}
    if agl:
        out["agl_acc"] = {m: float(np.mean(v)) for m, v in agl.items()}
    return out


def selector_tables(inp: AuditInputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = inp.means
    rows = []
    for (task, probe), g in m.groupby(GROUP, sort=True):
        models = list(g["model"])
        id_acc = dict(zip(models, g["id_accuracy"])) if "id_accuracy" in g else {}
        preds = artifact_preds(inp, task, probe)
        preds = {k: v for k, v in preds.items() if k in models}
        conditions: list[tuple[str, int | None, dict[str, float], dict[str, dict[str, float]]]] = []
        truth = dict(zip(models, g["f1_macro"]))
        scores = {s: dict(zip(models, g[f"sel_{s}"])) for s in sel.PER_RUN if f"sel_{s}" in g}
        if preds:
            scores.update(_cross_scores(preds, id_acc))
        conditions.append(("target", None, truth, scores))
        prior_keys = sorted({parsed[:2] for parsed in map(pri.parse_column, g.columns) if parsed is not None})
        info = inp.task_info.get(task, {})
        for prior, k in prior_keys:
            base = pri.column(prior, k, "f1_none")
            if base not in g:
                continue
            t = dict(zip(models, g[base]))
            sc = {s: dict(zip(models, g[pri.column(prior, k, f"sel_{s}")]))
                  for s in sel.PER_RUN if pri.column(prior, k, f"sel_{s}") in g}
            if preds and info.get("priors"):
                sc.update(_prior_cross_scores(preds, id_acc, info, prior, k))
            conditions.append((prior, k, t, sc))
        for prior, k, t, sc in conditions:
            table = dict(sc)
            if id_acc:
                table["id_acc"] = id_acc
            for r in sel.evaluate_selectors(table, t):
                rows.append({"task": task, "probe": probe, "prior": prior, "K": k, **r})
    out = pd.DataFrame(rows)
    if out.empty:
        return out, out
    out["condition"] = np.where(out["prior"] == "target", "target",
                                np.where(out["prior"].isin(list(BALANCED_PRIORS)), "balanced", "skewed"))
    summary = (out.groupby(["probe", "condition", "selector"], sort=True)
               .agg(n=("regret", "size"), mean_spearman=("spearman", "mean"), mean_regret=("regret", "mean"),
                    max_regret=("regret", "max"))
               .reset_index())
    return out, summary


def _prior_cross_scores(preds, id_acc, info: dict, prior: str, k: int) -> dict[str, dict[str, float]]:
    """consensus / agl_acc on the very batches the plugin drew (same seeds), averaged over draws."""
    cfg = info["priors"]
    any_model = next(iter(preds.values()))
    acc: dict[str, dict[str, list[float]]] = {}
    for s, arr in any_model.items():  # s = (split key, seed): the plugin drew with the run's seed
        y = arr["y_test"].astype(np.int64)
        n_classes = info.get("n_classes") or (int(y.max()) + 1)
        try:
            vec = pri.prior_vector(prior, n_classes, info.get("class_names", ()), custom=cfg.get("custom"),
                                   target_labels=y)
        except PrismError:
            return {}
        for d in range(int(cfg.get("draws", 1))):
            idx, _ = pri.resample(y, vec, k, pri.draw_seed(int(cfg.get("seed", 0)) + int(s[1]), prior, k, d))
            for name, vals in _cross_scores(preds, id_acc, idx=idx, seeds=[s]).items():
                for model, v in vals.items():
                    acc.setdefault(name, {}).setdefault(model, []).append(v)
    return {name: {mm: float(np.mean(v)) for mm, v in per.items()} for name, per in acc.items()}
