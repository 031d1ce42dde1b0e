"""Reduced-depth, random-weight instances of the eight adapters embed real decoded PNG tiles.

Each runs the adapter's real preprocessing (both profiles) and pooling through
the real extraction loop and cache, returns the declared width, L2-normalised;
the recipes are checked against each library's own outputs (timm ``model(x)``,
the CLIP ``image_embeds``, CONCH's ``encode_image``, the model cards' formulas).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from .adapters_support import EIGHT, adapter_class, extract, needs_backend

CPU = torch.device("cpu")


def reduced(name: str, **kwargs):
    needs_backend(name)
    adapter = adapter_class(name)(pretrained=False, batch_size=4, **kwargs)
    adapter.arch_overrides = {"depth": 1}
    return adapter


def preprocessed(adapter, tiles) -> torch.Tensor:
    """The batch the pipeline should have built: decode with PIL, the profile's transform."""
    from PIL import Image

    transform = adapter.preprocessing.transform()
    out = []
    for path in tiles:
        with Image.open(path) as im:
            out.append(transform(im.convert("RGB")))
    return torch.stack(out)


@pytest.mark.parametrize("name", list(EIGHT))
def test_reduced_model_embeds_png_tiles(name, tiles, tmp_path):
    adapter = reduced(name)
    X = extract(adapter, tiles, tmp_path)
    assert X.shape == (len(tiles), adapter.paper_dim)
    assert np.isfinite(X).all()
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    # the same network, unnormalised, on batches preprocessed here: the pipeline changed nothing else
    raw = adapter_class(name)(pretrained=False, normalize=False)
    raw._model, raw._built = adapter._model, True
    batch = preprocessed(adapter, tiles)
    assert tuple(batch.shape[1:]) == (3, adapter.preprocessing.crop, adapter.preprocessing.crop)
    with torch.inference_mode():
        expected = raw.forward(batch).numpy()
    assert not np.allclose(np.linalg.norm(expected, axis=1), 1.0)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(X, expected, atol=2e-5)
    # the other profile: its own geometry and statistics, same width, another cache key
    other = reduced(name, profile="model_card")
    other._model, other._built = adapter._model, True
    card_batch = preprocessed(other, tiles[:2])
    with torch.inference_mode():
        assert tuple(other.forward(card_batch).shape) == (2, adapter.paper_dim)
    assert other.fingerprint() != adapter.fingerprint()


def recipes(name):
    adapter = reduced(name)
    adapter.build(CPU)
    outputs = {}
    crop = adapter.preprocessing.crop
    x = torch.randn(3, 3, crop, crop, generator=torch.Generator().manual_seed(0))
    for pooling in adapter.poolings:
        other = adapter_class(name)(pretrained=False, pooling=pooling)
        other._model, other._built = adapter._model, True
        with torch.inference_mode():
            outputs[pooling] = other.forward(x)
        assert tuple(outputs[pooling].shape) == (3, other.embed_dim)
    return adapter._model, x, outputs


@pytest.mark.parametrize("name", ["uni", "gigapath", "h_optimus_0"])
def test_timm_class_token_is_timms_own_output(name):
    model, x, out = recipes(name)
    with torch.inference_mode():
        torch.testing.assert_close(out["cls"], model(x))  # what the PRISM notebooks called
        tokens = model.forward_features(x)
    regs = {"uni": 0, "gigapath": 0, "h_optimus_0": 4}[name]
    torch.testing.assert_close(out["mean"], tokens[:, 1 + regs:].mean(1))
    torch.testing.assert_close(out["cls+mean"], torch.cat([out["cls"], out["mean"]], 1))


def test_virchow2_card_recipe():
    model, x, out = recipes("virchow2")
    with torch.inference_mode():
        tokens = model(x)  # global_pool="": all tokens, [CLS, 4 registers, 256 patches]
    assert tokens.shape[1] == 1 + 4 + 256
    card = torch.cat([tokens[:, 0], tokens[:, 5:].mean(dim=1)], dim=-1)
    torch.testing.assert_close(out["cls+mean"], card)
    torch.testing.assert_close(out["cls"], tokens[:, 0])


@pytest.mark.parametrize("name", ["clip", "plip"])
def test_clip_pooler_and_projection(name):
    model, x, out = recipes(name)
    with torch.inference_mode():
        full = model(pixel_values=x)
        hidden = model.vision_model(pixel_values=x).last_hidden_state
    torch.testing.assert_close(out["projection"], full.image_embeds)
    torch.testing.assert_close(out["pooler"], model.vision_model.post_layernorm(hidden[:, 0]))


def test_midnight_pooler_and_card_recipe():
    model, x, out = recipes("midnight")
    with torch.inference_mode():
        hidden = model(pixel_values=x).last_hidden_state
    torch.testing.assert_close(out["pooler"], hidden[:, 0])
    torch.testing.assert_close(out["cls+mean"], torch.cat([hidden[:, 0], hidden[:, 1:].mean(1)], -1))


def test_conch_matches_its_own_encode_image():
    needs_backend("conch")
    from conch.open_clip_custom.coca_model import CoCa

    model, x, out = recipes("conch")
    cfg = adapter_class("conch").model_config()
    vision = {**cfg["vision_cfg"], "layers": 1}
    text = {**cfg["text_cfg"], "layers": 1}
    multimodal = {**cfg["multimodal_cfg"], "layers": 1}
    coca = CoCa(embed_dim=cfg["embed_dim"], embed_dim_caption=cfg["embed_dim_caption"], vision_cfg=vision,
                text_cfg=text, multimodal_cfg=multimodal).eval()
    coca.visual.load_state_dict(model.state_dict())
    with torch.inference_mode():
        no_proj = coca.encode_image(x, proj_contrast=False, normalize=True)  # the PRISM call
        proj = coca.encode_image(x, proj_contrast=True, normalize=False)
    torch.testing.assert_close(torch.nn.functional.normalize(out["pooled"], dim=-1), no_proj)
    torch.testing.assert_close(out["projected"], proj)
