"""Mahmood Lab models: UNI (``--model uni``) and CONCH (``--model conch``).

Both are gated on the hub under CC-BY-NC-ND 4.0: accept the terms on the model
page, then log in (``hf auth login`` or ``HF_TOKEN``), or pass a local copy
with ``--model-args checkpoint=PATH``.
"""

from __future__ import annotations

import json
from typing import Any

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.errors import PrismError
from prism_plugin.model_adapters.foundation import FoundationAdapter, TimmFoundation


class UNI(TimmFoundation):
    """UNI (``MahmoodLab/UNI``): ViT-L/16 trained with DINOv2 on Mass-100K (100k WSIs).

    Architecture as on the model card: timm ``vit_large_patch16_224`` with
    ``init_values=1e-5`` (LayerScale), ``dynamic_img_size=True``, no head:
    24 blocks, width 1024, 16 heads, patch 16, no register tokens.

    Embedding (PRISM, ``pooling=cls``): ``model(x)``, the class token after the
    final norm, **1024-d**. Also ``mean`` and ``cls+mean`` (2048).

    Preprocessing: ``prism_main`` = Resize 224 (bilinear) + CenterCrop 224 +
    ImageNet (Table 4); ``model_card`` = the card's transform and the hub's timm
    config: Resize 224 bilinear, ImageNet; ``prism_camelyon17`` = the same, as
    PRISM's Camelyon17 re-extraction resolved it through timm (Table 6).

    dtype policy: bf16 autocast on CUDA (a LayerScale ViT-L; bf16 keeps fp32's
    exponent range) under ``model_card``; ``prism_main`` runs in fp32 and
    ``prism_camelyon17`` in fp16, as PRISM did (docs/recipes.md).
    """

    name = "uni"
    display_name = "UNI"
    hub_id = "MahmoodLab/UNI"
    licence = "CC-BY-NC-ND-4.0"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/MahmoodLab/UNI"
    licence_date = "2026-12-02"
    gated = True
    architecture = "ViT-L/16 (timm vit_large_patch16_224, LayerScale 1e-5), 24 blocks"
    arch_short = "ViT-L/16 (timm)"
    arch_facts = {"embed_dim": 1024, "patch_size": 16, "depth": 24, "reg_tokens": 0}
    timm_arch = "vit_large_patch16_224"
    timm_kwargs = {"img_size": 224, "patch_size": 16, "init_values": 1e-5, "num_classes": 0,
                   "dynamic_img_size": True}
    poolings = {"cls": 1024, "mean": 1024, "cls+mean": 2048}
    default_pooling = "cls"
    profiles = {
        "prism_main": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
        # the card's torchvision Resize(224) and the hub config's timm data config are both bilinear, as
        # was PRISM's Camelyon17 extraction (it resolved UNI's transform through timm)
        "model_card": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
        "prism_camelyon17": Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear"),
    }
    paper_dim = 1024
    weight_files = ("pytorch_model.bin", "model.safetensors")
    default_dtype = "bf16"
    #: the UNI card: Mass-100K (100k H&E WSIs from MGH, BWH and GTEx)
    pretraining_data = ("Mass-100K",)


CONCH_LOADER = Preprocessing(448, 448, CLIP_MEAN, CLIP_STD, "bicubic")


class CONCH(FoundationAdapter):
    """CONCH (``MahmoodLab/CONCH``): CoCa-style vision-language model; only its image tower is built.

    Architecture (``conch-fork`` package, config ``conch_ViT-B-16``, optional
    extra ``prism-plugin[conch]``): a timm ViT-B/16 trunk at 448 px (12 blocks,
    width 768) followed by an attentional pooler (1 contrast query, 8 heads,
    width 512) with LayerNorm, then a 512 x 512 contrastive projection.

    Embedding (PRISM, ``pooling=pooled``): ``encode_image(x, proj_contrast=False,
    normalize=True)`` as in the PRISM notebooks, i.e. the attentional-pool
    contrast token after its LayerNorm, **512-d**, L2-normalised (our
    ``normalize`` step; equal to the encoder's own ``normalize=True``).
    ``pooling=projected`` is ``encode_image`` with the contrastive projection.

    Preprocessing: the model loader's transform in both profiles (Table 4 and 6):
    Resize 448 bicubic + CenterCrop 448 + OpenAI CLIP statistics.

    dtype policy: bf16 autocast on CUDA.
    """

    name = "conch"
    display_name = "CONCH"
    hub_id = "MahmoodLab/CONCH"
    licence = "CC-BY-NC-ND-4.0"
    licence_source = "PRISM README (prism-bench), model table; https://huggingface.co/MahmoodLab/CONCH"
    licence_date = "2026-12-02"
    gated = True
    architecture = "CoCa image tower: ViT-B/16 at 448 px + attentional pooler (conch-fork), 12 blocks"
    arch_short = "ViT-B/16@448 + attn pool (conch-fork)"
    arch_facts = {"embed_dim": 768, "patch_size": 16, "depth": 12, "reg_tokens": 0}
    poolings = {"pooled": 512, "projected": 512}
    default_pooling = "pooled"
    profiles = {"prism_main": CONCH_LOADER, "model_card": CONCH_LOADER, "prism_camelyon17": CONCH_LOADER}
    paper_dim = 512
    weight_files = ("pytorch_model.bin",)
    default_dtype = "bf16"
    ignore_prefixes = ("text.", "text_decoder.", "logit_scale")
    #: the CONCH card: 1.17M histopathology image-caption pairs (PubMed Central and educational sources)
    pretraining_data = ("CONCH-1.17M",)
    CONFIG_NAME = "conch_ViT-B-16"

    @staticmethod
    def _conch():
        try:
            from conch.open_clip_custom import coca_model
        except ImportError:
            raise PrismError("CONCH needs the conch-fork package (the CONCH model code, no weights): "
                             "pip install 'prism-plugin[conch]' (or pip install conch-fork)") from None
        return coca_model

    @classmethod
    def model_config(cls) -> dict[str, Any]:
        from importlib import resources

        cls._conch()
        path = resources.files("conch.open_clip_custom") / "model_configs" / f"{cls.CONFIG_NAME}.json"
        return json.loads(path.read_text())

    def create_model(self, **overrides: Any):
        coca_model = self._conch()
        cfg = self.model_config()
        vision = dict(cfg["vision_cfg"])
        if "depth" in overrides:
            vision["layers"] = int(overrides.pop("depth"))
        vision.update(overrides)
        return coca_model._build_vision_tower(cfg["embed_dim"], vision, cfg.get("embed_dim_caption"))

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        # a full CoCa checkpoint: keep the image tower ("visual.*"), drop the rest
        out: dict[str, Any] = {}
        for key, value in state.items():
            if key.startswith("visual."):
                out[key[len("visual."):]] = value
            elif not key.startswith(self.ignore_prefixes):
                out[key] = value
        return out

    def arch_summary(self, model) -> dict[str, int]:
        trunk = model.trunk
        return {"embed_dim": int(trunk.embed_dim), "patch_size": int(trunk.patch_embed.patch_size[0]),
                "depth": len(trunk.blocks), "reg_tokens": int(getattr(trunk, "num_reg_tokens", 0)),
                "img_size": int(trunk.patch_embed.img_size[0]), "contrast_dim": int(model.proj_contrast.shape[1])}

    def pool(self, model, batch):
        if self.pooling == "projected":
            out = model(batch)
            return out[0] if isinstance(out, tuple) else out
        return model.forward_no_head(batch, normalize=False)


def register(register) -> None:
    for cls in (UNI, CONCH):
        register(cls.name, cls, description=cls.ls_description())
