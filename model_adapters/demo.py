"""The demo adapter: a real ViT-Tiny network with random weights, small enough for 2 CPU cores.

``--model demo_vit`` runs timm's ``vit_tiny_patch16_224`` architecture at
96 x 96 input, randomly initialised with a fixed seed (no download), class-token
pooling, L2-normalised 192-d embeddings. It exercises the same extraction path
as a real foundation model; its numbers say nothing about any pretrained model.
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import Preprocessing
from prism_plugin.model_adapters.timm_generic import TimmAdapter

DEMO_ARCH = "vit_tiny_patch16_224"


class DemoViT(TimmAdapter):
    licence = "Apache-2.0 (timm architecture, random weights)"
    licence_source = "timm's package metadata (License: Apache-2.0, timm 1.0.31): the architecture's code; no weights"
    licence_date = "2026-12-02"
    #: no hub weights (``ls adapters``: gated n/a)
    gated = None

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("pretrained", False)
        kwargs.setdefault("img_size", 96)
        kwargs.setdefault("pooling", "cls")
        kwargs.setdefault("batch_size", 64)
        super().__init__(DEMO_ARCH, **kwargs)
        self.name = "demo_vit"
        self.display_name = "DemoViT-Tiny"


#: what DemoViT builds at its defaults (timm's data config of vit_tiny_patch16_224 at 96 px; checked by the tests)
DEMO_PREPROCESSING = Preprocessing(resize=107, crop=96, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                                   interpolation="bicubic")


def register(register) -> None:
    register("demo_vit", DemoViT, dim=192, preprocessing=DEMO_PREPROCESSING,
             description="ViT-Tiny at 96 px with random weights (offline demo, 192-d)")
