"""Synthetic perturbation domains: the task key ``perturb`` (seeded image transforms on every image).

Each image of every split and source type is transformed, in the listed order, as it is read: a SYNTHETIC target
domain to pair with the clean task in a ``shift: covariate`` transfer (docs/tasks.md).

Determinism: image ``key`` (its stable identity: relative path, row id) gets the random stream ``default_rng([seed,
blake2b(key)])``, one child stream per transform, so the same image is changed the same way in every split, split
seed and run, on every machine. The split's images fingerprint covers the transforms (kind, parameters, seed), so
the embedding cache keys of a perturbed task differ from the clean task's.

The kinds are the ``perturbations`` registry (``prism-run ls perturbations``; built-ins registered by this module's
hook). A numeric parameter may be a number or a ``[low, high]`` range drawn per image:

``hed_jitter``  stain jitter in HED space (Tellez et al. 2018): colour deconvolution with the
                Ruifrok-Johnston haematoxylin-eosin-DAB matrix (as scikit-image's ``rgb2hed``), each
                stain concentration ``s`` becomes ``s * a + b`` with ``a ~ U(1 - alpha, 1 + alpha)``
                and ``b ~ U(-beta, beta)`` per image and channel, then back to RGB (concentrations
                are not clipped at zero, so zero jitter returns the image unchanged).
                ``alpha`` (default 0.05), ``beta`` (default 0.05; stain units of ``rgb2hed``).
``hsv_jitter``  colour jitter in HSV: hue shifted by ``U(-hue, hue)`` of the hue circle, saturation and
                value multiplied by ``U(1 - saturation, 1 + saturation)`` / ``U(1 - value, 1 + value)``.
                Defaults hue 0.05, saturation 0.1, value 0.1.
``blur``        Gaussian blur, ``sigma`` in pixels (default 1.0; PIL's ``GaussianBlur``).
``jpeg``        JPEG re-encoding at ``quality`` 1-95 (default 30; PIL, 4:2:0 subsampling).
``scale``       scale change by ``factor`` (default 0.5); ``mode: resample`` (default) shrinks by the
                factor and enlarges back (loss of resolution, same field of view); ``mode: zoom``
                magnifies (factor > 1: centre crop enlarged) or shrinks (factor < 1: reflected border)
                the content at the same image size (a magnification change).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from prism_plugin.data.refs import ImageRef
from prism_plugin.errors import PrismError, suggest
from prism_plugin.hookspecs import hookimpl

#: Ruifrok & Johnston (2001) stain vectors (rows: haematoxylin, eosin, DAB), as scikit-image's rgb_from_hed
RGB_FROM_HED = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11], [0.27, 0.57, 0.78]])
HED_FROM_RGB = np.linalg.inv(RGB_FROM_HED)
_LOG_ADJUST = np.log(1e-6)  # scikit-image's stain units: optical density / ln(1e6)


@dataclass(frozen=True)
class Param:
    default: Any
    lo: float
    hi: float
    integer: bool = False
    rangeable: bool = True
    choices: tuple[str, ...] = ()
    lo_open: bool = False


def _kinds(host=None):
    """The ``perturbations`` registry of the plugin host (built-in and plugin kinds)."""
    from prism_plugin.plugins import host_or_shared

    return host_or_shared(host).perturbations


# ------------------------------------------------------------------------------------------ validation
def check_perturb(value: Any, fail: Callable[[str, str], Exception], host=None) -> dict[str, Any] | None:
    """The normalised ``perturb:`` mapping ``{seed, transforms: [{kind, **params}]}`` (defaults filled in);
    ``fail(key, message)`` builds the error for the key path (``perturb.transforms[0].sigma``)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise fail("perturb", "must be a mapping {seed: INT, transforms: [{kind: ..., ...}, ...]}, e.g. "
                              "{seed: 0, transforms: [{kind: hed_jitter, alpha: 0.05, beta: 0.05}]}")
    for key in value:
        if key not in ("seed", "transforms"):
            raise fail(f"perturb.{key}", f"unknown key{suggest(str(key), ('seed', 'transforms'))} "
                                         "(allowed: seed, transforms)")
    seed = value.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise fail("perturb.seed", f"must be an integer in [0, 2**32), got {seed!r}")
    transforms = value.get("transforms")
    reg = _kinds(host)
    kinds = reg.names()
    if not isinstance(transforms, list) or not transforms:
        raise fail("perturb.transforms", "must be a non-empty list of {kind: ..., ...} (kinds: "
                                         f"{', '.join(kinds)})")
    out = []
    for i, t in enumerate(transforms):
        where = f"perturb.transforms[{i}]"
        if not isinstance(t, Mapping) or "kind" not in t:
            raise fail(where, f"must be a mapping with a kind ({', '.join(kinds)}), got {t!r}")
        kind = t["kind"]
        if not isinstance(kind, str) or kind not in reg:
            raise fail(f"{where}.kind", f"{kind!r} is not a perturbation kind{suggest(str(kind), kinds)} "
                                        f"(kinds: {', '.join(kinds)})")
        kind = reg.entry(kind).name  # an alias names its entry
        spec = reg.get(kind).params
        norm: dict[str, Any] = {"kind": kind}
        for key, raw in t.items():
            if key == "kind":
                continue
            if key not in spec:
                raise fail(f"{where}.{key}", f"not a parameter of {kind}{suggest(str(key), spec)} "
                                             f"(parameters: {', '.join(spec)})")
        for key, p in spec.items():
            norm[key] = _check_param(t.get(key, p.default), p, lambda msg, key=key: fail(f"{where}.{key}", msg))
        out.append(norm)
    return {"seed": int(seed), "transforms": out}


def _check_param(value: Any, p: Param, fail: Callable[[str], Exception]) -> Any:
    if p.choices:
        if value not in p.choices:
            raise fail(f"must be one of {', '.join(p.choices)}, got {value!r}{suggest(str(value), p.choices)}")
        return value
    kind = "an integer" if p.integer else "a number"
    bounds = f"in [{p.lo:g}, {p.hi:g}]"

    def number(v):
        ok = (isinstance(v, int) if p.integer else isinstance(v, (int, float))) and not isinstance(v, bool)
        if not ok or not p.lo <= v <= p.hi:
            raise fail(f"must be {kind} {bounds} or a [low, high] range of them, got {v!r}")
        return int(v) if p.integer else float(v)

    if isinstance(value, list):
        if len(value) != 2:
            raise fail(f"a range is [low, high], got {value!r}")
        lo, hi = number(value[0]), number(value[1])
        if lo > hi:
            raise fail(f"range [low, high] needs low <= high, got {value!r}")
        return [lo, hi]
    return number(value)


def check_task_perturb(value: Any, ctx) -> dict[str, Any] | None:
    """The ``perturb`` task key's validator (tasks/keys.py): :func:`check_perturb`, refused for a task whose
    source is a feature source (there are no images to perturb)."""
    from prism_plugin.plugins import host_or_shared

    out = check_perturb(value, ctx.fail, host=ctx.host)
    source = ctx.data.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    sources = host_or_shared(ctx.host).sources
    if out is not None and isinstance(kind, str) and kind in sources and sources.meta(kind, "kind") == "features":
        raise ctx.fail("perturb", f"the task reads embedding vectors (source.type {kind} is a feature source): there "
                                  "are no images to perturb; perturb an image task (imagefolder, npz, hf, demo, "
                                  "hema_demo, ...) or drop the key")
    return out


# ------------------------------------------------------------------------------------------ transforms
def _draw(value, rng: np.random.Generator, integer: bool = False):
    if isinstance(value, (list, tuple)):
        v = rng.uniform(value[0], value[1])
        return int(round(v)) if integer else float(v)
    rng.uniform()  # keep the stream's position independent of fixed vs range
    return value


def hed_jitter(img: np.ndarray, rng: np.random.Generator, alpha=0.05, beta=0.05) -> np.ndarray:
    a = float(_draw(alpha, rng))
    b = float(_draw(beta, rng))
    rgb = np.maximum(img.astype(np.float64) / 255.0, 1e-6)
    stains = (np.log(rgb) / _LOG_ADJUST) @ HED_FROM_RGB  # not clipped at 0: no jitter is the identity
    stains = stains * rng.uniform(1 - a, 1 + a, 3) + rng.uniform(-b, b, 3)
    out = np.exp((stains * _LOG_ADJUST) @ RGB_FROM_HED)
    return np.clip(np.round(out * 255.0), 0, 255).astype(np.uint8)


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """``[0, 1]`` RGB -> HSV (all in ``[0, 1]``), vectorised (the matplotlib formulas)."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    mx, mn = rgb.max(-1), rgb.min(-1)
    d = mx - mn
    s = np.where(mx > 0, d / np.where(mx > 0, mx, 1), 0)
    safe = np.where(d > 0, d, 1)
    h = np.where(mx == r, (g - b) / safe % 6, np.where(mx == g, (b - r) / safe + 2, (r - g) / safe + 4)) / 6
    h = np.where(d > 0, h, 0) % 1.0
    return np.stack([h, s, mx], -1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    i = np.floor(h * 6).astype(int) % 6
    f = h * 6 - np.floor(h * 6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape)
    for k, (rr, gg, bb) in enumerate(choices):
        m = i == k
        out[..., 0][m], out[..., 1][m], out[..., 2][m] = rr[m], gg[m], bb[m]
    return out


def hsv_jitter(img: np.ndarray, rng: np.random.Generator, hue=0.05, saturation=0.1, value=0.1) -> np.ndarray:
    hmax, smax, vmax = float(_draw(hue, rng)), float(_draw(saturation, rng)), float(_draw(value, rng))
    hsv = rgb_to_hsv(img.astype(np.float64) / 255.0)
    dh, fs, fv = rng.uniform(-hmax, hmax), rng.uniform(1 - smax, 1 + smax), rng.uniform(1 - vmax, 1 + vmax)
    hsv[..., 0] = (hsv[..., 0] + dh) % 1.0
    hsv[..., 1] = np.clip(hsv[..., 1] * fs, 0, 1)
    hsv[..., 2] = np.clip(hsv[..., 2] * fv, 0, 1)
    return np.clip(np.round(hsv_to_rgb(hsv) * 255.0), 0, 255).astype(np.uint8)


def blur(img: np.ndarray, rng: np.random.Generator, sigma=1.0) -> np.ndarray:
    from PIL import Image, ImageFilter

    s = float(_draw(sigma, rng))
    if s <= 0:
        return img
    return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=s)))


def jpeg(img: np.ndarray, rng: np.random.Generator, quality=30) -> np.ndarray:
    from PIL import Image

    q = int(_draw(quality, rng, integer=True))
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=q)
    buf.seek(0)
    with Image.open(buf) as im:
        return np.asarray(im.convert("RGB"))


def scale(img: np.ndarray, rng: np.random.Generator, factor=0.5, mode="resample") -> np.ndarray:
    from PIL import Image

    f = float(_draw(factor, rng))
    h, w = img.shape[:2]
    pil = Image.fromarray(img)
    if mode == "resample":
        small = pil.resize((max(1, round(w * f)), max(1, round(h * f))), Image.BILINEAR)
        return np.asarray(small.resize((w, h), Image.BILINEAR))
    nw, nh = max(1, round(w * f)), max(1, round(h * f))
    resized = np.asarray(pil.resize((nw, nh), Image.BICUBIC if f > 1 else Image.BILINEAR))
    if f >= 1:
        top, left = (nh - h) // 2, (nw - w) // 2
        return np.ascontiguousarray(resized[top:top + h, left:left + w])
    pad_h, pad_w = h - nh, w - nw
    width = [(pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2)] + [(0, 0)] * (img.ndim - 2)
    mode_pad = "reflect" if max(pad_h, pad_w) < min(nh, nw) else "symmetric" if nh > 1 and nw > 1 else "edge"
    try:
        return np.ascontiguousarray(np.pad(resized, width, mode=mode_pad))
    except ValueError:
        return np.ascontiguousarray(np.pad(resized, width, mode="edge"))


#: the built-in kinds (registered by :func:`register_perturbations`; a plugin adds its own the same way):
#: name -> (transform, parameter specs, one-line description)
BUILTIN_KINDS: dict[str, tuple[Callable[..., np.ndarray], dict[str, Param], str]] = {
    "hed_jitter": (hed_jitter, {"alpha": Param(0.05, 0.0, 1.0), "beta": Param(0.05, 0.0, 1.0)},
                   "stain jitter in HED space (Ruifrok-Johnston deconvolution): alpha, beta"),
    "hsv_jitter": (hsv_jitter, {"hue": Param(0.05, 0.0, 0.5), "saturation": Param(0.1, 0.0, 1.0),
                                  "value": Param(0.1, 0.0, 1.0)},
                   "hue / saturation / value jitter: hue, saturation, value"),
    "blur": (blur, {"sigma": Param(1.0, 0.0, 50.0)}, "Gaussian blur: sigma (px)"),
    "jpeg": (jpeg, {"quality": Param(30, 1, 95, integer=True)}, "JPEG re-encoding: quality (1-95)"),
    "scale": (scale, {"factor": Param(0.5, 0.05, 8.0),
                        "mode": Param("resample", 0, 0, rangeable=False, choices=("resample", "zoom"))},
              "scale change: factor, mode (resample | zoom)"),
}


@hookimpl
def register_perturbations(register) -> None:
    """The built-in kinds of the ``perturb:`` task key (:data:`BUILTIN_KINDS`)."""
    for name, (function, params, description) in BUILTIN_KINDS.items():
        register(name, function, params=params, description=description)


def image_rng(seed: int, key: str) -> np.random.Generator:
    """The random stream of one image: ``default_rng([seed, blake2b(key) as four 32-bit words])``."""
    words = np.frombuffer(hashlib.blake2b(str(key).encode(), digest_size=16).digest(), dtype="<u4")
    return np.random.default_rng([int(seed), *[int(w) for w in words]])


def transforms_of(spec: Mapping[str, Any], host=None) -> list[Callable[..., np.ndarray]]:
    """The transform function of each step of a normalised spec, from the ``perturbations`` registry."""
    reg = _kinds(host)
    return [reg.get(t["kind"]).transform for t in spec["transforms"]]


def apply_perturb(img: np.ndarray, spec: Mapping[str, Any], key: str,
                  transforms: Sequence[Callable[..., np.ndarray]] | None = None) -> np.ndarray:
    """``img`` (``H x W x 3`` uint8) with the transforms of ``spec`` (a normalised ``perturb:`` mapping)
    applied in order, drawn from the stream of image ``key``; same shape and dtype. ``transforms``: the
    steps' functions (default: looked up in the shared host's registry)."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    functions = transforms_of(spec) if transforms is None else transforms
    children = image_rng(spec.get("seed", 0), key).spawn(len(spec["transforms"]))
    for t, function, rng in zip(spec["transforms"], functions, children):
        params = {k: v for k, v in t.items() if k != "kind"}
        img = np.ascontiguousarray(function(img, rng, **params), dtype=np.uint8)
    return img


def spec_text(spec: Mapping[str, Any]) -> str:
    """Canonical JSON of a normalised spec (what the fingerprint hashes)."""
    return json.dumps({"seed": spec.get("seed", 0), "transforms": list(spec["transforms"])}, sort_keys=True)


# ------------------------------------------------------------------------------------------ the image hook
class PerturbedImageRef(ImageRef):
    """An item (file path or :class:`ImageRef`) read, converted to RGB, perturbed and encoded as PNG.

    :meth:`digest_bytes` is the transforms' canonical JSON plus the item's own content (file bytes, or
    its ``digest_bytes``), so the images fingerprint changes with the perturbation and with the image,
    without perturbing anything while fingerprinting.
    """

    def __init__(self, item, key: str, spec: Mapping[str, Any], transforms: Sequence[Callable] | None = None):
        self.item = item
        self.key = str(key)
        self.spec = {"seed": int(spec.get("seed", 0)), "transforms": [dict(t) for t in spec["transforms"]]}
        #: the steps' functions, resolved once for the split (module-level functions: picklable for workers)
        self.transforms = list(transforms) if transforms is not None else transforms_of(self.spec)

    def pixels(self) -> np.ndarray:
        from PIL import Image

        item = self.item
        if isinstance(item, ImageRef):
            item.seek(0)
        with Image.open(item) as im:
            base = np.asarray(im.convert("RGB"))
        return apply_perturb(base, self.spec, self.key, self.transforms)

    def digest_bytes(self) -> bytes:
        from prism_plugin.storage import file_digest

        head = f"perturb|{spec_text(self.spec)}|".encode()
        if isinstance(self.item, ImageRef):
            return head + self.item.digest_bytes()
        return head + str(file_digest(self.item)).encode()


def perturb_items(items: Sequence, keys: Sequence[str], spec: Mapping[str, Any] | None) -> list:
    """``items`` wrapped so each is perturbed when read (``spec`` None or empty: unchanged)."""
    if not spec:
        return list(items)
    functions = transforms_of(spec)
    return [PerturbedImageRef(item, key, spec, functions) for item, key in zip(items, keys)]


def describe(spec: Mapping[str, Any] | None) -> str:
    """``hed_jitter(alpha=0.05, beta=0.05) + blur(sigma=1.0), seed 0`` (for messages and reports)."""
    if not spec:
        return ""
    parts = [f"{t['kind']}({', '.join(f'{k}={v}' for k, v in t.items() if k != 'kind')})" for t in spec["transforms"]]
    return f"{' + '.join(parts)}, seed {spec.get('seed', 0)}"


__all__ = ["BUILTIN_KINDS", "Param", "register_perturbations", "transforms_of", "RGB_FROM_HED", "HED_FROM_RGB", "check_perturb", "check_task_perturb",
           "apply_perturb", "image_rng", "perturb_items", "PerturbedImageRef", "spec_text", "describe"]
