"""Owkin: Phikon (``--model phikon``), the iBOT ViT-B/16 pathology model.

Built with Hugging Face ``transformers`` (``ViTModel``; optional extra ``prism-plugin[transformers]``).
Public on the hub (``owkin/phikon``), licence "other" (Owkin non-commercial), not gated.
"""

from __future__ import annotations

import re
from typing import Any

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import FoundationAdapter, require_transformers

#: owkin/phikon config.json (main): a BERT-style ViT-B/16 at 224 px
PHIKON_CONFIG = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                     image_size=224, patch_size=16, hidden_act="gelu", layer_norm_eps=1e-12, qkv_bias=True,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

#: the card's image processor (ViTImageProcessor): resize to 224 x 224 (bilinear), ImageNet statistics
PHIKON_PREP = Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear")


#: transformers 4 -> 5 names of a ViTModel's weights (transformers 5 loads old checkpoints through the
#: same renaming in its conversion_mapping; we load state dicts ourselves, so we apply it here)
LEGACY_VIT_RENAMES = (
    (re.compile(r"^encoder\.layer\.(\d+)\."), r"layers.\1."),
    (re.compile(r"\.attention\.attention\.query\."), ".attention.q_proj."),
    (re.compile(r"\.attention\.attention\.key\."), ".attention.k_proj."),
    (re.compile(r"\.attention\.attention\.value\."), ".attention.v_proj."),
    (re.compile(r"\.attention\.output\.dense\."), ".attention.o_proj."),
    (re.compile(r"\.intermediate\.dense\."), ".mlp.fc1."),
    (re.compile(r"\.output\.dense\."), ".mlp.fc2."),
)


def legacy_vit_key(key: str) -> str:
    """A transformers-4 ``ViTModel`` weight name in transformers-5 form (other names unchanged)."""
    for pattern, repl in LEGACY_VIT_RENAMES:
        key = pattern.sub(repl, key)
    return key


def vit_blocks(model):
    """The transformer blocks of a ``ViTModel`` in either transformers layout."""
    return model.layers if hasattr(model, "layers") else model.encoder.layer


class Phikon(FoundationAdapter):
    """Phikon: ViT-B/16 trained with iBOT on 40M pan-cancer TCGA tiles (Filiot et al., 2023).

    Architecture: ``transformers`` ``ViTModel`` without pooling layer, 12 blocks, width 768, 12
    heads, patch 16, 224 px. Embedding (``pooling=cls``, default; the card's and DinoBloom's recipe):
    ``last_hidden_state[:, 0]``, the class token after the final LayerNorm, **768-d**. Also ``mean``
    (patch tokens). Preprocessing: ``audit`` = ``model_card`` = the card's image processor, resize to
    224 x 224 bilinear + ImageNet statistics.

    Pretraining data: TCGA (PanCancer40M). Unverified offline: the processor's resampling filter and
    statistics (read from third-party uses of ``AutoImageProcessor.from_pretrained("owkin/phikon")``,
    not from its ``preprocessor_config.json``); ``layer_norm_eps`` (1e-12 on ``main``; a hub pull
    request proposes timm's 1e-6: the weights are the same, the outputs differ negligibly);
    revision (``main``).
    """

    name = "phikon"
    display_name = "Phikon"
    hub_id = "owkin/phikon"
    licence = "Owkin non-commercial (other)"
    licence_source = ("https://huggingface.co/owkin/phikon (card: Owkin non-commercial license, "
                      "github.com/owkin/HistoSSLscaling LICENSE.txt)")
    licence_date = "2026-12-02"
    licence_note = "hub tag 'other'; the licence text grants its rights to non-profit entities only"
    gated = False
    architecture = "iBOT ViT-B/16 (transformers ViTModel), 12 blocks, width 768"
    arch_short = "ViT-B/16 (transformers)"
    arch_facts = {"embed_dim": 768, "patch_size": 16, "depth": 12, "reg_tokens": 0}
    poolings = {"cls": 768, "mean": 768}
    default_pooling = "cls"
    profiles = {"audit": PHIKON_PREP, "model_card": PHIKON_PREP}
    default_profile = "audit"
    paper_dim = 768
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "fp32"
    ignore_prefixes = ("pooler.", "embeddings.mask_token")
    pretraining_data = ("TCGA",)

    def create_model(self, **overrides: Any):
        transformers = require_transformers(self.display_name)
        settings = dict(PHIKON_CONFIG)
        if "depth" in overrides:
            settings["num_hidden_layers"] = int(overrides.pop("depth"))
        settings.update(overrides)
        return transformers.ViTModel(transformers.ViTConfig(**settings), add_pooling_layer=False)

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        # weights saved from a ViT task model carry a "vit." prefix
        if state and all(k.startswith(("vit.", "classifier.")) for k in state):
            state = {k[len("vit."):]: v for k, v in state.items() if k.startswith("vit.")}
        return state

    def load_weights(self, model, state: dict[str, Any], source, *, assign: bool = False) -> None:
        own = model.state_dict()
        if any(k not in own for k in state):  # hub checkpoints use transformers 4 names; 5.x renamed them
            state = {(legacy_vit_key(k) if k not in own else k): v for k, v in state.items()}
        super().load_weights(model, state, source, assign=assign)

    def arch_summary(self, model) -> dict[str, int]:
        cfg = model.config
        return {"embed_dim": int(cfg.hidden_size), "patch_size": int(cfg.patch_size),
                "depth": len(vit_blocks(model)), "reg_tokens": 0, "img_size": int(cfg.image_size)}

    def pool(self, model, batch):
        tokens = model(pixel_values=batch).last_hidden_state
        return tokens[:, 0] if self.pooling == "cls" else tokens[:, 1:].mean(dim=1)


def register(register) -> None:
    register(Phikon.name, Phikon, description=Phikon.ls_description())
