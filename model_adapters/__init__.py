"""Built-in model adapters, one vendor or family per module.

This package is installed as ``prism_plugin.model_adapters`` and registered
through the ``prism_plugin`` entry-point group like any third-party plugin.

The eight PRISM foundation models (``clip``, ``plip``, ``conch``, ``uni``,
``virchow2``, ``gigapath``, ``h_optimus_0``, ``midnight``) live one vendor or
family per module on top of :mod:`.foundation`, as are the hematology audit's encoders
(:data:`AUDIT_MODELS`: DinoBloom, RedDino, Phikon, Lunit-DINO, DINOv2, EVA-02, BiomedCLIP, CLIP-L,
ImageNet ViT-B, ResNet-50 and ResNet-18; papers/002 Sec. 4); the generic families
``timm:<name>``, ``open_clip:<arch>[/<pretrained>]`` and ``hf:<repo>`` wrap any
model of those libraries; ``precomputed`` reads embeddings from disk and
``demo_vit`` is the offline random-weight demo. Importing this package is cheap:
torch, timm and transformers are imported only when an adapter is built.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl

#: modules with a ``register(register)`` function, in ``ls adapters`` order of origin
BUILTIN_MODULES = ("clip", "mahmood", "paige", "gigapath", "bioptimus", "kaiko",
                   "dinov2", "dinobloom", "reddino", "owkin", "lunit", "eva", "biomedclip", "imagenet",
                   "timm_generic", "openclip_generic", "hf_generic", "precomputed", "demo")

#: the eight PRISM models: ``--model`` name -> adapter class path (module:Class)
PRISM_MODELS = {
    "clip": "clip:CLIP", "plip": "clip:PLIP", "conch": "mahmood:CONCH", "uni": "mahmood:UNI",
    "virchow2": "paige:Virchow2", "gigapath": "gigapath:GigaPath", "h_optimus_0": "bioptimus:HOptimus0",
    "midnight": "kaiko:Midnight",
}


#: the hematology audit's encoder catalogue (papers/002 Sec. 4, Table 1, A.14): ``--model`` name -> module:Class
AUDIT_MODELS = {
    "dinobloom_s": "dinobloom:DinoBloomS", "dinobloom_b": "dinobloom:DinoBloomB",
    "dinobloom_l": "dinobloom:DinoBloomL", "dinobloom_g": "dinobloom:DinoBloomG",
    "reddino_s": "reddino:RedDinoS", "reddino_b": "reddino:RedDinoB", "reddino_l": "reddino:RedDinoL",
    "phikon": "owkin:Phikon", "lunit_dino_s16": "lunit:LunitDINOS16", "lunit_dino_s8": "lunit:LunitDINOS8",
    "dinov2_s": "dinov2:DINOv2S", "dinov2_b": "dinov2:DINOv2B", "dinov2_l": "dinov2:DINOv2L",
    "eva02_b": "eva:EVA02B", "biomedclip": "biomedclip:BiomedCLIP", "clip_l": "clip:CLIPLarge",
    "imagenet_vit_b": "imagenet:ImageNetViTB", "resnet50": "imagenet:ResNet50", "resnet18": "imagenet:ResNet18",
}


def prism_model_class(name: str):
    """The adapter class of one of the eight PRISM models (by ``--model`` name)."""
    import importlib

    module, cls = PRISM_MODELS[name].split(":")
    return getattr(importlib.import_module(f"prism_plugin.model_adapters.{module}"), cls)


def audit_model_class(name: str):
    """The adapter class of one of the hematology audit's encoders (by ``--model`` name)."""
    import importlib

    module, cls = AUDIT_MODELS[name].split(":")
    return getattr(importlib.import_module(f"prism_plugin.model_adapters.{module}"), cls)


@hookimpl
def register_adapters(register):
    import importlib

    for module in BUILTIN_MODULES:
        importlib.import_module(f"prism_plugin.model_adapters.{module}").register(register)
