"""Generic families (open_clip:, hf:, timm:) and local checkpoints of the built-in adapters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import needs
import torch

from prism_plugin.errors import PrismError
from prism_plugin.plugins import get_host
from prism_plugin.runner import make_adapter

from .adapters_support import adapter_class, extract, needs_backend

CPU = torch.device("cpu")


# -- local checkpoints of the foundation adapters -------------------------------------------
def reduced(name, **kwargs):
    needs_backend(name)
    adapter = adapter_class(name)(batch_size=4, **kwargs)
    adapter.arch_overrides = {"depth": 1}
    return adapter


@pytest.mark.parametrize("name,fmt", [("h_optimus_0", "safetensors"), ("conch", "bin"), ("clip", "bin"),
                                      ("midnight", "safetensors")])
def test_local_checkpoint_round_trip(name, fmt, tmp_path):
    source = reduced(name, pretrained=False, seed=3)
    source.build(CPU)
    state = {k: v.clone() for k, v in source._model.state_dict().items()}
    # store it the way the hub does: CONCH inside a full CoCa, CLIP beside its text tower
    if name == "conch":
        state = {**{f"visual.{k}": v for k, v in state.items()}, "text.token_embedding.weight": torch.zeros(2, 2),
                 "logit_scale": torch.tensor(1.0)}
    if name == "clip":
        state = {**state, "text_model.embeddings.token_embedding.weight": torch.zeros(2, 2),
                 "logit_scale": torch.tensor(1.0)}
    path = tmp_path / f"weights.{fmt}"
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)
    loaded = reduced(name, checkpoint=str(path))
    loaded.build(CPU)
    crop = loaded.preprocessing.crop
    x = torch.randn(2, 3, crop, crop)
    with torch.inference_mode():
        torch.testing.assert_close(loaded.forward(x), source.forward(x))
    assert loaded.weights_fingerprint().startswith("file:")


def test_checkpoint_of_another_architecture_is_refused(tmp_path):
    other = reduced("uni", pretrained=False)
    other.build(CPU)
    path = tmp_path / "uni.pth"
    torch.save(other._model.state_dict(), path)
    wrong = reduced("gigapath", checkpoint=str(path))
    with pytest.raises(PrismError) as err:
        wrong.build(CPU)
    assert "do not fit" in str(err.value) and str(path) in str(err.value)


# -- open_clip:<arch>[/<pretrained>] ------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_open_clip(tmp_path_factory):
    open_clip = needs("open_clip")
    folder = tmp_path_factory.mktemp("oc-configs")
    (folder / "PrismTiny-B-16.json").write_text(json.dumps({
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "layers": 1, "width": 64, "patch_size": 16},
        "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
    }))
    open_clip.add_model_config(folder)
    return "PrismTiny-B-16"


def test_open_clip_random_and_checkpoint(tiny_open_clip, tiles, tmp_path):
    host = get_host()
    adapter = make_adapter(host, f"open_clip:{tiny_open_clip}", {"seed": "5", "batch_size": "4"})
    assert adapter.embed_dim == 32 and (adapter.preprocessing.resize, adapter.preprocessing.crop) == (64, 64)
    X = extract(adapter, tiles, tmp_path)
    assert X.shape == (len(tiles), 32)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    # the same weights from a local file reproduce the embeddings
    path = tmp_path / "tiny.pt"
    torch.save(adapter._model.state_dict(), path)
    again = make_adapter(host, f"open_clip:{tiny_open_clip}", {"checkpoint": str(path), "batch_size": "4"})
    Y = extract(again, tiles, tmp_path / "second")
    np.testing.assert_allclose(Y, X, atol=1e-5)
    assert again.fingerprint() != adapter.fingerprint()


def test_open_clip_unknown_names(tiny_open_clip):
    host = get_host()
    with pytest.raises(PrismError, match="did you mean"):
        make_adapter(host, "open_clip:ViT-B-3", {})
    with pytest.raises(PrismError, match="no pretrained tag"):
        make_adapter(host, "open_clip:ViT-B-32/not-a-tag", {})


def test_open_clip_pretrained_tag_fails_fast_offline(monkeypatch):
    needs("open_clip")
    import huggingface_hub.constants as constants

    from prism_plugin.embed import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.reset_state()
    adapter = make_adapter(get_host(), "open_clip:ViT-B-32/laion2b_s34b_b79k", {})
    assert adapter.embed_dim == 512 and adapter.preprocessing.interpolation == "bicubic"
    with pytest.raises(PrismError) as err:
        adapter.build(CPU)
    assert "laion2b_s34b_b79k" in str(err.value) and "checkpoint=PATH" in str(err.value)


# -- hf:<repo or folder> --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_hf_folder(tmp_path_factory):
    transformers = needs("transformers")
    folder = tmp_path_factory.mktemp("hf-tiny")
    config = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, patch_size=8,
                                       image_size=48, mlp_ratio=2)
    torch.manual_seed(0)
    transformers.Dinov2Model(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "do_center_crop": True, "crop_size": {"height": 48, "width": 48}, "size": {"shortest_edge": 56},
        "image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.2, 0.2], "resample": 3,
    }))
    return folder


@pytest.mark.parametrize("pooling,dim", [("cls", 32), ("mean", 32), ("cls+mean", 64), ("pooler", 32)])
def test_hf_local_folder(tiny_hf_folder, tiles, tmp_path, pooling, dim):
    adapter = make_adapter(get_host(), f"hf:{tiny_hf_folder}", {"pooling": pooling, "batch_size": "4"})
    pre = adapter.preprocessing
    assert (pre.resize, pre.crop, pre.mean, pre.interpolation) == (56, 48, (0.5, 0.4, 0.3), "bicubic")
    X = extract(adapter, tiles, tmp_path)
    assert X.shape == (len(tiles), dim)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)


def test_hf_hub_repo_fails_fast_offline(monkeypatch):
    needs("transformers")
    import huggingface_hub.constants as constants

    from prism_plugin.embed import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.reset_state()
    with pytest.raises(PrismError) as err:
        make_adapter(get_host(), "hf:owkin/phikon-v2", {})
    assert "owkin/phikon-v2" in str(err.value) and "checkpoint=PATH" in str(err.value)


def test_timm_generic_dtype_option():
    adapter = make_adapter(get_host(), "timm:vit_tiny_patch16_224", {"pretrained": "false", "dtype": "bf16"})
    assert adapter.autocast_dtype is torch.bfloat16 and adapter.config()["dtype"] == "bf16"
    plain = make_adapter(get_host(), "timm:vit_tiny_patch16_224", {"pretrained": "false"})
    assert plain.autocast_dtype is None and "dtype" not in plain.config()
