"""The verdict's transfer and few-shot lines: transfer AUROC against the PRISM label-definition
zone (Table 7) where it applies, declared covariate / prior shifts said as such, and how many
labelled target samples the few-shot temperature needs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; imported where used (quick start-up)
    import pandas as pd

from prism_plugin.registrars import TableKind
from prism_plugin.report.derived import TRANSFER_ZONE
from prism_plugin.report.verdict_rows import (MAX_LISTED, SHIFT_WORDS, ci_range, get_value, kind_label, num, pct,
                                              setting_name, verdict_row, where_of)
from prism_plugin.tables import UNDECLARED

def _zone_text(auroc: float) -> tuple[str, str]:
    if auroc < TRANSFER_ZONE:
        return ("bad", f"does not transfer well (transfer AUROC {num(auroc)}, the mean over source label fractions; "
                       f"below the ~{TRANSFER_ZONE:.2f} zone "
                       "under which, in the PRISM paper, more source labels worsened target ECE in 86–88 % of "
                       "combinations)")
    if auroc < 0.95:
        return ("warn", f"transfers moderately (transfer AUROC {num(auroc)}, the mean over source label fractions; "
                        f"just above the ~{TRANSFER_ZONE:.2f} "
                        "zone; in the paper 8 % of combinations at this level had rising target ECE)")
    return ("good", f"transfers (transfer AUROC {num(auroc)}, the mean over source label fractions; in the paper 1 % "
                    "of combinations at this level had "
                    "rising target ECE)")


def _shift_of(r) -> str:
    return str(get_value(r, "shift", "") or "")


def _transfer_unbanded(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    """Transfer lines of settings the PRISM label-definition bands do not apply to: a declared
    covariate or prior shift (said as such), or a transfer task without a declared shift kind."""
    table = spec.name
    out = []
    if len(s) > MAX_LISTED:
        a = float(s["transfer_auroc"].mean())
        rises = int(s["target_ece_rises"].astype(bool).sum())
        kind = _shift_of(next(s.itertuples(index=False)))
        what = SHIFT_WORDS.get(kind, "shift kind not declared")
        text = (f"{kind_label(spec, s)} ({len(s)} pairs; {what}): mean target AUROC {num(a)} over source label "
                f"fractions; target ECE rose with more source labels on {rises} of {len(s)}. Not compared with the "
                "PRISM label-definition bands" + (", which hold for label-definition pairs only." if kind in SHIFT_WORDS
                                                  else _UNDECLARED_FIX))
        out.append(verdict_row(model, "transfer", "info" if kind in SHIFT_WORDS else "warn", table, "", text,
                        where_of(table, model, s["setting"]), "transfer_auroc", "mean", a))
        return out
    for r in s.itertuples(index=False):
        kind = _shift_of(r)
        direction = "rose" if r.target_ece_delta > 0 else "fell"
        trend = (f"raw target ECE {direction} by {num(abs(r.target_ece_delta))} from {pct(r.fraction_min)} to "
                 f"{pct(r.fraction_max)} source labels")
        if kind in SHIFT_WORDS:
            text = (f"{setting_name(r.setting)} ({SHIFT_WORDS[kind]}): transfer AUROC {num(float(r.transfer_auroc))} "
                    f"(mean over source label fractions); {trend}. The PRISM label-definition bands (~"
                    f"{TRANSFER_ZONE:.2f} zone) are not the yardstick of a {kind} shift and are not applied.")
            level = "info"
        else:
            text = (f"{setting_name(r.setting)}: shift kind not declared — transfer AUROC "
                    f"{num(float(r.transfer_auroc))} (mean over source label fractions); {trend}. Not compared with "
                    "the PRISM label-definition bands" + _UNDECLARED_FIX)
            level = "warn"
        out.append(verdict_row(model, "transfer", level, table, r.setting, text, where_of(table, model, [r.setting]),
                        "transfer_auroc", "value", float(r.transfer_auroc)))
    return out


_UNDECLARED_FIX = ("; add `shift: covariate`, `shift: label_definition` or `shift: prior` to the transfer task "
                   "file to say what differs between source and target.")


def transfer_lines(model: str, spec: TableKind, s: pd.DataFrame) -> list[dict]:
    import pandas as pd
    table = spec.name
    out = []
    s = s.loc[s["transfer_auroc"].notna()]
    if s.empty:
        return out
    shifts = s["shift"].astype(str) if "shift" in s.columns else pd.Series("", index=s.index)
    banded = np.array([spec.bands and k != UNDECLARED for k in shifts], dtype=bool)
    if not banded.all():
        out.extend(_transfer_unbanded(model, spec, s.loc[~banded]))
        s = s.loc[banded]
        if s.empty:
            return out
    if len(s) > MAX_LISTED:  # e.g. the 20 Camelyon17 hospital pairs: one line for all
        a = float(s["transfer_auroc"].mean())
        level, zone = _zone_text(a)
        rises = int(s["target_ece_rises"].astype(bool).sum())
        below = int((s["transfer_auroc"] < TRANSFER_ZONE).sum())
        text = (f"{spec.label} ({len(s)} pairs): on average the probe {zone}; {below} of "
                f"{len(s)} pairs are below {TRANSFER_ZONE:.2f}, and target ECE rose with more source labels on "
                f"{rises} of {len(s)}.")
        out.append(verdict_row(model, "transfer", level, table, "", text, where_of(table, model, s["setting"]),
                        "transfer_auroc", "mean", a))
        return out
    for r in s.itertuples(index=False):
        level, zone = _zone_text(float(r.transfer_auroc))
        direction = "rose" if r.target_ece_delta > 0 else "fell"
        lo, hi = get_value(r, "transfer_auroc_ci_low"), get_value(r, "transfer_auroc_ci_high")
        ci = ci_range(lo, hi)
        settled = ""
        if ci:
            edges = [z for z in (TRANSFER_ZONE, 0.95) if float(lo) < z <= float(hi)]
            if edges:
                settled = (f"; its test-set CI {ci} straddles {edges[0]:.2f}, so the band is not settled by this "
                           "test set")
                level = "warn" if level == "good" else level
            else:
                settled = f"; test-set CI {ci}"
        text = (f"{setting_name(r.setting)}: the probe {zone}{settled}; here raw target ECE {direction} by "
                f"{num(abs(r.target_ece_delta))} from {pct(r.fraction_min)} to {pct(r.fraction_max)} source labels.")
        out.append(verdict_row(model, "transfer", level, table, r.setting, text, where_of(table, model, [r.setting]),
                        "transfer_auroc", "value", float(r.transfer_auroc)))
    return out


def fewshot_lines(model: str, spec: TableKind, s: pd.DataFrame, tolerance: float) -> list[dict]:
    table = spec.name
    out = []
    s = s.loc[s["transfer_auroc"].notna()]
    measured = s.loc[s["fewshot_ks"].fillna("").astype(str) != ""]
    if measured.empty:
        return out
    for r in measured.itertuples(index=False):
        ks = [int(k) for k in str(r.fewshot_ks).split(";") if k]
        where = where_of(table, model, [r.setting])
        if math.isnan(r.fewshot_k_needed):
            text = (f"{setting_name(r.setting)}: even {max(ks)} labelled target samples do not bring the few-shot "
                    f"temperature's target ECE within {tolerance:g} of the oracle ECE at {pct(r.fraction_max)} "
                    "source labels — recalibrating this site needs more target labels.")
            level = "bad"
        else:
            k = int(r.fewshot_k_needed)
            text = (f"{setting_name(r.setting)}: {k} labelled target samples bring the few-shot temperature's "
                    f"target ECE within {tolerance:g} of the oracle ECE at {pct(r.fraction_max)} source labels "
                    f"(tested K = {', '.join(map(str, ks))}).")
            level = "good" if k <= 16 else "warn"
        out.append(verdict_row(model, "fewshot", level, table, r.setting, text, where, "fewshot_k_needed", "value",
                        r.fewshot_k_needed))
    return out
