"""Generic adapter for any timm architecture: ``--model timm:<name>``.

``--model-args``: ``pretrained`` (default true; false = random weights seeded by ``seed``, default 0),
``checkpoint=PATH``, ``pooling`` (``default`` = timm's head-less output, ``cls``, ``mean`` of patch tokens,
``cls+mean``), ``img_size`` (ViT-style models), ``dtype`` (CUDA autocast, default ``fp32``), plus
``normalize``, ``batch_size``, ``device`` (see the adapter base).

Hub weights (``pretrained=true``, including ``timm:hf-hub:<repo>``) are fetched
after :func:`prism_plugin.embed.hub.prepare_hub`: offline (``--offline``,
``HF_HUB_OFFLINE=1`` or no network) a model that is not in the local cache
fails at once with the hub id and the remedies, instead of retrying.

Preprocessing comes from the model's own pretrained config (timm's
``resolve_data_config``): resize to ``crop / crop_pct``, centre crop, model
mean/std.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from prism_plugin.embed.adapter import Adapter, Preprocessing, dtype_name, parse_bool, parse_dtype, parse_int
from prism_plugin.errors import PrismError

POOLINGS = ("default", "cls", "mean", "cls+mean")


class TimmAdapter(Adapter):
    """Any ``timm`` architecture, pretrained or random, with a chosen pooling."""

    licence = "per model (see the timm / HF model card)"

    def __init__(self, arch: str, *, pretrained: Any = True, checkpoint: str | None = None,
                 pooling: str = "default", img_size: Any = None, seed: Any = 0, dtype: Any = "fp32", **base: Any):
        super().__init__(**base)
        self.autocast_dtype = parse_dtype(dtype)
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
        return super().accepted_args() | {"pretrained", "checkpoint", "pooling", "img_size", "seed", "dtype"}

    def _create_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"num_classes": 0}
        if self.img_size is not None:
            kwargs["img_size"] = self.img_size
        return kwargs

    def _probe_shape(self) -> None:
        import timm
        import torch

        if self.hub_id:  # hf-hub: architectures need the repository's config.json, even without weights
            from prism_plugin.embed import hub

            hub.prepare_hub()
        try:
            with torch.device("meta"):
                model = timm.create_model(self.arch, pretrained=False, **self._create_kwargs())
        except Exception as exc:
            if self.hub_id:
                from prism_plugin.embed import hub

                cause = exc.__cause__ or exc
                kind = hub.classify(exc) if hub.classify(exc) != "other" else hub.classify(cause)
                raise hub.weights_error(f"timm:{self.arch}", self.hub_id,
                                        hub.describe_failure(kind, cause),
                                        gated=True) from None
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
        cfg = {**super().config(), "arch": self.arch, "pretrained": self.pretrained,
               "pooling": self.pooling, "img_size": self.img_size,
               "seed": None if self.pretrained or self.checkpoint else self.seed}
        if self.autocast_dtype is not None:  # fp32 keeps the keys of caches written before dtype existed
            cfg["dtype"] = dtype_name(self.autocast_dtype)
        return cfg

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

        from prism_plugin.embed import hub

        torch.manual_seed(self.seed)
        pretrained = self.pretrained and self.checkpoint is None
        if pretrained:
            hub.prepare_hub()  # offline or no network: the hub client answers from its cache, no retries
        try:
            model = timm.create_model(self.arch, pretrained=pretrained, **self._create_kwargs())
        except Exception as exc:
            if not pretrained:
                raise PrismError(f"timm could not build {self.arch!r}: {type(exc).__name__}: {exc}") from None
            cause = exc.__cause__ or exc
            kind = hub.classify(cause) if hub.classify(exc) == "other" else hub.classify(exc)
            where = self.hub_id or self._pretrained_hub_id()
            raise hub.weights_error(f"timm:{self.arch}", where or self.arch, hub.describe_failure(kind, cause),
                                    gated=True) from None
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

    def _pretrained_hub_id(self) -> str:
        import timm

        try:
            cfg = timm.models.get_pretrained_cfg(self.arch)
        except Exception:  # noqa: BLE001 - only used to word an error message
            cfg = None
        return str(getattr(cfg, "hf_hub_id", "") or "")

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
             description="any timm model: timm:<name> or timm:hf-hub:<repo>; num_features (2x cls+mean); "
                         "licence per model")
