"""CLIP-family vision encoders: OpenAI CLIP ViT-B/32 and PLIP (``--model clip`` / ``--model plip``).

Both are the vision tower of a CLIP ViT-B/32 (12 blocks, width 768, patch 32,
224 px), built with Hugging Face ``transformers`` (``CLIPVisionModelWithProjection``;
optional extra ``prism-plugin[transformers]``).

Embedding (PRISM recipe, default ``pooling=pooler``): the vision model's
``pooler_output``, i.e. the class token after the final LayerNorm, **768-d**:
this is what the PRISM extraction notebooks saved for the six main datasets and
for the Camelyon17 re-extraction (PROTOCOL §1.4: the stale
``preprocessing_table.csv`` lists 512 for these two models). ``pooling=projection``
gives the 512-d CLIP image embedding (pooler output times the visual projection).

Preprocessing: ``prism_main`` = Resize 224 (bilinear) + CenterCrop 224 +
ImageNet statistics, exactly the torchvision transform of the PRISM notebooks
(Table 4); ``model_card`` = the CLIP image processor: Resize 224 bicubic +
CenterCrop 224 + CLIP statistics; ``prism_camelyon17`` = PRISM's Camelyon17 re-extraction (Table 6): the
processor's size and statistics, resized bilinear (torchvision's default), in fp16.

dtype policy: fp16 autocast on CUDA (CLIP was trained in mixed fp16 precision).
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import FoundationAdapter, require_transformers

#: the vision tower of CLIP ViT-B/32 (openai/clip-vit-base-patch32), shared by PLIP
VIT_B32 = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
               image_size=224, patch_size=32, projection_dim=512, hidden_act="quick_gelu", layer_norm_eps=1e-5)

#: the vision tower of CLIP ViT-L/14 at 224 px (openai/clip-vit-large-patch14)
VIT_L14 = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
               image_size=224, patch_size=14, projection_dim=768, hidden_act="quick_gelu", layer_norm_eps=1e-5)

CLIP_PROFILES = {
    "prism_main": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
    "model_card": Preprocessing(224, 224, CLIP_MEAN, CLIP_STD, "bicubic"),
    # PRISM's Camelyon17 code took the CLIP processor's size and statistics but resized with torchvision's
    # default filter (bilinear)
    "prism_camelyon17": Preprocessing(224, 224, CLIP_MEAN, CLIP_STD, "bilinear"),
}


class CLIPVisionFoundation(FoundationAdapter):
    architecture = "CLIP ViT-B/32 vision tower (transformers), 12 blocks"
    arch_short = "ViT-B/32 (transformers)"
    arch_facts = {"embed_dim": 768, "patch_size": 32, "depth": 12, "reg_tokens": 0}
    poolings = {"pooler": 768, "projection": 512}
    default_pooling = "pooler"
    profiles = CLIP_PROFILES
    paper_dim = 768
    default_dtype = "fp16"
    # a full CLIPModel checkpoint also holds the text tower
    ignore_prefixes = ("text_model.", "text_projection.", "logit_scale")
    #: transformers CLIPVisionConfig settings of the tower
    vision_settings: ClassVar[Mapping[str, Any]] = VIT_B32

    def create_model(self, **overrides: Any):
        transformers = require_transformers(self.display_name)
        settings = dict(self.vision_settings)
        if "depth" in overrides:
            settings["num_hidden_layers"] = int(overrides.pop("depth"))
        settings.update(overrides)
        config = transformers.CLIPVisionConfig(**settings)
        return transformers.CLIPVisionModelWithProjection(config)

    def arch_summary(self, model) -> dict[str, int]:
        cfg = model.config
        return {"embed_dim": int(cfg.hidden_size), "patch_size": int(cfg.patch_size),
                "depth": len(model.vision_model.encoder.layers), "reg_tokens": 0,
                "img_size": int(cfg.image_size), "projection_dim": int(model.visual_projection.out_features)}

    def pool(self, model, batch):
        out = model.vision_model(pixel_values=batch)
        pooled = out.pooler_output
        if self.pooling == "projection":
            return model.visual_projection(pooled)
        return pooled


class CLIP(CLIPVisionFoundation):
    """OpenAI CLIP ViT-B/32 (``openai/clip-vit-base-patch32``, MIT licence, not gated)."""

    name = "clip"
    display_name = "CLIP"
    hub_id = "openai/clip-vit-base-patch32"
    licence = "MIT"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/openai/clip-vit-base-patch32"
    licence_date = "2026-12-02"
    gated = False
    #: OpenAI's 400M web image-text pairs (the CLIP paper's WebImageText)
    pretraining_data = ("WIT-400M",)


class PLIP(CLIPVisionFoundation):
    """PLIP: CLIP ViT-B/32 fine-tuned on pathology image-text pairs from Twitter (``vinid/plip``).

    Licence: the PRISM README lists it as "Custom"; the hub card carries no
    standard licence tag and the PLIP authors release it for research use
    (``licence_note``; check the card before other use).
    """

    name = "plip"
    display_name = "PLIP"
    hub_id = "vinid/plip"
    licence = "Custom, research use"
    licence_source = "PRISM README (prism-bench), model table ('Custom'); https://huggingface.co/vinid/plip"
    licence_date = "2026-12-02"
    licence_note = ("sources differ in wording: the PRISM README lists the licence as 'Custom'; the "
                    "vinid/plip card carries no standard licence tag and its authors release the model "
                    "for research use (the card as recorded on 2026-11-29, not re-read offline): check "
                    "the card before any other use")
    gated = False
    #: CLIP's WIT-400M, then OpenPath (pathology image-text pairs from Twitter and LAION)
    pretraining_data = ("WIT-400M", "OpenPath")


class CLIPLarge(CLIPVisionFoundation):
    """OpenAI CLIP ViT-L/14 at 224 px (``openai/clip-vit-large-patch14``, MIT, not gated): the hematology
    audit's "CLIP-L" (papers/002 Table 1 / A.3; every audit encoder runs at 224, so not the 336-px model).

    Architecture: the CLIP ViT-L/14 vision tower (``transformers`` ``CLIPVisionModelWithProjection``),
    24 blocks, width 1024, 16 heads, patch 14, 224 px. Embedding (``pooling=pooler``, default, as for
    ``clip``): ``pooler_output``, the class token after the post-LayerNorm, **1024-d**, the audit's
    "CLS/pooled features"; ``pooling=projection`` = ``get_image_features``, **768-d**.
    Preprocessing: ``audit`` (default) = ``model_card`` = the CLIP image processor, Resize 224 bicubic
    + CenterCrop 224 + CLIP statistics.

    Pretraining data (declared): WIT-400M, OpenAI's 400M web image-text pairs. Unverified offline:
    whether the audit used the pooled (1024) or projected (768) features; revision (``main``).
    """

    name = "clip_l"
    display_name = "CLIP-L"
    hub_id = "openai/clip-vit-large-patch14"
    licence = "MIT"
    licence_source = "https://huggingface.co/openai/clip-vit-large-patch14 (hub tag)"
    licence_date = "2026-12-01"
    licence_note = ("the hub tag as recorded when the adapter was written; the PRISM README's table has "
                    "only the ViT-B/32 CLIP (MIT)")
    gated = False
    architecture = "CLIP ViT-L/14 vision tower (transformers), 24 blocks"
    arch_short = "ViT-L/14 (transformers)"
    arch_facts = {"embed_dim": 1024, "patch_size": 14, "depth": 24, "reg_tokens": 0}
    poolings = {"pooler": 1024, "projection": 768}
    default_pooling = "pooler"
    profiles = {"audit": CLIP_PROFILES["model_card"], "model_card": CLIP_PROFILES["model_card"]}  # no PRISM runs
    default_profile = "audit"
    paper_dim = 1024
    vision_settings = VIT_L14
    pretraining_data = ("WIT-400M",)


def register(register) -> None:
    for cls in (CLIP, PLIP, CLIPLarge):
        register(cls.name, cls, description=cls.ls_description())
