"""Generic adapter for OpenCLIP image towers: ``--model open_clip:<arch>[/<pretrained>]``.

Forms (``open_clip_torch`` is the optional extra ``prism-plugin[clip]``):

* ``open_clip:ViT-B-32/laion2b_s34b_b79k``: a built-in architecture with one of
  its pretrained tags (``open_clip.list_pretrained()``); weights via the hub.
* ``open_clip:hf-hub:org/repo``: a hub repository with ``open_clip_config.json``.
* ``open_clip:local-dir:/path``: a folder with ``open_clip_config.json`` and weights.
* ``open_clip:ViT-B-32`` with ``--model-args checkpoint=PATH``: local weights;
  without a checkpoint the architecture is randomly initialised (``seed``).

Embedding: ``model.encode_image(x)`` (the image tower's projected embedding,
``embed_dim`` of the model config), L2-normalised by default.
Preprocessing: the pretrained config's mean/std/interpolation and the model's
image size, Resize (shorter side) + CenterCrop, as open_clip's validation
transform (``resize_mode=squash`` models are resized the same way, which is
identical for square tiles). ``dtype`` (default ``fp32``) sets CUDA autocast.

Hub weights (a tag whose weights live on the hub, or ``hf-hub:``) are loaded at the commit the embedding identity
records: ``revision`` (``--model-args``, default ``main``; a branch, tag or 40-hex commit) is resolved to a commit
once (:func:`prism_plugin.embed.hub.resolve_revision`), the files of that commit are fetched (or found in the hub
cache) and open_clip builds from them (``pretrained=<file>``; ``local-dir:<snapshot>`` for ``hf-hub:``), so open_clip
never downloads whatever ``main`` is by then. A tag whose weights are a plain URL is loaded as open_clip names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prism_plugin.embed.adapter import (
    CLIP_MEAN,
    CLIP_STD,
    Adapter,
    Preprocessing,
    dtype_name,
    file_content_digest,
    parse_dtype,
    parse_int,
)
import os

from prism_plugin.embed.hub import classify, describe_failure, download_weights, prepare_hub, weights_error
from prism_plugin.errors import PrismError, suggest

HF_PREFIX = "hf-hub:"
LOCAL_PREFIX = "local-dir:"


def _open_clip():
    try:
        import open_clip
    except ImportError:
        raise PrismError("open_clip adapters need open_clip_torch: pip install 'prism-plugin[clip]' "
                         "(or pip install open_clip_torch)") from None
    return open_clip


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``ViT-B-32/openai`` -> (``ViT-B-32``, ``openai``); schema names keep their slashes."""
    if spec.startswith((HF_PREFIX, LOCAL_PREFIX)):
        return spec, None
    arch, _, tag = spec.partition("/")
    return arch, (tag or None)


class OpenCLIPAdapter(Adapter):
    """Any OpenCLIP model's image tower."""

    licence = "per model (see the open_clip pretrained table / hub card)"

    def __init__(self, spec: str, *, checkpoint: Any = None, dtype: Any = "fp32", seed: Any = 0, revision: Any = None,
                 **base: Any):
        super().__init__(**base)
        open_clip = _open_clip()
        if not spec:
            raise PrismError("--model open_clip:<arch>[/<pretrained>] needs an architecture, "
                             "e.g. open_clip:ViT-B-32/laion2b_s34b_b79k")
        self.spec = spec
        self.arch, self.tag = parse_spec(spec)
        self.name = f"open_clip:{spec}"
        self.display_name = spec.replace("/", "_").replace(":", "_")
        self.checkpoint = Path(str(checkpoint)).expanduser() if checkpoint not in (None, "") else None
        if self.checkpoint is not None and not self.checkpoint.is_file():
            raise PrismError(f"--model-args checkpoint={checkpoint}: file not found")
        if self.checkpoint is not None and (self.tag or self.arch.startswith((HF_PREFIX, LOCAL_PREFIX))):
            raise PrismError(f"--model open_clip:{spec}: give either a pretrained tag / hub repo or "
                             "--model-args checkpoint=PATH, not both")
        self.autocast_dtype = parse_dtype(dtype)
        self.seed = parse_int(seed, "seed", 0)
        self.revision = str(revision).strip() if revision not in (None, "") else None
        self.hub_file = ""  # the weight file a tag names in its repository ("" = open_clip's default names)
        model_cfg, pre = self._configs(open_clip)
        if self.revision is not None and not self.hub_repo:
            raise PrismError(f"--model-args revision={self.revision}: a revision applies to hub weights; "
                             f"open_clip:{spec} loads none from the hub (drop revision=)")
        self.embed_dim = int(model_cfg["embed_dim"])
        size = model_cfg.get("vision_cfg", {}).get("image_size", 224)
        size = int(size[0] if isinstance(size, (list, tuple)) else size)
        size = int(pre.get("size", size) if not isinstance(pre.get("size"), (list, tuple)) else pre["size"][0])
        self.preprocessing = Preprocessing(
            resize=size, crop=size, mean=tuple(float(x) for x in pre.get("mean", CLIP_MEAN)),
            std=tuple(float(x) for x in pre.get("std", CLIP_STD)),
            interpolation=str(pre.get("interpolation", "bicubic")),
        )
        self._model = None

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"checkpoint", "dtype", "seed", "revision"}

    # -- configuration without weights -------------------------------------------------
    def _configs(self, open_clip) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.arch.startswith(HF_PREFIX):
            repo = self.arch[len(HF_PREFIX):]
            self.hub_id = repo
            path = download_weights(repo, ("open_clip_config.json",), model=self.name, gated=False,
                                    revision=self._loaded_commit())  # the config of the commit loaded
            cfg = json.loads(path.read_text())
            return cfg["model_cfg"], cfg.get("preprocess_cfg", {})
        if self.arch.startswith(LOCAL_PREFIX):
            path = Path(self.arch[len(LOCAL_PREFIX):]).expanduser() / "open_clip_config.json"
            if not path.is_file():
                raise PrismError(f"--model open_clip:{self.spec}: {path} not found")
            cfg = json.loads(path.read_text())
            return cfg["model_cfg"], cfg.get("preprocess_cfg", {})
        model_cfg = open_clip.get_model_config(self.arch)
        if model_cfg is None:
            raise PrismError(f"open_clip has no architecture {self.arch!r}{suggest(self.arch, open_clip.list_models())}")
        pre: dict[str, Any] = {}
        if self.tag:
            pre = dict(open_clip.get_pretrained_cfg(self.arch, self.tag) or {})
            if not pre:
                tags = open_clip.list_pretrained_tags_by_model(self.arch)
                raise PrismError(f"open_clip {self.arch} has no pretrained tag {self.tag!r}"
                                 f"{suggest(self.tag, tags) or '; known: ' + ', '.join(tags[:8])}")
            hf_hub = str(pre.get("hf_hub") or "")
            if hf_hub:  # open_clip's 'org/repo/<file>' spelling ('org/repo/' = its default file names)
                repo, self.hub_file = os.path.split(hf_hub)
                self.hub_id = repo.strip("/")
            else:
                self.hub_id = str(pre.get("url") or "")
        pre.update(model_cfg.get("preprocess_cfg", {}) if not self.tag else {})
        return model_cfg, pre

    # -- identity --------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        cfg = {**super().config(), "spec": self.spec, "dtype": dtype_name(self.autocast_dtype),
               "seed": self.seed if self.random_init else None}
        if self.revision is not None:  # absent by default: the keys of caches written before revision= existed
            cfg["revision"] = self.revision
        return cfg

    @property
    def random_init(self) -> bool:
        return self.checkpoint is None and not self.tag and not self.arch.startswith((HF_PREFIX, LOCAL_PREFIX))

    def weights_fingerprint(self) -> str:
        if self.checkpoint is not None:
            return "file:" + file_content_digest(self.checkpoint)
        if self.random_init:
            import torch

            return f"random-init:seed={self.seed}:torch={torch.__version__.split('+')[0]}"
        repo = self.hub_repo
        if not repo:
            return f"open_clip:{self.spec}"
        from prism_plugin.embed.adapter import hub_weights

        return f"open_clip:{self.spec}:" + hub_weights(self, repo, getattr(self, "revision", None), self.weight_files)

    # -- the hub commit loaded ---------------------------------------------------------
    @property
    def hub_repo(self) -> str:
        """The hub repository the weights come from; ``""`` for a checkpoint, random init, a local folder or a
        tag whose weights are a download URL."""
        hub_id = getattr(self, "hub_id", "") or ""
        if self.checkpoint is not None or self.arch.startswith(LOCAL_PREFIX) or "://" in hub_id:
            return ""
        return hub_id

    @property
    def weight_files(self) -> tuple[str, ...]:
        """The weight file names open_clip looks for in the repository, its safetensors alternative first."""
        name = getattr(self, "hub_file", "")
        if not name:
            return ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
        if name.endswith((".bin", ".pth")):
            return (name[:-4] + ".safetensors", name)
        return (name,)

    def _loaded_commit(self) -> str | None:
        """The revision the files are fetched at: the commit the weights fingerprint names (resolved once), else
        the revision name (``None``: the hub's default)."""
        from prism_plugin.embed.adapter import load_revision

        return load_revision(self, self.hub_repo, getattr(self, "revision", None))

    def _pinned_source(self) -> tuple[str, str | None]:
        """(model name, pretrained) for open_clip: hub weights as the local files of the commit loaded."""
        commit = self._loaded_commit()
        weights = download_weights(self.hub_repo, self.weight_files, model=self.name, gated=False, revision=commit)
        if self.arch.startswith(HF_PREFIX):  # config and weights of one commit: its snapshot folder
            config = download_weights(self.hub_repo, ("open_clip_config.json",), model=self.name, gated=False,
                                      revision=commit)
            if config.parent != weights.parent:
                raise PrismError(f"{self.name}: open_clip_config.json and the weights of {self.hub_repo}@{commit} are "
                                 f"not in one snapshot folder ({config.parent}, {weights.parent}); clear the hub cache "
                                 "entry of this repository and rerun")
            return LOCAL_PREFIX + str(weights.parent), None
        return self.arch, str(weights)

    # -- build / forward ---------------------------------------------------------------
    def build(self, device) -> None:
        import torch

        open_clip = _open_clip()
        torch.manual_seed(self.seed)
        pretrained = str(self.checkpoint) if self.checkpoint is not None else self.tag
        from_hub = self.checkpoint is None and not self.random_init and not self.arch.startswith(LOCAL_PREFIX)
        name = self.arch
        if from_hub:
            prepare_hub()
            if self.hub_repo:  # the files of the commit the identity records, never the hub's main of the day
                name, pretrained = self._pinned_source()
        try:
            model = open_clip.create_model(name, pretrained=pretrained, device=device,
                                           require_pretrained=not self.random_init)
        except Exception as exc:  # noqa: BLE001 - turned into one clear message
            if not from_hub:
                raise PrismError(f"open_clip could not build {self.spec}"
                                 f"{' from ' + str(self.checkpoint) if self.checkpoint else ''}: "
                                 f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
            cause = exc.__cause__ or exc
            raise weights_error(self.name, self.hub_id or self.spec, describe_failure(classify(cause), cause),
                                gated=False) from None
        model.eval().requires_grad_(False)
        self._model = model
        self._built = True

    def forward(self, batch):
        return self._model.encode_image(batch)


def register(register) -> None:
    register("open_clip:", lambda name="", **kw: OpenCLIPAdapter(name.split(":", 1)[1] if ":" in name else name, **kw),
             description="any OpenCLIP image tower: open_clip:<arch>[/<tag>] or open_clip:hf-hub:<repo>; "
                         "model's embed_dim; licence per model; extra [clip]")
