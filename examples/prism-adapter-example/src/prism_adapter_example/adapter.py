"""A complete, weight-free adapter: colour statistics of a stained tile.

Everything a real foundation-model adapter declares is here: the name users
type (the entry-point name, ``example_colour_stats``), the display name written
to the results, the embedding width, the preprocessing, a licence, the
``--model-args`` it accepts, ``build`` (load the network) and ``forward``
(preprocessed batch -> embeddings). A real model would build a network in
``build`` and call it in ``forward``; prism-plugin does the rest (decoding,
batching, device, L2 normalisation, the cache, the probe grid, the report).

Its weights identity needs no code: the base class's ``weights_fingerprint()``
hashes the content of any file an ``__init__`` argument names (a ``checkpoint=``
of your own adapter), a declared ``hub_id``/``revision`` and the other
arguments' values (here ``size``), so the embedding cache never serves features
of other weights (see the README).
"""

from __future__ import annotations

from typing import Any

from prism_plugin.embed.adapter import Adapter, Preprocessing, parse_int

QUANTILES = (0.1, 0.5, 0.9)


class ColourStatsAdapter(Adapter):
    """Per-channel mean, std and quantiles of RGB and of optical density (H&E stain proxies)."""

    name = "example_colour_stats"
    display_name = "ColourStats"
    licence = "Apache-2.0"
    # images are resized to 64 px and kept in [0, 1]: mean 0, std 1 leaves them unnormalised
    preprocessing = Preprocessing(resize=64, crop=64, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                                  interpolation="bilinear")

    def __init__(self, *, size: Any = 64, **base: Any):
        super().__init__(**base)
        side = parse_int(size, "size", 8)
        self.preprocessing = Preprocessing(resize=side, crop=side, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                                           interpolation="bilinear")
        # RGB and optical density, each: mean, std and len(QUANTILES) quantiles per channel
        self.embed_dim = 2 * 3 * (2 + len(QUANTILES))

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"size"}

    def build(self, device) -> None:
        import torch

        self._q = torch.tensor(QUANTILES, device=device)

    def forward(self, batch):
        import torch

        rgb = batch.flatten(2)                                   # (B, 3, H*W) in [0, 1]
        od = -torch.log(rgb.clamp(min=1 / 255))                  # Beer-Lambert optical density
        feats = []
        for x in (rgb, od):
            feats += [x.mean(dim=2), x.std(dim=2)]
            feats += list(torch.quantile(x, self._q.to(x.dtype), dim=2).unbind(0))
        return torch.cat(feats, dim=1)
