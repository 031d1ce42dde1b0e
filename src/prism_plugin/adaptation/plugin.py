"""The adaptation plugin: the built-in test-time adaptation methods, analyses and diagnostics
(``register_adaptation``) and the per-run audit columns (``run_metrics``).

Active for transfer runs (``run.meta["kind"] == "transfer"``) and for any task that sets ``adaptation`` or
``priors`` (see :mod:`prism_plugin.adaptation.config`); needs the run's features (``run.features``), so it does
nothing for callers that do not provide them. The methods a run computes are the adaptation registry's entries of
role ``"method"`` that the task chose (or the ``default=True`` ones), in registration order: a plugin's own method
gets the same columns and takes part in the class-prior stress test like a built-in. Columns (method m; all
macro-F1 on the target evaluation split):

* ``id_f1_macro``, ``id_accuracy`` - the probe on the held-out **source** split (val): the in-domain score used for
  rank transfer and in-domain selection.
* ``f1_macro_<m>``, ``gain_<m>`` (= ``f1_macro_<m> - f1_macro``), ``ece_<m>`` (top-label, fixed bins), ``nll_<m>``,
  ``brier_<m>`` (multiclass Brier) - every adaptation method on the whole target as one batch. ``oracle_cb`` uses
  target labels (upper bound).
* ``first_moment_shift`` - the RMS over features of ``(mean target - mean source train) / SD source train``
  (source-standardised units, a zero SD counted as 1): the size of the embedding's first-moment shift, beside the
  target drop in the audit's ``mechanism`` table (``sel_neg_shift`` is its negative).
* ``calx_<arm>_<metric>`` - calibration transfer (``calibration``): arms ``raw``, ``src``, ``oracle``, ``k4``,
  ``k8``, ``k16``, ``k32``, ``cbr``, ``cbr_src``; metrics ``ece_top``, ``ece_adaptive``, ``nll``, ``brier`` (see
  :mod:`.calibration`).
* ``sel_<s>`` - label-free selection scores (``selectors``): conf, neg_ent, neg_shift, neg_predKL, marg_ent.
* ``prior__<prior>__k<K>__f1_<m>`` (m = ``none`` for the unadapted probe) and ``prior__<prior>__k<K>__sel_<s>`` -
  means over the draws of the class-prior stress test (``priors``).
* ``dom_decode_acc``, ``dom_decode_within``, ``dom_decode_perm``, ``dom_decode_class`` (source train vs target,
  ``decodability``) and ``proj_f1_macro``, ``proj_gain``, ``proj_id_delta`` (the probe retrained after removing the
  source-target mean direction, ``projection``).

When the run carries an ``artifact_dir``, per-example target and source-val predictions are saved there
(``<task>--<run_id>.npz``, the run's cell id, e.g. ``f1-s0``; ``<task>--f<fraction>-s<seed>.npz`` for a run context
without ``run_id``) for the cross-encoder analyses of ``prism-run audit`` (consensus, agreement-on-the-line, paired
bootstrap, per-class recall and confusion), with the run's identity (model, task, probe, fraction, seed,
split_seed, run_id) and, when calibration transfer ran, each arm's top-label reliability bin sums (``reliability``,
``(arms, 3, 15)``: count, sum of confidence, sum correct,
:func:`prism_plugin.adaptation.calibration.reliability_sums`; the arms' names in ``reliability_arms``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from prism_plugin.adaptation import calibration as cal
from prism_plugin.adaptation import priors as pri
from prism_plugin.adaptation import selection as sel
from prism_plugin.adaptation import stats
from prism_plugin.adaptation import config
from prism_plugin.adaptation.stats import macro_f1 as f1_macro
from prism_plugin.adaptation.tta import (BUILTIN_METHODS, AdaptationInputs, cbr_outputs, resolve_method, run_method,
                                         source_moments)
from prism_plugin.errors import UnknownNameError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.metrics.core import multiclass_brier, nll
from prism_plugin.plugins import host_or_shared
from prism_plugin.storage import atomic_write_bytes

NAN = float("nan")
DECODABILITY_DRAWS = 3


@hookimpl
def register_metrics(register) -> None:
    """Describe two of this plugin's columns (``prism-run ls metrics``; used by no table): the
    first-moment shift and, for each built-in method, the Brier score after it."""
    register("first_moment_shift", display="first-moment shift (source SDs)", summary=False, report=False,
             description="adaptation plugin: RMS over features of (target mean - source-train mean) / source-train "
                         "SD; the audit's mechanism table puts it beside the target drop")
    for name in BUILTIN_METHODS:
        register(f"brier_{name}", direction="lower", display=f"Brier after {name}", summary=False, report=False,
                 description=f"adaptation plugin: multiclass Brier on the target after the adaptation method {name}")


#: what the analyses and diagnostics of this plugin compute (``prism-run ls adaptation``)
ANALYSES = {
    "calibration": ("analysis", True, "calibration transfer: calx_<arm>_<metric> (raw, source T, oracle T, "
                                      "K-shot T, CBR, CBR + source T)"),
    "selectors": ("analysis", True, "label-free encoder-selection scores sel_<score>"),
    "decodability": ("diagnostic", False, "domain (scanner) decodability of the features: dom_decode_*"),
    "projection": ("diagnostic", False, "probe retrained without the source-target mean direction: proj_*"),
}


@hookimpl
def register_adaptation(register) -> None:
    """The built-in methods (in column order), then the analyses and diagnostics."""
    for name, (method, needs_labels) in BUILTIN_METHODS.items():
        register(name, method, role="method", default=True, needs_labels=needs_labels,
                 description=(method.__doc__ or "").strip().split("\n")[0])
    for name, (role, default, description) in ANALYSES.items():
        register(name, role=role, default=default, description=description)


def selected_analyses(meta: Mapping[str, Any], host=None) -> tuple[str, ...]:
    """What this run computes: the task's ``adaptation`` list, else every ``default=True`` entry."""
    chosen = meta.get("adaptation")
    if chosen is not None:
        return tuple(chosen)
    if meta.get("kind") == "transfer" or meta.get("priors"):
        return config.default_names(host)
    return ()


def safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))


def artifact_name(task: str, fraction: float, seed, run_id: str | None = None) -> str:
    """``<task>--<run_id>.npz``; without a run id ``<task>--f<fraction>-s<seed>.npz`` (``seed`` may
    be ``"*"`` for a glob pattern)."""
    if run_id:
        return f"{safe_name(task)}--{safe_name(run_id)}.npz"
    return f"{safe_name(task)}--f{fraction:g}-s{seed}.npz"


def first_moment_shift(X_target: np.ndarray, source_mean: np.ndarray, source_std: np.ndarray) -> float:
    """RMS over features of ``(mean target - source mean) / source SD`` (give a zero SD as 1)."""
    return -sel.neg_shift(X_target, source_mean, source_std)


@hookimpl
def run_metrics(run) -> Mapping[str, Any] | None:
    feats = run.features
    if feats is None:
        return None
    host = host_or_shared(getattr(run, "host", None))  # the host that runs this grid, else the shared one
    chosen = selected_analyses(run.meta, host)
    if not chosen:
        return None
    return AuditRun(run, chosen, host).columns()


class AuditRun:
    """The adaptation plugin's work on one run."""

    def __init__(self, run, chosen: tuple[str, ...], host=None):
        self.run, self.chosen = run, chosen
        self.host = host_or_shared(getattr(run, "host", None) if host is None else host)
        feats = run.features
        self.X = np.asarray(feats.test_X, dtype=np.float32)
        self.y = np.asarray(run.y_test, dtype=np.int64)
        self.k = run.n_classes
        train_X = feats.train_X
        self.source = source_moments(train_X)
        train_y = np.asarray(feats.train_y, dtype=np.int64)
        self.source_prior = np.bincount(train_y, minlength=self.k) / len(train_y)
        val = run.calibration.get("val")
        self.val_pred = None if val is None else np.asarray(val.logits).argmax(axis=1)
        self.val_y = None if val is None else np.asarray(val.labels, dtype=np.int64)
        kind = getattr(feats, "head_kind", "") or ""
        linear = None  # unknown head kind: shot_im probes the head
        if kind:
            try:
                linear = bool(self.host.head_traits(kind).get("linear"))
            except UnknownNameError:
                pass
        self.inputs = AdaptationInputs(head=feats.head, source=self.source, n_classes=self.k,
                                       val_pred=self.val_pred, val_y=self.val_y, seed=run.seed,
                                       head_kind=kind, head_linear=linear)
        self.base_proba = np.asarray(run.proba_test, dtype=np.float64)
        self.f1_base = f1_macro(self.y, self.base_proba.argmax(axis=1))
        self.cache: dict = {}
        #: calibration arm -> reliability bin sums (filled by calibration_columns)
        self.reliability: dict[str, np.ndarray] = {}
        #: the chosen methods, registry order, resolved once for every batch they adapt
        self.methods = {m: resolve_method(m, self.host) for m in config.names("method", self.host)
                        if m in self.chosen}

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["id_f1_macro"] = NAN if self.val_y is None else f1_macro(self.val_y, self.val_pred)
        out["id_accuracy"] = NAN if self.val_y is None else float(np.mean(self.val_pred == self.val_y))
        methods = list(self.methods)
        for m in methods:
            a = self.adapt(m, self.X, base_proba=self.base_proba, y_true=self.y, cache=self.cache)
            if a.proba is None:
                out.update({f"f1_macro_{m}": NAN, f"gain_{m}": NAN, f"ece_{m}": NAN, f"nll_{m}": NAN,
                            f"brier_{m}": NAN})
                continue
            f = f1_macro(self.y, a.pred)
            out[f"f1_macro_{m}"] = f
            out[f"gain_{m}"] = f - self.f1_base
            out[f"ece_{m}"] = cal.top_label_ece(self.y, a.proba, self.run.ece_bins, "fixed")
            out[f"nll_{m}"] = nll(self.y, a.proba)
            out[f"brier_{m}"] = multiclass_brier(self.y, a.proba)
        out["first_moment_shift"] = first_moment_shift(self.X, self.source.mean, self.source.std)
        if "calibration" in self.chosen:
            out.update(self.calibration_columns())
        if "selectors" in self.chosen:
            scores = sel.per_run_scores(self.base_proba, self.X, self.source.mean, self.source.std, self.source_prior)
            out.update({f"sel_{k}": v for k, v in scores.items()})
        if self.run.meta.get("priors"):
            out.update(self.prior_columns(methods))
        if "decodability" in self.chosen:
            out.update(self.decodability_columns())
        if "projection" in self.chosen:
            out.update(self.projection_columns())
        if self.run.artifact_dir is not None:
            self.write_artifact(Path(self.run.artifact_dir))
        return out

    def adapt(self, method: str, X: np.ndarray, *, base_proba: np.ndarray, y_true: np.ndarray, cache: dict):
        return run_method(self.methods[method], X, self.inputs, base_proba=base_proba, y_true=y_true, cache=cache,
                          meta=self.run.meta)

    # -- calibration transfer ---------------------------------------------------------------
    def _cbr_logits(self) -> np.ndarray:
        from prism_plugin.protocol.grid import to_logits

        decision = cbr_outputs(self.X, self.inputs, self.base_proba, self.cache)[0]
        return to_logits(np.asarray(decision), self.run.binary_logits)

    def calibration_columns(self) -> dict[str, Any]:
        run = self.run
        arms, _temps = cal.calibration_transfer(
            run.logits_test, self.y, source_temperature=run.temperature("val"),
            neutral_temperature=run.neutral_temperature, cbr_logits=self._cbr_logits(), seed=run.seed,
            bounds=tuple(run.t_bounds), n_bins=run.ece_bins, reliability=self.reliability,
        )
        return {f"calx_{arm}_{m}": v for arm, row in arms.items() for m, v in row.items()}

    # -- class-prior stress -----------------------------------------------------------------
    def prior_columns(self, methods: list[str]) -> dict[str, Any]:
        run = self.run
        cfg = run.meta["priors"]
        vectors = pri.resolve_priors(cfg, self.k, run.class_names, self.y)
        want_sel = "selectors" in self.chosen
        sums: dict[str, list[float]] = {}
        for batch in pri.batches(self.y, vectors, cfg["batch_sizes"], cfg["draws"], seed=cfg.get("seed", 0) + run.seed):
            idx = batch.indices
            Xb, yb, pb = self.X[idx], self.y[idx], self.base_proba[idx]
            vals = {"f1_none": f1_macro(yb, pb.argmax(axis=1))}
            cache: dict = {}
            for m in methods:
                a = self.adapt(m, Xb, base_proba=pb, y_true=yb, cache=cache)
                vals[f"f1_{m}"] = NAN if a.proba is None else f1_macro(yb, a.pred)
            if want_sel:
                scores = sel.per_run_scores(pb, Xb, self.source.mean, self.source.std, self.source_prior)
                vals.update({f"sel_{k}": v for k, v in scores.items()})
            for name, v in vals.items():
                sums.setdefault(pri.column(batch.prior, batch.k, name), []).append(v)
        return {col: float(np.mean(v)) for col, v in sums.items()}

    # -- diagnostics ------------------------------------------------------------------------
    def decodability_columns(self) -> dict[str, Any]:
        feats = self.run.features
        res = stats.domain_decodability([(feats.train_X, feats.train_y), (self.X, self.y)],
                                        draws=DECODABILITY_DRAWS, seed=self.run.seed)
        return {"dom_decode_acc": res["domain_acc"], "dom_decode_within": res["within_class_acc"],
                "dom_decode_perm": res["permutation_acc"], "dom_decode_class": res["class_acc"]}

    def projection_columns(self) -> dict[str, Any]:
        feats = self.run.features
        evals = {"tgt": (self.X, self.y)}
        if feats.val_X is not None:
            evals["id"] = (feats.val_X, feats.val_y)
        res = stats.subspace_projection((feats.train_X, feats.train_y), evals, feats.make_head, k=1)
        return {"proj_f1_macro": res["f1_tgt_after"], "proj_gain": res["delta_tgt"],
                "proj_id_delta": res.get("delta_id", NAN)}

    # -- artifacts --------------------------------------------------------------------------
    def write_artifact(self, folder: Path) -> None:
        run = self.run
        arrays = {
            "y_test": self.y.astype(np.int32),
            "pred_test": self.base_proba.argmax(axis=1).astype(np.int32),
            "proba_test": self.base_proba.astype(np.float32),
            "model": np.array(run.model),
            "task": np.array(run.task),
            "seed": np.array(run.seed),
            "fraction": np.array(run.fraction),
            "probe": np.array(str(getattr(self.run.features, "head_kind", "") or "")),
        }
        split_seed = getattr(run, "split_seed", None)
        if split_seed is not None:
            arrays["split_seed"] = np.array(int(split_seed))
        run_id = getattr(run, "run_id", None) or None
        if run_id:
            arrays["run_id"] = np.array(str(run_id))
        if self.reliability:
            arrays["reliability_arms"] = np.array(list(self.reliability))
            arrays["reliability"] = np.stack([np.asarray(v, dtype=np.float64) for v in self.reliability.values()])
        if self.val_y is not None:
            arrays["y_val"] = self.val_y.astype(np.int32)
            arrays["pred_val"] = self.val_pred.astype(np.int32)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        atomic_write_bytes(folder / artifact_name(run.task, run.fraction, run.seed, run_id), buf.getvalue())
