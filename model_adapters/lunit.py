"""Lunit: DINO ViT-S pathology encoders (``--model lunit_dino_s16`` / ``lunit_dino_s8``).

From "Benchmarking Self-Supervised Learning on Diverse Pathology Datasets" (Kang et al., CVPR 2023):
ViT-S/16 and ViT-S/8 trained with DINO on histology patches. The original weights are released in
``lunit-io/benchmark-ssl-pathology``; the hub copies used here are the timm conversions
``1aurent/vit_small_patch16_224.lunit_dino`` and ``1aurent/vit_small_patch8_224.lunit_dino``
(licence: Lunit non-commercial, not gated). Built with timm.
"""

from __future__ import annotations

from prism_plugin.embed.adapter import Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation

#: Lunit's histology normalisation statistics (benchmark-ssl-pathology README)
LUNIT_MEAN = (0.70322989, 0.53606487, 0.66096631)
LUNIT_STD = (0.21716536, 0.26081574, 0.20723464)

LUNIT_AUDIT = Preprocessing(224, 224, LUNIT_MEAN, LUNIT_STD, "bicubic")
#: Lunit's README: ToTensor + Normalize on 224 px tiles (any resize is the user's: bilinear here)
LUNIT_CARD = Preprocessing(224, 224, LUNIT_MEAN, LUNIT_STD, "bilinear")


class _LunitDINO(TimmFoundation):
    """Lunit-DINO ViT-S/{patch}: DINO self-supervision on histology patches (TCGA and Lunit's TULIP).

    Architecture: timm ``vit_small_patch{patch}_224`` (12 blocks, width 384, 6 heads, no LayerScale,
    no registers). Embedding (``pooling=cls``, default): the class token after the final LayerNorm
    (``model(x)``), **384-d**; also ``mean`` and ``cls+mean``. Preprocessing: ``audit`` = Resize 224
    + CenterCrop 224, bicubic, Lunit's statistics; ``model_card`` = the same at bilinear.

    Pretraining data (declared): TCGA and TULIP (Lunit's internal collection), as the Lunit paper
    describes its pretraining set. Unverified offline: which of the two patch sizes the audit used
    (papers/002 names "Lunit-DINO" only; ViT-S/8 is the more downloaded copy); the exact
    composition of the pretraining set (the hub card says "33M histology patches from various
    pathology datasets" and lists evaluation datasets as tags); the timm config's interpolation
    (bicubic assumed); revision (``main``).
    """

    licence = "Lunit non-commercial"
    licence_source = ("https://huggingface.co/1aurent/vit_small_patch16_224.lunit_dino (and patch8; hub tag "
                      "lunit-non-commercial)")
    licence_date = "2026-12-02"
    gated = False
    default_pooling = "cls"
    profiles = {"audit": LUNIT_AUDIT, "model_card": LUNIT_CARD}
    default_profile = "audit"
    paper_dim = 384
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "fp32"
    poolings = {"cls": 384, "mean": 384, "cls+mean": 768}
    pretraining_data = ("TCGA", "TULIP")
    ignore_prefixes = ("head.",)
    timm_kwargs = {"num_classes": 0, "global_pool": "token", "img_size": 224}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        p = cls.patch
        cls.name, cls.display_name = f"lunit_dino_s{p}", f"Lunit-DINO-S/{p}"
        cls.timm_arch = f"vit_small_patch{p}_224"
        cls.hub_id = f"1aurent/{cls.timm_arch}.lunit_dino"
        cls.architecture = f"DINO ViT-S/{p} (timm {cls.timm_arch}), 12 blocks, width 384"
        cls.arch_short = f"ViT-S/{p} (timm)"
        cls.arch_facts = {"embed_dim": 384, "patch_size": p, "depth": 12, "reg_tokens": 0}


class LunitDINOS16(_LunitDINO):
    patch = 16


class LunitDINOS8(_LunitDINO):
    patch = 8


LUNIT_MODELS = (LunitDINOS16, LunitDINOS8)


def register(register) -> None:
    for cls in LUNIT_MODELS:
        register(cls.name, cls, description=cls.ls_description())
