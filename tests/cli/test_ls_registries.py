"""``prism-run ls [REGISTRY]``: every registry lists its entries with their origin."""

from __future__ import annotations

import subprocess
import sys

from prism_plugin.cli import main
from prism_plugin.commands.ls import LISTINGS
from prism_plugin.plugins import BUILTIN_ORIGIN
from tests.conftest import prism_run

#: registry -> (header words, entries that must be listed)
EXPECTED = {
    "adapters": (("adapter", "dim", "licence", "gated", "aliases", "description", "from"),
                 ("uni", "demo_vit", "timm:<name>")),
    "heads": (("head", "seed_invariant", "linear", "from"), ("logistic", "knn1", "mlp")),
    "sources": (("source", "class", "from"), ("imagefolder", "demo", "records", "camelyon17")),
    "adaptation": (("adaptation", "role", "default", "from"), ()),
    "metrics": (("metric", "direction", "aggregation", "used in", "from"), ("auroc", "ece_fixed", "nll")),
    "tables": (("table", "file", "required columns", "from"), ("indomain", "transfer")),
    "task-keys": (("task key", "kinds", "from"), ("adaptation", "priors", "sweep")),
    "checks": (("check", "description", "function", "from"), ("convergence", "temperature_bounds", "collapse")),
    "perturbations": (("perturbation", "parameters", "function", "from"), ("hed_jitter", "blur", "jpeg")),
    "commands": (("command", "help", "module", "from"), ("ls", "validate", "report", "compare", "cache")),
    "tasks": (("task", "description", "file"), ("prism_demo",)),
    "groups": (("group", "members", "file"), ("prism_main",)),
    "plugins": (("plugin", "hooks", "from"), ("calibration", "builtin_commands", "builtin_adapters")),
}


def _rows(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return {line.split()[0]: line for line in lines[1:]}


def test_every_registry_lists_entries_with_origins(capsys):
    assert set(EXPECTED) == set(LISTINGS)
    outs = {}
    for what in EXPECTED:  # in-process (the console script's own main); subprocesses below
        assert main(["ls", what]) == 0, what
        cap = capsys.readouterr()
        assert not cap.err.strip(), (what, cap.err)
        outs[what] = cap.out
    for what, out in outs.items():
        header = out.splitlines()[0]
        words, names = EXPECTED[what]
        assert all(w in header for w in words), (what, header)
        rows = _rows(out)
        for name in names:
            assert name in rows, (what, name, out)
        if what not in ("tasks", "groups"):  # registries and plugins say where each entry comes from
            assert rows and all(BUILTIN_ORIGIN in line for line in rows.values()), (what, out)
    heads = _rows(outs["heads"])
    assert heads["logistic"].split()[1:3] == ["yes", "yes"]  # seed-invariant, linear
    assert heads["knn1"].split()[1:3] == ["no", "no"]
    metrics = _rows(outs["metrics"])
    assert metrics["auroc"].split()[1:3] == ["higher", "mean"] and "compare" in metrics["auroc"]
    assert metrics["nll"].split()[1] == "lower"
    tables = _rows(outs["tables"])
    assert "indomain_all_v2.csv" in tables["indomain"] and "auroc" in tables["indomain"]
    assert "indomain, transfer" in _rows(outs["task-keys"])["sweep"]
    assert "prism_plugin.commands.ls" in _rows(outs["commands"])["ls"]
    assert "prism_plugin.data" in _rows(outs["sources"])["demo"]


def test_ls_without_argument_lists_the_registries_and_unknown_ones_are_one_line():
    proc = prism_run("ls", check=True)
    rows = _rows(proc.stdout)
    assert set(LISTINGS) <= set(rows), proc.stdout
    assert int(rows["commands"].split()[1]) >= 10 and int(rows["heads"].split()[1]) >= 7
    bad = prism_run("ls", "adaptr")
    err = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(err) == 1 and "unknown registry 'adaptr'" in err[0] and "'adapters'" in err[0]


def test_ls_reads_disable_before_building_the_host():
    proc = prism_run("ls", "plugins", "--disable=calibration", check=True)
    rows = _rows(proc.stdout)
    assert "calibration" not in rows and "collapse" in rows, proc.stdout
    assert "disabled: calibration" in proc.stdout
    proc = prism_run("ls", "commands", "--disable", "builtin_commands")
    # the core catalogues (here: the built-in subcommands) cannot be switched off
    assert proc.returncode == 2 and "--disable builtin_commands: this plugin holds a core catalogue" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_listing_adapters_imports_no_deep_learning_library():
    code = ("import sys\nfrom prism_plugin.cli import main\n"
            "assert main(['ls', 'adapters']) == 0\n"
            "heavy = [m for m in ('torch', 'timm', 'transformers', 'open_clip') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
