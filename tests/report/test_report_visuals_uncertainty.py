"""Issue 16: the report's visual defects (reliability markers at 0/1, the gap above the legend,
fixed 0-1 AUROC axes, tiny fonts in wide grids), the transfer KPI card, the overview's file list,
percentages with their unit, the sweep report, and the test-set uncertainty in cells, figures,
tables and verdict. Small hand-made inputs; numbers checked against independent computations."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from prism_plugin.report import basic, cell_figures, derived, plots, transfer_sections, uncertainty, verdict_section
from prism_plugin.report.verdict import build_verdict
from prism_plugin.report.verdict_rows import check_verdict
from prism_plugin.tables import RunTables

pytest.importorskip("matplotlib")


@pytest.fixture
def figs(monkeypatch):
    """The matplotlib figures the plot functions save, in order."""
    seen = []
    real = plots.report_png

    def capture(fig):
        data = real(fig)
        seen.append((fig, data))
        return data

    monkeypatch.setattr(plots, "report_png", capture)
    return seen


def _cells(table="indomain", settings=("D1",), models=("A", "B"), base=0.97, ci=True, step=0.005):
    rows = []
    for si, s in enumerate(settings):
        for mi, m in enumerate(models):
            for f in (0.01, 0.1, 1.0):
                a = base + step * mi + 0.01 * np.log10(f) / 2 + 0.002 * si
                r = {"table": table, "model": m, "setting": s, "fraction": f, "n_runs": 3, "n_classes": 2,
                     "collapsed_runs": 0, "degenerate_runs": 0, "collapse_signal": "prism",
                     "neutral_temperature": 2.0, "shift": "label_definition" if "transfer" in table else ""}
                for metric, v in (("auroc", a), ("f1_macro", a - 0.1), ("ece_fixed", 0.1 + 0.02 * mi),
                                  ("ece_scaled_fixed", 0.05 + 0.01 * mi)):
                    r.update({f"{metric}_mean": v, f"{metric}_std": 0.002, f"{metric}_min": v - 0.003,
                              f"{metric}_max": v + 0.003})
                    if ci:
                        r.update({f"{metric}_ci_low": v - 0.01, f"{metric}_ci_high": min(1.0, v + 0.01)})
                r.update({"temperature_mean": 1.5, "temperature_min": 1.4, "temperature_max": 1.6})
                rows.append(r)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures
def test_reliability_markers_at_0_and_1_are_not_clipped(figs):
    k = 15
    count = np.zeros(k)
    count[[0, 7, 14]] = [10, 5, 20]
    conf = np.full(k, np.nan)
    conf[[0, 7, 14]] = [0.02, 0.5, 0.99]
    acc = np.full(k, np.nan)
    acc[[0, 7, 14]] = [0.0, 0.5, 1.0]  # bins at observed frequency exactly 0 and 1
    b = {"count": count, "confidence": conf, "accuracy": acc, "n": 35.0}
    cell_figures.reliability_grid([{"title": "t", "raw": b, "scaled": b, "ece_raw": 0.1, "ece_scaled": 0.05,
                             "temperature": 1.0, "binary": True}])
    fig = figs[-1][0]
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo < 0 and hi > 1 and ax.get_xlim()[0] < 0 and ax.get_xlim()[1] > 1
    scatters = [c for c in ax.collections if len(c.get_offsets())]
    assert scatters and all(not c.get_clip_on() for c in scatters)


def _legend_gap_in(fig) -> float:
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    lowest = min(ax.get_tightbbox(r).y0 for ax in fig.axes if ax.get_visible())
    top_of_legend = fig.legends[0].get_window_extent(r).y1
    return (lowest - top_of_legend) / fig.dpi


def test_legend_sits_right_below_the_axes(figs):
    cells = _cells()
    plots.ece_curves(cells, ["D1"])
    plots.metric_curves(cells, [("D1", "auroc", "AUROC")], bounds=(0, 1))
    for fig, data in figs:
        gap = _legend_gap_in(fig)
        assert 0 <= gap <= 0.2, gap  # was ~0.5 in: the margin reserved for the axis label plus the legend's own
        # the saved PNG is cropped to its content: little white below the legend either
        img = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
        ink_rows = np.where((img < 200).any(axis=1))[0]
        assert (img.shape[0] - 1 - ink_rows.max()) / plots.DPI < 0.2


def test_auroc_axes_fit_the_data_never_beyond_0_1(figs):
    cells = _cells(settings=("h0", "h1"), models=tuple("ABCDEFGH"), base=0.96, step=0.004)
    plots.metric_curves(cells, [(s, "auroc", "AUROC") for s in ("h0", "h1")], bounds=(0.0, 1.0))
    fig = figs[-1][0]
    for ax, s in zip(fig.axes, ("h0", "h1")):
        lo, hi = ax.get_ylim()
        sub = cells.loc[cells["setting"] == s]
        data_lo = min(sub["auroc_min"].min(), sub["auroc_ci_low"].min())
        assert 0.0 <= lo <= data_lo and sub["auroc_max"].max() <= hi <= 1.0
        assert hi - lo < 0.2  # a fixed 0-1 axis merged the eight curves at the top
    assert plots.data_ylim([[0.999, 1.0]], (0.0, 1.0)) [1] == 1.0
    lo, hi = plots.data_ylim([[0.2, 0.3]], (0.0, 1.0), include=(0.85,))
    assert lo < 0.2 and 0.85 < hi <= 1.0


def test_transfer_auroc_axis_fits_and_keeps_the_zone(figs):
    cells = _cells("transfer", settings=("S->T",), base=0.96)
    plots.transfer_curves(cells, ["S->T"], zone=True, zone_at=0.85)
    a_ax = figs[-1][0].axes[0]
    lo, hi = a_ax.get_ylim()
    assert 0.8 < lo < 0.85 and hi <= 1.0


def _min_displayed_pt(fig, data: bytes) -> float:
    from matplotlib.text import Text

    width_px = Image.open(io.BytesIO(data)).size[0]
    scale = min(1.0, plots.REPORT_COLUMN_PX / width_px)  # the report column shrinks wider images
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    return min(sizes) * plots.DPI / 72 * 0.75 * scale  # PNG px are CSS px; 1 CSS px = 0.75 pt


def test_fonts_are_legible_at_the_displayed_size(figs):
    four = _cells("transfer", settings=("A->B", "B->A", "C->D", "D->C"))
    four["temperature_oracle_mean"] = 3.0
    plots.temperature_curves(four, ["A->B", "B->A", "C->D", "D->C"], max_cols=4,
                             extra=[("temperature_oracle", "oracle T", "--")])
    plots.transfer_curves(four, ["A->B", "B->A", "C->D", "D->C"])
    six = _cells(settings=tuple(f"D{i}" for i in range(6)))
    plots.ece_curves(six, [f"D{i}" for i in range(6)])
    for fig, data in figs:
        assert fig.get_size_inches()[0] <= plots.MAX_FIGURE_WIDTH_IN + 1e-9
        assert _min_displayed_pt(fig, data) >= plots.MIN_DISPLAY_PT - 0.05
    assert plots.displayed_pt(9.5, 16.4) < 6.5  # the old 4-panel width: 5.8 pt on screen


def test_error_bars_and_legend_say_what_is_what(figs):
    cells = _cells()
    plots.metric_curves(cells, [("D1", "auroc", "AUROC")], bounds=(0, 1), ci_level=0.95)
    fig = figs[-1][0]
    title = fig.legends[0].get_title().get_text().replace("\n", " ")
    assert "band: min–max over seeds" in title and "95 % test-set bootstrap CI of the seed mean" in title
    from matplotlib.collections import LineCollection

    bars = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    segs = np.concatenate([np.asarray(c.get_segments()) for c in bars])
    spans = sorted(np.round(np.abs(segs[:, 1, 1] - segs[:, 0, 1]), 6))
    want = sorted(np.round((cells["auroc_ci_high"] - cells["auroc_ci_low"]).to_numpy(), 6))
    assert spans == want
    plots.metric_curves(_cells(ci=False), [("D1", "auroc", "AUROC")], bounds=(0, 1))
    assert "bars" not in figs[-1][0].legends[0].get_title().get_text()  # old results: no bars, none claimed


# --------------------------------------------------------------------------- report text
def _runs(n_min=30, ci=True, delta_overlaps=True, model="A", dataset="D1", extra=None):
    rng = np.random.default_rng(0)
    rows = []
    for f in (0.1, 1.0):
        for seed in (1, 2, 3):
            a = 0.9 + 0.05 * f + 0.01 * rng.random()
            e, es = 0.10 + 0.01 * rng.random(), 0.08 + 0.01 * rng.random()
            r = {"model": model, "dataset": dataset, "fraction": f, "seed": seed, "n_classes": 2, "auroc": a,
                 "f1_macro": a - 0.1, "ece_fixed": e, "ece_scaled_fixed": es, "temperature": 1.5, "nll": 0.5,
                 "nll_scaled": 0.45, "degenerate": False, "collapsed": False, "probe_converged": True,
                 "task": "t", "reference_table": "indomain", "n_test_classes": 2}
            if ci:
                w = 0.03 if delta_overlaps else 0.004
                r.update({"auroc_ci_low": a - 0.04, "auroc_ci_high": min(1.0, a + 0.03), "ece_fixed_ci_low": e - w,
                          "ece_fixed_ci_high": e + w, "ece_scaled_fixed_ci_low": es - w,
                          "ece_scaled_fixed_ci_high": es + w, "n_test_min_class": n_min})
            r.update(extra or {})
            rows.append(r)
    return pd.DataFrame(rows)


def test_cells_carry_the_mean_of_the_seeds_intervals_and_the_rarest_class():
    runs = _runs(n_min=6)
    runs.loc[runs["seed"] == 2, "n_test_min_class"] = 5
    cells = derived.report_cells(RunTables(indomain=runs))
    want = runs.groupby("fraction")[["auroc_ci_low", "ece_scaled_fixed_ci_high"]].mean()
    assert np.allclose(cells["auroc_ci_low"], want["auroc_ci_low"])
    assert np.allclose(cells["ece_scaled_fixed_ci_high"], want["ece_scaled_fixed_ci_high"])
    assert (cells["n_test_min_class"] == 5).all()
    # conservative CI of scaled - raw: scaled low - raw high .. scaled high - raw low
    g = runs.groupby("fraction")
    lo = g["ece_scaled_fixed_ci_low"].mean() - g["ece_fixed_ci_high"].mean()
    assert np.allclose(cells["ece_scaling_delta_ci_low"], lo)
    old = derived.report_cells(RunTables(indomain=_runs(ci=False)))
    assert "auroc_ci_low" not in old and "ci_source" not in old  # old results: nothing claimed


def _verdict(runs):
    cells = derived.report_cells(RunTables(indomain=runs))
    settings = derived.report_settings(cells)
    v = build_verdict(settings)
    assert check_verdict(v, {"report_settings": settings}) == []  # every cited number recomputes
    return v, settings


def test_verdict_says_few_samples_and_noise_instead_of_a_confident_success():
    confident, _ = _verdict(_runs(n_min=30000, delta_overlaps=False))
    scaling = confident.loc[confident["topic"] == "scaling"]
    assert (scaling["level"] == "good").any() and not scaling["text"].str.contains("includes zero").any()
    few, settings = _verdict(_runs(n_min=6, delta_overlaps=True))
    assert int(settings["n_test_min_class"].iloc[0]) == 6
    line = few.loc[few["column"] == "n_test_min_class"]
    assert len(line) == 1 and line["level"].iloc[0] == "warn" and "only 6 samples" in line["text"].iloc[0]
    s = few.loc[few["topic"] == "scaling"]
    assert not (s["level"] == "good").any()  # the same numbers, no longer a plain success
    noise = s.loc[s["column"] == "scaling_unsure_cells"]
    assert len(noise) == 1 and "includes zero in 2 of 2" in noise["text"].iloc[0]
    glance = few.loc[few["topic"] == "glance"].iloc[0]["text"]
    assert "test-set CI [" in glance
    old, _ = _verdict(_runs(ci=False))  # old results: the verdict as before
    assert not old["text"].str.contains("CI|few test samples").any()


def _write_npz(path: Path, reps: np.ndarray, names, digest="0" * 64, seed=0, level=0.9):
    """A replicates artifact as interface 1 of the issue describes it (the bootstrap plugin's format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, format=np.array("prism-bootstrap/1"), metrics=np.array(names), replicates=reps,
             point=reps.mean(axis=0), n=np.int64(len(reps)), seed=np.int64(seed), level=np.float64(level),
             test_digest=np.array(digest))


def test_exact_seed_mean_ci_from_paired_replicates(tmp_path):
    runs = _runs()
    runs.to_csv(tmp_path / "runs.csv", index=False)
    rng = np.random.default_rng(1)
    names = ["auroc", "ece_fixed", "ece_scaled_fixed"]
    stored = {}
    for r in runs.itertuples():
        reps = rng.normal([r.auroc, r.ece_fixed, r.ece_scaled_fixed], 0.01, size=(200, 3))
        stored[(r.fraction, r.seed)] = reps
        _write_npz(tmp_path / "artifacts" / "bootstrap" / f"t--f{r.fraction:g}-s{r.seed}.npz", reps, names)
    cells = derived.report_cells(RunTables(indomain=runs))
    out, level, k = uncertainty.exact_cell_ci([tmp_path], cells)
    assert k == 2 and level == 0.9
    for f in (0.1, 1.0):
        mean = np.mean([stored[(f, s)] for s in (1, 2, 3)], axis=0)  # seed mean, replicate by replicate
        row = out.loc[np.isclose(out["fraction"], f)].iloc[0]
        assert row["auroc_ci_low"] == pytest.approx(np.quantile(mean[:, 0], 0.05))
        assert row["auroc_ci_high"] == pytest.approx(np.quantile(mean[:, 0], 0.95))
        d = mean[:, 2] - mean[:, 1]
        assert row["ece_scaling_delta_ci_low"] == pytest.approx(np.quantile(d, 0.05))
        assert row["ci_source"] == "paired replicates"
    # seeds on the same test set but different resamples cannot be averaged replicate by replicate
    _write_npz(tmp_path / "artifacts" / "bootstrap" / "t--f1-s3.npz", stored[(1.0, 3)], names, seed=7)
    _, _, k = uncertainty.exact_cell_ci([tmp_path], cells)
    assert k == 1


def test_kpi_card_quotes_the_glance_number_and_says_what_it_is():
    cells = _cells("transfer", settings=("S->T",), models=("A",))
    cells.loc[cells["fraction"] == 1.0, "auroc_mean"] = 0.967
    settings = derived.report_settings(cells)
    html = verdict_section.kpis(settings, "A")
    v = build_verdict(settings)
    glance = v.loc[v["topic"] == "glance", "text"].iloc[0]
    assert "0.967" in glance and "0.967" in html and "at 100 % source labels" in html
    transfer = v.loc[v["topic"] == "transfer", "text"].iloc[0]
    assert f"{settings['transfer_auroc'].iloc[0]:.3f}, the mean over source label fractions" in transfer


def _report(folder: Path, runs: pd.DataFrame) -> str:
    from prism_plugin.plugins import host_or_shared
    from prism_plugin.report import build

    folder.mkdir(parents=True, exist_ok=True)
    runs.to_csv(folder / "runs.csv", index=False)
    build.write_report(folder, host_or_shared())
    return (folder / "report.md").read_text(encoding="utf-8")


def test_overview_cites_only_files_that_exist_and_cells_show_the_ci(tmp_path):
    md = _report(tmp_path / "r", _runs(n_min=6))
    over = md.split('<a id="verdict">')[0]
    cited = set(__import__("re").findall(r"`([\w.]+\.(?:csv|json))`", over))
    assert cited and "mechanism_summary.csv" not in cited and "cri_variants_100.csv" not in cited
    for name in cited:
        assert (tmp_path / "r" / "summaries" / name).exists(), name
    assert "test-set bootstrap CI of the seed mean" in md and "⚠️ few" in md
    assert "the rarest test class has only 6 samples" in md


def test_percentages_carry_their_unit():
    bands = pd.DataFrame({"band": ["<0.85"], "n": [4], "rises": [4], "rate": [100.0], "mean_delta": [0.1],
                          "designs": ["x"]})
    from prism_plugin.report.markdown import markdown_table

    text = markdown_table(bands, formats=transfer_sections.PERCENT_COLUMNS)
    assert "| 100 % |" in text
    assert all("(%)" not in what for _k, what, _p, _f in transfer_sections.PAPER_NUMBERS)


# --------------------------------------------------------------------------- the sweep report
def _sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for c in (0.1, 1.0):
        d = root / f"t_probe.C_{c:g}" / "A"
        d.mkdir(parents=True)
        runs = _runs(extra={"sweep_key": "probe.C", "sweep_value": c, "probe_C": c, "task": f"t@probe.C={c:g}"})
        runs["auroc"] += c / 100  # the variants differ
        runs.to_csv(d / "runs.csv", index=False)
    return root


def test_sweep_report_reads_each_variant_apart(tmp_path):
    from prism_plugin.plugins import host_or_shared
    from prism_plugin.report import build
    from prism_plugin.summaries.probe_sensitivity import with_sweep_variants

    root = _sweep(tmp_path)
    host = host_or_shared()
    # the builder reads a sweep folder's variants itself: no "No per-run results", no "only transfer"
    view = build.build_view(root, host, write_tables=False)
    secs = {s.key: s for s in basic.report_sections(view)}
    assert "No per-run results could be read" not in secs["overview"].body
    assert "A · C = 0.1" in secs["overview"].body and "A · C = 1" in secs["overview"].body
    assert not any("only transfer" in n for n in secs["discrimination"].not_shown)
    assert not any("per-run tables could not be assembled" in n for n in view.notes)
    # with the variants read apart: one model per C, cells and diagrams per variant
    tables = with_sweep_variants(None, [root], host)
    assert sorted(tables["indomain"]["model"].unique()) == ["A · C = 0.1", "A · C = 1"]
    view = build.build_view(root, host, run_tables=tables, write_tables=False)
    cells = view.table("report_cells")
    assert sorted(cells["model"].unique()) == ["A · C = 0.1", "A · C = 1"]
    want = tables["indomain"].groupby(["model", "fraction"])["auroc"].mean()
    assert np.allclose(cells.set_index(["model", "fraction"])["auroc_mean"].sort_index(), want.sort_index())
    secs = {s.key: s for s in basic.report_sections(view)}
    assert "A · C = 0.1" in secs["overview"].body and secs["discrimination"].figures


def test_reliability_groups_never_pool_sweep_variants():
    bins = {"count": [5.0, 5.0], "confidence": [0.25, 0.75], "accuracy": [0.2, 0.8], "n": 10, "ece": 0.05,
            "temperature": 1.0}
    entries = [{"model": "A", "setting": "D1", "reference_table": "indomain", "fraction": 1.0, "seed": s,
                "task": f"t@probe.C={c}", "raw": bins, "scaled": bins, "n_classes": 2}
               for c in ("0.1", "1", "10") for s in (1, 2)]
    groups, _skipped, n_pairs = basic._reliability_groups(entries, None)
    assert n_pairs == 3 and len(groups) == 3
    assert all("2 seeds pooled" in g["title"] for g in groups)
    assert [g["title"].split("\n")[1].split(",")[0] for g in groups] == ["A · C = 0.1", "A · C = 1", "A · C = 10"]
