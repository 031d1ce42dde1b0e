"""Paige: Virchow2 (``--model virchow2``).

Gated on the hub (``paige-ai/Virchow2``, CC-BY-NC-ND 4.0): accept the terms on
the model page and log in, or pass ``--model-args checkpoint=PATH``.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation


class Virchow2(TimmFoundation):
    """Virchow2 (``paige-ai/Virchow2``): ViT-H/14 with 4 register tokens and a SwiGLU MLP, 3.1M WSIs.

    Architecture as in the hub's timm config: ``vit_huge_patch14_224`` with
    ``reg_tokens=4``, ``mlp_ratio=5.3375``, ``init_values=1e-5``,
    ``global_pool=""`` and ``mlp_layer=SwiGLUPacked``, ``act_layer=SiLU`` (the two
    the model card passes in code): 32 blocks, width 1280, 16 heads, patch 14.
    The token sequence is ``[CLS, 4 registers, 256 patches]`` at 224 px.

    Embedding (PRISM, ``pooling=cls+mean``, the card's recipe too): the class
    token concatenated with the mean of the 256 patch tokens, register tokens
    excluded, **2560-d**. Also ``cls`` (1280) and ``mean`` (1280).

    Preprocessing: ``prism_main`` = Resize 224 (bilinear) + CenterCrop 224 +
    ImageNet (Table 4); ``model_card`` = the timm-resolved transform, Resize 224
    bicubic + CenterCrop 224 + ImageNet (Table 6).

    dtype policy: fp16 autocast on CUDA, as the model card's example does.
    """

    name = "virchow2"
    display_name = "VIRCHOW2"
    hub_id = "paige-ai/Virchow2"
    licence = "CC-BY-NC-ND-4.0"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/paige-ai/Virchow2"
    licence_date = "2026-12-02"
    gated = True
    architecture = "ViT-H/14 + 4 registers, SwiGLU (timm vit_huge_patch14_224), 32 blocks"
    arch_short = "ViT-H/14+4reg SwiGLU (timm)"
    arch_facts = {"embed_dim": 1280, "patch_size": 14, "depth": 32, "reg_tokens": 4}
    timm_arch = "vit_huge_patch14_224"
    timm_kwargs = {"img_size": 224, "init_values": 1e-5, "num_classes": 0, "reg_tokens": 4, "mlp_ratio": 5.3375,
                   "global_pool": "", "dynamic_img_size": True}
    poolings = {"cls+mean": 2560, "cls": 1280, "mean": 1280}
    default_pooling = "cls+mean"
    profiles = {
        "prism_main": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
        "model_card": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bicubic"),
        "prism_camelyon17": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bicubic"),  # Table 6: the model's own transform
    }
    paper_dim = 2560
    default_dtype = "fp16"
    #: the Virchow2 card: 3.1M WSIs from Memorial Sloan Kettering Cancer Center
    pretraining_data = ("MSKCC-3.1M-WSI",)

    def timm_create_kwargs(self) -> dict[str, Any]:
        import torch
        from timm.layers import SwiGLUPacked

        return {**self.timm_kwargs, "mlp_layer": SwiGLUPacked, "act_layer": torch.nn.SiLU}


def register(register) -> None:
    register(Virchow2.name, Virchow2, description=Virchow2.ls_description())
