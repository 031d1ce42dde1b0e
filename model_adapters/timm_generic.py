"""Generic adapter for any timm architecture: ``--model timm:<name>``.

``--model-args``: ``pretrained`` (default true; false = random weights seeded by ``seed``, default 0),
``checkpoint=PATH``, ``pooling`` (``default`` = timm's head-less output, ``cls``, ``mean`` of patch tokens,
``cls+mean``), ``img_size`` (ViT-style models), ``dtype`` (CUDA autocast, default ``fp32``), ``revision`` (the
hub revision of pretrained weights: a branch, tag or 40-hex commit; default ``main``), plus ``normalize``,
``batch_size``, ``device`` (see the adapter base).

Pretrained hub weights are loaded at the commit the embedding identity records
(:func:`prism_plugin.embed.adapter.load_revision`): the revision is resolved to a commit once
(:func:`prism_plugin.embed.hub.resolve_revision`) and timm is given ``<repo>@<commit>`` (its own spelling of a
revision: ``hf-hub:<repo>@<commit>`` for a hub architecture, the ``hf_hub_id`` of the pretrained config for a
timm tag), so timm never downloads whatever ``main`` is by then. A timm tag whose weights are a plain URL (no
hub id) is loaded as timm names it.

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
                 pooling: str = "default", img_size: Any = None, seed: Any = 0, dtype: Any = "fp32",
                 revision: Any = None, **base: Any):
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
        self.revision = str(revision).strip() if revision not in (None, "") else None
        if self.revision is not None:
            named = (self.hub_id or self._pretrained_hub_id()).partition("@")[2]
            if not self.pretrained or self.checkpoint is not None or not (self.hub_id or self._pretrained_hub_id()):
                raise PrismError(f"--model-args revision={self.revision}: a revision applies to pretrained hub weights; "
                                 f"timm:{arch} {'loads no hub weights here' if self.pretrained else 'is random-init'} "
                                 "(drop revision=, or use pretrained=true without checkpoint=)")
            if named and named != self.revision:
                raise PrismError(f"--model-args revision={self.revision}: timm:{arch} already names revision "
                                 f"{named!r}; give one of them")
        self._model = None
        # Build on the meta device to learn the width and the data config without weights.
        self._probe_shape()

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"pretrained", "checkpoint", "pooling", "img_size", "seed", "dtype",
                                          "revision"}

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
        name = self._timm_name()  # a hub architecture's config.json at the commit its weights come from
        try:
            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False, **self._create_kwargs())
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
        if self.revision is not None:  # absent by default: the keys of caches written before revision= existed
            cfg["revision"] = self.revision
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
        # timm's pretrained weights live on the hub: name the commit (a timm tag without a hub id keeps the name)
        hub_id, revision = self._hub_source()
        if not hub_id:
            return f"timm-pretrained:{self.arch}"
        from prism_plugin.embed.adapter import hub_weights

        return f"timm-pretrained:{self.arch}:" + hub_weights(self, hub_id, revision, self._weight_files())

    # -- the hub commit loaded ----------------------------------------------------------
    def _hub_source(self) -> tuple[str, str | None]:
        """(hub repository, revision asked for) of the pretrained weights; ``("", None)`` when they are not a hub
        model's (random-init, a checkpoint, a timm tag with a URL only)."""
        if not self.pretrained or self.checkpoint is not None:
            return "", None
        repo, _, named = (self.hub_id or self._pretrained_hub_id()).partition("@")  # timm's repo@revision spelling
        return repo, (getattr(self, "revision", None) or named or None)

    def _weight_files(self) -> tuple[str, ...]:
        import timm

        try:
            name = getattr(timm.models.get_pretrained_cfg(self.arch), "hf_hub_filename", None) if not self.hub_id else None
        except Exception:  # noqa: BLE001 - an hf-hub: architecture has no registered config
            name = None
        return (name,) if name else ("model.safetensors", "pytorch_model.bin")

    def _loaded_commit(self) -> str | None:
        """The revision timm downloads the weights (and a hub architecture's config) at: the commit the weights
        fingerprint names (resolved once), else the revision name; ``None`` when not hub weights."""
        repo, revision = self._hub_source()
        if not repo:
            return None
        from prism_plugin.embed.adapter import load_revision

        return load_revision(self, repo, revision)

    def _timm_name(self) -> str:
        """The name timm builds: a hub architecture as ``hf-hub:<repo>@<commit>`` (config and weights of that
        commit), anything else as given."""
        if not self.hub_id or not self.pretrained or self.checkpoint is not None:
            return self.arch
        commit = self._loaded_commit()
        return f"hf-hub:{self.hub_id.partition('@')[0]}@{commit}" if commit else self.arch

    def _pinned_overlay(self) -> dict[str, Any]:
        """``pretrained_cfg_overlay`` of a timm tag whose weights live on the hub: its ``hf_hub_id`` at the
        commit (timm downloads ``<repo>@<commit>``)."""
        if self.hub_id:
            return {}
        repo, _ = self._hub_source()
        commit = self._loaded_commit() if repo else None
        return {"pretrained_cfg_overlay": {"hf_hub_id": f"{repo}@{commit}"}} if commit else {}

    def build(self, device) -> None:
        import timm
        import torch

        from prism_plugin.embed import hub

        torch.manual_seed(self.seed)
        pretrained = self.pretrained and self.checkpoint is None
        if pretrained:
            hub.prepare_hub()  # offline or no network: the hub client answers from its cache, no retries
        try:
            pin = self._pinned_overlay() if pretrained else {}
            model = timm.create_model(self._timm_name() if pretrained else self.arch, pretrained=pretrained,
                                      **self._create_kwargs(), **pin)
        except PrismError:
            raise
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
