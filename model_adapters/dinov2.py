"""Meta DINOv2 (``--model dinov2_s`` / ``dinov2_b`` / ``dinov2_l``) and the patch-14 ViT machinery shared
with the DINOv2-derived hematology encoders (DinoBloom in :mod:`.dinobloom`, RedDino in :mod:`.reddino`).

These are the DINOv2 sizes the hematology audit used (papers/002, Sec. 4 and A.3/A.5 name DINOv2-S,
-B and -L). Weights: the timm hub copies of Meta's LVD-142M checkpoints (``timm/vit_*_patch14_dinov2
.lvd142m``, Apache-2.0, not gated), built with timm (no extra dependency).

Resolution. DINOv2 checkpoints carry a 37 x 37 position grid (518 px); the audit runs every encoder at
224 x 224. The adapter builds the ViT at the requested input size and resamples the checkpoint's
position embeddings to that grid once, at load (bicubic with antialiasing, timm's
``resample_abs_pos_embed``, the same resampling timm applies when it loads such a checkpoint at
another size). ``--model-args resolution=518`` runs at the native size instead (any multiple of the
patch size is accepted); the input size is part of the preprocessing, so of the cache key.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from prism_plugin.embed.adapter import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, parse_int
from prism_plugin.errors import PrismError
from prism_plugin.model_adapters.foundation import TimmFoundation

#: size -> (timm architecture, width, depth, heads); the DINOv2 ViT family with 14 px patches
DINOV2_ARCHS = {
    "S": ("vit_small_patch14_dinov2", 384, 12, 6),
    "B": ("vit_base_patch14_dinov2", 768, 12, 12),
    "L": ("vit_large_patch14_dinov2", 1024, 24, 16),
    "G": ("vit_giant_patch14_dinov2", 1536, 40, 24),  # packed SwiGLU MLP
}

#: size letter -> the ViT naming of the DINOv2 paper (the giant is "ViT-g")
VIT_SIZE = {"S": "S", "B": "B", "L": "L", "G": "g"}

#: the audit's common input: Resize 224 + CenterCrop 224 (a plain resize for square single-cell crops)
AUDIT_SIZE = 224


def with_size(prep: Preprocessing, size: int) -> Preprocessing:
    """``prep`` with its crop set to ``size`` (the resize scaled alike, so the crop margin is kept)."""
    resize = size if prep.resize == prep.crop else int(round(prep.resize * size / prep.crop))
    return Preprocessing(resize, size, prep.mean, prep.std, prep.interpolation)


class PatchViTFoundation(TimmFoundation):
    """A timm ViT whose input size is an option (``resolution``), its position grid resampled at load.

    Subclasses declare ``size`` (a key of :data:`DINOV2_ARCHS` or their own ``timm_arch``),
    ``patch`` and the profiles; ``resolution`` defaults to the profile's crop.
    """

    patch: ClassVar[int] = 14
    #: the input size of the checkpoint's position grid, for the docs (the weights themselves decide)
    native_size: ClassVar[int] = 518

    def __init__(self, *, resolution: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        if resolution not in (None, ""):
            size = parse_int(resolution, "resolution", self.patch)
            if size % self.patch:
                raise PrismError(f"--model-args resolution={resolution}: {self.display_name} has {self.patch}-px "
                                 f"patches; use a multiple of {self.patch} (e.g. 224 or {self.native_size})")
            self.preprocessing = with_size(self.preprocessing, size)
        self.resolution = int(self.preprocessing.crop)

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"resolution"}

    def timm_create_kwargs(self) -> dict[str, Any]:
        return {**self.timm_kwargs, "img_size": self.resolution}

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        state = dinov2_to_timm(state)
        pos = state.get("pos_embed")
        if pos is not None and pos.ndim == 3:
            grid = self.resolution // self.patch
            prefix = 1 + int(getattr(self, "reg_tokens", 0))
            have = pos.shape[1] - prefix
            if have != grid * grid and int(round(math.sqrt(have))) ** 2 == have:
                from timm.layers import resample_abs_pos_embed

                state["pos_embed"] = resample_abs_pos_embed(pos.float(), new_size=[grid, grid], num_prefix_tokens=prefix)
        return state


def dinov2_to_timm(state: dict[str, Any]) -> dict[str, Any]:
    """Key names of an original DINOv2-repository checkpoint (as DinoBloom's Zenodo ``.pth`` and
    RedDino's training checkpoints are saved) -> timm's; a timm checkpoint passes unchanged.

    * a training checkpoint's ``teacher`` dict: its ``backbone.*`` weights (heads dropped);
    * ``mask_token`` (used only by the iBOT loss) is dropped;
    * the fused SwiGLU of the giant model (``mlp.w12`` / ``mlp.w3``) -> timm's ``mlp.fc1`` / ``mlp.fc2``.
    """
    if isinstance(state.get("teacher"), dict):
        state = state["teacher"]
    if any(k.startswith("backbone.") for k in state):
        state = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
    out = {}
    for key, value in state.items():
        if key == "mask_token" or not hasattr(value, "shape"):
            continue
        out[key.replace(".mlp.w12.", ".mlp.fc1.").replace(".mlp.w3.", ".mlp.fc2.")] = value
    return out


def sized(base: type, size: str, **attrs: Any) -> type:
    """The ``size`` member of family ``_Family``: class ``FamilyS``, name ``family_s``, shown as ``Family-S``."""
    family = base.__name__.lstrip("_")
    return type(f"{family}{size}", (base,), {"__module__": base.__module__, "name": f"{family.lower()}_{size.lower()}",
                                            "display_name": f"{family}-{size}", "size": size, **attrs})


class DinoV2Family(PatchViTFoundation):
    """DINOv2-architecture ViT (timm ``vit_*_patch14_dinov2``): LayerScale, no registers, 14 px patches.

    Recipes: ``cls`` (the class token after the final LayerNorm, what ``model(x)`` returns; the
    audit's "CLS features", default), ``mean`` (mean of the patch tokens) and ``cls+mean``.
    """

    size: ClassVar[str] = "S"
    default_pooling = "cls"
    default_dtype = "fp32"

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        arch, width, depth, heads = DINOV2_ARCHS[cls.size]
        cls.timm_arch = arch
        cls.timm_kwargs = {"num_classes": 0, "global_pool": "token", "init_values": 1e-5}
        cls.arch_facts = {"embed_dim": width, "patch_size": 14, "depth": depth, "reg_tokens": 0}
        cls.poolings = {"cls": width, "mean": width, "cls+mean": 2 * width}
        cls.paper_dim = width


# --------------------------------------------------------------------------- Meta DINOv2
DINOV2_AUDIT = Preprocessing(AUDIT_SIZE, AUDIT_SIZE, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
#: the timm pretrained config of the lvd142m checkpoints: 518 px, bicubic, crop_pct 1.0, ImageNet
DINOV2_CARD = Preprocessing(518, 518, IMAGENET_MEAN, IMAGENET_STD, "bicubic")


class _DINOv2(DinoV2Family):
    """Meta DINOv2 ViT-{size}/14, self-supervised on LVD-142M (``timm/vit_*_patch14_dinov2.lvd142m``).

    Architecture as in timm's ``vit_*_patch14_dinov2`` (LayerScale 1e-5, no registers, 14 px patches,
    a 37 x 37 position grid = 518 px). Embedding (``pooling=cls``): the class token after the final
    LayerNorm. Preprocessing: ``audit`` (default) = Resize 224 + CenterCrop 224, bicubic, ImageNet
    statistics (the timm data config with the audit's 224 input); ``model_card`` = the timm data
    config itself (518 px). Licence Apache-2.0 (timm's pretrained config and Meta's repository), not
    gated. Revision: the hub's ``main`` (no revision is pinned by the card).

    Unverified offline: whether the audit loaded these weights from timm, torch.hub or transformers
    (``facebook/dinov2-*``): the same checkpoints, so only the position-embedding interpolation at 224
    px can differ slightly between the three loaders.
    """

    licence = "Apache-2.0"
    licence_source = ("https://huggingface.co/timm/vit_small_patch14_dinov2.lvd142m (and the base/large copies; "
                      "Meta's facebookresearch/dinov2 repository)")
    licence_date = "2026-12-01"
    licence_note = ("as recorded when the adapter was written; DINOv2's weights were first released "
                    "under CC-BY-NC-4.0 (the tag RedDino's timm export still carries)")
    gated = False
    profiles = {"audit": DINOV2_AUDIT, "model_card": DINOV2_CARD}
    default_profile = "audit"
    weight_files = ("model.safetensors", "pytorch_model.bin")
    pretraining_data = ("LVD-142M",)

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        width = DINOV2_ARCHS[cls.size][1]
        cls.hub_id = f"timm/{DINOV2_ARCHS[cls.size][0]}.lvd142m"
        cls.architecture = (f"DINOv2 ViT-{VIT_SIZE[cls.size]}/14 (timm {DINOV2_ARCHS[cls.size][0]}), "
                            f"{DINOV2_ARCHS[cls.size][2]} blocks, width {width}")
        cls.arch_short = f"ViT-{VIT_SIZE[cls.size]}/14 (timm)"


DINOv2S, DINOv2B, DINOv2L = DINOV2_MODELS = tuple(sized(_DINOv2, s) for s in "SBL")


def register(register) -> None:
    for cls in DINOV2_MODELS:
        register(cls.name, cls, description=cls.ls_description())


__all__ = ["DINOv2S", "DINOv2B", "DINOv2L", "DinoV2Family", "PatchViTFoundation", "dinov2_to_timm", "sized",
           "with_size", "DINOV2_ARCHS"]
