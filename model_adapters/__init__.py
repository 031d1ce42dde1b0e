"""Built-in model adapters, one vendor or family per module.

This package is installed as ``prism_plugin.model_adapters`` and registered
through the ``prism_plugin`` entry-point group like any third-party plugin.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl


@hookimpl
def register_adapters(register):
    from prism_plugin.model_adapters import demo, precomputed, timm_generic

    timm_generic.register(register)
    precomputed.register(register)
    demo.register(register)
