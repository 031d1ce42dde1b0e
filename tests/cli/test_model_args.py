"""``--model-args`` per model: after its ``--model``, or in brackets; the one-model form anywhere."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from prism_plugin.cli import main_parser
from prism_plugin.commands.model_args import model_specs, split_model
from prism_plugin.errors import PrismError
from tests.conftest import run_main


def specs(*argv: str):
    args = main_parser().parse_args(["--task", "t", *argv])
    return model_specs(args.model_order)


def test_each_model_args_binds_to_the_model_before_it():
    assert specs("--model", "A", "--model-args", "k=v", "--model", "B", "--model-args", "k=w,x=1") == [
        ("A", {"k": "v"}), ("B", {"k": "w", "x": "1"})]
    assert specs("--model", "A", "--model", "B", "--model-args", "k=w") == [("A", {}), ("B", {"k": "w"})]
    assert specs("--model", "A[k=v,k2=w]", "--model", "B") == [("A", {"k": "v", "k2": "w"}), ("B", {})]
    # brackets and a following --model-args combine, the later value winning
    assert specs("--model", "A[k=v]", "--model-args", "k=z,j=1", "--model", "B[]") == [
        ("A", {"k": "z", "j": "1"}), ("B", {})]
    assert specs("--model", "timm:hf-hub:org/repo[pretrained=false]") == [("timm:hf-hub:org/repo",
                                                                          {"pretrained": "false"})]


def test_one_model_takes_every_model_args_wherever_it_stands():
    assert specs("--model-args", "a=1", "--model", "A", "--model-args", "b=2", "--model-args", "a=3") == [
        ("A", {"a": "3", "b": "2"})]
    assert specs("--model", "A", "--model-args", "a=1,b=2") == [("A", {"a": "1", "b": "2"})]
    assert specs("--model", "A") == [("A", {})]


def test_ambiguous_and_malformed_forms_are_errors():
    with pytest.raises(PrismError, match=r"before any --model, but 2 models.*--model A --model-args k=v --model B"):
        specs("--model-args", "k=v", "--model", "A", "--model", "B")
    for bad in ("A[k=v", "A]", "[k=v]", "A[k=v][j=1]"):
        with pytest.raises(PrismError, match="NAME\\[key=value"):
            split_model(bad)
    with pytest.raises(PrismError, match="key=value"):
        split_model("A[pooling]")


def test_ambiguous_model_args_is_one_line_from_run_main():
    proc = run_main("--task", "prism_demo", "--model-args", "pooling=cls", "--model", "demo_vit",
                    "--model", "demo_vit")
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith("prism-run: error: --model-args pooling=cls comes before any --model")
    assert "--model 'A[k=v]'" in err[0]


def test_two_runs_of_one_adapter_with_their_own_args(tmp_path):
    out = tmp_path / "out"
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--model-args", "pooling=cls,img_size=32",
                    "--model", "demo_vit[pooling=mean]", "--model-args", "img_size=48",
                    "--limit", "8", "--set", "label_fractions=[1.0]", "--set", "seeds=[42]",
                    "--output", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet", "--no-report")
    assert proc.returncode == 0, proc.stderr
    dirs = sorted(p.parent for p in out.glob("prism_demo/*/summary.json"))
    assert [d.name for d in dirs] == ["DemoViT-Tiny-img_size-32-pooling-cls", "DemoViT-Tiny-img_size-48-pooling-mean"]
    got = [json.loads((d / "summary.json").read_text())["adapter"] for d in dirs]
    assert [(a["pooling"], a["img_size"]) for a in got] == [("cls", 32), ("mean", 48)]
    assert got[0]["preprocessing"]["crop"] == 32 and got[1]["preprocessing"]["crop"] == 48
    assert all((d / "runs.csv").is_file() for d in dirs)
    # each option set is its own `model` in runs.csv, so compare / audit / report never merge the two
    assert [pd.read_csv(d / "runs.csv").model.unique().tolist() for d in dirs] == [[d.name] for d in dirs]
    assert not list(out.rglob("report.html"))  # --no-report: neither report.html nor report.md
    assert not list(out.rglob("report.md"))
