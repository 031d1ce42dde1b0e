"""The adapter base class: turns a batch of images into embeddings.

An adapter declares what it produces (``embed_dim``) and how images must be prepared (``preprocessing``); the
extraction loop does the rest (decoding, batching, device placement, L2 normalisation, caching). Subclasses
implement :meth:`build` (construct the network, load weights) and :meth:`forward` (a preprocessed ``(B, 3, H, W)``
tensor -> ``(B, embed_dim)`` features).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from prism_plugin.errors import PrismError
from prism_plugin.storage import memoised_file_digest

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: OpenAI CLIP normalisation statistics (also CONCH's loader).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

#: The default preprocessing profile: what the PRISM paper applied on its six main datasets (its
#: Table 4; ``model_card`` = each model's own documented transform). Part of the cache key.
DEFAULT_PROFILE = "prism_main"

#: the precision each published extraction ran in, by profile name (docs/recipes.md gives the sources):
#: PRISM's main notebooks ran in fp32 with no autocast, its Camelyon17 re-extraction in fp16 for all eight
#: models. A profile not listed here (``model_card``, ``audit``: papers/002 states no precision) keeps the
#: adapter's own ``default_dtype``; ``--model-args dtype=`` overrides either.
PROFILE_DTYPES = {"prism_main": "fp32", "prism_camelyon17": "fp16"}

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


#: file suffixes of weights inside a checkpoint folder (hashed by the default :meth:`Adapter.weights_fingerprint`)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".onnx", ".msgpack",
                   ".npz", ".gguf", ".tar")
#: constructor arguments that never change the embeddings (left out of the default weights fingerprint)
RUNTIME_ARGS = frozenset({"batch_size", "device", "num_workers", "normalize", "pretraining_data"})

#: the model-arg that declares (or overrides) an adapter's pretraining datasets; never part of the
#: adapter's config() or fingerprint (what the encoder saw does not change the numbers it produces)
PRETRAINING_ARG = "pretraining_data"


def parse_pretraining_data(value: Any) -> tuple[str, ...] | None:
    """``--model-args pretraining_data=A+B`` -> ``("A", "B")``; ``none`` (or empty) -> ``()``.

    A tuple/list of names is accepted as is (blank names dropped); ``None`` means "not declared".
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        names = tuple(str(v).strip() for v in value)
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none"):
            return ()
        names = tuple(part.strip() for part in text.split("+"))
    else:
        raise PrismError(f"--model-args pretraining_data={value!r}: expected dataset names joined by '+' "
                         "(e.g. pretraining_data=ImageNet-1k+LVD-142M) or 'none'")
    if any(not n for n in names):
        raise PrismError(f"--model-args pretraining_data={value!r}: empty dataset name; join names with a single '+' "
                         "(or pass 'none')")
    return names


def _existing_file_or_folder(value: Any):
    """``Path`` of a ``str``/``PathLike`` value naming an existing file or folder, else ``None``."""
    import os
    from pathlib import Path

    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value.strip()):
        return None
    try:
        path = Path(os.fspath(value)).expanduser()
        if path.is_file() or path.is_dir():
            return path
    except (OSError, ValueError, TypeError):  # a name too long, a NUL byte, ...
        return None
    return None


def path_content_digest(path) -> str:
    """The content digest of a weight file (:func:`file_content_digest`) or of a checkpoint folder: its weight
    files (:data:`WEIGHT_SUFFIXES`, top level, sorted) as ``name=digest`` pairs; ``""`` for a folder that holds
    none (e.g. a data folder)."""
    from pathlib import Path

    path = Path(path)
    if path.is_file():
        return file_content_digest(path)
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in WEIGHT_SUFFIXES and p.is_file())
    return ",".join(f"{p.name}={file_content_digest(p)}" for p in files)


def declared_weights(adapter: "Adapter") -> dict[str, Any]:
    """What the default :meth:`Adapter.weights_fingerprint` covers: ``hub`` (``hub_id@revision``), ``files``
    (blake2b content digests, memoised per path, size and mtime) and ``args`` (the rest but :data:`RUNTIME_ARGS`).
    """
    out: dict[str, Any] = {}
    if getattr(adapter, "hub_id", ""):
        out["hub"] = hub_weights(adapter, adapter.hub_id, getattr(adapter, "revision", None))[len("hub:"):]
    args, kwargs = getattr(adapter, "_init_args", ((), {}))
    named = [(f"#{i}", v) for i, v in enumerate(args)] + sorted(kwargs.items())
    attrs = sorted((k, v) for k, v in vars(adapter).items() if not k.startswith("_"))
    files: dict[str, str] = {}
    plain: dict[str, Any] = {}
    for origin, items in (("arg", named), ("attr", attrs)):
        for name, value in items:
            if name in RUNTIME_ARGS:
                continue
            path = _existing_file_or_folder(value)
            digest = None
            if path is not None:
                try:
                    digest = path_content_digest(path)  # "" for a folder without weight files
                except OSError:  # unreadable here: its name identifies it (the build will say why)
                    path = None
            if digest:
                files[f"{origin}:{name}"] = digest
            elif path is None and origin == "arg":
                plain[name] = json.loads(json.dumps(value, sort_keys=True, default=str))
    if files:
        out["files"] = files
    if plain:
        out["args"] = plain
    return out


def hub_weights(adapter: "Adapter", hub_id: str, revision: Any = None, filenames: tuple[str, ...] = ()) -> str:
    """``hub:<hub_id>@<commit>``: the weights fingerprint of a hub model, naming the commit its weights are
    loaded from (:func:`prism_plugin.embed.hub.resolve_revision`; the revision name when no commit can be
    known offline). Resolved once per adapter and revision; :func:`weights_revision` gives the answer and
    :func:`load_revision` the revision to download (the commit itself, so what is loaded is what is named)."""
    from prism_plugin.embed.hub import resolve_revision

    requested = str(revision) if revision not in (None, "") else "main"
    memo = adapter.__dict__.setdefault("_weights_revisions", {})
    rev = memo.get((hub_id, requested))
    if rev is None:
        who = getattr(adapter, "display_name", "") or getattr(adapter, "name", "") or hub_id
        rev = memo[(hub_id, requested)] = resolve_revision(hub_id, requested, model=str(who),
                                                           gated=bool(getattr(adapter, "gated", False)),
                                                           filenames=tuple(filenames))
    adapter.__dict__["_weights_revision"] = rev
    return f"hub:{hub_id}@{rev.tag}"


def weights_revision(adapter: "Adapter"):
    """The :class:`~prism_plugin.embed.hub.Revision` the adapter's weights fingerprint resolved, or ``None``
    (weights not from the hub, or not fingerprinted yet)."""
    return getattr(adapter, "__dict__", {}).get("_weights_revision")


def load_revision(adapter: "Adapter", hub_id: str, revision: Any = None) -> str | None:
    """The revision to download ``hub_id`` at: the commit the fingerprint named, else the revision name."""
    hub_weights(adapter, hub_id, revision)
    rev = weights_revision(adapter)
    return rev.commit or (str(revision) if revision not in (None, "") else None)


# --------------------------------------------------------------------------- precision identity
def bind_extraction_device(adapter: "Adapter", request: Any) -> None:
    """Record the ``--device`` request of the job (``auto``: the adapter's own ``device=``), which decides
    the precision the embeddings are computed in (:func:`precision_identity`)."""
    req = str(request or "auto")
    if adapter.__dict__.get("_device_bound") != req:
        adapter.__dict__["_device_bound"] = req
        adapter.__dict__.pop("_precision", None)


def precision_identity(adapter: "Adapter", device_type: str | None = None) -> dict[str, Any]:
    """The precision the embeddings are computed in, beside the one asked for.

    ``precision`` (the effective one, part of the cache key), ``precision_requested`` (``dtype=`` or the
    profile's), ``device`` (the device type the extraction uses; resolved as the extraction resolves it, only
    when a reduced precision is asked for) and ``note`` (why they differ: autocast is applied on CUDA only, so
    elsewhere a bf16/fp16 request computes fp32). A features adapter's vectors are ``as stored``.
    ``device_type`` ("cuda", "cpu", "mps") answers for that device instead (nothing is recorded)."""
    if getattr(adapter, "input_kind", "images") == "features":
        return {"precision": "as stored", "precision_requested": "as stored", "device": None, "note": ""}
    requested = dtype_name(getattr(adapter, "autocast_dtype", None))
    if requested == "fp32":
        return {"precision": "fp32", "precision_requested": "fp32", "device": device_type, "note": ""}
    explicit = device_type is not None
    if not explicit:
        cached = adapter.__dict__.get("_precision")
        if cached and cached["precision_requested"] == requested:
            return dict(cached)
        from prism_plugin.embed.device import pick_device

        bound = adapter.__dict__.get("_device_bound") or "auto"
        device_type = pick_device(bound if bound != "auto" else getattr(adapter, "device_request", "auto")).type
    effective = requested if device_type == "cuda" else "fp32"
    note = "" if effective == requested else (
        f"{requested} was asked for (dtype= or the profile's precision), but the extraction runs on {device_type}, "
        f"where autocast is not applied: the embeddings are computed, cached and recorded as fp32")
    out = {"precision": effective, "precision_requested": requested, "device": device_type, "note": note}
    if not explicit:
        adapter.__dict__["_precision"] = out
    return dict(out)


def _config_at_fp32(adapter: "Adapter") -> dict[str, Any]:
    """``adapter.config()`` as it is with no autocast: the cache key of an fp32 extraction, whatever was asked."""
    import copy

    twin = copy.copy(adapter)
    twin.autocast_dtype = None
    return twin.config()


def embedding_identity(adapter: "Adapter") -> dict[str, Any]:
    """What the embeddings are: the effective precision and the weights (with the hub commit), as
    ``summary.json``'s ``embedding_identity`` holds them; ``notes`` lists what qualifies them
    (``{"check", "level", "message"}``)."""
    prec = precision_identity(adapter)
    weights = adapter.weights_identity()
    notes = []
    if prec["note"]:
        notes.append({"check": "precision_not_as_requested", "level": "info", "message": prec["note"]})
    rev = weights_revision(adapter)
    if rev is not None and rev.note:
        notes.append({"check": "weights_revision_not_checked", "level": rev.level, "message": rev.note})
    return {"precision": prec["precision"], "precision_requested": prec["precision_requested"],
            "device": prec["device"], **weights, "notes": notes}


#: the runs.csv columns of the embedding identity (:func:`identity_columns`)
IDENTITY_COLUMNS = ("precision", "weights", "weights_revision")


def identity_columns(identity: Mapping[str, Any]) -> dict[str, Any]:
    """``precision``, ``weights`` and ``weights_revision`` (the hub commit; a missing value, NaN, when the
    weights are not a hub model's or no commit is known: an empty runs.csv field) of an :func:`embedding_identity`."""
    return {"precision": identity.get("precision"), "weights": identity.get("weights"),
            "weights_revision": identity.get("weights_revision") or float("nan")}


def parse_int(value: Any, name: str, minimum: int = 1) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise PrismError(f"--model-args {name}={value!r}: expected an integer") from None
    if out < minimum:
        raise PrismError(f"--model-args {name}={value!r}: must be >= {minimum}")
    return out


_UNSET = object()


class Adapter:
    """Base class of every image adapter.

    Class attributes a subclass sets: ``name`` (the ``--model`` name), ``display_name`` (the ``model`` column),
    ``embed_dim``, ``preprocessing``, ``licence`` and ``hub_id`` where relevant. ``normalize`` (L2, on by default
    as in the PRISM protocol) and ``batch_size`` may be overridden per run with ``--model-args
    normalize=false,batch_size=32``.
    """

    name: str = "adapter"
    display_name: str = "adapter"
    embed_dim: int = 0
    preprocessing: Preprocessing = Preprocessing(224, 224)
    licence: str = ""
    hub_id: str = ""
    #: "images" adapters embed decoded tiles; "features" adapters read vectors from a feature source
    #: (``feature_source(task)``: their own, or ``None`` for the task's; see embed/load.feature_source).
    input_kind: str = "images"
    #: dtype for ``torch.autocast`` during extraction on CUDA (``None``: full fp32).
    #: The extraction loop reads it; adapters document why their model tolerates it.
    autocast_dtype: Any = None
    #: datasets the encoder was pretrained on, as dataset identities matched (case-insensitively)
    #: against a task's ``dataset`` and ``dataset_aliases`` by the exposure audit: ``None`` = not
    #: declared ("unknown"), ``()`` = declared as none of them. ``--model-args
    #: pretraining_data=A+B`` (or ``none``) overrides it per run, for every adapter; it is not part
    #: of :meth:`config` or :meth:`fingerprint`, so declaring it never changes a cache key.
    pretraining_data: tuple[str, ...] | None = None

    def __new__(cls, *args: Any, **kwargs: Any):
        # the constructor's arguments, for the default weights_fingerprint (a subclass's own
        # ``checkpoint=`` never reaches Adapter.__init__); pickling/copying calls __new__ bare
        self = super().__new__(cls)
        kwargs.pop(PRETRAINING_ARG, None)  # a declaration about the weights, not a weight option
        self._init_args = (tuple(args), dict(kwargs))
        return self

    def __init_subclass__(cls, **kwargs: Any):
        # every adapter accepts ``pretraining_data=``, whatever its own __init__ takes: the
        # subclass's constructor is wrapped so the argument is taken off before it runs and
        # applied to the instance after it
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_takes_pretraining_data", False):
            return

        import functools

        @functools.wraps(init)
        def __init__(self, *args: Any, **kw: Any):
            declared = kw.pop(PRETRAINING_ARG, _UNSET)
            init(self, *args, **kw)
            if declared is not _UNSET:
                self.pretraining_data = parse_pretraining_data(declared)

        __init__._takes_pretraining_data = True
        cls.__init__ = __init__

    def __init__(self, *, normalize: Any = True, batch_size: Any = 64, device: str = "auto",
                 pretraining_data: Any = _UNSET, **unknown: Any):
        if pretraining_data is not _UNSET:
            self.pretraining_data = parse_pretraining_data(pretraining_data)
        if unknown:  # a subclass may set its name after this runs: then the class names it
            who = self.name if self.name != Adapter.name else type(self).__name__
            raise PrismError(
                f"adapter {who!r} does not accept --model-args {', '.join(sorted(unknown))}; "
                f"it accepts {', '.join(sorted(self.accepted_args()))}"
            )
        self.normalize = parse_bool(normalize, "normalize")
        self.batch_size = parse_int(batch_size, "batch_size")
        self.device_request = str(device)
        self._built = False

    @classmethod
    def accepted_args(cls) -> set[str]:
        return {"normalize", "batch_size", "device", PRETRAINING_ARG}

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
        """What identifies the weights (and any other option) this adapter embeds with; part of
        :meth:`fingerprint`, hence of the embedding-cache key and of every run's fingerprint.

        The default covers, without any code in the subclass (:func:`declared_weights`):

        * the **content** of every file named by a constructor argument or a public attribute
          (``checkpoint="/w/model.pt"``, ``self.weights = Path(...)``): a checkpoint rewritten in place gets a new
          fingerprint, a moved one keeps it; a checkpoint folder counts by its weight files (:data:`WEIGHT_SUFFIXES`);
        * ``hub_id`` with a ``revision`` attribute (default ``main``) when declared;
        * every other constructor argument by value (not ``batch_size``, ``device``, ``normalize``, which
          :meth:`config` already covers or which do not change the numbers).

        An adapter with nothing of the kind gets ``""``. Override it when the weights come from somewhere else (a
        download resolved at build time, a random initialisation): return a string that changes whenever the
        weights do, e.g. ``"file:" + file_content_digest(path)`` or ``f"hub:{repo}@{commit}"``.
        """
        declared = declared_weights(self)
        return json.dumps(declared, sort_keys=True) if declared else ""

    def weights_identity(self) -> dict[str, Any]:
        """``weights`` (what the weights are: ``hub:<id>``, ``file:<digest>``, ``random-init:...``, or a digest of
        a declared fingerprint) and ``weights_revision`` (the hub commit loaded, ``None`` when not a hub model
        or unknown), plus ``revision`` (how the commit was found) for a hub model."""
        if self.input_kind == "features":
            return {"weights": "as stored", "weights_revision": None}
        fp = self.weights_fingerprint()
        rev = weights_revision(self)
        if rev is not None:
            return {"weights": f"hub:{rev.hub_id}", "weights_revision": rev.commit, "revision": rev.to_dict()}
        weights = "declared:" + hashlib.sha256(fp.encode()).hexdigest()[:16] if fp.startswith("{") else fp
        return {"weights": weights, "weights_revision": None}

    def fingerprint(self, device_type: str | None = None) -> str:
        """The embedding identity: :meth:`config` (with the **effective** precision, see
        :func:`precision_identity`: a bf16/fp16 request extracted where autocast does not apply keys as fp32)
        and :meth:`weights_fingerprint` (a hub model's with its commit)."""
        prec = precision_identity(self, device_type)
        weights = self.weights_fingerprint()
        config = self.config() if prec["precision"] == prec["precision_requested"] else _config_at_fp32(self)
        rev = weights_revision(self)
        if rev is not None and rev.commit and "revision" in config:
            # the weights fingerprint names the commit: ``revision=main`` and ``revision=<that commit>`` are
            # the same weights, one cache entry
            config = {k: v for k, v in config.items() if k != "revision"}
        payload = json.dumps({"config": config, "weights": weights}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def describe(self) -> Mapping[str, Any]:
        return {"name": self.name, "display_name": self.display_name, "embed_dim": self.embed_dim,
                "licence": self.licence, "hub_id": self.hub_id, **self.config()}
