"""One labelling rule for models, and ``ls adapters`` facts of adapters registered lazily.

A model given options is labelled by its display name and those options (``DemoViT-Tiny-pooling-mean``), whether it
runs alone or beside another option set; a model given none keeps its display name; ``name=`` is the label itself.
An adapter registered lazily (``"module:Class"`` or a ``prism_plugin.adapters`` entry point) shows what its class
declares, read from its source without importing it (so without torch).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from prism_plugin.commands.model_args import model_label, model_labels
from prism_plugin.errors import PrismError
from tests.conftest import REPO, run_main

FAST = ("--limit", "8", "--set", "label_fractions=[1.0]", "--set", "seeds=[42]", "--quiet", "--no-report",
        "--num-workers", "0")


def test_the_label_rule_is_the_same_alone_and_beside_other_option_sets():
    assert model_label("DemoViT-Tiny", {}) == "DemoViT-Tiny"
    assert model_label("DemoViT-Tiny", {"pooling": "mean"}) == "DemoViT-Tiny-pooling-mean"
    alone = model_labels(["DemoViT-Tiny"], [("demo_vit", {"pooling": "mean"})])
    beside = model_labels(["DemoViT-Tiny"] * 2, [("demo_vit", {}), ("demo_vit", {"pooling": "mean"})])
    assert alone == ["DemoViT-Tiny-pooling-mean"] and beside == ["DemoViT-Tiny", "DemoViT-Tiny-pooling-mean"]
    # options sorted by key; name= is the label; where the weights or arrays are, and runtime options, never label
    assert model_label("X", {"pooling": "cls", "img_size": "32"}) == "X-img_size-32-pooling-cls"
    assert model_label("MyFM", {"root": "/e/MyFM", "name": "MyFM"}) == "MyFM"
    assert model_label("UNI", {"checkpoint": "/w/uni.bin", "batch_size": "8", "device": "cpu"}) == "UNI"
    # ... unless two models of one command differ only there
    assert model_labels(["UNI", "UNI"], [("uni", {"checkpoint": "/a.bin"}), ("uni", {"checkpoint": "/b.bin"})]) == [
        "UNI-checkpoint-/a.bin", "UNI-checkpoint-/b.bin"]
    # a display name from an adapter never carries a control character into a label
    assert model_label("Evil\x1b[31m", {}) == "Evil\\x1b[31m"


def test_models_that_would_share_a_label_are_refused_in_one_line():
    with pytest.raises(PrismError, match=r"--model demo_vit is given twice with the same --model-args \(pooling=mean\)"):
        model_labels(["D", "D"], [("demo_vit", {"pooling": "mean"}), ("demo_vit", {"pooling": "mean"})])
    with pytest.raises(PrismError, match=r"--model precomputed and --model demo_vit would both be labelled 'D'"):
        model_labels(["D", "D"], [("precomputed", {"name": "D"}), ("demo_vit", {})])


def _labels(out: Path) -> dict[str, list[str]]:
    return {str(p.relative_to(out)): pd.read_csv(p)["model"].unique().tolist() for p in sorted(out.rglob("runs.csv"))}


def test_a_model_with_options_has_one_label_alone_and_beside_another(tmp_path):
    cache = str(tmp_path / "cache")
    alone, beside, plain = tmp_path / "alone", tmp_path / "beside", tmp_path / "plain"
    run_main("--task", "prism_demo", "--model", "demo_vit[pooling=mean]", "--output", str(alone),
             "--cache-dir", cache, *FAST, check=True)
    run_main("--task", "prism_demo", "--model", "demo_vit", "--model", "demo_vit[pooling=mean]",
             "--output", str(beside), "--cache-dir", cache, *FAST, check=True)
    run_main("--task", "prism_demo", "--model", "demo_vit", "--output", str(plain), "--cache-dir", cache, *FAST,
             check=True)
    assert _labels(alone) == {"runs.csv": ["DemoViT-Tiny-pooling-mean"]}
    assert _labels(beside) == {"prism_demo/DemoViT-Tiny/runs.csv": ["DemoViT-Tiny"],
                               "prism_demo/DemoViT-Tiny-pooling-mean/runs.csv": ["DemoViT-Tiny-pooling-mean"]}
    # the same label, the same table: byte for byte, alone or beside; a model without options keeps its display name
    assert (alone / "runs.csv").read_bytes() == (beside / "prism_demo/DemoViT-Tiny-pooling-mean/runs.csv").read_bytes()
    assert (plain / "runs.csv").read_bytes() == (beside / "prism_demo/DemoViT-Tiny/runs.csv").read_bytes()
    assert _labels(plain) == {"runs.csv": ["DemoViT-Tiny"]}


# --------------------------------------------------------------------------- ls adapters: lazy registrations
HEAVY = '''import torch  # noqa: F401  (a real adapter module imports its deep-learning library at the top)

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, Adapter, Preprocessing

SIDE = 112


class _Base(Adapter):
    licence = "CC-BY-NC-4.0"
    preprocessing = Preprocessing(resize=SIDE + 16, crop=SIDE, mean=CLIP_MEAN, std=CLIP_STD, interpolation="bilinear")


class Heavy(_Base):
    display_name = "HeavyNet"
    embed_dim: int = 3 * 256
    pretraining_data = ("TCGA", "GTEx")


class Computed(Adapter):
    embed_dim = int("7")  # known only at run time
    licence = "MIT"
'''

PLUGIN = '''from prism_plugin.hookspecs import hookimpl


@hookimpl
def register_adapters(register):
    register("lazy_heavy", "lazyheavy.models:Heavy", description="registered lazily")
    register("lazy_computed", "lazyheavy.models:Computed", description="registered lazily")
'''


def _ls(code: str, env: dict) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


LS_CODE = ("import sys\nfrom prism_plugin.cli import main\nassert main(['ls', 'adapters']) == 0\n"
           "heavy = [m for m in ('torch', 'timm', {mods}) if m in sys.modules]\nassert not heavy, heavy\n")


def _row(out: str, name: str) -> dict[str, str]:
    from tests.adapters.test_ls_adapters import HEADER, _cell, _table

    lines, rows = _table(out)
    return {c: _cell(lines, rows[name], c) for c in HEADER[1:6]}


def test_ls_adapters_reads_a_lazy_module_class_registration_without_importing_it(tmp_path):
    from tests.conftest import pip_install_target

    pkg = tmp_path / "lazyheavy-pkg"
    (pkg / "src" / "lazyheavy").mkdir(parents=True)
    (pkg / "src" / "lazyheavy" / "__init__.py").write_text('raise RuntimeError("imported by ls adapters")\n')
    (pkg / "src" / "lazyheavy" / "models.py").write_text(HEAVY)
    (pkg / "src" / "lazyheavy_plugin.py").write_text(PLUGIN)
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "lazyheavy-test"\nversion = "0.0.1"\n\n'
        '[project.entry-points.prism_plugin]\nlazyheavy = "lazyheavy_plugin"\n\n'
        '[tool.setuptools]\npackage-dir = {"" = "src"}\npackages = ["lazyheavy"]\npy-modules = ["lazyheavy_plugin"]\n')
    env = pip_install_target(pkg, tmp_path / "install")
    proc = _ls(LS_CODE.format(mods="'lazyheavy', 'lazyheavy.models'"), {"PYTHONPATH": env["PYTHONPATH"]})
    assert proc.returncode == 0, proc.stderr
    assert _row(proc.stdout, "lazy_heavy") == {"dim": "768", "input": "112",
                                               "resize/crop interp mean-std": "128/112 bilinear clip",
                                               "licence": "CC-BY-NC-4.0", "pretrained on": "TCGA+GTEx"}
    computed = _row(proc.stdout, "lazy_computed")  # computed at run time: not known without importing
    assert computed["dim"] == "at build" and computed["licence"] == "MIT"


def test_ls_adapters_reads_an_entry_point_adapter_class_without_importing_it(install_once):
    env = install_once(REPO / "tests" / "foundation" / "thirdparty_pkg")  # the session's (test_end_to_end's too)
    proc = _ls(LS_CODE.format(mods="'prism_thirdparty.adapter'"), {"PYTHONPATH": env["PYTHONPATH"]})
    assert proc.returncode == 0, proc.stderr
    assert _row(proc.stdout, "thirdparty_colour") == {
        "dim": "32", "input": "64", "resize/crop interp mean-std": "64/64 bicubic mean(0.5,0.5,0.5)/std(0.25,0.25,0.25)",
        "licence": "MIT", "pretrained on": "-"}
