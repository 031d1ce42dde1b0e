"""`prism-run reference` and `reference pull`, the shipped paper figures, the summaries engine."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism_plugin import reference_data as rd
from prism_plugin.commands import reference as refcmd
from prism_plugin.errors import PrismError
from prism_plugin.tables import SummaryOutput
from tests.conftest import REFERENCE, prism_run

PUBLISHED = ["cri_variants_100", "cri_variants_1", "cri_components", "camelyon17_cri_components"]


@pytest.fixture(scope="module")
def shared_ref() -> Path:
    if not (REFERENCE / "indomain_all_v2.csv").exists():
        pytest.skip(f"shared reference tables not found at {REFERENCE} (set PRISM_SHARED)")
    return REFERENCE


# --------------------------------------------------------------------------- reference command
def test_reference_command_reproduces_the_published_tables(shared_ref, tmp_path):
    out = tmp_path / "ref"
    proc = prism_run("reference", "--reference", str(shared_ref), "--output", str(out), check=True)
    for stem in PUBLISHED:
        got = pd.read_csv(out / f"{stem}.csv")
        ref = pd.read_csv(shared_ref / f"{stem}.csv")
        assert list(got.columns) == list(ref.columns), stem  # published names and column order
        assert got["model"].tolist() == ref["model"].tolist(), stem
        np.testing.assert_allclose(got.iloc[:, 1:].to_numpy(float), ref.iloc[:, 1:].to_numpy(float),
                                   rtol=0, atol=1e-12, err_msg=stem)
    # all four aggregations printed, for both published fractions
    text = proc.stdout
    assert "CRI at 1 % labels (8 models" in text and "CRI at 100 % labels (8 models" in text
    for rule in ("multiplicative", "arithmetic", "geometric", "worst_axis"):
        assert rule in text
    vir = [line for line in text.splitlines() if line.startswith("VIRCHOW2")]
    assert vir[-1].split()[4] == "0.6425"  # 100 %: cri_multiplicative 0.64246...
    assert "Kendall tau between the four rules (1 % and 100 % tables): 0.71-1.00" in text


def test_reference_directory_with_missing_and_malformed_files_names_each(shared_ref, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(shared_ref / "camelyon17_indomain.csv", bad)
    (bad / "indomain_all_v2.csv").write_text("model,dataset,fraction\nCLIP,PCam,1.0\n")  # columns missing
    ood = pd.read_csv(shared_ref / "ood_all_v2.csv")
    ood["auroc"] = ood["auroc"].astype(object)
    ood.loc[3, "auroc"] = "high"
    ood.to_csv(bad / "ood_all_v2.csv", index=False)
    (bad / "camelyon17_transfer.csv").write_bytes(b"")  # empty file
    with pytest.raises(PrismError) as exc:
        refcmd.read_reference_dir(bad)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "indomain_all_v2.csv: missing column(s) seed, auroc" in msg
    assert "ood_all_v2.csv: non-numeric values in column(s) auroc" in msg
    assert "camelyon17_transfer.csv: cannot be read as CSV" in msg
    assert "camelyon17_indomain.csv" not in msg
    from prism_plugin.cli import main

    assert main(["reference", "--reference", str(tmp_path / "missing"), "--output", str(tmp_path / "o")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["reference", "--reference", str(tmp_path / "empty"), "--output", str(tmp_path / "o")]) == 2
    assert "indomain_all_v2.csv is missing; ood_all_v2.csv is missing" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_reference_without_tables_uses_the_paper_figures_and_says_what_they_cover(tmp_path, monkeypatch, capsys):
    out = tmp_path / "paper"
    proc = prism_run("reference", "--output", str(out), env={"PRISM_CACHE_DIR": str(tmp_path / "cache")},
                     check=True)
    assert "PRISM paper appendix" in proc.stdout and "H-Optimus-0 and MIDNIGHT" in proc.stdout
    table = pd.read_csv(out / "paper_cri_100.csv", index_col=0)
    assert list(table.index) == list(rd.PAPER_MODELS)
    assert not (out / "cri_variants_100.csv").exists()  # published names only from per-run tables
    from prism_plugin.cli import main

    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["reference", "--fraction", "0.01", "--output", str(out)]) == 2
    assert "only at --fraction 1.0" in capsys.readouterr().err


# --------------------------------------------------------------------------- the shipped paper figures
def test_paper_figures_match_the_published_per_run_tables(shared_ref):
    """Every number typed in from the paper equals the seed mean of the per-run table, to print precision."""
    ind = pd.read_csv(shared_ref / "indomain_all_v2.csv")
    ood = pd.read_csv(shared_ref / "ood_all_v2.csv")
    checked = 0
    for number, table in rd.PAPER_TABLES.items():
        df = table.frame()
        assert list(df.index) == list(rd.PAPER_MODELS)
        transfer = number in rd.TRANSFER_TABLES
        src = ood if transfer else ind
        key = "pair" if transfer else "dataset"
        rows = src.loc[np.isclose(src["fraction"], table.fraction)]
        means = rows.groupby(["model", key])[table.quantity].mean()
        decimals = 2 if number == 14 else 3
        for model in df.index:
            for col in df.columns:
                truth = means.loc[(model, col)]
                if number == 14 and col in rd.BINARY_DATASETS:
                    truth = truth / 2.0  # printed on the natural sigmoid scale
                if number == 13 and col not in rd.BINARY_DATASETS:
                    assert np.isnan(truth)  # no per-run multiclass Brier
                    continue
                off = abs(df.at[model, col] - truth) > 0.5 * 10 ** -decimals + 1e-9
                assert off == ((number, model, col) in rd.KNOWN_DISCREPANCIES), (number, model, col, truth)
                checked += 1
    assert checked == 7 * 36 - 24 + 2 * 24  # Tables 9-15 less the multiclass Brier cells, Tables 16-17


def test_paper_cri_is_close_to_the_published_cri_and_to_the_stated_figures(shared_ref):
    from prism_plugin.summaries import cri

    tables = rd.paper_run_tables()
    got = cri.cri_variants(tables.indomain, cri.ood_stability(tables.indomain, tables.transfer), 1.0)
    published = pd.read_csv(shared_ref / "cri_variants_100.csv", index_col=0).loc[list(rd.PAPER_MODELS)]
    diff = (got - published[got.columns]).abs().to_numpy().max()
    assert diff < 1e-3
    # Figure 7 caption: VIRCHOW2 leads, 0.64 at 100 % labels
    assert round(got.at["VIRCHOW2", "cri_multiplicative"], 2) == rd.STATED_CRI[("VIRCHOW2", 1.0)]
    assert got["cri_multiplicative"].idxmax() == "VIRCHOW2"
    # the stated figures against the published per-run result (all 8 models)
    for frac, stem in ((0.01, "cri_variants_1"), (1.0, "cri_variants_100")):
        pub = pd.read_csv(shared_ref / f"{stem}.csv", index_col=0)["cri_multiplicative"]
        assert round(pub["VIRCHOW2"], 2) == rd.STATED_CRI[("VIRCHOW2", frac)]
        assert round(pub.max() - pub.min(), 2) == rd.STATED_CRI_SPREAD[frac]


def test_published_manifest_matches_the_shared_files(shared_ref):
    assert refcmd.verify_files(shared_ref) == []
    for name, (size, sha) in rd.PUBLISHED_FILES.items():
        assert (shared_ref / name).stat().st_size == size
        assert hashlib.sha256((shared_ref / name).read_bytes()).hexdigest() == sha


# --------------------------------------------------------------------------- pull
def test_reference_pull_offline_says_so_at_once(tmp_path, monkeypatch, capsys, network_attempts):
    env = {"PRISM_CACHE_DIR": str(tmp_path / "cache")}
    proc = prism_run("reference", "pull", env=env)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 0:  # a machine with network: the real download was verified
        assert refcmd.verify_files(tmp_path / "cache" / "reference" / "prism-benchmark-502be72" / "results_v2") == []
        return
    assert proc.returncode == 2 and len(lines) == 1
    assert "reference pull: offline" in lines[0] and "--reference DIR" in lines[0]
    # forced offline (and an unreachable mirror) take the same path, without touching the network
    from prism_plugin.cli import main

    monkeypatch.setenv("PRISM_CACHE_DIR", env["PRISM_CACHE_DIR"])
    for key, value, most in (("PRISM_OFFLINE", "1", 0), ("PRISM_REFERENCE_URL", "http://127.0.0.1:9/results_v2", 1)):
        network_attempts.clear()
        with monkeypatch.context() as m:
            m.setenv(key, value)
            assert main(["reference", "pull"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "offline" in err and "--reference DIR" in err
        # at once: forced offline touches no network, an unreachable mirror is tried once, never retried
        assert len([a for kind, a in network_attempts if kind == "connect"]) <= most, network_attempts
    assert not (tmp_path / "cache" / "reference").exists() or not any((tmp_path / "cache" / "reference").rglob("*.csv"))


@pytest.fixture
def mirror(shared_ref, tmp_path):
    """A local HTTP server with the results_v2 files (one copy can be corrupted)."""
    root = tmp_path / "mirror" / "results_v2"
    shutil.copytree(shared_ref, root)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_reference_pull_verifies_every_file_and_installs_atomically(mirror, tmp_path, monkeypatch, capsys):
    root, url = mirror
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    dest = refcmd.pulled_dir()
    # a corrupted file: the pull fails naming it and installs nothing
    (root / "ood_all_v2.csv").write_bytes((root / "ood_all_v2.csv").read_bytes().replace(b"CLIP", b"CLAP", 1))
    with pytest.raises(PrismError, match=r"ood_all_v2\.csv: 142870 bytes / SHA-256 [0-9a-f]{12}\.\.\., expected"):
        refcmd.pull(base_url=url)
    assert not dest.exists() or not any(dest.iterdir())
    shutil.copy(REFERENCE / "ood_all_v2.csv", root / "ood_all_v2.csv")
    assert refcmd.pull(base_url=url) == dest
    assert refcmd.verify_files(dest) == []
    assert "sizes and SHA-256 verified" in capsys.readouterr().out
    # the pulled copy is now the default reference
    ref = refcmd.resolve_reference(None)
    assert ref.kind == "pulled" and len(ref.tables.indomain) == 864
    # tampering with the pulled copy is caught before use
    with open(dest / "cri_components.csv", "a") as fh:
        fh.write("\n")
    with pytest.raises(PrismError, match="cri_components.csv has 1046 bytes, expected 1045"):
        refcmd.resolve_reference(None)


# --------------------------------------------------------------------------- summaries engine
def test_engine_runs_selected_plugins_and_writes_atomically(shared_ref, tmp_path):
    from prism_plugin.plugins import PluginHost
    from prism_plugin.summaries.engine import run_summaries, write_summaries

    host = PluginHost()
    tables = refcmd.read_reference_dir(shared_ref)
    out = run_summaries(tables, {}, host, only=[refcmd.cri_plugin_name(host)])
    assert {"cri_variants_100", "cri_components_per_pair"} <= set(out.tables)
    written = write_summaries(tmp_path, out)
    assert tmp_path / "findings.json" in written
    per_pair = pd.read_csv(tmp_path / "cri_components_per_pair.csv")
    assert per_pair.columns[0] == "model"  # RangeIndex tables are written without an index
    variants = pd.read_csv(tmp_path / "cri_variants_100.csv")
    assert variants.columns[0] == "model"  # named index written as the first column
    with pytest.raises(PrismError, match="not registered or disabled"):
        run_summaries(tables, {}, host, only=["no_such_plugin"])

    class Clash:
        @staticmethod
        def summarize(tables, options):
            return SummaryOutput(tables={"cri_components": pd.DataFrame()})

    from prism_plugin.hookspecs import hookimpl

    Clash.summarize = hookimpl(Clash.summarize)
    host2 = PluginHost(extra_plugins=[Clash])
    with pytest.raises(PrismError, match="'cri_components' produced by both"):
        run_summaries(tables, {}, host2, only=[refcmd.cri_plugin_name(host2), "Clash"])
