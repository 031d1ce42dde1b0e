"""RedDino (Zedda et al., MICCAI 2025): RBC-focused DINOv2 (``--model reddino_s`` / ``_b`` / ``_l``).

RedDino continues DINOv2 training on about 1.25M red-blood-cell images from 18 sources. Weights: the
authors' timm exports ``Snarcy/RedDino-small`` / ``-base`` / ``-large`` (timm ``vit_*_patch14_dinov2``
with a 16 x 16 = 224 px position grid, as their ``huggingface/to_hub.ipynb`` builds them), hub tag
Apache-2.0, not gated. The audit reports "RedDino" as one encoder (the MLL23 winner); which size it
ran is not stated in papers/002: all published sizes are available.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.dinov2 import AUDIT_SIZE, DINOV2_ARCHS, DinoV2Family, sized

#: the timm data config the authors push (224 px, bicubic, crop_pct 1.0, ImageNet statistics)
REDDINO_AUDIT = Preprocessing(AUDIT_SIZE, AUDIT_SIZE, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
#: the authors' usage notebook: transforms.Resize((224, 224)) (bilinear) + ToTensor + ImageNet
REDDINO_CARD = Preprocessing(AUDIT_SIZE, AUDIT_SIZE, IMAGENET_MEAN, IMAGENET_STD, "bilinear")

_HUB_SIZE = {"S": "small", "B": "base", "L": "large"}


class _RedDino(DinoV2Family):
    """RedDino-{size}: DINOv2 ViT-{size}/14 trained further on RBC images.

    Architecture: timm ``vit_*_patch14_dinov2`` (LayerScale, no registers, patch 14), 224 px grid.
    Embedding (``pooling=cls``, default): the class token after the final LayerNorm (``model(x)`` of
    the authors' example). Preprocessing: ``audit`` = Resize 224 + CenterCrop 224, bicubic, ImageNet;
    ``model_card`` = the usage notebook's Resize((224, 224)) bilinear + ImageNet (a plain resize, the
    same as ``audit``'s geometry for square single-cell crops).

    Pretraining data: **not declared** (``None``, shown as unknown by the exposure audit): the
    RedDino paper's 18 RBC sources could not be enumerated offline, and papers/002 A.8 notes that
    RedDino, like DinoBloom, "was trained on overlapping public hematology data". Declare them per
    run with ``--model-args pretraining_data=NAME+NAME``.

    Unverified offline: the existence of ``Snarcy/RedDino-base`` (the small and large repositories
    are documented; base follows the same naming); the licence (hub tag Apache-2.0, while the
    exported timm config carries DINOv2's former ``cc-by-nc-4.0`` tag); revision (``main``).
    """

    licence = "Apache-2.0"
    licence_source = "https://huggingface.co/Snarcy/RedDino-small (and -base, -large; hub tag apache-2.0)"
    licence_date = "2026-12-02"
    licence_note = ("the hub tag says Apache-2.0 while the exported timm config carries DINOv2's former "
                    "cc-by-nc-4.0 tag")
    gated = False
    profiles = {"audit": REDDINO_AUDIT, "model_card": REDDINO_CARD}
    default_profile = "audit"
    native_size = 224
    weight_files = ("model.safetensors", "pytorch_model.bin")
    pretraining_data = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        arch, width, depth, _heads = DINOV2_ARCHS[cls.size]
        cls.hub_id = f"Snarcy/RedDino-{_HUB_SIZE[cls.size]}"
        cls.architecture = f"DINOv2 ViT-{cls.size}/14 (timm {arch}), {depth} blocks, width {width}"
        cls.arch_short = f"ViT-{cls.size}/14 (timm)"


RedDinoS, RedDinoB, RedDinoL = REDDINO_MODELS = tuple(sized(_RedDino, s) for s in "SBL")


def register(register) -> None:
    for cls in REDDINO_MODELS:
        register(cls.name, cls, description=cls.ls_description())
