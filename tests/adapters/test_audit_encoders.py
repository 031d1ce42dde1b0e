"""The hematology audit's encoder catalogue (papers/002 Sec. 4, Table 1, A.14): architectures, dims,
preprocessing, the 224/518 resolution option, checkpoint formats, offline errors, pretraining data
and the ``ls adapters`` listing.

Expected values are the model cards' / hub configs' (see each adapter's docstring). Full-size
networks are built on torch's meta device (no weights allocated); forward passes and checkpoint
round trips use random weights with 1-2 blocks.
"""

from __future__ import annotations

import functools
import inspect

import pytest

from tests.conftest import needs
import torch

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD
from prism_plugin.errors import PrismError
from prism_plugin.model_adapters import builtin_classes

AUDIT_MODELS = builtin_classes("audit")

LUNIT = ((0.70322989, 0.53606487, 0.66096631), (0.21716536, 0.26081574, 0.20723464))
HALF = ((0.5,) * 3, (0.5,) * 3)
IMNET, CLIPS = (IMAGENET_MEAN, IMAGENET_STD), (CLIP_MEAN, CLIP_STD)

# name: (hub id, width, patch, depth, default dim, (resize, crop, interpolation), (mean, std), model-card (resize, crop, interp))
CARDS = {
    "dinobloom_s": ("1aurent/vit_small_patch14_224.dinobloom", 384, 14, 12, 384, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "dinobloom_b": ("1aurent/vit_base_patch14_224.dinobloom", 768, 14, 12, 768, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "dinobloom_l": ("1aurent/vit_large_patch14_224.dinobloom", 1024, 14, 24, 1024, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "dinobloom_g": ("1aurent/vit_giant_patch14_224.dinobloom", 1536, 14, 40, 1536, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "reddino_s": ("Snarcy/RedDino-small", 384, 14, 12, 384, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "reddino_b": ("Snarcy/RedDino-base", 768, 14, 12, 768, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "reddino_l": ("Snarcy/RedDino-large", 1024, 14, 24, 1024, (224, 224, "bicubic"), IMNET, (224, 224, "bilinear")),
    "phikon": ("owkin/phikon", 768, 16, 12, 768, (224, 224, "bilinear"), IMNET, (224, 224, "bilinear")),
    "lunit_dino_s16": ("1aurent/vit_small_patch16_224.lunit_dino", 384, 16, 12, 384, (224, 224, "bicubic"), LUNIT, (224, 224, "bilinear")),
    "lunit_dino_s8": ("1aurent/vit_small_patch8_224.lunit_dino", 384, 8, 12, 384, (224, 224, "bicubic"), LUNIT, (224, 224, "bilinear")),
    "dinov2_s": ("timm/vit_small_patch14_dinov2.lvd142m", 384, 14, 12, 384, (224, 224, "bicubic"), IMNET, (518, 518, "bicubic")),
    "dinov2_b": ("timm/vit_base_patch14_dinov2.lvd142m", 768, 14, 12, 768, (224, 224, "bicubic"), IMNET, (518, 518, "bicubic")),
    "dinov2_l": ("timm/vit_large_patch14_dinov2.lvd142m", 1024, 14, 24, 1024, (224, 224, "bicubic"), IMNET, (518, 518, "bicubic")),
    "eva02_b": ("timm/eva02_base_patch14_224.mim_in22k", 768, 14, 12, 768, (224, 224, "bicubic"), CLIPS, (248, 224, "bicubic")),
    "biomedclip": ("microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224", 768, 16, 12, 768, (224, 224, "bicubic"), CLIPS,
                   (224, 224, "bicubic")),
    "clip_l": ("openai/clip-vit-large-patch14", 1024, 14, 24, 1024, (224, 224, "bicubic"), CLIPS, (224, 224, "bicubic")),
    "imagenet_vit_b": ("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", 768, 16, 12, 768, (224, 224, "bicubic"), HALF,
                       (248, 224, "bicubic")),
    "resnet50": ("timm/resnet50.tv_in1k", 2048, 0, 16, 2048, (224, 224, "bilinear"), IMNET, (256, 224, "bilinear")),
    "resnet18": ("timm/resnet18.tv_in1k", 512, 0, 8, 512, (224, 224, "bilinear"), IMNET, (256, 224, "bilinear")),
}
# one full-size build per distinct network (the DinoBloom/RedDino/DINOv2 sizes share timm architectures)
DISTINCT = ("dinobloom_s", "dinobloom_b", "dinobloom_l", "dinobloom_g", "phikon", "lunit_dino_s16", "lunit_dino_s8",
            "eva02_b", "biomedclip", "clip_l", "imagenet_vit_b", "resnet50", "resnet18")
SHARED_ARCH = {"reddino_s": "dinobloom_s", "reddino_b": "dinobloom_b", "reddino_l": "dinobloom_l",
               "dinov2_s": "dinobloom_s", "dinov2_b": "dinobloom_b", "dinov2_l": "dinobloom_l"}
# parameter counts the cards give (DinoBloom README / hub cards), within 2 %
CARD_PARAMS = {"dinobloom_s": 22e6, "dinobloom_b": 86e6, "dinobloom_l": 304e6, "dinobloom_g": 1136e6,
               "lunit_dino_s8": 21.7e6}


def _needs(name: str) -> None:
    if name in ("phikon", "clip_l"):
        needs("transformers")
    if name == "biomedclip":
        needs("open_clip")


@functools.lru_cache(maxsize=None)
def _meta(name: str):
    adapter = AUDIT_MODELS[name](pretrained=False)
    with torch.device("meta"):
        model = adapter.create_model()
    return adapter, model


def test_catalogue_matches_the_audit_families():
    assert set(AUDIT_MODELS) == set(CARDS)
    for name in AUDIT_MODELS:
        cls = AUDIT_MODELS[name]
        hub, width, patch, depth, dim, geometry, stats, card = CARDS[name]
        assert cls.name == name and cls.hub_id == hub and cls.gated is False
        assert cls.poolings[cls.default_pooling] == dim == cls.paper_dim
        assert cls.arch_facts["embed_dim"] == width and cls.arch_facts["depth"] == depth
        prep = cls.profiles[cls.default_profile]
        assert cls.default_profile == "audit"
        assert (prep.resize, prep.crop, prep.interpolation) == geometry
        assert (tuple(prep.mean), tuple(prep.std)) == stats
        mc = cls.profiles["model_card"]
        assert (mc.resize, mc.crop, mc.interpolation) == card and (tuple(mc.mean), tuple(mc.std)) == stats
        assert cls.licence and cls.architecture and "Unverified offline" in (inspect.getdoc(cls) or ""), name
        adapter = cls(pretrained=False)
        assert adapter.preprocessing == prep and adapter.embed_dim == dim  # the audit's 224 by default


@pytest.mark.parametrize("name", DISTINCT)
def test_full_size_architecture_on_meta(name):
    _needs(name)
    adapter, model = _meta(name)
    assert all(p.is_meta for p in model.parameters())
    summary = adapter.arch_summary(model)
    _hub, width, patch, depth, _dim, _geo, _stats, _card = CARDS[name]
    assert (summary["embed_dim"], summary["patch_size"], summary["depth"]) == (width, patch, depth)
    assert summary.items() >= dict(adapter.arch_facts).items()
    if patch:
        assert summary["img_size"] == 224 and summary["reg_tokens"] == 0
    if name in CARD_PARAMS:
        n = sum(p.numel() for p in model.parameters())
        assert abs(n / CARD_PARAMS[name] - 1) < 0.02, (name, n)
    for other, same in SHARED_ARCH.items():  # the adapters sharing this network declare the same facts
        if same == name:
            assert AUDIT_MODELS[other].arch_facts == adapter.arch_facts
            assert AUDIT_MODELS[other].timm_arch == adapter.timm_arch


@pytest.mark.parametrize("name", DISTINCT)
def test_every_recipe_width_on_meta(name):
    _needs(name)
    cls = AUDIT_MODELS[name]
    for pooling, dim in cls.poolings.items():
        adapter = cls(pretrained=False, pooling=pooling)
        with torch.device("meta"):
            model = adapter.create_model(depth=1)
            out = adapter.pool(model, torch.empty(2, 3, 224, 224))
        assert tuple(out.shape) == (2, dim) == (2, adapter.embed_dim), (name, pooling)


def _tiny(cls, **kwargs):
    adapter = cls(pretrained=False, **kwargs)
    adapter.arch_overrides = {"depth": 1}
    adapter.build(torch.device("cpu"))
    return adapter


def test_dinobloom_resolution_224_default_518_on_request(tmp_path):
    from prism_plugin.model_adapters.dinobloom import DinoBloomS

    a224 = _tiny(DinoBloomS)
    assert a224.resolution == 224 and a224._model.pos_embed.shape[1] == 1 + 16 * 16
    ckpt = tmp_path / "model.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in a224._model.state_dict().items()}, str(ckpt))
    a518 = DinoBloomS(checkpoint=str(ckpt), resolution=518)
    a518.arch_overrides = {"depth": 1}
    assert (a518.preprocessing.resize, a518.preprocessing.crop) == (518, 518)
    assert a518.preprocessing.mean == a224.preprocessing.mean
    assert a518.fingerprint() != DinoBloomS(checkpoint=str(ckpt)).fingerprint()  # the input size is in the key
    a518.build(torch.device("cpu"))
    assert a518._model.pos_embed.shape[1] == 1 + 37 * 37  # resampled at load from the 16 x 16 grid
    torch.testing.assert_close(a518._model.pos_embed[:, 0], a224._model.pos_embed[:, 0])  # class position kept
    with torch.inference_mode():
        out = a518.forward(torch.randn(1, 3, 518, 518))
    assert out.shape == (1, 384) and torch.isfinite(out).all()
    with pytest.raises(PrismError, match="multiple of 14"):
        DinoBloomS(pretrained=False, resolution=500)
    # the model-card profile at 518 keeps its own interpolation
    assert DinoBloomS(pretrained=False, profile="model_card", resolution=518).preprocessing.interpolation == "bilinear"


def _load_on_meta(name: str, state: dict, tmp_path):
    """Adapt and strictly load ``state`` (meta tensors) into the full-size network on meta: names and
    shapes must fit exactly, as a real checkpoint's must."""
    adapter, model = _meta(name)  # the cached network: its own (meta) tensors are assigned back
    adapted = adapter.adapt_state_dict(dict(state))
    adapter.load_weights(model, adapted, tmp_path / "checkpoint", assign=True)
    return adapted, model


def test_dinobloom_zenodo_checkpoint_maps_onto_the_timm_network(tmp_path):
    """DinoBloom's original .pth (DINOv2-repository names under teacher.backbone, with the DINO/iBOT
    heads and the mask token) fits the same network as the hub's timm conversion; so does the
    giant model's fused SwiGLU (mlp.w12 / mlp.w3)."""
    for name, width in (("dinobloom_s", 384), ("dinobloom_g", 1536)):
        own = _meta(name)[1].state_dict()
        teacher = {"backbone." + k.replace(".mlp.fc1.", ".mlp.w12.").replace(".mlp.fc2.", ".mlp.w3."): v
                   for k, v in own.items()}
        teacher["backbone.mask_token"] = torch.empty(1, width, device="meta")
        teacher["dino_head.mlp.0.weight"] = torch.empty(4, width, device="meta")
        adapted, _ = _load_on_meta(name, {"teacher": teacher, "student": {}}, tmp_path)
        assert set(adapted) == set(own)
        assert all(adapted[k] is teacher["backbone." + k.replace(".mlp.fc1.", ".mlp.w12.").replace(".mlp.fc2.", ".mlp.w3.")]
                   for k in own)
    assert any(".mlp.w12." in k for k in teacher)


def test_phikon_loads_transformers4_names(tmp_path):
    needs("transformers")
    from prism_plugin.model_adapters.owkin import legacy_vit_key

    own = _meta("phikon")[1].state_dict()
    # names of owkin/phikon's checkpoint (a transformers-4 ViTModel), literally
    legacy = {"encoder.layer.3.attention.attention.query.weight": "layers.3.attention.q_proj.weight",
              "encoder.layer.3.attention.attention.key.bias": "layers.3.attention.k_proj.bias",
              "encoder.layer.3.attention.attention.value.weight": "layers.3.attention.v_proj.weight",
              "encoder.layer.3.attention.output.dense.weight": "layers.3.attention.o_proj.weight",
              "encoder.layer.3.intermediate.dense.weight": "layers.3.mlp.fc1.weight",
              "encoder.layer.3.output.dense.bias": "layers.3.mlp.fc2.bias",
              "encoder.layer.3.layernorm_before.weight": "layers.3.layernorm_before.weight",
              "embeddings.patch_embeddings.projection.weight": "embeddings.patch_embeddings.projection.weight"}
    assert {k: legacy_vit_key(k) for k in legacy} == legacy
    if "layers.0.attention.q_proj.weight" not in own:  # transformers 4: its own names load as they are
        pytest.skip("transformers 4 layout: checkpoint names are the model's")
    inverse = {}
    for key in own:  # every weight under its transformers-4 name
        old = key
        if key.startswith("layers."):
            old = (key.replace("layers.", "encoder.layer.", 1).replace(".attention.q_proj.", ".attention.attention.query.")
                   .replace(".attention.k_proj.", ".attention.attention.key.")
                   .replace(".attention.v_proj.", ".attention.attention.value.")
                   .replace(".attention.o_proj.", ".attention.output.dense.")
                   .replace(".mlp.fc1.", ".intermediate.dense.").replace(".mlp.fc2.", ".output.dense."))
        inverse[old] = own[key]
    inverse["pooler.dense.weight"] = torch.empty(768, 768, device="meta")  # saved with a pooler: ignored
    _load_on_meta("phikon", inverse, tmp_path)


def test_biomedclip_full_open_clip_checkpoint_keeps_the_image_tower(tmp_path):
    needs("open_clip")
    own = _meta("biomedclip")[1].state_dict()
    state = {f"visual.{k}": v for k, v in own.items()}
    state.update({"text.transformer.embeddings.word_embeddings.weight": torch.empty(4, 2, device="meta"),
                  "text.proj.0.weight": torch.empty(2, 2, device="meta"), "logit_scale": torch.empty((), device="meta")})
    adapted, model = _load_on_meta("biomedclip", state, tmp_path)
    assert set(adapted) == set(own) and tuple(model.head.proj.weight.shape) == (512, 768)


def test_resnet_checkpoint_with_the_imagenet_classifier(tmp_path):
    own = _meta("resnet50")[1].state_dict()
    state = {**own, "fc.weight": torch.empty(1000, 2048, device="meta"), "fc.bias": torch.empty(1000, device="meta")}
    _load_on_meta("resnet50", state, tmp_path)
    with pytest.raises(PrismError, match="do not fit"):  # a foreign weight is still refused
        _load_on_meta("resnet50", {**own, "layer9.weight": torch.empty(1, device="meta")}, tmp_path)


# --------------------------------------------------------------------------- pretraining data
def test_pretraining_data_declared_and_overridable_outside_the_fingerprint():
    from prism_plugin.model_adapters.dinobloom import DinoBloomB
    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    declared = DinoBloomB.pretraining_data
    assert {"matek", "raabin", "mll23", "labanonymous"} <= {n.lower() for n in declared}
    assert "acevedo" not in {n.lower() for n in declared}  # the audit's only DinoBloom-held-out dataset
    assert AUDIT_MODELS["dinov2_s"].pretraining_data == ("LVD-142M",)
    assert AUDIT_MODELS["biomedclip"].pretraining_data == ("PMC-15M",)
    assert AUDIT_MODELS["clip_l"].pretraining_data == ("WIT-400M",)
    assert AUDIT_MODELS["resnet50"].pretraining_data == ("ImageNet-1k",)
    assert AUDIT_MODELS["reddino_s"].pretraining_data is None  # not enumerable offline: unknown
    for name in CARDS:
        value = AUDIT_MODELS[name].pretraining_data
        assert value is None or (isinstance(value, tuple) and all(isinstance(v, str) and v for v in value))
    for name, cls in builtin_classes("prism_main").items():
        assert cls.pretraining_data, name
    base = DinoBloomB(pretrained=False)
    over = DinoBloomB(pretrained=False, pretraining_data="Matek+Acevedo")
    assert over.pretraining_data == ("Matek", "Acevedo") and base.pretraining_data == declared
    assert DinoBloomB(pretrained=False, pretraining_data="none").pretraining_data == ()
    assert over.fingerprint() == base.fingerprint() and "pretraining" not in str(over.config())
    # every adapter accepts it, also one with its own constructor and the default fingerprint
    timm_a = TimmAdapter("resnet18", pretrained=False, pretraining_data="ImageNet-1k")
    assert timm_a.pretraining_data == ("ImageNet-1k",)
    assert timm_a.fingerprint() == TimmAdapter("resnet18", pretrained=False).fingerprint()
    with pytest.raises(PrismError, match="pretraining_data"):
        DinoBloomB(pretrained=False, pretraining_data="Matek++Raabin")


# --------------------------------------------------------------------------- offline
@pytest.mark.parametrize("name", ["dinobloom_s", "phikon", "biomedclip"])  # timm, transformers, open_clip
def test_offline_build_fails_fast_naming_hub_id_and_checkpoint(name, monkeypatch, tmp_path, network_attempts):
    _needs(name)
    import huggingface_hub.constants as constants

    from prism_plugin.embed import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.reset_state()
    try:
        adapter = AUDIT_MODELS[name]()
        with pytest.raises(hub.HubWeightsError) as err:
            adapter.build(torch.device("cpu"))
        assert network_attempts == [] and adapter._model is None  # offline: no lookup, no connect
        message = str(err.value)
        assert adapter.hub_id in message and "checkpoint=PATH" in message and "\n" not in message
    finally:
        hub.reset_state()


# --------------------------------------------------------------------------- ls adapters
def test_ls_adapters_lists_the_catalogue_with_dim_input_and_pretraining(capsys):
    from prism_plugin.cli import main

    from .test_ls_adapters import _cell, _table

    assert main(["ls", "adapters"]) == 0
    lines, rows = _table(capsys.readouterr().out)
    for name in CARDS:
        cls = AUDIT_MODELS[name]
        line = rows[name]
        assert _cell(lines, line, "dim") == str(CARDS[name][4])
        assert _cell(lines, line, "input") == "224"
        assert _cell(lines, line, "licence") == f"{cls.licence} ({cls.licence_date})" and cls.hub_id in line
        assert _cell(lines, line, "gated") == ("yes" if cls.gated else "no")
        expected = "+".join(cls.pretraining_data) if cls.pretraining_data else "-"
        assert _cell(lines, line, "pretrained on") == expected
    assert _cell(lines, rows["dinobloom_l"], "resize/crop interp mean-std") == "224/224 bicubic imagenet"
    assert _cell(lines, rows["conch"], "input") == "448"
    assert _cell(lines, rows["uni"], "pretrained on") == "Mass-100K"
    assert _cell(lines, rows["timm:<name>"], "pretrained on") == "per model"
    assert _cell(lines, rows["precomputed"], "input") == "-"
