"""kaiko.ai: Midnight-12k (``--model midnight``).

Public on the hub (``kaiko-ai/midnight``, MIT licence, not gated). Built with
Hugging Face ``transformers`` (optional extra ``prism-plugin[transformers]``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import FoundationAdapter, require_transformers

#: DINOv2 ViT-g/14 as in transformers' Dinov2Model: packed SwiGLU FFN, LayerScale, no registers
MIDNIGHT_CONFIG = dict(hidden_size=1536, num_hidden_layers=40, num_attention_heads=24, mlp_ratio=4,
                       use_swiglu_ffn=True, patch_size=14, image_size=224, layerscale_value=1e-5,
                       layer_norm_eps=1e-6, qkv_bias=True, hidden_act="gelu")


#: transformers-4 ``Dinov2Model`` weight names -> the transformers-5 ones (5.x renamed the attention
#: projections and split the fused SwiGLU input projection into gate and up halves)
_DINOV2_RENAMES = (("attention.attention.query.", "attention.q_proj."),
                   ("attention.attention.key.", "attention.k_proj."),
                   ("attention.attention.value.", "attention.v_proj."),
                   ("attention.output.dense.", "attention.o_proj."),
                   ("mlp.weights_out.", "mlp.down_proj."))


def legacy_dinov2_state(state: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A transformers-4 Dinov2 state dict in the names of ``own`` (a transformers-5 model's state dict);
    names ``own`` already has are kept. ``mlp.weights_in`` (gate rows first, then up) is split in two."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key in own:
            out[key] = value
            continue
        if ".mlp.weights_in." in key:
            stem, kind = key.split(".mlp.weights_in.")
            gate, up = value.chunk(2, dim=0)
            out[f"{stem}.mlp.gate_proj.{kind}"], out[f"{stem}.mlp.up_proj.{kind}"] = gate, up
            continue
        for old, new in _DINOV2_RENAMES:
            key = key.replace(old, new)
        out[key] = value
    return out


class Midnight(FoundationAdapter):
    """Midnight-12k: a DINOv2 ViT-g/14 trained by kaiko.ai on 12k TCGA slides.

    Architecture: ``transformers`` ``Dinov2Model``, 40 blocks, width 1536, 24
    heads, patch 14, SwiGLU FFN, no register tokens (727 weight tensors).

    Embedding (PRISM, ``pooling=pooler``): ``pooler_output``, the class token
    after the final LayerNorm, **1536-d**, as the PRISM notebooks extracted it
    (main datasets and Camelyon17 re-extraction). The model card's own recipe,
    class token concatenated with the mean of the patch tokens (**3072-d**), is
    ``pooling=cls+mean``; the stale Camelyon17 ``preprocessing_table.csv`` lists
    that width.

    Preprocessing: ``prism_main`` = Resize 224 (bilinear) + CenterCrop 224 +
    ImageNet (Table 4); ``model_card`` = the card's Resize 224 + CenterCrop 224
    + mean = std = 0.5 (Table 6).

    dtype policy: bf16 autocast on CUDA.
    """

    name = "midnight"
    display_name = "MIDNIGHT"
    hub_id = "kaiko-ai/midnight"
    licence = "MIT"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/kaiko-ai/midnight"
    licence_date = "2026-12-02"
    gated = False
    architecture = "DINOv2 ViT-g/14, SwiGLU (transformers Dinov2Model), 40 blocks"
    arch_short = "ViT-g/14 SwiGLU (transformers)"
    arch_facts = {"embed_dim": 1536, "patch_size": 14, "depth": 40, "reg_tokens": 0}
    poolings = {"pooler": 1536, "cls+mean": 3072}
    default_pooling = "pooler"
    profiles = {
        "prism_main": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
        "model_card": Preprocessing(224, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bilinear"),
        "prism_camelyon17": Preprocessing(224, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bilinear"),  # Table 6: the model's own transform
    }
    paper_dim = 1536
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "bf16"
    #: Midnight-12k: 12k TCGA slides (the kaiko-ai/midnight card)
    pretraining_data = ("TCGA",)

    def create_model(self, **overrides: Any):
        transformers = require_transformers(self.display_name)
        settings = dict(MIDNIGHT_CONFIG)
        if "depth" in overrides:
            settings["num_hidden_layers"] = int(overrides.pop("depth"))
        settings.update(overrides)
        return transformers.Dinov2Model(transformers.Dinov2Config(**settings))

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        # weights saved from a Dinov2 task model carry a "dinov2." prefix
        if state and all(k.startswith("dinov2.") or k.startswith("classifier.") for k in state):
            state = {k[len("dinov2."):]: v for k, v in state.items() if k.startswith("dinov2.")}
        return state

    def load_weights(self, model, state: dict[str, Any], source, *, assign: bool = False) -> None:
        own = model.state_dict()
        if any(k not in own for k in state):  # the hub checkpoint has transformers-4 names
            state = legacy_dinov2_state(state, own)
        super().load_weights(model, state, source, assign=assign)

    def overrides_for_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        # the position grid the weights were trained with (Dinov2 interpolates it to the input)
        pos = state.get("embeddings.position_embeddings")
        if pos is None:
            return {}
        side = int(round(math.sqrt(pos.shape[1] - 1)))
        return {"image_size": side * MIDNIGHT_CONFIG["patch_size"]}

    def arch_summary(self, model) -> dict[str, int]:
        cfg = model.config
        return {"embed_dim": int(cfg.hidden_size), "patch_size": int(cfg.patch_size),
                "depth": len(model.encoder.layer), "reg_tokens": int(getattr(cfg, "num_register_tokens", 0) or 0),
                "img_size": int(cfg.image_size), "swiglu": int(bool(cfg.use_swiglu_ffn))}

    def pool(self, model, batch):
        import torch

        out = model(pixel_values=batch)
        if self.pooling == "pooler":
            return out.pooler_output
        tokens = out.last_hidden_state
        return torch.cat([tokens[:, 0], tokens[:, 1:].mean(dim=1)], dim=1)


def register(register) -> None:
    register(Midnight.name, Midnight, description=Midnight.ls_description())
