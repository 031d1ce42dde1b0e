"""``--model eva:<registry name>``: backbones built from eva's own registry (kaiko-eva), offline."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import needs, run_main

TINY = "universal/vit_tiny_patch16_224_random"  # the smallest entry of eva's registry (ViT-Tiny, random weights)


def test_ls_adapters_lists_the_family():
    res = run_main("ls", "adapters")
    assert res.returncode == 0 and "eva:<name>" in res.stdout


def test_without_kaiko_eva_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "eva.vision.models.networks.backbones", None)  # import fails as if absent
    res = run_main("--task", "prism_demo", "--model", f"eva:{TINY}", "--quiet", "--no-report")
    assert res.returncode == 2 and "pip install 'prism-plugin[eva]'" in res.stderr, res.stderr


@pytest.fixture(scope="module")
def eva_registry():
    needs("eva")
    return needs("eva.vision.models.networks.backbones").backbone_registry


def _adapter(name=TINY, **kw):
    from prism_plugin.model_adapters.eva_registry import EvaBackboneAdapter

    return EvaBackboneAdapter(name, **kw)


def test_embeddings_are_eva_own_model(eva_registry):
    """The adapter's vectors are those of eva's ModelFromRegistry built independently with the same seed."""
    import torch
    from eva.vision.models import ModelFromRegistry

    adapter = _adapter(seed=3)
    adapter.build("cpu")
    assert adapter.embed_dim == 192 and not adapter.pretrained
    torch.manual_seed(3)
    reference = ModelFromRegistry(TINY).eval()
    batch = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        np.testing.assert_array_equal(adapter.forward(batch).numpy(), reference(batch).numpy())


def test_preprocessing_is_declared_with_its_source(eva_registry):
    tiny = _adapter()
    assert tiny.preprocessing.mean == (0.5, 0.5, 0.5) and tiny.preprocessing.interpolation == "bilinear"
    assert "ResizeAndCrop" in tiny.config()["preprocessing_source"]
    timm_entry = _adapter("timm/vit_tiny_patch16_224", pretrained="false")
    assert "timm pretrained config" in timm_entry.config()["preprocessing_source"]
    import timm

    cfg = timm.models.get_pretrained_cfg("vit_tiny_patch16_224")
    assert timm_entry.preprocessing.mean == tuple(cfg.mean) and timm_entry.preprocessing.crop == cfg.input_size[-1]
    custom = _adapter(mean="0.485+0.456+0.406", std="0.229+0.224+0.225")
    assert custom.preprocessing.mean == (0.485, 0.456, 0.406) and "mean,std" in custom.config()["preprocessing_source"]


def test_identity_covers_name_args_and_seed(eva_registry):
    base = _adapter().fingerprint()
    assert _adapter().fingerprint() == base
    assert _adapter(seed=1).fingerprint() != base
    assert _adapter(dynamic_img_size="false").fingerprint() != base
    assert _adapter("universal/vit_small_patch16_224_random").fingerprint() != base
    published = _adapter("universal/vit_small_patch16_224_dino")
    assert published.pretrained and published.weights_fingerprint().startswith("eva-published:")
    assert _adapter("timm/vit_tiny_patch16_224", pretrained="false").config()["seed"] == 0


def test_tiny_prism_run_with_an_eva_backbone(eva_registry, tmp_path):
    out = tmp_path / "out"
    res = run_main("--task", "prism_demo", "--model", f"eva:{TINY}", "--limit", "16", "--set",
                   "label_fractions=[1.0]", "--set", "seeds=[42]", "--bootstrap", "0", "--output", str(out),
                   "--no-report", "--quiet", env={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 1 and runs["model"].iloc[0] == "eva-universal-vit_tiny_patch16_224_random"


@pytest.mark.parametrize("args, expected", [
    (("eva:universal/vit_small_patch16_224_dino",), "its published weights cannot be fetched offline"),
    (("eva:universal/vit_small_patch16_224_dino", "--model-args", "pretrained=false"), "always loads its published"),
    (("eva:pathology/kaiko_vitz",), "did you mean 'pathology/kaiko_vits8'"),
    ((f"eva:{TINY}", "--model-args", "out_indices=1"), "out_indices: not for"),
    ((f"eva:{TINY}", "--model-args", "bogus=1"), "bogus: eva:universal/vit_tiny_patch16_224_random takes"),
])
def test_bad_backbones_give_one_line(eva_registry, tmp_path, args, expected):
    res = run_main("--task", "prism_demo", "--model", *args, "--limit", "8", "--output",
                   str(tmp_path / "o"), "--quiet", "--no-report", env={"HF_HUB_OFFLINE": "1"})
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("prism-run: error:")]
    assert res.returncode == 2 and len(lines) == 1 and expected in lines[0], res.stderr
