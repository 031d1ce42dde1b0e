"""The audit's tables from per-example predictions (``artifacts/``): the paired bootstrap of
macro-F1 differences between encoders, per-class recall and confusion, and reliability bins."""

from __future__ import annotations

from itertools import combinations
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from prism_plugin.adaptation import selection as sel
from prism_plugin.adaptation import stats
from prism_plugin.studies.hematology.inputs import GROUP, AuditInputs, RunKey, artifact_preds

# -- E: paired bootstrap ------------------------------------------------------------------------

def paired_bootstrap_table(inp: AuditInputs, B: int, seed: int, compare: Sequence[tuple[str, str]] = (),
                           max_models: int = 12) -> pd.DataFrame:
    rows = []
    for (task, probe), g in inp.means.groupby(GROUP, sort=True):
        preds = artifact_preds(inp, task, probe)
        if len(preds) < 2:
            continue
        common = sorted(set.intersection(*[set(v) for v in preds.values()]))
        if not common:
            continue
        names = sorted(preds)
        if compare:
            pairs = [(a, b) for a, b in compare if a in preds and b in preds]
        elif len(names) <= max_models:
            pairs = list(combinations(names, 2))
        else:  # many encoders: the in-domain best against every other one
            best = sel.select(dict(zip(g["model"], g["id_f1_macro"])))
            pairs = [(best, n) for n in names if n != best]
        groups = _shared_target_groups(preds[names[0]], common)
        for a, b in pairs:
            results = []
            for keys in groups:
                y = preds[names[0]][keys[0]]["y_test"].astype(np.int64)
                A = np.stack([preds[a][s]["pred_test"] for s in keys])
                Bm = np.stack([preds[b][s]["pred_test"] for s in keys])
                results.append(stats.paired_bootstrap_f1(y, A, Bm, B=B, seed=seed))
            res = ({**results[0], "aggregation": "one bootstrap over the shared target examples"}
                   if len(results) == 1 else _average_bootstrap(results))
            rows.append({"task": task, "probe": probe, "model_a": a, "model_b": b, "n_seeds": len(common),
                         "n_split_seeds": len({k[0] for k in common}), **res})
    return pd.DataFrame(rows)


def _shared_target_groups(runs: dict[RunKey, dict[str, np.ndarray]], common: Sequence[RunKey]) -> list[list[RunKey]]:
    """The runs of one bootstrap each: all of them when every split seed evaluates the same target
    examples (the same labels in the same order), else one group per split seed."""
    by_split: dict[int, list[RunKey]] = {}
    for k in common:
        by_split.setdefault(int(k[0]), []).append(k)
    if len(by_split) == 1:
        return [list(common)]
    ys = [runs[keys[0]]["y_test"] for keys in by_split.values()]
    if all(y.shape == ys[0].shape and np.array_equal(y, ys[0]) for y in ys[1:]):
        return [list(common)]
    return list(by_split.values())


def _average_bootstrap(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-split-seed paired bootstraps averaged (the CI bounds and p as means over split seeds).

    Used only when the split seeds scored different target examples; a mean of percentile bounds is
    not itself a confidence interval, so the row says how it was made (``aggregation``)."""
    out = {k: float(np.mean([r[k] for r in results])) for k in ("diff", "ci_low", "ci_high", "p_boot")}
    out["B"] = int(results[0]["B"])
    out["n"] = int(round(np.mean([r["n"] for r in results])))
    out["excludes_zero"] = bool(out["ci_low"] > 0 or out["ci_high"] < 0)
    out["aggregation"] = f"mean of {len(results)} per-split-seed bootstraps (not a joint CI)"
    return out

# -- H: per-class recall and confusion, reliability ---------------------------------------------

RECALL_COLUMNS = ["task", "probe", "model", "target_dataset", "class_name", "recall", "n_true"]
CONFUSION_COLUMNS = ["task", "probe", "model", "target_dataset", "true_class", "pred_class", "count", "share"]
RELIABILITY_COLUMNS = ["task", "probe", "model", "arm", "bin", "confidence", "accuracy", "count"]


def _target_dataset(inp: AuditInputs, task: str, model: str) -> str:
    c = inp.cells
    if c.empty:
        return ""
    hit = c[(c["task"] == task) & (c["model"] == model)]
    return str(hit["target_dataset"].iloc[0]) if len(hit) else ""


def pooled_confusion(runs: Iterable[dict[str, np.ndarray]], n_classes: int = 0) -> np.ndarray:
    """Confusion counts ``C[true, predicted]`` summed over runs (target labels and predictions)."""
    mats = []
    for arr in runs:
        y = np.asarray(arr["y_test"], dtype=np.int64)
        p = np.asarray(arr["pred_test"], dtype=np.int64)
        mats.append((y, p))
    k = max([int(n_classes)] + [int(max(y.max(initial=-1), p.max(initial=-1))) + 1 for y, p in mats])
    C = np.zeros((k, k), dtype=np.int64)
    for y, p in mats:
        np.add.at(C, (y, p), 1)
    return C


def class_tables(inp: AuditInputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    recall_rows, conf_rows = [], []
    for (task, probe, model), files in sorted(inp.artifacts.items()):
        if not files:
            continue
        info = inp.task_info.get(task, {})
        names = list(info.get("class_names") or ())
        C = pooled_confusion((inp.load(f) for _k, f in sorted(files.items())), info.get("n_classes") or len(names))
        k = C.shape[0]
        names = names + [str(i) for i in range(len(names), k)] if len(names) < k else names[:k]
        dataset = _target_dataset(inp, task, model)
        support = C.sum(axis=1)
        for i in range(k):
            recall_rows.append({"task": task, "probe": probe, "model": model, "target_dataset": dataset,
                                "class_name": names[i], "recall": float(C[i, i] / support[i]) if support[i] else np.nan,
                                "n_true": int(support[i])})
            for j in range(k):
                conf_rows.append({"task": task, "probe": probe, "model": model, "target_dataset": dataset,
                                  "true_class": names[i], "pred_class": names[j], "count": int(C[i, j]),
                                  "share": float(C[i, j] / support[i]) if support[i] else np.nan})
    return pd.DataFrame(recall_rows, columns=RECALL_COLUMNS), pd.DataFrame(conf_rows, columns=CONFUSION_COLUMNS)


def reliability_table(inp: AuditInputs) -> pd.DataFrame:
    from prism_plugin.adaptation.calibration import ARMS

    rows = []
    for (task, probe, model), files in sorted(inp.artifacts.items()):
        sums: dict[str, np.ndarray] = {}
        for _k, f in sorted(files.items()):
            arr = inp.load(f)
            if "reliability" not in arr or "reliability_arms" not in arr:
                continue
            for arm, v in zip(arr["reliability_arms"].tolist(), arr["reliability"]):
                arm = str(arm)
                if arm not in sums:
                    sums[arm] = v.astype(float)
                elif sums[arm].shape == v.shape:
                    sums[arm] = sums[arm] + v
                else:  # another bin count (a task with other ece_bins): never mixed, never silently dropped
                    inp.notes.append(f"reliability: {f.name} has {v.shape[-1]} bins for arm {arm}, the other runs of "
                                     f"{model} on {task} ({probe}) {sums[arm].shape[-1]}; left out of the pooled bins")
        order = [a for a in ARMS if a in sums] + sorted(a for a in sums if a not in ARMS)
        for arm in order:
            count, conf, correct = sums[arm]
            for b in np.flatnonzero(count > 0):
                rows.append({"task": task, "probe": probe, "model": model, "arm": arm, "bin": int(b),
                             "confidence": float(conf[b] / count[b]), "accuracy": float(correct[b] / count[b]),
                             "count": int(round(count[b]))})
    return pd.DataFrame(rows, columns=RELIABILITY_COLUMNS)
