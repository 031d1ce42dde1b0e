"""Marr lab (Helmholtz Munich): DinoBloom-S/B/L/G (``--model dinobloom_s`` / ``_b`` / ``_l`` / ``_g``).

DinoBloom (Koch et al., MICCAI 2024) fine-tunes the DINOv2 ViT-S/B/L/G checkpoints with a DINOv2
recipe on 13 public single-cell hematology datasets (> 380k white-blood-cell images). The original
weights are on Zenodo (record 10908163, ``DinoBloom-{S,B,L,G}.pth``, DINOv2-repository key names);
the hub copies used here are the timm conversions ``1aurent/vit_{small,base,large,giant}_patch14_224
.dinobloom`` (Apache-2.0, not gated). ``--model-args checkpoint=PATH`` takes either form: a hub
snapshot folder / ``model.safetensors``, or the Zenodo ``.pth`` (its ``teacher.backbone.*`` weights
are mapped onto timm's names).

Resolution (papers/002 Sec. 4 and A.14): the checkpoint names encode 224 px and DinoBloom's own
evaluation code runs at 224, but the architecture's configuration inherits DINOv2's 518 px default.
The audit forces 224 for every encoder: the default here. ``--model-args resolution=518`` gives the
native-518 variant of A.14 (position embeddings resampled, see :mod:`.dinov2`).
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.dinov2 import VIT_SIZE, AUDIT_SIZE, DINOV2_ARCHS, DinoV2Family, sized

#: the audit's input: the timm data config of the hub copies (bicubic, crop_pct 1.0, ImageNet) at 224
DINOBLOOM_AUDIT = Preprocessing(AUDIT_SIZE, AUDIT_SIZE, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
#: DinoBloom's own evaluation transform (marrlab/DinoBloom, eval/miccai/models/return_model.py
#: get_transforms): torchvision Resize(224) (bilinear) + ToTensor + ImageNet normalisation
DINOBLOOM_CARD = Preprocessing(AUDIT_SIZE, AUDIT_SIZE, IMAGENET_MEAN, IMAGENET_STD, "bilinear")

#: every WBC dataset of the audit except Acevedo (its source), papers/002 Sec. 4: Matek-19 (LMU),
#: Raabin-WBC and MLL23, which DinoBloom's paper calls "LabAnonymous"; plus the DINOv2
#: initialisation's LVD-142M
DINOBLOOM_PRETRAINING = ("Matek", "Raabin", "MLL23", "LabAnonymous", "LVD-142M")

_TIMM_SIZE_NAMES = {"S": "small", "B": "base", "L": "large", "G": "giant"}


class _DinoBloom(DinoV2Family):
    """DinoBloom-{size}: DINOv2 ViT-{size}/14 fine-tuned on 13 public hematology datasets.

    Architecture: timm ``vit_*_patch14_dinov2`` (LayerScale, no registers, patch 14; the giant
    model's MLP is packed SwiGLU), the position grid of the weights is 16 x 16 (224 px).
    Embedding (``pooling=cls``, default): the class token after the final LayerNorm, what DinoBloom's
    code and the timm model return. Preprocessing: ``audit`` (default) = Resize 224 + CenterCrop 224,
    bicubic, ImageNet statistics; ``model_card`` = DinoBloom's evaluation transform (Resize 224
    bilinear, ImageNet). ``resolution=518`` for A.14's native-518 extraction.

    Pretraining data (declared): Matek, Raabin, MLL23 (= "LabAnonymous") and DINOv2's LVD-142M.
    Unverified offline: the other public sources among DinoBloom's 13 are not enumerated here (none
    of them is an audit dataset, per papers/002 Sec. 4); the hub copies' revision (the cards pin
    none; ``main`` is used); whether the hub conversion's ``config.json`` declares 518 or 224 (the
    weights' 257-token position embedding is what this adapter reads).
    """

    licence = "Apache-2.0"
    licence_source = ("https://huggingface.co/1aurent/vit_small_patch14_224.dinobloom (and the base/large/giant "
                      "copies; the card links the marrlab/DinoBloom LICENSE)")
    licence_date = "2026-12-02"
    gated = False
    profiles = {"audit": DINOBLOOM_AUDIT, "model_card": DINOBLOOM_CARD}
    default_profile = "audit"
    native_size = 518
    pretraining_data = DINOBLOOM_PRETRAINING

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        arch, width, depth, _heads = DINOV2_ARCHS[cls.size]
        cls.hub_id = f"1aurent/vit_{_TIMM_SIZE_NAMES[cls.size]}_patch14_224.dinobloom"
        cls.weight_files = ("model.safetensors", "pytorch_model.bin", f"DinoBloom-{cls.size}.pth")
        swiglu = ", SwiGLU" if cls.size == "G" else ""
        cls.architecture = f"DINOv2 ViT-{VIT_SIZE[cls.size]}/14{swiglu} (timm {arch}), {depth} blocks, width {width}"
        cls.arch_short = f"ViT-{VIT_SIZE[cls.size]}/14{' SwiGLU' if swiglu else ''} (timm)"


DinoBloomS, DinoBloomB, DinoBloomL = (sized(_DinoBloom, s) for s in "SBL")
DinoBloomG = sized(_DinoBloom, "G", default_dtype="bf16")  # 1.1B parameters: bf16 autocast on CUDA
DINOBLOOM_MODELS = (DinoBloomS, DinoBloomB, DinoBloomL, DinoBloomG)


def register(register) -> None:
    for cls in DINOBLOOM_MODELS:
        register(cls.name, cls, description=cls.ls_description())
