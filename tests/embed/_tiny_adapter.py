"""A small real network for worker tests: patch embedding, one transformer encoder layer, layer norm,
class-token pooling (the kernels of a ViT), seeded random weights; imports torch only (no timm), so
a Ray actor that builds it starts in about half the time of the demo ViT."""

from __future__ import annotations

from prism_plugin.embed.adapter import Adapter, Preprocessing


class TinyViT(Adapter):
    name = "tiny_vit_test"
    display_name = "TinyViT (test)"
    embed_dim = 32
    preprocessing = Preprocessing(resize=32, crop=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))

    def __init__(self, seed: int = 0, **base):
        super().__init__(**base)
        self.seed = int(seed)
        self._model = None

    def weights_fingerprint(self) -> str:
        return f"tiny-random:seed={self.seed}"

    def build(self, device) -> None:
        import torch
        from torch import nn

        torch.manual_seed(self.seed)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.patch = nn.Conv2d(3, 32, kernel_size=8, stride=8)
                self.cls = nn.Parameter(torch.randn(1, 1, 32) * 0.02)
                self.block = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True,
                                                        activation="gelu", norm_first=True)
                self.norm = nn.LayerNorm(32)

            def forward(self, x):
                tokens = self.patch(x).flatten(2).transpose(1, 2)
                tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1)
                return self.norm(self.block(tokens))[:, 0]

        self._model = Net().eval().to(device)

    def forward(self, batch):
        return self._model(batch)
