"""Backbones of eva's registry (kaiko-eva): ``--model eva:<registry name>``.

``eva:universal/vit_small_patch16_224_dino``, ``eva:pathology/kaiko_vits16``, ``eva:timm/<timm name>``, ...: any
name of ``eva.vision.models.networks.backbones.backbone_registry`` (``python -c "from
eva.vision.models.networks.backbones import backbone_registry as r; print(r.entries())"``), built the way eva
builds it (``eva.vision.models.ModelFromRegistry``, eva's own keyword filtering). Needs the ``eva`` extra
(``pip install 'prism-plugin[eva]'``: kaiko-eva[vision]). (:mod:`.eva` is the unrelated EVA-02 model.)

``--model-args``:

* ``pretrained``: for entries whose constructor takes it (``timm/<name>``: eva's default there is false);
  ``pretrained=false`` = random weights seeded by ``seed`` (default 0). Entries named ``*_random`` are random by
  construction (seeded too); every other entry always loads its published weights (hub, torch.hub), which
  offline (``--offline``, ``HF_HUB_OFFLINE=1``, no network) fails at once in one line.
* any other argument of the entry's own constructor (``dynamic_img_size=false``); ``out_indices`` (patch
  feature maps) is refused: PRISM probes one vector per image.
* ``size``, ``mean``, ``std`` (``0.485+0.456+0.406``): preprocessing. The default is, for ``timm/<name>``
  entries, timm's pretrained config of that name (input size, crop_pct, mean/std, interpolation); for every
  other entry eva's default transform, ``eva.vision.data.transforms.common.ResizeAndCrop`` (resize the shorter
  side to 224 with bilinear interpolation, centre crop 224, mean = std = 0.5), which eva's configs override per
  model: set ``mean``/``std`` as the model's eva config does. ``config()["preprocessing_source"]`` says which.
* ``dtype`` (CUDA autocast, default ``fp32``), ``normalize``, ``batch_size``, ``device``.

``timm/<name>`` entries get ``num_classes=0`` (features, not logits). The identity (cache key, run fingerprint)
covers the registry name, every entry argument, the weights (published, or random with the seed and the library
versions), the preprocessing and the eva version.
"""

from __future__ import annotations

import inspect
from typing import Any

from prism_plugin.embed.adapter import Adapter, Preprocessing, dtype_name, parse_bool, parse_dtype, parse_int
from prism_plugin.errors import PrismError

#: eva.vision.data.transforms.common.ResizeAndCrop's defaults (torchvision v2 Resize: bilinear)
EVA_DEFAULT = Preprocessing(resize=224, crop=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bilinear")
EXTRA_HINT = "pip install 'prism-plugin[eva]' (kaiko-eva[vision])"
REFUSED_ARGS = ("out_indices", "model_name", "checkpoint_path")


def registry():
    """eva's backbone registry, or one line naming the extra."""
    try:
        from eva.vision.models.networks.backbones import backbone_registry
    except ImportError as exc:
        raise PrismError(f"--model eva:<name> needs kaiko-eva with its vision part ({exc.name or exc}): "
                         f"{EXTRA_HINT}") from None
    return backbone_registry


def _floats(value: Any, name: str) -> tuple[float, float, float]:
    parts = value if isinstance(value, (list, tuple)) else str(value).replace(",", "+").split("+")
    try:
        out = tuple(float(p) for p in parts)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 3:
        raise PrismError(f"--model-args {name}={value!r}: give three numbers joined by '+', e.g. "
                         f"{name}=0.485+0.456+0.406")
    return out  # type: ignore[return-value]


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import timm
    import torch

    try:
        eva = version("kaiko-eva")
    except PackageNotFoundError:  # pragma: no cover - the registry imported, so it is installed
        eva = "unknown"
    return f"eva={eva}:timm={timm.__version__}:torch={torch.__version__.split('+')[0]}"


class EvaBackboneAdapter(Adapter):
    """One backbone of eva's registry, built by eva's ``ModelFromRegistry``."""

    licence = "per model (see eva's backbone documentation and the model card)"

    def __init__(self, registry_name: str, *, pretrained: Any = None, seed: Any = 0, size: Any = None,
                 mean: Any = None, std: Any = None, dtype: Any = "fp32", normalize: Any = True,
                 batch_size: Any = 64, device: str = "auto", **entry_args: Any):
        super().__init__(normalize=normalize, batch_size=batch_size, device=device)
        if not registry_name:
            raise PrismError("--model eva:<name> needs a name of eva's backbone registry, e.g. "
                             "eva:universal/vit_small_patch16_224_dino")
        reg = registry()
        if registry_name not in reg.entries():
            from prism_plugin.errors import suggest

            names = [n for n in reg.entries() if not n.startswith("timm/")]
            raise PrismError(f"eva's backbone registry has no {registry_name!r}"
                             f"{suggest(registry_name, reg.entries())}; its names are timm/<timm model> and "
                             f"{', '.join(names[:6])}, ... (eva.vision.models.networks.backbones)")
        self.registry_name = registry_name
        self.name = f"eva:{registry_name}"
        self.display_name = "eva-" + registry_name.replace("/", "-")
        params = inspect.signature(reg.get(registry_name)).parameters
        takes = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        for key in entry_args:
            if key in REFUSED_ARGS:
                raise PrismError(f"--model-args {key}: not for eva:{registry_name} here (PRISM embeds one vector per "
                                 "image with the entry's own model)")
            if key not in takes:
                raise PrismError(f"--model-args {key}: eva:{registry_name} takes {', '.join(sorted(takes - set(REFUSED_ARGS))) or 'no arguments'}"
                                 f"; PRISM's own: {', '.join(sorted(self.accepted_args()))}")
        self.entry_args = {k: entry_args[k] for k in sorted(entry_args)}
        if "dynamic_img_size" in self.entry_args:
            self.entry_args["dynamic_img_size"] = parse_bool(self.entry_args["dynamic_img_size"], "dynamic_img_size")
        self.seed = parse_int(seed, "seed", 0)
        if pretrained is not None and "pretrained" not in takes:
            wanted = parse_bool(pretrained, "pretrained")
            random_entry = registry_name.endswith("_random")
            if wanted == random_entry:
                what = ("builds random weights (its name says _random)" if random_entry else
                        "always loads its published weights")
                alternatives = ("eva:universal/vit_small_patch16_224_random, eva:universal/vit_tiny_patch16_224_random "
                                "or eva:timm/<name> with pretrained=false")
                raise PrismError(f"--model-args pretrained={pretrained}: eva:{registry_name} {what} and takes no "
                                 f"pretrained argument; for random weights use {alternatives}")
        if "pretrained" in takes:
            default = params["pretrained"].default
            self.pretrained = parse_bool(pretrained if pretrained is not None else bool(default), "pretrained")
            self.entry_args["pretrained"] = self.pretrained
        else:
            self.pretrained = not registry_name.endswith("_random")
        self.timm_name = registry_name[len("timm/"):] if registry_name.startswith("timm/") else ""
        self.autocast_dtype = parse_dtype(dtype)
        self.preprocessing, self.preprocessing_source = self._preprocessing(size, mean, std)
        self._model = None

    @classmethod
    def accepted_args(cls) -> set[str]:
        return super().accepted_args() | {"pretrained", "seed", "size", "mean", "std", "dtype",
                                          "<an argument of the eva entry>"}

    def _preprocessing(self, size: Any, mean: Any, std: Any) -> tuple[Preprocessing, str]:
        base, source = EVA_DEFAULT, "eva default: eva.vision.data.transforms.common.ResizeAndCrop()"
        if self.timm_name:
            import timm

            cfg = timm.models.get_pretrained_cfg(self.timm_name)
            if cfg is not None and getattr(cfg, "mean", None):
                crop = int(cfg.input_size[-1])
                base = Preprocessing(resize=int(round(crop / float(cfg.crop_pct or 1.0))), crop=crop,
                                     mean=tuple(float(x) for x in cfg.mean), std=tuple(float(x) for x in cfg.std),
                                     interpolation=str(cfg.interpolation or "bicubic"))
                source = f"timm pretrained config of {self.timm_name}"
        if size is None and mean is None and std is None:
            return base, source
        crop = parse_int(size, "size", 8) if size is not None else base.crop
        out = Preprocessing(resize=crop if size is not None else base.resize, crop=crop,
                            mean=_floats(mean, "mean") if mean is not None else base.mean,
                            std=_floats(std, "std") if std is not None else base.std,
                            interpolation=base.interpolation)
        return out, f"{source}, with --model-args " + ",".join(
            k for k, v in (("size", size), ("mean", mean), ("std", std)) if v is not None)

    def config(self) -> dict[str, Any]:
        # embed_dim is learnt when the model is built; the registry name and the arguments fix it
        cfg = {"adapter": "eva:", "registry_name": self.registry_name, "entry_args": dict(self.entry_args),
               "preprocessing": self.preprocessing.describe(), "preprocessing_source": self.preprocessing_source,
               "normalize": self.normalize, "pretrained": self.pretrained,
               "seed": None if self.pretrained else self.seed}
        if self.autocast_dtype is not None:
            cfg["dtype"] = dtype_name(self.autocast_dtype)
        return cfg

    def weights_fingerprint(self) -> str:
        if not self.pretrained:
            return f"eva-random:{self.registry_name}:seed={self.seed}:{_versions()}"
        return f"eva-published:{self.registry_name}:{_versions().split(':')[0]}"  # eva=<version>

    def _model_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.entry_args)
        if self.timm_name:
            kwargs.setdefault("num_classes", 0)
        return kwargs

    def build(self, device) -> None:
        import torch

        from eva.vision.models import ModelFromRegistry
        from prism_plugin.embed import hub

        torch.manual_seed(self.seed)
        offline = hub.prepare_hub() if self.pretrained else False
        try:
            model = ModelFromRegistry(self.registry_name, model_kwargs=self._model_kwargs())
        except Exception as exc:  # noqa: BLE001 - every failure to build is one line naming the model
            if not self.pretrained:
                raise PrismError(f"eva:{self.registry_name}: eva could not build it with random weights: "
                                 f"{type(exc).__name__}: {str(exc)[:200]}") from None
            why = (f"cannot be fetched offline ({hub.offline_reason()}) and are not in the local cache" if offline
                   else f"could not be loaded ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})")
            raise PrismError(f"eva:{self.registry_name}: its published weights {why}; connect to the hub and run "
                             "without --offline / HF_HUB_OFFLINE (log in with `hf auth login` if the model is gated), "
                             "or use random weights (eva:timm/<name> with pretrained=false, or "
                             "eva:universal/vit_small_patch16_224_random)") from None
        model.eval().to(device)
        self._model = model
        crop = self.preprocessing.crop
        with torch.no_grad():
            probe = model(torch.zeros(1, 3, crop, crop, device=device))
        if not isinstance(probe, torch.Tensor) or probe.ndim != 2:
            shape = tuple(probe.shape) if isinstance(probe, torch.Tensor) else type(probe).__name__
            raise PrismError(f"eva:{self.registry_name}: the backbone returns {shape}, not one vector per image "
                             "(B, D); PRISM needs pooled embeddings")
        self.embed_dim = int(probe.shape[1])

    def forward(self, batch):
        return self._model(batch)


def register(register) -> None:
    register("eva:", lambda name="", **kw: EvaBackboneAdapter(name.split(":", 1)[1] if ":" in name else name, **kw),
             description="a backbone of eva's registry (kaiko-eva): eva:<registry name>, e.g. "
                         "eva:universal/vit_small_patch16_224_dino, eva:timm/<name>; needs the eva extra")
