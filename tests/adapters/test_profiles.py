"""Preprocessing profiles equal the PRISM paper's tables, and each model's own transform.

``prism_main`` is checked against the paper's Table 4 and the PRISM notebooks'
torchvision transform; ``model_card`` against Table 6 and the Camelyon17
``preprocessing_table.csv``, and against the transform each model's own library
builds (transformers' CLIP image processor, conch-fork's loader, timm's
``create_transform``, torchvision v2 for Midnight's card).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs
import torch
from PIL import Image
from torchvision import transforms as T

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD

from .adapters_support import EIGHT, adapter_class, table_block

BY_DISPLAY = {v.upper(): k for k, v in EIGHT.items()}


def profile(name, which):
    return adapter_class(name).profiles[which]


def stats_kind(pre) -> str:
    if np.allclose(pre.mean, IMAGENET_MEAN) and np.allclose(pre.std, IMAGENET_STD):
        return "ImageNet"
    if np.allclose(pre.mean, CLIP_MEAN) and np.allclose(pre.std, CLIP_STD):
        return "CLIP statistics"
    return "model-specific"


def test_prism_main_is_table_4(paper_text):
    rows = table_block(paper_text, "Table 4:")
    assert rows[0] == ["Model(s)", "Resize", "Crop", "Normalization"]
    seen = set()
    for row in rows[1:]:
        for display in (s.strip() for s in row[0].split(",")):
            key = BY_DISPLAY[display.upper()]
            pre = profile(key, "prism_main")
            seen.add(key)
            if len(row) == 2:  # "transform supplied by the model loader"
                assert key == "conch" and "loader" in row[1]
                assert pre == profile("conch", "model_card")
                continue
            assert (pre.resize, pre.crop) == (int(row[1]), int(row[2])), key
            assert stats_kind(pre) == row[3], key
    assert seen == set(EIGHT)


def test_prism_camelyon17_is_table_6(paper_text):
    rows = table_block(paper_text, "Table 6:")
    assert rows[0] == ["Model", "Resize", "Normalization", "Dim"]
    for row in rows[1:]:
        for display in (s.strip() for s in row[0].split(",")):
            key = BY_DISPLAY[display.upper()]
            pre, cls = profile(key, "prism_camelyon17"), adapter_class(key)
            assert cls.paper_dim == int(row[3])
            if row[1] == "model loader":
                assert key == "conch"
                continue
            assert pre.resize == int(row[1]) and pre.crop == 224, key
            assert stats_kind(pre) == row[2], key


def test_prism_camelyon17_is_camelyon17_table(preprocessing_csv):
    for rec in preprocessing_csv.to_dict("records"):
        key = BY_DISPLAY[rec["model"].upper()]
        pre, cls = profile(key, "prism_camelyon17"), adapter_class(key)
        assert pre.resize == int(rec["resize"]) and (pre.crop, pre.crop) == eval(rec["crop"]), key
        np.testing.assert_allclose(pre.mean, eval(rec["mean"]), atol=6e-5)
        np.testing.assert_allclose(pre.std, eval(rec["std"]), atol=6e-5)
        # the table's dims are stale for CLIP/PLIP/MIDNIGHT (PROTOCOL §1.4): they are named recipes here
        dim = int(rec["dim"])
        if key in ("clip", "plip", "midnight"):
            assert dim != cls.paper_dim and dim in cls.poolings.values(), key
        else:
            assert dim == cls.paper_dim, key


@pytest.fixture(scope="module")
def image():
    rng = np.random.default_rng(3)
    arr = rng.integers(0, 256, size=(70, 80, 3), dtype=np.uint8)
    return Image.fromarray(arr).resize((310, 270), Image.BILINEAR)


@pytest.mark.parametrize("name", [k for k in EIGHT if k != "conch"])
def test_prism_main_is_the_notebooks_torchvision_transform(name, image):
    pre = profile(name, "prism_main")
    notebook = T.Compose([T.Resize(pre.resize), T.CenterCrop(pre.crop), T.ToTensor(), T.Normalize(pre.mean, pre.std)])
    torch.testing.assert_close(pre.transform()(image), notebook(image), rtol=0, atol=0)


def test_clip_card_is_the_clip_image_processor(image):
    transformers = needs("transformers")
    ours = profile("clip", "model_card").transform()(image)
    theirs = transformers.CLIPImageProcessor()(images=image, return_tensors="pt")["pixel_values"][0]
    assert ours.shape == theirs.shape
    assert float((ours - theirs).abs().mean()) < 1e-3 and float((ours - theirs).abs().max()) < 0.05


def test_conch_is_its_loader_transform(image):
    needs("conch.open_clip_custom")
    from conch.open_clip_custom.transform import image_transform

    loader = image_transform(448, mean=CLIP_MEAN, std=CLIP_STD)
    for which in ("prism_main", "model_card"):
        torch.testing.assert_close(profile("conch", which).transform()(image), loader(image), rtol=0, atol=0)


@pytest.mark.parametrize("name,crop_pct", [("uni", 1.0), ("virchow2", 1.0), ("gigapath", 1.0), ("h_optimus_0", 0.875)])
def test_timm_card_profiles_are_timms_transform(name, crop_pct, image):
    from timm.data import create_transform

    from .test_recipes import published

    pre = profile(name, "model_card")
    # the filter is the published one (docs/recipes.md, with its source), not a value restated here
    theirs = create_transform(input_size=(3, 224, 224), interpolation=published()[(name, "model_card")]["filter"],
                              crop_pct=crop_pct, crop_mode="center", mean=pre.mean, std=pre.std)
    torch.testing.assert_close(pre.transform()(image), theirs(image), rtol=0, atol=0)


def test_midnight_card_is_its_v2_transform(image):
    from torchvision.transforms import v2

    card = v2.Compose([v2.Resize(224), v2.CenterCrop(224), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))])
    torch.testing.assert_close(profile("midnight", "model_card").transform()(image), card(image), atol=1e-6, rtol=0)
