"""A third-party adapter: a small seeded CNN, published through ``prism_plugin.adapters``."""

from __future__ import annotations

import torch
from torch import nn

from prism_plugin.embed.adapter import Adapter, Preprocessing


class ColourHistogramCNN(Adapter):
    name = "thirdparty_colour"
    display_name = "ThirdPartyCNN"
    embed_dim = 32
    preprocessing = Preprocessing(resize=64, crop=64, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    licence = "MIT"

    def build(self, device):
        torch.manual_seed(1234)
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        ).to(device).eval()

    def weights_fingerprint(self):
        return "seeded-1234"

    def forward(self, batch):
        return self.net(batch)
