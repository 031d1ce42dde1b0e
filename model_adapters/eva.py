"""BAAI EVA-02 (``--model eva02_b``): the MIM-pretrained EVA-02 ViT-B/14 at 224 px.

Weights: ``timm/eva02_base_patch14_224.mim_in22k`` (MIT licence, not gated), built with timm.
"""

from __future__ import annotations

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation

EVA02_AUDIT = Preprocessing(224, 224, CLIP_MEAN, CLIP_STD, "bicubic")
#: timm's pretrained config of the checkpoint: 224 px, crop_pct 0.9 (Resize 248), bicubic, CLIP statistics
EVA02_CARD = Preprocessing(248, 224, CLIP_MEAN, CLIP_STD, "bicubic")


class EVA02B(TimmFoundation):
    """EVA-02-B/14 (Fang et al., 2023): masked image modelling of EVA-CLIP features on ImageNet-21k.

    Architecture: timm ``eva02_base_patch14_224`` (12 blocks, width 768, patch 14, SwiGLU MLP,
    rotary position embedding, 224 px), no head. Embedding (``pooling=pooled``, default): what
    ``model(x)`` returns, timm's pooled features of this checkpoint: the mean of the patch tokens
    after the final (fc) LayerNorm, **768-d**; ``cls`` = the class token from ``forward_features``
    (which has no final norm in this model). Preprocessing: ``audit`` = Resize 224 + CenterCrop 224,
    bicubic, CLIP statistics; ``model_card`` = timm's data config (Resize 248 + CenterCrop 224).

    Pretraining data (declared): ImageNet-21k (the MIM teacher, EVA-CLIP, saw LAION-scale image-text
    data; it is not counted here). Unverified offline: which EVA-02 the audit used (papers/002 names
    "EVA-02" at 224 px only; the base MIM checkpoint is assumed, the size of its ImageNet ViT-B
    comparison) and whether it pooled with timm's default (mean) or the class token; revision
    (``main``).
    """

    name = "eva02_b"
    display_name = "EVA-02-B"
    hub_id = "timm/eva02_base_patch14_224.mim_in22k"
    licence = "MIT"
    licence_source = "https://huggingface.co/timm/eva02_base_patch14_224.mim_in22k (hub tag)"
    licence_date = "2026-12-01"
    licence_note = "the hub tag as recorded when the adapter was written"
    gated = False
    architecture = "EVA-02 ViT-B/14, SwiGLU + RoPE (timm eva02_base_patch14_224), 12 blocks"
    arch_short = "EVA-02 ViT-B/14 (timm)"
    arch_facts = {"embed_dim": 768, "patch_size": 14, "depth": 12, "reg_tokens": 0}
    timm_arch = "eva02_base_patch14_224"
    timm_kwargs = {"num_classes": 0, "img_size": 224}
    poolings = {"pooled": 768, "cls": 768}
    default_pooling = "pooled"
    profiles = {"audit": EVA02_AUDIT, "model_card": EVA02_CARD}
    default_profile = "audit"
    paper_dim = 768
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "fp32"
    ignore_prefixes = ("head.",)
    pretraining_data = ("ImageNet-21k",)

    def pool(self, model, batch):
        tokens = model.forward_features(batch)
        if self.pooling == "cls":
            return tokens[:, 0]
        return model.forward_head(tokens, pre_logits=True)


def register(register) -> None:
    register(EVA02B.name, EVA02B, description=EVA02B.ls_description())
