"""Built-in model adapters, one vendor or family per module.

This package is installed as ``prism_plugin.model_adapters`` and registered
through the ``prism_plugin`` entry-point group like any third-party plugin.

The eight PRISM foundation models (``clip``, ``plip``, ``conch``, ``uni``,
``virchow2``, ``gigapath``, ``h_optimus_0``, ``midnight``) live one vendor or
family per module on top of :mod:`.foundation`; the generic families
``timm:<name>``, ``open_clip:<arch>[/<pretrained>]`` and ``hf:<repo>`` wrap any
model of those libraries; ``precomputed`` reads embeddings from disk and
``demo_vit`` is the offline random-weight demo. Importing this package is cheap:
torch, timm and transformers are imported only when an adapter is built.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl

#: modules with a ``register(register)`` function, in ``ls adapters`` order of origin
BUILTIN_MODULES = ("clip", "mahmood", "paige", "gigapath", "bioptimus", "kaiko",
                   "timm_generic", "openclip_generic", "hf_generic", "precomputed", "demo")

#: the eight PRISM models: ``--model`` name -> adapter class path (module:Class)
PRISM_MODELS = {
    "clip": "clip:CLIP", "plip": "clip:PLIP", "conch": "mahmood:CONCH", "uni": "mahmood:UNI",
    "virchow2": "paige:Virchow2", "gigapath": "gigapath:GigaPath", "h_optimus_0": "bioptimus:HOptimus0",
    "midnight": "kaiko:Midnight",
}


def prism_model_class(name: str):
    """The adapter class of one of the eight PRISM models (by ``--model`` name)."""
    import importlib

    module, cls = PRISM_MODELS[name].split(":")
    return getattr(importlib.import_module(f"prism_plugin.model_adapters.{module}"), cls)


@hookimpl
def register_adapters(register):
    import importlib

    for module in BUILTIN_MODULES:
        importlib.import_module(f"prism_plugin.model_adapters.{module}").register(register)
