"""Generic adapter for Hugging Face ``transformers`` vision models: ``--model hf:<repo>``.

``<repo>`` is a hub id (``hf:owkin/phikon-v2``) or a local folder written by
``save_pretrained`` (``hf:/data/models/my-vit``). Needs the optional extra
``prism-plugin[transformers]``. Models whose configuration carries a
``vision_config`` (CLIP, SigLIP, ...) contribute their vision tower.

``--model-args``: ``pooling`` = ``cls`` (default, ``last_hidden_state[:, 0]``), ``mean`` (patch tokens;
class and register tokens excluded), ``cls+mean`` or ``pooler`` (``pooler_output``); ``revision``;
``pretrained=false`` (random weights, ``seed``); ``dtype`` (CUDA autocast, default ``fp32``).

Preprocessing comes from the repository's ``preprocessor_config.json`` (size,
crop size, mean, std, resample), else 224 px and ImageNet statistics. The
configuration is fetched when the adapter is created, so an offline machine
without a cached copy fails at once with the hub id and the remedies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prism_plugin.embed.adapter import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Adapter,
    Preprocessing,
    dtype_name,
    parse_bool,
    parse_dtype,
    parse_int,
)
from prism_plugin.embed.hub import classify, describe_failure, download_weights, prepare_hub, weights_error
from prism_plugin.errors import PrismError
from prism_plugin.model_adapters.foundation import require_transformers

POOLINGS = ("cls", "mean", "cls+mean", "pooler")
#: PIL resample codes used in image-processor configs
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def _edge(value: Any, default: int) -> int:
    if isinstance(value, dict):
        for key in ("shortest_edge", "height", "width"):
            if key in value:
                return int(value[key])
        return default
    if isinstance(value, (list, tuple)):
        return int(value[0])
    return int(value) if value is not None else default


def preprocessing_from_processor(cfg: dict[str, Any] | None, image_size: int = 224) -> Preprocessing:
    """Map an image-processor config onto Resize (shorter side) + CenterCrop + Normalize."""
    cfg = cfg or {}
    size = _edge(cfg.get("size"), image_size)
    crop = _edge(cfg.get("crop_size"), size) if cfg.get("do_center_crop", "crop_size" in cfg) else size
    mean = tuple(float(x) for x in (cfg.get("image_mean") or IMAGENET_MEAN))
    std = tuple(float(x) for x in (cfg.get("image_std") or IMAGENET_STD))
    interpolation = RESAMPLE.get(int(cfg.get("resample", 3)), "bicubic")
    return Preprocessing(resize=size, crop=min(crop, size), mean=mean, std=std, interpolation=interpolation)


class HFVisionAdapter(Adapter):
    """Any transformers vision backbone whose forward returns ``last_hidden_state``."""

    licence = "per model (see the hub card)"

    def __init__(self, repo: str, *, pooling: Any = "cls", pretrained: Any = True, revision: Any = None,
                 dtype: Any = "fp32", seed: Any = 0, trust_remote_code: Any = False, **base: Any):
        super().__init__(**base)
        # Off unless the user asks: it would execute Python shipped inside the model repository.
        self.trust_remote_code = parse_bool(trust_remote_code, "trust_remote_code")
        if not repo:
            raise PrismError("--model hf:<repo> needs a hub id or a local folder, e.g. hf:owkin/phikon-v2")
        transformers = require_transformers(f"hf:{repo}")
        self.repo = repo
        self.name = f"hf:{repo}"
        self.local = Path(repo).expanduser().is_dir()
        self.hub_id = "" if self.local else repo
        self.display_name = Path(repo).name if self.local else repo.replace("/", "_")
        if str(pooling) not in POOLINGS:
            raise PrismError(f"--model-args pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        self.pooling = str(pooling)
        self.pretrained = parse_bool(pretrained, "pretrained")
        self.revision = str(revision) if revision not in (None, "") else None
        self.autocast_dtype = parse_dtype(dtype)
        self.seed = parse_int(seed, "seed", 0)
        config_path = self._file("config.json", required=True)
        self.config_dict = json.loads(config_path.read_text())
        self.hf_config = transformers.AutoConfig.from_pretrained(str(config_path.parent),
                                                                 trust_remote_code=self.trust_remote_code)
        vision = getattr(self.hf_config, "vision_config", None) or self.hf_config
        self.vision_config = vision
        width = getattr(vision, "hidden_size", None) or getattr(vision, "embed_dim", None)
        if width is None:
            raise PrismError(f"hf:{repo}: configuration has no hidden_size; only ViT-like vision models are supported")
        self.num_prefix_tokens = 1 + int(getattr(vision, "num_register_tokens", 0) or 0)
        self.embed_dim = 2 * int(width) if self.pooling == "cls+mean" else int(width)
        processor = self._file("preprocessor_config.json", required=False)
        image_size = _edge(getattr(vision, "image_size", 224), 224)
        self.preprocessing = preprocessing_from_processor(
            json.loads(processor.read_text()) if processor is not None else None, image_size)
        self._model = None

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"pooling", "pretrained", "revision", "dtype", "seed", "trust_remote_code"}

    def _file(self, filename: str, *, required: bool) -> Path | None:
        if self.local:
            path = Path(self.repo).expanduser() / filename
            if path.is_file():
                return path
            if required:
                raise PrismError(f"--model hf:{self.repo}: {path} not found (expected a save_pretrained folder)")
            return None
        try:
            return download_weights(self.repo, (filename,), model=self.name, gated=False, revision=self.revision)
        except PrismError:
            if required:
                raise
            return None

    def config(self) -> dict[str, Any]:
        return {**super().config(), "repo": self.repo, "revision": self.revision, "pooling": self.pooling,
                "dtype": dtype_name(self.autocast_dtype), "seed": None if self.pretrained else self.seed}

    def weights_fingerprint(self) -> str:
        if not self.pretrained:
            import torch

            return f"random-init:seed={self.seed}:torch={torch.__version__.split('+')[0]}"
        if self.local:
            from prism_plugin.embed.adapter import file_content_digest

            files = sorted(p for p in Path(self.repo).expanduser().iterdir()
                           if p.suffix in (".safetensors", ".bin") and p.is_file())
            return "files:" + ",".join(f"{p.name}={file_content_digest(p)}" for p in files)
        from prism_plugin.embed.adapter import hub_weights

        return hub_weights(self, self.repo, self.revision, ("model.safetensors", "pytorch_model.bin"))

    def build(self, device) -> None:
        import torch

        transformers = require_transformers(self.name)
        torch.manual_seed(self.seed)
        has_vision_tower = getattr(self.hf_config, "vision_config", None) is not None
        if not self.pretrained:
            with torch.device(device):
                model = transformers.AutoModel.from_config(self.hf_config, trust_remote_code=self.trust_remote_code)
        else:
            if not self.local:
                prepare_hub()
            source = str(Path(self.repo).expanduser()) if self.local else self.repo
            try:
                from prism_plugin.embed.adapter import load_revision

                # the commit the fingerprint named (the cache key's), not whatever the branch points at by now
                revision = None if self.local else load_revision(self, self.repo, self.revision)
                model = transformers.AutoModel.from_pretrained(source, revision=revision,
                                                               trust_remote_code=self.trust_remote_code)
            except Exception as exc:  # noqa: BLE001 - one clear error instead of a traceback
                if self.local:
                    raise PrismError(f"hf:{self.repo}: cannot load the model ({type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:200]})") from None
                raise weights_error(self.name, self.repo, describe_failure(classify(exc), exc), gated=False) from None
            model = model.to(device)
        if has_vision_tower and hasattr(model, "vision_model"):
            model = model.vision_model
        model.eval().requires_grad_(False)
        self._model = model
        self._built = True

    def forward(self, batch):
        import torch

        out = self._model(pixel_values=batch)
        if self.pooling == "pooler":
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                raise PrismError(f"hf:{self.repo}: the model has no pooler_output; use pooling=cls or mean")
            return pooled.flatten(1)
        tokens = out.last_hidden_state
        if tokens.ndim != 3:
            raise PrismError(f"hf:{self.repo}: last_hidden_state has shape {tuple(tokens.shape)}; "
                             "use pooling=pooler for convolutional models")
        cls = tokens[:, 0]
        if self.pooling == "cls":
            return cls
        mean = tokens[:, self.num_prefix_tokens:].mean(dim=1)
        return mean if self.pooling == "mean" else torch.cat([cls, mean], dim=1)


def register(register) -> None:
    register("hf:", lambda name="", **kw: HFVisionAdapter(name.split(":", 1)[1] if ":" in name else name, **kw),
             description="any transformers ViT: hf:<repo or folder>; hidden size (cls/mean/pooler, 2x cls+mean); "
                         "licence per model; extra [transformers]")
