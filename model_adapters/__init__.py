"""Built-in model adapters, one vendor or family per module.

This package is installed as ``prism_plugin.model_adapters`` and registered
through the ``prism_plugin`` entry-point group like any third-party plugin.

The eight PRISM foundation models (``clip``, ``plip``, ``conch``, ``uni``,
``virchow2``, ``gigapath``, ``h_optimus_0``, ``midnight``) live one vendor or
family per module on top of :mod:`.foundation`, as are the hematology audit's encoders
(``builtin_classes("audit")``: DinoBloom, RedDino, Phikon, Lunit-DINO, DINOv2, EVA-02, BiomedCLIP, CLIP-L,
ImageNet ViT-B, ResNet-50 and ResNet-18; papers/002 Sec. 4); the generic families
``timm:<name>``, ``open_clip:<arch>[/<pretrained>]`` and ``hf:<repo>`` wrap any
model of those libraries; ``precomputed`` reads embeddings from disk and
``demo_vit`` is the offline random-weight demo. Importing this package is cheap:
torch, timm and transformers are imported only when an adapter is built.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl

#: the one declaration of the built-in adapters: modules whose ``register(register)`` registers their own
#: classes, in ``ls adapters`` order of origin
BUILTIN_MODULES = ("clip", "mahmood", "paige", "gigapath", "bioptimus", "kaiko",
                   "dinov2", "dinobloom", "reddino", "owkin", "lunit", "eva", "biomedclip", "imagenet",
                   "timm_generic", "openclip_generic", "hf_generic", "eva_registry", "precomputed", "demo")


def _register_all(register) -> None:
    import importlib

    for module in BUILTIN_MODULES:
        importlib.import_module(f"prism_plugin.model_adapters.{module}").register(register)


def builtin_classes(profile: str | None = None) -> dict[str, type]:
    """``--model`` name -> class of the built-in adapters, in registration order; with ``profile``, the
    foundation models that default to it (``prism_main``: the eight PRISM models, ``audit``: the
    hematology audit's encoders, papers/002 Sec. 4)."""
    found: dict[str, type] = {}
    _register_all(lambda name, factory, **_: found.setdefault(name, factory))
    return {n: c for n, c in found.items()
            if isinstance(c, type) and (profile is None or getattr(c, "default_profile", None) == profile)}


@hookimpl
def register_adapters(register):
    _register_all(register)
