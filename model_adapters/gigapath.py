"""Providence / Microsoft: Prov-GigaPath tile encoder (``--model gigapath``).

Gated on the hub (``prov-gigapath/prov-gigapath``): accept the terms (research
use only) on the model page and log in, or pass ``--model-args checkpoint=PATH``.
"""

from __future__ import annotations

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation


class GigaPath(TimmFoundation):
    """Prov-GigaPath tile encoder: ViT-giant trained with DINOv2 on 171k WSIs (Prov-Path).

    Architecture as in the hub's timm config: ``vit_giant_patch14_dinov2`` with
    ``patch_size=16`` (the tile encoder uses 16 px patches despite the name),
    ``img_size=224``, ``embed_dim=1536``, ``depth=40``, ``num_heads=24``,
    ``mlp_ratio=5.33334`` (packed SwiGLU), ``init_values=1e-5``, class-token pooling.

    Embedding (PRISM, ``pooling=cls``): ``model(x)``, the class token after the
    final norm, **1536-d**. Also ``mean`` and ``cls+mean`` (3072).

    Preprocessing: ``prism_main`` = Resize 256 (bilinear) + CenterCrop 224 +
    ImageNet, the one model PRISM resized to 256 (Table 4); ``model_card`` = the
    transform resolved from the timm config, Resize 224 bicubic + CenterCrop 224
    + ImageNet (Table 6; the GitHub README shows Resize 256, the hub config
    resolves to 224).

    dtype policy: bf16 autocast on CUDA.
    """

    name = "gigapath"
    display_name = "GigaPath"
    hub_id = "prov-gigapath/prov-gigapath"
    licence = "Microsoft Research License"
    licence_source = ("PRISM README (prism-bench), model table; https://huggingface.co/prov-gigapath/prov-gigapath "
                      "(licence changed 2025-03-22)")
    licence_date = "2025-03-22"
    licence_note = ("the hub repository's licence changed on 2025-03-22; before, its access terms read "
                    "'Apache-2.0 terms, research use only' (this adapter's former record), and the "
                    "prov-gigapath-flash card's model-family table still lists GigaPath as Apache-2.0: "
                    "check the card before use")
    gated = True
    architecture = "ViT-g, patch 16, SwiGLU (timm vit_giant_patch14_dinov2), 40 blocks"
    arch_short = "ViT-g/16 SwiGLU (timm)"
    arch_facts = {"embed_dim": 1536, "patch_size": 16, "depth": 40, "reg_tokens": 0}
    timm_arch = "vit_giant_patch14_dinov2"
    timm_kwargs = {"img_size": 224, "in_chans": 3, "patch_size": 16, "embed_dim": 1536, "depth": 40,
                   "num_heads": 24, "init_values": 1e-5, "mlp_ratio": 5.33334, "num_classes": 0,
                   "global_pool": "token"}
    poolings = {"cls": 1536, "mean": 1536, "cls+mean": 3072}
    default_pooling = "cls"
    profiles = {
        "prism_main": Preprocessing(256, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
        "model_card": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bicubic"),
        "prism_camelyon17": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bicubic"),  # Table 6: the model's own transform
    }
    paper_dim = 1536
    weight_files = ("pytorch_model.bin", "model.safetensors")
    default_dtype = "bf16"
    #: the Prov-GigaPath card: Prov-Path, 171k WSIs from Providence Health
    pretraining_data = ("Prov-Path",)


def register(register) -> None:
    register(GigaPath.name, GigaPath, description=GigaPath.ls_description())
