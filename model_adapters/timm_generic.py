"""Generic adapter for any timm architecture: ``--model timm:<name>``.

``--model-args`` (comma-separated ``key=value``):

* ``pretrained`` (default true): download weights through timm / the HF hub.
  ``false`` builds the architecture with random weights (seeded by ``seed``).
* ``checkpoint=PATH``: load a local state dict instead of downloading.
* ``pooling``: ``default`` (timm's own head-less output), ``cls``, ``mean``
  (mean of patch tokens) or ``cls+mean`` (concatenation, twice the width).
* ``img_size``: input size for ViT-style models (changes the preprocessing).
* ``seed`` (default 0): RNG seed of random initialisation.
* plus ``normalize``, ``batch_size``, ``device`` (see the adapter base).

Preprocessing comes from the model's own pretrained config (timm's
``resolve_data_config``): resize to ``crop / crop_pct``, centre crop, model
mean/std.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from prism_plugin.embed.adapter import Adapter, Preprocessing, parse_bool, parse_int
from prism_plugin.errors import PrismError

POOLINGS = ("default", "cls", "mean", "cls+mean")


class TimmAdapter(Adapter):
    """Any ``timm`` architecture, pretrained or random, with a chosen pooling."""

    licence = "per model (see the timm / HF model card)"

    def __init__(self, arch: str, *, pretrained: Any = True, checkpoint: str | None = None,
                 pooling: str = "default", img_size: Any = None, seed: Any = 0, **base: Any):
        super().__init__(**base)
        import timm

        if not arch:
            raise PrismError("--model timm:<name> needs an architecture name, e.g. timm:vit_small_patch16_224")
        self.arch = arch
        self.name = f"timm:{arch}"
        self.display_name = arch
        self.hub_id = arch[len("hf-hub:"):] if arch.startswith("hf-hub:") else ""
        self.pretrained = parse_bool(pretrained, "pretrained")
        self.checkpoint = Path(checkpoint).expanduser() if checkpoint else None
        if self.checkpoint is not None and not self.checkpoint.is_file():
            raise PrismError(f"--model-args checkpoint={checkpoint}: file not found")
        if pooling not in POOLINGS:
            raise PrismError(f"--model-args pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.img_size = parse_int(img_size, "img_size", 8) if img_size not in (None, "") else None
        self.seed = parse_int(seed, "seed", 0)
        if not self.hub_id and arch not in timm.list_models() and arch not in timm.list_models(pretrained=True):
            known = timm.list_models()
            from prism_plugin.errors import suggest

            raise PrismError(f"timm has no architecture {arch!r}{suggest(arch, known)}")
        self._model = None
        # Build on the meta device to learn the width and the data config without weights.
        self._probe_shape()

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"pretrained", "checkpoint", "pooling", "img_size", "seed"}

    def _create_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"num_classes": 0}
        if self.img_size is not None:
            kwargs["img_size"] = self.img_size
        return kwargs

    def _probe_shape(self) -> None:
        import timm
        import torch

        try:
            with torch.device("meta"):
                model = timm.create_model(self.arch, pretrained=False, **self._create_kwargs())
        except Exception as exc:
            raise PrismError(f"timm could not build {self.arch!r} with {self._create_kwargs()}: {exc}") from None
        width = int(model.num_features)
        self.embed_dim = 2 * width if self.pooling == "cls+mean" else width
        if self.pooling in ("cls", "mean", "cls+mean") and not hasattr(model, "forward_features"):
            raise PrismError(f"pooling={self.pooling} needs a token model; {self.arch} has no forward_features")
        cfg = timm.data.resolve_data_config({}, model=model)
        crop = int(self.img_size or cfg["input_size"][-1])
        resize = int(round(crop / float(cfg.get("crop_pct", 1.0) or 1.0)))
        self.preprocessing = Preprocessing(
            resize=resize, crop=crop, mean=tuple(float(x) for x in cfg["mean"]),
            std=tuple(float(x) for x in cfg["std"]), interpolation=str(cfg.get("interpolation", "bicubic")),
        )
        self.num_prefix_tokens = int(getattr(model, "num_prefix_tokens", 1))

    def config(self) -> dict[str, Any]:
        return {**super().config(), "arch": self.arch, "pretrained": self.pretrained,
                "pooling": self.pooling, "img_size": self.img_size,
                "seed": None if self.pretrained or self.checkpoint else self.seed}

    def weights_fingerprint(self) -> str:
        if self.checkpoint is not None:
            h = hashlib.sha256()
            with open(self.checkpoint, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            return "file:" + h.hexdigest()
        if not self.pretrained:
            import timm
            import torch

            return f"random-init:seed={self.seed}:timm={timm.__version__}:torch={torch.__version__.split('+')[0]}"
        return f"timm-pretrained:{self.arch}"

    def build(self, device) -> None:
        import timm
        import torch

        torch.manual_seed(self.seed)
        pretrained = self.pretrained and self.checkpoint is None
        try:
            model = timm.create_model(self.arch, pretrained=pretrained, **self._create_kwargs())
        except Exception as exc:
            offline = os.environ.get("HF_HUB_OFFLINE") == "1"
            raise PrismError(
                f"cannot load pretrained weights for {self.arch!r}"
                f"{' (offline mode)' if offline else ''}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}; "
                "pass --model-args checkpoint=PATH for a local file, or connect and log in to the hub "
                "(HF_TOKEN) for gated weights, or pretrained=false for random weights"
            ) from None
        if self.checkpoint is not None:
            try:
                state = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
            except Exception as exc:
                raise PrismError(f"checkpoint {self.checkpoint}: cannot be read as a state dict ({exc})") from None
            state = state.get("state_dict", state) if isinstance(state, dict) else state
            missing, unexpected = model.load_state_dict(state, strict=False)
            if missing:
                raise PrismError(f"checkpoint {self.checkpoint}: missing {len(missing)} weights, e.g. {missing[:3]}")
        model.eval().to(device)
        self._model = model

    def forward(self, batch):
        import torch

        model = self._model
        if self.pooling == "default":
            return model(batch)
        tokens = model.forward_features(batch)
        if tokens.ndim != 3:
            raise PrismError(f"pooling={self.pooling} needs token outputs; {self.arch} returned shape {tuple(tokens.shape)}")
        cls = tokens[:, 0]
        patches = tokens[:, self.num_prefix_tokens:]
        if self.pooling == "cls":
            return cls
        if self.pooling == "mean":
            return patches.mean(dim=1)
        return torch.cat([cls, patches.mean(dim=1)], dim=1)


def register(register) -> None:
    register("timm:", lambda name="", **kw: TimmAdapter(name.split(":", 1)[1] if ":" in name else name, **kw),
             description="any timm architecture: timm:<name> (pretrained or random, pooling cls/mean/cls+mean)")
