"""The adapter base class: turns a batch of images into embeddings.

An adapter declares what it produces (``embed_dim``) and how images must be
prepared (``preprocessing``); the extraction loop does the rest (decoding,
batching, device placement, L2 normalisation, caching). Subclasses implement
:meth:`build` (construct the network, load weights) and :meth:`forward`
(a preprocessed ``(B, 3, H, W)`` tensor -> ``(B, embed_dim)`` features).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from prism_plugin.errors import PrismError
from prism_plugin.hashing import memoised_file_digest

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: OpenAI CLIP normalisation statistics (also CONCH's loader).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

#: Preprocessing profiles of the built-in foundation-model adapters:
#: ``prism_main`` = what the PRISM paper applied on its six main datasets
#: (its Table 4), ``model_card`` = each model's own documented transform (its
#: Table 6, used for the Camelyon17 extraction). The profile is part of the
#: cache key.
PROFILES = ("prism_main", "model_card")
DEFAULT_PROFILE = "prism_main"

#: ``--model-args dtype=...`` -> autocast dtype on CUDA (``None`` = full fp32).
DTYPES = {"fp32": None, "float32": None, "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16"}


@dataclass(frozen=True)
class Preprocessing:
    """Resize (shorter side) -> centre crop -> to tensor -> normalise."""

    resize: int
    crop: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bicubic"

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def transform(self):
        from torchvision import transforms
        from torchvision.transforms import InterpolationMode

        modes = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR,
                 "nearest": InterpolationMode.NEAREST}
        if self.interpolation not in modes:
            raise PrismError(f"preprocessing interpolation must be one of {sorted(modes)}, got {self.interpolation!r}")
        return transforms.Compose([
            transforms.Resize(self.resize, interpolation=modes[self.interpolation]),
            transforms.CenterCrop(self.crop),
            transforms.ToTensor(),
            transforms.Normalize(self.mean, self.std),
        ])


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise PrismError(f"--model-args {name}={value!r}: expected true or false")


def parse_dtype(value: Any, name: str = "dtype"):
    """``fp32`` / ``bf16`` / ``fp16`` -> ``None`` / ``torch.bfloat16`` / ``torch.float16``."""
    import torch

    text = str(value).strip().lower()
    if text not in DTYPES:
        raise PrismError(f"--model-args {name}={value!r}: choose one of fp32, bf16, fp16")
    return None if DTYPES[text] is None else getattr(torch, DTYPES[text])


def dtype_name(dtype) -> str:
    return "fp32" if dtype is None else {"bfloat16": "bf16", "float16": "fp16"}.get(str(dtype).split(".")[-1], str(dtype))


def choose_profile(profiles: Mapping[str, "Preprocessing"], name: Any, model: str) -> "Preprocessing":
    """The named preprocessing profile, or a one-line error listing the choices."""
    key = str(name or DEFAULT_PROFILE)
    if key not in profiles:
        raise PrismError(f"--model-args profile={key!r}: {model} has profiles {', '.join(profiles)}")
    return profiles[key]


def file_content_digest(path) -> str:
    """blake2b (20 bytes) of a (possibly multi-GB) weight file, memoised per (path, size, mtime)."""
    return memoised_file_digest(path, digest_size=20)


def parse_int(value: Any, name: str, minimum: int = 1) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise PrismError(f"--model-args {name}={value!r}: expected an integer") from None
    if out < minimum:
        raise PrismError(f"--model-args {name}={value!r}: must be >= {minimum}")
    return out


class Adapter:
    """Base class of every image adapter.

    Class attributes a subclass sets: ``name`` (the ``--model`` name),
    ``display_name`` (the ``model`` column), ``embed_dim``, ``preprocessing``,
    ``licence`` and ``hub_id`` where relevant. ``normalize`` (L2, on by default
    as in the PRISM protocol) and ``batch_size`` may be overridden per run with
    ``--model-args normalize=false,batch_size=32``.
    """

    name: str = "adapter"
    display_name: str = "adapter"
    embed_dim: int = 0
    preprocessing: Preprocessing = Preprocessing(224, 224)
    licence: str = ""
    hub_id: str = ""
    #: "images" adapters embed decoded tiles; "features" adapters read precomputed arrays.
    input_kind: str = "images"
    #: dtype for ``torch.autocast`` during extraction on CUDA (``None``: full fp32).
    #: The extraction loop reads it; adapters document why their model tolerates it.
    autocast_dtype: Any = None

    def __init__(self, *, normalize: Any = True, batch_size: Any = 64, device: str = "auto", **unknown: Any):
        if unknown:
            raise PrismError(
                f"adapter {self.name!r} does not accept --model-args {', '.join(sorted(unknown))}; "
                f"it accepts {', '.join(sorted(self.accepted_args()))}"
            )
        self.normalize = parse_bool(normalize, "normalize")
        self.batch_size = parse_int(batch_size, "batch_size")
        self.device_request = str(device)
        self._built = False

    @classmethod
    def accepted_args(cls) -> set[str]:
        return {"normalize", "batch_size", "device"}

    # -- to implement -----------------------------------------------------
    def build(self, device) -> None:
        """Construct the network and load its weights on ``device``."""
        raise NotImplementedError

    def forward(self, batch):
        """``(B, 3, H, W)`` preprocessed float tensor -> ``(B, embed_dim)`` tensor."""
        raise NotImplementedError

    # -- identity ---------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything that changes the numbers this adapter produces."""
        return {
            "adapter": self.name,
            "embed_dim": self.embed_dim,
            "preprocessing": self.preprocessing.describe(),
            "normalize": self.normalize,
        }

    def weights_fingerprint(self) -> str:
        """A digest of the weights; subclasses with files or hub revisions override it."""
        return ""

    def fingerprint(self) -> str:
        payload = json.dumps({"config": self.config(), "weights": self.weights_fingerprint()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def describe(self) -> Mapping[str, Any]:
        return {"name": self.name, "display_name": self.display_name, "embed_dim": self.embed_dim,
                "licence": self.licence, "hub_id": self.hub_id, **self.config()}


def state_dict_digest(module) -> str:
    """blake2b over every parameter and buffer (names, shapes, dtypes, bytes)."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for key, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{key}|{tuple(t.shape)}|{t.dtype}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class AdapterInfo:
    """What ``prism-run ls adapters`` shows."""

    name: str
    origin: str
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
