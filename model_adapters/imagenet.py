"""ImageNet-supervised baselines of the hematology audit: ViT-B/16 (``--model imagenet_vit_b``),
ResNet-50 (``--model resnet50``) and the supervised ResNet-18 baseline (``--model resnet18``).

All are timm models with timm-hosted weights (not gated): ``timm/vit_base_patch16_224.augreg2_in21k_ft_in1k``
(timm's default ``vit_base_patch16_224``), and the original torchvision ImageNet-1k weights
``timm/resnet50.tv_in1k`` / ``timm/resnet18.tv_in1k`` (torchvision's ``IMAGENET1K_V1``; BSD-3-Clause).
"""

from __future__ import annotations

from typing import Any, ClassVar

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from prism_plugin.model_adapters.foundation import TimmFoundation

# --------------------------------------------------------------------------- ViT-B/16
VITB_AUDIT = Preprocessing(224, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bicubic")
#: timm's pretrained config: 224 px, crop_pct 0.9 (Resize 248), bicubic, mean = std = 0.5
VITB_CARD = Preprocessing(248, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bicubic")


class ImageNetViTB(TimmFoundation):
    """ImageNet ViT-B/16 (Dosovitskiy et al.; AugReg2: ImageNet-21k pretraining, ImageNet-1k fine-tuning).

    Architecture: timm ``vit_base_patch16_224`` (12 blocks, width 768, patch 16), classifier removed.
    Embedding (``pooling=cls``, default): the class token after the final LayerNorm, **768-d**; also
    ``mean`` and ``cls+mean``. Preprocessing: ``audit`` = Resize 224 + CenterCrop 224, bicubic,
    mean = std = 0.5; ``model_card`` = timm's data config (Resize 248 + CenterCrop 224).

    Pretraining data (declared): ImageNet-21k, ImageNet-1k. Unverified offline: which ImageNet ViT-B
    checkpoint the audit used (papers/002 cites the ViT paper only; timm's default tag is assumed,
    torchvision's ``vit_b_16`` is ImageNet-1k only and uses ImageNet statistics); revision (``main``).
    """

    name = "imagenet_vit_b"
    display_name = "ImageNet-ViT-B"
    hub_id = "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"
    licence = "Apache-2.0"
    licence_source = "https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k (hub tag)"
    licence_date = "2026-12-01"
    licence_note = "the hub tag as recorded when the adapter was written"
    gated = False
    architecture = "ViT-B/16 (timm vit_base_patch16_224), 12 blocks, width 768"
    arch_short = "ViT-B/16 (timm)"
    arch_facts = {"embed_dim": 768, "patch_size": 16, "depth": 12, "reg_tokens": 0}
    timm_arch = "vit_base_patch16_224"
    timm_kwargs = {"num_classes": 0, "global_pool": "token", "img_size": 224}
    poolings = {"cls": 768, "mean": 768, "cls+mean": 1536}
    default_pooling = "cls"
    profiles = {"audit": VITB_AUDIT, "model_card": VITB_CARD}
    default_profile = "audit"
    paper_dim = 768
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "fp32"
    ignore_prefixes = ("head.",)
    pretraining_data = ("ImageNet-21k", "ImageNet-1k")


# --------------------------------------------------------------------------- ResNets
RESNET_AUDIT = Preprocessing(224, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear")
#: the torchvision / timm ``tv_in1k`` eval transform: Resize 256 + CenterCrop 224, bilinear, ImageNet
RESNET_CARD = Preprocessing(256, 224, IMAGENET_MEAN, IMAGENET_STD, "bilinear")


class TimmCNNFoundation(TimmFoundation):
    """A timm CNN pooled by its own global average pool (``model(x)`` without classifier)."""

    #: blocks per stage, checked on the built network
    stage_blocks: ClassVar[tuple[int, ...]] = ()

    def arch_summary(self, model) -> dict[str, int]:
        stages = [len(getattr(model, f"layer{i}")) for i in range(1, 5) if hasattr(model, f"layer{i}")]
        return {"embed_dim": int(model.num_features), "depth": sum(stages), "patch_size": 0, "reg_tokens": 0,
                "stages": len(stages)}

    def pool(self, model, batch):
        return model(batch)

    def create_model(self, **overrides: Any):
        depth = overrides.pop("depth", None)
        if depth is not None:  # reduced instances for tests: one block per stage
            overrides["layers"] = [1] * len(self.stage_blocks)
        return super().create_model(**overrides)


class _TorchvisionResNet(TimmCNNFoundation):
    """ResNet-{n} with the original torchvision ImageNet-1k weights (He et al., 2016), supervised.

    Architecture: timm ``resnet{n}`` (torchvision layout: 7x7 stem, 4 stages), classifier removed.
    Embedding (``pooling=pooled``): global average pool of the last stage. Preprocessing: ``audit``
    = Resize 224 + CenterCrop 224, bilinear, ImageNet; ``model_card`` = the torchvision eval transform
    (Resize 256 + CenterCrop 224).
    """

    licence = "BSD-3-Clause"
    licence_source = ("torchvision's licence (its IMAGENET1K_V1 weights); "
                      "https://huggingface.co/timm/resnet50.tv_in1k and https://huggingface.co/timm/resnet18.tv_in1k")
    licence_date = "2026-12-01"
    licence_note = "as recorded when the adapters were written"
    gated = False
    timm_kwargs = {"num_classes": 0, "global_pool": "avg"}
    default_pooling = "pooled"
    profiles = {"audit": RESNET_AUDIT, "model_card": RESNET_CARD}
    default_profile = "audit"
    weight_files = ("model.safetensors", "pytorch_model.bin")
    default_dtype = "fp32"
    ignore_prefixes = ("fc.",)
    pretraining_data = ("ImageNet-1k",)


class ResNet50(_TorchvisionResNet):
    """ResNet-50, ImageNet-1k supervised (torchvision V1 weights via ``timm/resnet50.tv_in1k``): **2048-d**.

    Unverified offline: which ImageNet ResNet-50 the audit used (torchvision V1 assumed; the V2
    weights are ``timm/resnet50.tv2_in1k``, pass them with ``checkpoint=``); revision (``main``).
    """

    name = "resnet50"
    display_name = "ResNet-50"
    hub_id = "timm/resnet50.tv_in1k"
    architecture = "ResNet-50 (timm resnet50), stages 3-4-6-3, width 2048"
    arch_short = "torchvision ResNet, 50 layers (timm)"
    arch_facts = {"embed_dim": 2048, "depth": 16}
    stage_blocks = (3, 4, 6, 3)
    timm_arch = "resnet50"
    poolings = {"pooled": 2048}
    paper_dim = 2048


class ResNet18(_TorchvisionResNet):
    """ResNet-18 (torchvision V1 weights via ``timm/resnet18.tv_in1k``): **512-d**; the audit's CNN baseline.

    What differs from the audit's baseline: papers/002 lists "a supervised ResNet-18 baseline" apart
    from its 15 *frozen* encoders, which we read as trained on its source (Acevedo); the text says no
    more. This default is frozen ImageNet-1k (supervised on ImageNet only, never on blood cells), i.e.
    one more frozen encoder, not that baseline. Unverified offline: how the baseline was trained; the
    audit publishes none of its settings (init, optimiser, learning rate, epochs, batch size,
    augmentation, seed), so it cannot be reproduced exactly; ``prism-run fit-baseline
    --task hema_acevedo --output DIR`` fits one on the source task's train split (the 70 % a run's probe
    sees) with our recorded defaults (ImageNet init, SGD, cross-entropy, this adapter's preprocessing;
    ``DIR/baseline.json``), and ``--model resnet18 --model-args checkpoint=DIR/pytorch_model.bin``
    embeds with it (a timm/torchvision ``resnet18`` state dict; its ``fc`` is ignored; the file's content
    digest is the weights identity, so the cache key differs from the default's). Declare what it saw
    with ``pretraining_data=ImageNet-1k+Acevedo``. Either way the probe on top is the task's own.
    """

    name = "resnet18"
    display_name = "ResNet-18"
    hub_id = "timm/resnet18.tv_in1k"
    architecture = "ResNet-18 (timm resnet18), stages 2-2-2-2, width 512"
    arch_short = "torchvision ResNet, 18 layers (timm)"
    arch_facts = {"embed_dim": 512, "depth": 8}
    stage_blocks = (2, 2, 2, 2)
    timm_arch = "resnet18"
    poolings = {"pooled": 512}
    paper_dim = 512


IMAGENET_MODELS = (ImageNetViTB, ResNet50, ResNet18)


def register(register) -> None:
    for cls in IMAGENET_MODELS:
        register(cls.name, cls, description=cls.ls_description())
