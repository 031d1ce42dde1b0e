"""Bioptimus: H-optimus-0 (``--model h_optimus_0``).

Gated on the hub (``bioptimus/H-optimus-0``, Apache-2.0): accept the terms on
the model page and log in, or pass ``--model-args checkpoint=PATH``.
"""

from __future__ import annotations

from prism_plugin.embed.adapter import Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation

#: H-optimus-0's own normalisation statistics (model card)
HOPTIMUS_MEAN = (0.707223, 0.578729, 0.703617)
HOPTIMUS_STD = (0.211883, 0.230117, 0.177517)


class HOptimus0(TimmFoundation):
    """H-optimus-0: ViT-g/14 with 4 register tokens (DINOv2 recipe), > 500k WSIs.

    Architecture as in the hub's timm config: ``vit_giant_patch14_reg4_dinov2``
    at ``img_size=224`` with ``init_values=1e-5``, class-token pooling: 40 blocks,
    width 1536, 24 heads, patch 14, packed SwiGLU MLP, token sequence
    ``[CLS, 4 registers, 256 patches]``.

    Embedding (PRISM, ``pooling=cls``): ``model(x)``, the class token after the
    final norm, **1536-d**. Also ``mean`` (registers excluded) and ``cls+mean``.

    Preprocessing: ``prism_main`` = Resize 224 (bilinear) + CenterCrop 224 +
    the model's own mean/std (Table 4); ``model_card`` = the timm-resolved
    transform, Resize 256 bicubic + CenterCrop 224 + own mean/std (Table 6).

    dtype policy: fp16 autocast on CUDA, as the model card's example does.
    """

    name = "h_optimus_0"
    display_name = "H-Optimus-0"
    hub_id = "bioptimus/H-optimus-0"
    licence = "Apache-2.0"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/bioptimus/H-optimus-0"
    licence_date = "2026-12-02"
    gated = True
    architecture = "ViT-g/14 + 4 registers, SwiGLU (timm vit_giant_patch14_reg4_dinov2), 40 blocks"
    arch_short = "ViT-g/14+4reg SwiGLU (timm)"
    arch_facts = {"embed_dim": 1536, "patch_size": 14, "depth": 40, "reg_tokens": 4}
    timm_arch = "vit_giant_patch14_reg4_dinov2"
    timm_kwargs = {"img_size": 224, "init_values": 1e-5, "num_classes": 0, "global_pool": "token",
                   "dynamic_img_size": False}
    poolings = {"cls": 1536, "mean": 1536, "cls+mean": 3072}
    default_pooling = "cls"
    profiles = {
        "prism_main": Preprocessing(224, 224, HOPTIMUS_MEAN, HOPTIMUS_STD, "bilinear"),
        "model_card": Preprocessing(256, 224, HOPTIMUS_MEAN, HOPTIMUS_STD, "bicubic"),
        "prism_camelyon17": Preprocessing(256, 224, HOPTIMUS_MEAN, HOPTIMUS_STD, "bicubic"),  # Table 6: the model's own transform
    }
    paper_dim = 1536
    weight_files = ("pytorch_model.bin", "model.safetensors")
    default_dtype = "fp16"
    #: the H-optimus-0 card: > 500k H&E WSIs (proprietary collection)
    pretraining_data = ("Bioptimus-500k-WSI",)


def register(register) -> None:
    register(HOptimus0.name, HOptimus0, description=HOptimus0.ls_description())
