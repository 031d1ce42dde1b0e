"""Shared machinery of the built-in foundation-model adapters.

Every built-in FM adapter declares, as class attributes, what the PRISM paper
needs to know about it: the hub id and licence, the architecture (built by
:meth:`FoundationAdapter.create_model`, so it can be checked on torch's meta
device without weights), the embedding recipes (``poolings``: name -> width,
the PRISM recipe being the default) and the preprocessing ``profiles``
(``prism_main`` = the paper's Table 4, ``model_card`` = its Table 6).

``--model-args`` understood by every FM adapter (``profile``, ``pooling``, ``checkpoint``, ``revision``,
``pretrained``, ``dtype``, ``normalize``, ``batch_size``, ``device``): docs/models.md. The hematology-audit
encoders' profiles are ``audit`` (default) and ``model_card``.

Weights are downloaded before the network is built, so a missing or refused
download fails in well under a second offline (see
:mod:`prism_plugin.embed.hub`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

from prism_plugin.embed.adapter import (
    PROFILE_DTYPES,
    Adapter,
    Preprocessing,
    choose_profile,
    dtype_name,
    file_content_digest,
    hub_weights,
    load_revision,
    parse_bool,
    parse_dtype,
    parse_int,
)
from prism_plugin.embed.hub import download_weights, hub_files_in
from prism_plugin.errors import PrismError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def read_state_dict(path: Path) -> dict[str, Any]:
    """A flat ``{name: tensor}`` from a safetensors file or a torch pickle (weights only)."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input
        raise PrismError(f"checkpoint {path}: cannot be read as a state dict ({type(exc).__name__}: {exc})") from None
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, dict):
        raise PrismError(f"checkpoint {path}: expected a dict of tensors, found {type(state).__name__}")
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


class FoundationAdapter(Adapter):
    """Base class: hub/local weights, profiles, pooling recipes, dtype policy."""

    # -- declared by each model -------------------------------------------
    display_name: ClassVar[str] = ""
    hub_id: ClassVar[str] = ""
    #: the licence as a short (SPDX-like) name; ``licence_source`` says where it is stated (hub card URL, the
    #: PRISM package README, a paper), ``licence_date`` the ISO date that source was read or the licence changed,
    #: ``licence_note`` what another source says where they differ (docs/models.md, Licences)
    licence: ClassVar[str] = ""
    licence_source: ClassVar[str] = ""
    licence_date: ClassVar[str] = ""
    licence_note: ClassVar[str] = ""
    #: the hub asks its users to accept the model's terms before the files download (``ls adapters``' gated column)
    gated: ClassVar[bool] = True
    #: human description of the network, e.g. "ViT-L/16 (timm vit_large_patch16_224), 24 blocks"
    architecture: ClassVar[str] = ""
    #: the same in a few characters, for ``prism-run ls adapters``
    arch_short: ClassVar[str] = ""
    #: expected architecture facts, checked by the tests on the meta device
    arch_facts: ClassVar[Mapping[str, int]] = {}
    #: embedding recipes: name -> output width. ``default_pooling`` is PRISM's.
    poolings: ClassVar[Mapping[str, int]] = {}
    default_pooling: ClassVar[str] = ""
    #: ``prism_main`` (paper Table 4), ``prism_camelyon17`` (the Camelyon17 re-extraction, paper Table 6) and
    #: ``model_card`` (each model's own documented transform); docs/recipes.md lists them with sources
    profiles: ClassVar[Mapping[str, Preprocessing]] = {}
    #: the profile used without ``--model-args profile=`` (the audit encoders default to ``audit``)
    default_profile: ClassVar[str] = "prism_main"
    #: dimension the PRISM papers report (Table 3 / PROTOCOL §1.1)
    paper_dim: ClassVar[int] = 0
    #: weight files to look for on the hub / in a checkpoint folder, in order
    weight_files: ClassVar[tuple[str, ...]] = ("model.safetensors", "pytorch_model.bin")
    #: default autocast on CUDA for profiles without a published precision (``model_card``, ``audit``):
    #: "fp32", "bf16" or "fp16" (see each adapter's docstring); ``prism_main`` and ``prism_camelyon17``
    #: take theirs from :data:`~prism_plugin.embed.adapter.PROFILE_DTYPES`
    default_dtype: ClassVar[str] = "bf16"
    #: state-dict key prefixes that belong to parts we do not build (text towers, heads)
    ignore_prefixes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, profile: Any = None, pooling: Any = None, checkpoint: Any = None,
                 pretrained: Any = True, revision: Any = None, dtype: Any = None, seed: Any = 0, **base: Any):
        super().__init__(**base)
        self.profile = str(profile or self.default_profile)
        self.preprocessing = choose_profile(self.profiles, self.profile, self.display_name)
        self.pooling = str(pooling or self.default_pooling)
        if self.pooling not in self.poolings:
            raise PrismError(f"--model-args pooling={self.pooling!r}: {self.display_name} offers "
                             f"{', '.join(self.poolings)} (PRISM used {self.default_pooling})")
        self.embed_dim = int(self.poolings[self.pooling])
        self.pretrained = parse_bool(pretrained, "pretrained")
        self.checkpoint = Path(str(checkpoint)).expanduser() if checkpoint not in (None, "") else None
        if self.checkpoint is not None and not self.checkpoint.exists():
            raise PrismError(f"--model-args checkpoint={checkpoint}: no such file or folder")
        self.revision = str(revision) if revision not in (None, "") else None
        # the published extraction's precision for its profile (PROFILE_DTYPES), else the model's own default
        self.autocast_dtype = parse_dtype(dtype if dtype not in (None, "") else
                                          PROFILE_DTYPES.get(self.profile, self.default_dtype))
        self.seed = parse_int(seed, "seed", 0)
        #: architecture overrides (e.g. ``{"depth": 1}``) for reduced test instances
        self.arch_overrides: dict[str, Any] = {}
        self._model = None

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"profile", "pooling", "checkpoint", "pretrained", "revision", "dtype", "seed"}

    @classmethod
    def ls_description(cls) -> str:
        """One line for ``prism-run ls adapters``: architecture, dim, recipes, licence, hub id (gating and the
        licence's date are columns of their own)."""
        others = ", ".join(f"{k} {v}" for k, v in cls.poolings.items() if k != cls.default_pooling)
        return (f"{cls.display_name} {cls.arch_short}; {cls.poolings[cls.default_pooling]}-d {cls.default_pooling}"
                f"{' [' + others + ']' if others else ''}; {cls.licence}; {cls.hub_id}")

    # -- to implement ----------------------------------------------------------
    def create_model(self, **overrides: Any):
        """The real architecture with random initialisation (no weights are read)."""
        raise NotImplementedError

    def arch_summary(self, model) -> dict[str, int]:
        """``embed_dim``, ``patch_size``, ``depth``, ``reg_tokens`` read from a built module."""
        raise NotImplementedError

    def pool(self, model, batch):
        """``(B, 3, H, W)`` -> ``(B, embed_dim)`` with the chosen recipe."""
        raise NotImplementedError

    def adapt_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Map checkpoint keys onto :meth:`create_model`'s names (default: unchanged)."""
        return state

    def overrides_for_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Architecture settings implied by the weights themselves (e.g. position-grid size)."""
        return {}

    # -- identity ---------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        cfg = {**super().config(), "profile": self.profile, "pooling": self.pooling, "hub_id": self.hub_id,
               "dtype": dtype_name(self.autocast_dtype)}
        if self.arch_overrides:
            cfg["arch_overrides"] = {k: repr(v) for k, v in sorted(self.arch_overrides.items())}
        if not self.pretrained and self.checkpoint is None:
            cfg["seed"] = self.seed
        return cfg

    def weights_fingerprint(self) -> str:
        if self.checkpoint is not None:
            return "file:" + file_content_digest(self._checkpoint_file())
        if not self.pretrained:
            import torch

            return f"random-init:seed={self.seed}:torch={torch.__version__.split('+')[0]}"
        # the commit the weights are loaded from (resolved before any extraction: part of the cache key)
        return hub_weights(self, self.hub_id, self.revision, self.weight_files)

    # -- weights ------------------------------------------------------------------
    def _checkpoint_file(self) -> Path:
        path = self.checkpoint
        if path.is_dir():
            found = hub_files_in(path, self.weight_files)
            if found is None:
                raise PrismError(f"--model-args checkpoint={path}: folder has none of {', '.join(self.weight_files)}")
            return found
        if path.suffix not in WEIGHT_SUFFIXES:
            raise PrismError(f"--model-args checkpoint={path}: expected a weight file ({', '.join(WEIGHT_SUFFIXES)})")
        return path

    def weights_path(self) -> Path | None:
        """The file to load: the local checkpoint, else the hub download (fails fast offline)."""
        if self.checkpoint is not None:
            return self._checkpoint_file()
        if not self.pretrained:
            return None
        return download_weights(self.hub_id, self.weight_files, model=self.display_name, gated=self.gated,
                                revision=load_revision(self, self.hub_id, self.revision))

    def load_weights(self, model, state: dict[str, Any], source: Path, *, assign: bool = False) -> None:
        """Load an adapted state dict, strictly: every weight present, right shapes, nothing foreign."""
        own = model.state_dict()
        unexpected = [k for k in state if k not in own]
        bad = [k for k in unexpected if not k.startswith(self.ignore_prefixes) and not k.endswith("position_ids")]
        state = {k: v for k, v in state.items() if k in own}
        shape_errors = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
                        if tuple(v.shape) != tuple(own[k].shape)]
        missing = [k for k in own if k not in state]
        if shape_errors or missing or bad:
            problems = []
            if missing:
                problems.append(f"{len(missing)} weights missing (e.g. {', '.join(missing[:3])})")
            if bad:
                problems.append(f"{len(bad)} unexpected (e.g. {', '.join(bad[:3])})")
            if shape_errors:
                problems.append(f"shape mismatch: {'; '.join(shape_errors[:2])}")
            raise PrismError(f"{self.display_name}: weights in {source} do not fit the {self.architecture} "
                             f"architecture: {'; '.join(problems)}")
        model.load_state_dict(state, strict=True, assign=assign)

    # -- build / forward ------------------------------------------------------------
    def build(self, device) -> None:
        import itertools

        import torch

        path = self.weights_path()  # before building anything: offline failures are immediate
        if path is None:  # random weights
            torch.manual_seed(self.seed)
            with torch.device(device):
                model = self.create_model(**self.arch_overrides)
        else:
            state = self.adapt_state_dict(read_state_dict(path))
            state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
            overrides = {**self.overrides_for_state(state), **self.arch_overrides}
            # no random initialisation of weights about to be replaced: build on meta, adopt the tensors
            with torch.device("meta"):
                model = self.create_model(**overrides)
            self.load_weights(model, state, path, assign=True)
            tensors = itertools.chain(model.parameters(), model.buffers())
            if any(t.is_meta for t in tensors):  # non-persistent buffers (e.g. position ids): build for real
                with torch.device("cpu"):
                    model = self.create_model(**overrides)
                self.load_weights(model, state, path)
            del state
            model = model.to(device)
        model.eval().requires_grad_(False)
        self._model = model
        self._built = True

    def forward(self, batch):
        if self._model is None:
            raise PrismError(f"{self.display_name}: build() must run before forward()")
        return self.pool(self._model, batch)


# --------------------------------------------------------------------------- timm family
class TimmFoundation(FoundationAdapter):
    """A ViT built by ``timm.create_model(timm_arch, **timm_kwargs)`` and pooled from its tokens.

    Token layout of timm ViTs: ``[CLS, registers..., patches...]``;
    ``num_prefix_tokens`` = 1 + registers. Recipes: ``cls`` (the class token
    after the final norm: what ``model(x)`` returns with ``global_pool="token"``),
    ``mean`` (mean of patch tokens, registers excluded) and ``cls+mean``.
    """

    timm_arch: ClassVar[str] = ""
    timm_kwargs: ClassVar[Mapping[str, Any]] = {}

    def timm_create_kwargs(self) -> dict[str, Any]:
        return dict(self.timm_kwargs)

    def create_model(self, **overrides: Any):
        import timm

        kwargs = {**self.timm_create_kwargs(), **overrides}
        try:
            return timm.create_model(self.timm_arch, pretrained=False, **kwargs)
        except Exception as exc:  # noqa: BLE001 - e.g. an old timm without this architecture
            raise PrismError(f"{self.display_name}: timm {timm.__version__} cannot build {self.timm_arch} "
                             f"({type(exc).__name__}: {exc}); upgrade timm") from None

    def arch_summary(self, model) -> dict[str, int]:
        return {"embed_dim": int(model.embed_dim), "patch_size": int(model.patch_embed.patch_size[0]),
                "depth": len(model.blocks), "reg_tokens": int(getattr(model, "num_reg_tokens", 0)),
                "img_size": int(model.patch_embed.img_size[0]), "num_prefix_tokens": int(model.num_prefix_tokens)}

    def pool(self, model, batch):
        import torch

        tokens = model.forward_features(batch)
        cls = tokens[:, 0]
        if self.pooling == "cls":
            return cls
        patches = tokens[:, model.num_prefix_tokens:]
        if self.pooling == "mean":
            return patches.mean(dim=1)
        return torch.cat([cls, patches.mean(dim=1)], dim=1)


def require_transformers(model: str):
    try:
        import transformers
    except ImportError:
        raise PrismError(f"{model} is built with Hugging Face transformers, which is not installed; "
                         "pip install 'prism-plugin[transformers]' (or pip install transformers)") from None
    return transformers
