"""``PRISMEvaluator``: the PRISM package's evaluator API, backed by prism-plugin.

``evaluate()`` runs :func:`prism_plugin.api.evaluate` (the PRISM v2 protocol: class-stratified subsets,
``LogisticRegression(C, max_iter=1000)`` on float32 features, temperature on the held-out validation split) on the
reference's floating-point path (``probability_dtype="float32"``), and returns the README's columns. ``compare()``
and ``reference_cri()`` read a results_v2 folder (``indomain_all_v2.csv``, ``ood_all_v2.csv``) and use
prism-plugin's CRI summary functions (:mod:`prism_plugin.summaries.cri`, PROTOCOL §6.1-6.2).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from prism_plugin.compat.errors import CompatError
from prism_plugin.errors import PrismError

#: dataset keys of the PRISM package -> names in the results_v2 tables
DATASETS: dict[str, str] = {
    "pcam": "PCam", "mhist": "MHIST", "crc": "CRC", "bracs": "BRACS",
    "lunghist700": "LungHist700", "spider_breast": "SPIDER-Breast",
}
LABEL_FRACTIONS = [0.01, 0.05, 0.10, 0.25, 0.50, 1.00]
SEEDS = [42, 123, 456]
REFERENCE_MODELS = ["CLIP", "PLIP", "CONCH", "VIRCHOW2", "UNI", "GigaPath", "H-Optimus-0", "MIDNIGHT"]

#: the columns ``evaluate()`` returns, in this order (PRISM package README)
EVALUATE_COLUMNS = [
    "model", "dataset", "fraction", "seed", "n_train", "n_classes", "auroc", "f1_macro", "brier",
    "ece_fixed", "ece_adaptive", "temperature", "ece_scaled_fixed", "ece_scaled_adaptive",
    "degeneracy_share", "forced_classes", "degenerate",
]
#: the columns ``compare()`` returns, in this order
COMPARE_COLUMNS = ["model", "fraction", "auroc", "ece", "ece_scaled", "ood_stability", "ood_stability_imputed",
                   "cri", "is_reference"]
BINARY_TEMPERATURES = ("natural", "doubled")
#: the grid's binary logit convention for each ``binary_temperature``: the package's v0.3 logits [-d/2, d/2]
#: have the same softmax, bit for bit, as ``natural`` [0, d] (both reduce to [-d/T, 0] or [0, d/T] after the
#: max-subtraction), and its earlier public release's [-d, d] are ``symmetric``; either way T is searched in
#: [0.1, 10] on that scale, as the package does
BINARY_LOGITS = {"natural": "natural", "doubled": "symmetric"}
FRACTION_ATOL = 1e-9


def _norm(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


_BY_NORM = {**{_norm(k): v for k, v in DATASETS.items()}, **{_norm(v): v for v in DATASETS.values()}}


def dataset_name(dataset: Any, *, allow_all: bool = False) -> str:
    """A PRISM dataset key or results_v2 name (any case, ``-``/``_`` ignored) -> its results_v2 name;
    ``"all"`` stays ``"all"`` where allowed."""
    if allow_all and isinstance(dataset, str) and dataset.strip().lower() == "all":
        return "all"
    got = _BY_NORM.get(_norm(dataset)) if isinstance(dataset, str) else None
    if got is None:
        extra = " (Camelyon17 is the transfer study, not a compare() dataset)" if _norm(dataset) == "camelyon17" else ""
        raise CompatError(
            f"dataset {dataset!r}: compare() needs one of the six PRISM datasets "
            f"({', '.join(DATASETS)}; results_v2 names {', '.join(DATASETS.values())})"
            + (" or 'all' to pool them" if allow_all else "") + extra
        )
    return got


# --------------------------------------------------------------------------- reference results
def _missing_reference_message(why: str) -> str:
    """Said only where there is no pulled copy at all (a damaged one is named as damaged)."""
    from prism_plugin.reference_files import pulled_dir

    return (f"{why}: prism-plugin does not bundle the PRISM reference results; run `prism-run reference pull` "
            f"(downloads and verifies them into {pulled_dir()}) or pass results_dir=PATH (command line: --results-dir DIR) to a results_v2 folder "
            "(indomain_all_v2.csv, ood_all_v2.csv)")


def _opened(folder: Path):
    """``(RunTables, where)`` of a reference folder through the one reader (:mod:`prism_plugin.reference_files`):
    a missing or damaged file is one :class:`CompatError` line naming it."""
    from prism_plugin.errors import PrismError
    from prism_plugin.reference_files import COMPAT, open_reference

    try:
        return open_reference(folder, COMPAT).tables, str(folder)
    except PrismError as exc:
        raise CompatError(str(exc)) from None


def _pulled_tables(why: str):
    from prism_plugin.reference_files import pulled_copy

    pulled = pulled_copy()
    if pulled is None:
        raise CompatError(_missing_reference_message(why))
    return _opened(pulled)


def load_reference(results_dir: str | Path | None):
    """``(RunTables, where)`` for ``results_dir`` with the PRISM package's rules (see the README text)."""
    from prism_plugin.tables import REFERENCE_FILES

    if results_dir is None:
        return _pulled_tables("PRISMEvaluator(results_dir=None)")
    path = Path(results_dir).expanduser()
    if not path.exists():
        if path.name == "results_v2":
            tables, where = _pulled_tables(f"results_dir={str(results_dir)!r} does not exist")
            warnings.warn(f"results_dir={str(results_dir)!r} does not exist; using the pulled reference copy "
                          f"in {where}", stacklevel=3)
            return tables, where
        raise CompatError(f"results_dir={str(results_dir)!r}: no such directory; pass a results_v2 folder "
                          "(indomain_all_v2.csv, ood_all_v2.csv) or a repository root containing results_v2/")
    if not path.is_dir():
        raise CompatError(f"results_dir={str(results_dir)!r} is a file; pass the results_v2 folder that contains it")
    published = [f for f, _ in REFERENCE_FILES.values()]
    for candidate in (path, path / "results_v2"):
        if candidate.is_dir() and any((candidate / f).exists() for f in published):
            return _opened(candidate)  # a file it needs that is absent or damaged is named
    if any(path.glob("*_results.csv")):
        raise CompatError(
            f"results_dir={str(results_dir)!r} has the legacy v1 layout (<model>_<dataset>_results.csv), which "
            "prism-plugin does not read: those are the as-submitted numbers, not the paper's; pass the results_v2 "
            "folder instead (or run `prism-run reference pull`)")
    raise CompatError(f"results_dir={str(results_dir)!r} has no indomain_all_v2.csv (neither in it nor in "
                      "results_v2/ below it); pass a results_v2 folder or run `prism-run reference pull`")


def _fraction_key(values) -> np.ndarray:
    return np.round(np.asarray(values, dtype=np.float64), 9)


def _pooled(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per (model, fraction): the mean over datasets of the seed means (PROTOCOL §6.2)."""
    t = table.assign(_f=_fraction_key(table["fraction"]))
    cells = t.groupby(["model", "dataset", "_f"], sort=False)[columns].mean()
    out = cells.groupby(level=["model", "_f"], sort=False).mean().reset_index()
    return out.rename(columns={"_f": "fraction"})


def _score(value: Any, where: str, what: str) -> float:
    from prism_plugin.protocol.array_checks import as_score

    try:
        return as_score(value, where, what=what)
    except PrismError as exc:
        raise CompatError(str(exc)) from None


def _check_results(custom: pd.DataFrame, columns: list[str]) -> None:
    """The score columns of ``custom_results``: numbers in [0, 1] (NaN = not computed, e.g. no validation split);
    ``fraction`` in (0, 1]."""
    for c in [*columns, "fraction"]:
        raw = custom[c]
        values = pd.to_numeric(raw, errors="coerce")
        text = values.isna() & raw.notna() & ~raw.map(lambda v: isinstance(v, float))
        if text.any():
            i = int(np.flatnonzero(text.to_numpy())[0])
            raise CompatError(f"custom_results column {c}: {raw.iloc[i]!r} (row {i}) is not a number; pass the "
                              "DataFrame evaluate() returned")
        v = values.to_numpy(dtype=np.float64)
        lo_ok = v > 0 if c == "fraction" else v >= 0
        bad = (np.isnan(v) & (c == "fraction")) | (~np.isnan(v) & ~(lo_ok & (v <= 1)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            rng = "(0, 1]" if c == "fraction" else "[0, 1]"
            raise CompatError(f"custom_results column {c}: {v[i]:g} (row {i}) is outside {rng}; pass the DataFrame "
                              "evaluate() returned")


class PRISMEvaluator:
    """The PRISM package's evaluator on prism-plugin.

    ``results_dir`` selects the reference results used by :meth:`compare` and :meth:`reference_cri`: ``None`` = the
    copy ``prism-run reference pull`` installed (prism-plugin bundles none); a results_v2 folder or a repository
    root containing ``results_v2/``. A path named ``results_v2`` that does not exist falls back to the pulled copy
    with a warning. Read on first use; :meth:`evaluate` needs no reference.
    """

    def __init__(self, results_dir: str | Path | None = None):
        self.results_dir = results_dir
        self._tables = None
        self.reference_source: str | None = None

    # ------------------------------------------------------------------ reference
    def _reference(self):
        if self._tables is None:
            self._tables, self.reference_source = load_reference(self.results_dir)
        return self._tables

    # ------------------------------------------------------------------ evaluate
    def evaluate(
        self,
        train_features,
        train_labels,
        test_features,
        test_labels,
        dataset: str,
        model_name: str = "CustomModel",
        val_features=None,
        val_labels=None,
        label_fractions: Sequence[float] | None = None,
        seeds: Sequence[int] | None = None,
        C: float = 1.0,
        *,
        binary_temperature: str = "natural",
        probability_dtype: str = "float32",
        extra_columns: bool = False,
        disable: Sequence[str] = (),
    ) -> pd.DataFrame:
        """One row per (fraction, seed), the README's columns.

        Without ``val_features`` the temperature and both scaled-ECE columns are NaN and a warning is raised (never
        fitted on the evaluation split). ``binary_temperature="natural"`` (default, the v0.3 convention) reports
        binary temperatures with T = 1 = the probe's own probabilities; ``"doubled"`` reports them on the
        results_v2 scale (2x). ``probability_dtype="float64"`` switches to prism-plugin's float64 metric
        arithmetic; ``extra_columns=True`` keeps every column prism-plugin computes (nll, collapse diagnostics,
        ...) after the README's, among them ``flags`` and ``qualified``, the per-run qualifications of
        :func:`prism_plugin.evaluate`; ``disable`` names prism-plugin metric plugins to leave out (as ``--disable``).
        The quality flags of the runs (a temperature at its search bound, a probe that did not converge, ...) are
        warned about and kept in ``attrs["flags"]`` / ``attrs["qualified"]``; invalid arrays raise a
        :class:`CompatError` (a ``ValueError``) of one line.
        """
        from prism_plugin.api import evaluate

        if binary_temperature not in BINARY_TEMPERATURES:
            raise CompatError(f"binary_temperature must be 'natural' (T = 1 is the identity) or 'doubled' "
                              f"(results_v2 scale, identity 2), got {binary_temperature!r}")
        if (val_features is None) != (val_labels is None):
            raise CompatError("val_features and val_labels: pass both (the validation split for temperature "
                              "scaling) or neither")
        if not isinstance(dataset, str) or not dataset.strip():
            raise CompatError(f"dataset: must be a non-empty name such as 'pcam', got {dataset!r}")
        val = None if val_features is None else (val_features, val_labels)
        with warnings.catch_warnings():
            # the PRISM package's own warning text for a missing validation split
            warnings.filterwarnings("ignore", message="no validation split")
            try:  # the arrays go through prism_plugin.protocol.array_checks, as for prism_plugin.evaluate()
                runs = evaluate(
                    (train_features, train_labels), val, (test_features, test_labels),
                    fractions=LABEL_FRACTIONS if label_fractions is None else label_fractions,
                    seeds=SEEDS if seeds is None else seeds,
                    C=C, max_iter=1000, model=model_name, dataset=dataset, probability_dtype=probability_dtype,
                    disable=disable, binary_logits=BINARY_LOGITS[binary_temperature],
                )
            except CompatError:
                raise
            except PrismError as exc:  # one line, and a ValueError as in the PRISM package
                raise CompatError(str(exc)) from None
        if val is None:
            warnings.warn("evaluate(): no val_features given, so temperature, ece_scaled_fixed and "
                          "ece_scaled_adaptive are NaN and the CRI cannot be computed (PRISM never fits the "
                          "temperature on the evaluation set)", UserWarning, stacklevel=2)
        out = runs[EVALUATE_COLUMNS].copy()
        if extra_columns:
            rest = [c for c in runs.columns if c not in EVALUATE_COLUMNS]
            out = pd.concat([out, runs[rest]], axis=1)
        for key in ("data_checks", "flags"):
            out.attrs[key] = runs.attrs.get(key, [])
        out.attrs["qualified"] = bool(runs.attrs.get("qualified", False))
        out.attrs["binary_temperature"] = binary_temperature
        return out

    # ------------------------------------------------------------------ compare
    def compare(
        self,
        custom_results: pd.DataFrame,
        dataset: str,
        fraction: float | None = None,
        ece_column: str = "ece_scaled_fixed",
        aggregation: str = "multiplicative",
        custom_ood_stability: float | None = None,
    ) -> pd.DataFrame:
        """Your model(s) beside the eight reference models, sorted by CRI (see the module docstring)."""
        from prism_plugin.summaries import cri as C

        if aggregation not in C.AGGREGATIONS:
            raise CompatError(f"aggregation {aggregation!r}: use one of {', '.join(C.AGGREGATIONS)}")
        if not isinstance(custom_results, pd.DataFrame):
            raise CompatError(f"custom_results: pass the DataFrame evaluate() returned (or pd.read_csv of its CSV), "
                              f"got {type(custom_results).__name__}")
        name = dataset_name(dataset, allow_all=True)
        if not isinstance(ece_column, str) or not ece_column.startswith("ece_scaled"):
            raise CompatError(f"ece_column {ece_column!r}: use a scaled-ECE column, e.g. 'ece_scaled_fixed' or "
                              "'ece_scaled_adaptive'")
        raw_column = ece_column.replace("ece_scaled", "ece", 1)
        if raw_column not in ("ece_fixed", "ece_adaptive"):
            raw_column = "ece_fixed"
        columns = ["auroc", raw_column, ece_column]
        missing = [c for c in ["model", "dataset", "fraction", *columns] if c not in custom_results.columns]
        if missing:
            raise CompatError(f"custom_results lacks column(s) {', '.join(missing)}; pass the DataFrame evaluate() "
                              "returned")
        if fraction is not None:
            try:
                fraction = float(fraction)
            except (TypeError, ValueError):
                raise CompatError(f"fraction {fraction!r}: pass a label fraction such as 0.1, or None") from None
        if custom_ood_stability is not None:
            custom_ood_stability = _score(custom_ood_stability, "custom_ood_stability", "an OOD stability")
        _check_results(custom_results, columns)

        tables = self._reference()
        ind = tables.indomain
        missing = [c for c in columns if c not in ind.columns]
        if missing:
            raise CompatError(f"the reference indomain_all_v2.csv ({self.reference_source}) lacks column(s) "
                              f"{', '.join(missing)}")
        if name != "all":
            ind = ind.loc[ind["dataset"] == name]
        if ind.empty:
            raise CompatError(f"the reference ({self.reference_source}) has no in-distribution runs on {name}")
        ref = _pooled(ind, columns)

        custom = custom_results.copy()
        keys = custom["dataset"].map(lambda d: _BY_NORM.get(_norm(d), str(d)))
        if name == "all":
            got = sorted(set(keys) & set(DATASETS.values()))
            if len(got) < len(DATASETS):
                warnings.warn(f"compare(dataset='all'): your results cover {', '.join(got) or 'none'} of the six PRISM "
                              "datasets; your rows pool those, the reference rows pool all six", stacklevel=2)
            if got:
                custom = custom.loc[keys.isin(got)]
        else:
            match = keys == name
            if match.any():
                custom = custom.loc[match]
            elif len(set(keys)) == 1:
                warnings.warn(f"compare(dataset={dataset!r}): your results are for dataset {custom['dataset'].iloc[0]!r}; "
                              f"compared with the reference runs on {name} as you asked", stacklevel=2)
            else:
                raise CompatError(f"custom_results has no rows for {name} (datasets: "
                                  f"{', '.join(map(str, pd.unique(custom['dataset'])))}); filter it or pass that dataset")
        for c in columns + ["fraction"]:
            custom[c] = pd.to_numeric(custom[c], errors="coerce")
        custom["dataset"] = keys.loc[custom.index]
        mine = _pooled(custom, columns)

        if fraction is not None:
            fk = float(_fraction_key([fraction])[0])
            for what, frame in (("your results", mine), (f"the reference ({name})", ref)):
                if not (frame["fraction"] == fk).any():
                    have = ", ".join(f"{f:g}" for f in sorted(frame["fraction"].unique()))
                    raise CompatError(f"fraction {fraction:g}: not in {what} (fractions: {have})")
            ref, mine = ref.loc[ref["fraction"] == fk], mine.loc[mine["fraction"] == fk]

        stab = C.ood_stability(tables.indomain, tables.transfer)
        ref_stab = stab.reindex(pd.unique(ref["model"])).astype(float)
        user_models = [m for m in pd.unique(mine["model"])]
        overrides = {m: custom_ood_stability for m in user_models} if custom_ood_stability is not None else None
        resolved = C.resolve_ood_stability(user_models, stab.loc[[m for m in stab.index if m in set(ref["model"])]],
                                           overrides=overrides)
        rows = []
        for frame, is_ref in ((ref, True), (mine, False)):
            for r in frame.itertuples(index=False):
                rd = r._asdict()
                if is_ref:
                    s, imputed = float(ref_stab.get(rd["model"], np.nan)), False
                else:
                    s = float(resolved.loc[rd["model"], "ood_stability"])
                    imputed = custom_ood_stability is None and bool(resolved.loc[rd["model"], "imputed"])
                a, e_raw, e = float(rd["auroc"]), float(rd[raw_column]), float(rd[ece_column])
                rows.append({"model": rd["model"], "fraction": float(rd["fraction"]), "auroc": a, "ece": e_raw,
                             "ece_scaled": e, "ood_stability": s, "ood_stability_imputed": imputed,
                             "cri": float(C.cri(a, e, s, aggregation)), "is_reference": is_ref})
        out = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
        nan_models = sorted({r["model"] for r in rows if not r["is_reference"] and not np.isfinite(r["cri"])})
        if nan_models:
            warnings.warn(f"compare(): CRI is NaN for {', '.join(map(str, nan_models))} ({ece_column} is NaN: "
                          "evaluate() needs val_features for temperature scaling)", stacklevel=2)
        out["_c"] = out["cri"].fillna(-np.inf)
        out = out.sort_values(["fraction", "_c"], ascending=[True, False], kind="stable").drop(columns="_c")
        out = out.reset_index(drop=True)
        out["ood_stability_imputed"] = out["ood_stability_imputed"].astype(bool)
        out["is_reference"] = out["is_reference"].astype(bool)
        return out

    # ------------------------------------------------------------------ reference_cri
    def reference_cri(self, fraction: float = 1.0) -> pd.DataFrame:
        """Model-level CRI of the eight reference models pooled over the six datasets under the four
        aggregation rules: the ``cri_variants_<pct>.csv`` table (index ``model``)."""
        from prism_plugin.summaries import cri as C
        from prism_plugin.summaries.conventions import fraction_mask, fractions_present

        try:
            fraction = float(fraction)
        except (TypeError, ValueError):
            raise CompatError(f"fraction {fraction!r}: pass a label fraction such as 1.0 or 0.01") from None
        tables = self._reference()
        if not fraction_mask(tables.indomain, fraction).any():
            have = ", ".join(f"{f:g}" for f in fractions_present(tables.indomain))
            raise CompatError(f"fraction {fraction:g}: no reference runs at that fraction (fractions: {have})")
        stab = C.ood_stability(tables.indomain, tables.transfer)
        return C.cri_variants(tables.indomain, stab, fraction)


__all__ = ["PRISMEvaluator", "CompatError", "DATASETS", "LABEL_FRACTIONS", "SEEDS", "REFERENCE_MODELS",
           "EVALUATE_COLUMNS", "COMPARE_COLUMNS", "dataset_name", "load_reference"]
