"""Microsoft BiomedCLIP (``--model biomedclip``): the image tower of
``microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224`` (an open_clip hub model, MIT, not gated).

Built with ``open_clip`` (optional extra ``prism-plugin[clip]``) from the model's own
``open_clip_config.json`` vision settings, written out here so that the architecture is known
without the hub: a timm ``vit_base_patch16_224`` trunk (``timm_pool=""``: its class-token pooling,
``timm_proj="linear"``: a bias-free 768 -> 512 projection), image size 224, CLIP statistics.
The text tower (PubMedBERT) is not built; its weights in the checkpoint are ignored.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, Preprocessing
from prism_plugin.errors import PrismError
from prism_plugin.model_adapters.foundation import FoundationAdapter

#: vision part of the hub's open_clip_config.json
BIOMEDCLIP_VISION = {"timm_model_name": "vit_base_patch16_224", "timm_model_pretrained": False, "timm_pool": "",
                     "timm_proj": "linear", "image_size": 224}
BIOMEDCLIP_EMBED_DIM = 512
#: open_clip's transform for this model: Resize 224 (bicubic) + CenterCrop 224 + the preprocess_cfg statistics
BIOMEDCLIP_PREP = Preprocessing(224, 224, CLIP_MEAN, CLIP_STD, "bicubic")


class BiomedCLIP(FoundationAdapter):
    """BiomedCLIP (Zhang et al., 2023): CLIP trained on PMC-15M figure-caption pairs.

    Architecture: open_clip ``TimmModel`` = timm ViT-B/16 at 224 px (12 blocks, width 768) + linear
    projection to 512. Embedding (``pooling=cls``, default): the trunk's class token after its final
    LayerNorm, **768-d**, the audit's "CLS features"; ``pooling=projected`` is open_clip's
    ``encode_image`` (unnormalised), **512-d**. Preprocessing: ``audit`` = ``model_card`` = open_clip's
    eval transform, Resize 224 bicubic + CenterCrop 224 + CLIP statistics.

    Pretraining data (declared): PMC-15M. Unverified offline: whether the audit took the trunk's CLS
    or the projected ``encode_image`` features (papers/002 says "CLS/pooled"); revision (``main``;
    the hub's history shows several config updates, none changing the vision settings used here).
    """

    name = "biomedclip"
    display_name = "BiomedCLIP"
    hub_id = "microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224"
    licence = "MIT"
    licence_source = "https://huggingface.co/microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224 (hub tag)"
    licence_date = "2026-12-01"
    licence_note = "the hub tag as recorded when the adapter was written"
    gated = False
    architecture = "BiomedCLIP image tower: ViT-B/16 (open_clip TimmModel, timm vit_base_patch16_224), 12 blocks"
    arch_short = "ViT-B/16 (open_clip/timm)"
    arch_facts = {"embed_dim": 768, "patch_size": 16, "depth": 12, "reg_tokens": 0}
    poolings = {"cls": 768, "projected": BIOMEDCLIP_EMBED_DIM}
    default_pooling = "cls"
    profiles = {"audit": BIOMEDCLIP_PREP, "model_card": BIOMEDCLIP_PREP}
    default_profile = "audit"
    paper_dim = 768
    weight_files = ("open_clip_pytorch_model.bin", "open_clip_model.safetensors")
    default_dtype = "fp16"
    ignore_prefixes = ("text.", "logit_scale", "logit_bias")
    pretraining_data = ("PMC-15M",)

    @staticmethod
    def _open_clip():
        try:
            import open_clip.model as oc_model
        except ImportError:
            raise PrismError("BiomedCLIP is built with open_clip, which is not installed; "
                             "pip install 'prism-plugin[clip]' (or pip install open_clip_torch)") from None
        return oc_model

    def create_model(self, **overrides: Any):
        import torch

        oc_model = self._open_clip()
        depth = overrides.pop("depth", None)
        cfg = {**BIOMEDCLIP_VISION, **overrides}
        if depth is None:
            return oc_model._build_vision_tower(BIOMEDCLIP_EMBED_DIM, cfg)
        # reduced instances (tests): open_clip builds the full trunk, so build it on meta, keep the
        # first blocks and materialise only those, initialised by timm / torch as usual
        target = torch.empty(0).device
        with torch.device("meta"):
            visual = oc_model._build_vision_tower(BIOMEDCLIP_EMBED_DIM, cfg)
        visual.trunk.blocks = visual.trunk.blocks[: int(depth)]
        if target.type != "meta":
            visual = visual.to_empty(device=target)
            visual.trunk.init_weights()
            visual.head.proj.reset_parameters()
        return visual

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        # a full open_clip CLIP checkpoint: keep the image tower ("visual.*"), drop the rest
        if any(k.startswith("visual.") for k in state):
            return {k[len("visual."):]: v for k, v in state.items() if k.startswith("visual.")}
        return state

    def arch_summary(self, model) -> dict[str, int]:
        trunk = model.trunk
        return {"embed_dim": int(trunk.embed_dim), "patch_size": int(trunk.patch_embed.patch_size[0]),
                "depth": len(trunk.blocks), "reg_tokens": int(getattr(trunk, "num_reg_tokens", 0)),
                "img_size": int(trunk.patch_embed.img_size[0]), "projection_dim": int(model.head.proj.out_features)}

    def pool(self, model, batch):
        if self.pooling == "projected":
            return model(batch)
        return model.trunk(batch)


def register(register) -> None:
    register(BiomedCLIP.name, BiomedCLIP, description=BiomedCLIP.ls_description())
