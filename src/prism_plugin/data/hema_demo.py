"""SYNTHETIC single-cell images of the five white-blood-cell classes (offline hematology demo; not real data).

A procedural generator (NumPy only) of blood-smear-like crops, one white cell in the middle, drawn
as stain concentrations of two dyes (a basic, blue-purple dye and an acidic, orange-red one) that
Beer-Lambert turns into RGB:

* ``neutrophil``: 3-5 nuclear lobes joined by thin strands, pale lilac-pink cytoplasm;
* ``lymphocyte``: a small cell, a large round dense nucleus, a thin rim of blue cytoplasm;
* ``monocyte``: a large cell, a folded (kidney-shaped) lighter nucleus, grey-blue cytoplasm, vacuoles;
* ``eosinophil``: a bilobed nucleus and coarse orange-red granules;
* ``basophil``: dark purple granules over (and hiding) the nucleus.

Every parameter is drawn per cell from overlapping ranges, and a share of cells borrows part of
another class's look, so a probe on these crops is well above chance but not perfect.

Four fictitious **acquisition domains** differ in what a real scanner/lab difference changes --
stain colour and intensity, optical blur, magnification (scale), background (red-cell density,
plasma tint, illumination) and sensor noise -- so transfer between them is a covariate shift
(:data:`DOMAIN_STYLE`: ``a`` is the reference, ``b``, ``c``, ``d`` differ).

Class priors: ``balanced`` (``n_per_class`` images of each class, the default), ``clinical``
(neutrophil-heavy, like a peripheral-blood differential: 60/28/7/4/1 % with at least
:data:`MIN_CLINICAL` per class; ``5 * n_per_class`` images in all), or a mapping of class -> weight.

Images are generated once into the data cache (``datasets/demo-hema-<domain>-<digest>/<class>/*.png``,
the flat image-folder layout; :func:`ensure_hema_demo`) through the same machinery as the PRISM demo
tiles (:mod:`prism_plugin.data.demo`), and read back like any image folder (source type ``hema_demo``).
Image ``i`` of class ``c`` in domain ``d`` is drawn from ``numpy.random.default_rng([seed, d, c, i])``:
asking for more images keeps the first ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from prism_plugin.data.base import Source, keyed_error
from prism_plugin.data.folder import ImageFolderSource
from prism_plugin.errors import PrismError, suggest

CLASSES = ("neutrophil", "lymphocyte", "monocyte", "eosinophil", "basophil")
DOMAINS = ("a", "b", "c", "d")
GENERATOR_VERSION = 1
#: the clinical prior (share of each class in CLASSES order) and the smallest count per class under it
CLINICAL_PRIOR = (0.60, 0.28, 0.07, 0.04, 0.01)
MIN_CLINICAL = 4
PRIORS = ("balanced", "clinical")

# OD (optical density per unit concentration) of the two dyes, R G B
_BASIC = np.array([0.95, 0.78, 0.22])   # azure / methylene blue: absorbs red and green -> blue-purple
_ACID = np.array([0.06, 0.72, 0.95])    # eosin: absorbs green and blue -> orange-red

#: domain -> stain, optics and background settings (fictitious scanners)
DOMAIN_STYLE: dict[str, dict[str, Any]] = {
    "a": dict(label="Scanner A (fictitious): balanced stain, sharp", basic=1.0, acid=1.0, hue=(0.0, 0.0, 0.0),
              blur=0.35, scale=1.0, rbc=(2, 5), plasma=(0.02, 0.04), tint=(0.0, 0.0, 0.0), illum=1.0, noise=3.0),
    "b": dict(label="Scanner B (fictitious): pinker, softer focus, smaller cells", basic=0.9, acid=1.15,
              hue=(-0.04, 0.02, 0.03), blur=0.6, scale=0.9, rbc=(3, 7), plasma=(0.03, 0.05), tint=(0.0, 0.01, 0.015),
              illum=0.99, noise=3.0),
    "c": dict(label="Scanner C (fictitious): bluer, darker, larger cells, crowded red cells", basic=1.15, acid=0.92,
              hue=(0.05, 0.01, -0.05), blur=0.5, scale=1.1, rbc=(5, 10), plasma=(0.015, 0.035), tint=(0.01, 0.0, 0.0),
              illum=0.96, noise=3.5),
    "d": dict(label="Scanner D (fictitious): faded, warm illumination, blurred, noisy", basic=0.82, acid=0.85,
              hue=(0.0, 0.04, 0.0), blur=1.0, scale=0.96, rbc=(1, 4), plasma=(0.04, 0.07), tint=(0.0, 0.03, 0.09),
              illum=0.97, noise=5.0),
}

# class -> look: cell radius range (px at 64 px, scale 1), nucleus (basic, acid) dye, cytoplasm (basic, acid),
# granules (count range, radius, basic, acid)
_LOOK: dict[str, dict[str, Any]] = {
    "neutrophil": dict(radius=(11.5, 15.0), nucleus=(1.05, 0.45), cyto=(0.12, 0.30), granules=(30, 60, 0.7, 0.10, 0.22)),
    "lymphocyte": dict(radius=(8.0, 11.0), nucleus=(1.45, 0.50), cyto=(0.42, 0.05), granules=(0, 3, 0.7, 0.3, 0.3)),
    "monocyte": dict(radius=(13.5, 17.5), nucleus=(0.88, 0.38), cyto=(0.36, 0.18), granules=(10, 30, 0.6, 0.15, 0.15)),
    "eosinophil": dict(radius=(11.5, 15.0), nucleus=(1.00, 0.42), cyto=(0.08, 0.30), granules=(70, 130, 1.0, 0.05, 1.0)),
    "basophil": dict(radius=(10.0, 13.5), nucleus=(0.85, 0.35), cyto=(0.15, 0.22), granules=(45, 90, 1.1, 1.25, 0.45)),
}
#: share of cells whose colours borrow from another class, and the largest borrowed weight
BORROW_P, BORROW_MAX = 0.35, 0.55


def check_domain(domain: Any) -> str:
    if domain not in DOMAIN_STYLE:
        raise ValueError(f"domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    return str(domain)


def class_counts(n_per_class: int, prior: Any = "balanced") -> dict[str, int]:
    """Images per class: ``n_per_class`` each (``balanced``), or ``5 * n_per_class`` split by the clinical
    prior (or a ``{class: weight}`` mapping), at least :data:`MIN_CLINICAL` per class."""
    n = int(n_per_class)
    if prior == "balanced":
        return {c: n for c in CLASSES}
    if prior == "clinical":
        weights = dict(zip(CLASSES, CLINICAL_PRIOR))
    elif isinstance(prior, Mapping):
        weights = {c: float(prior.get(c, 0.0)) for c in CLASSES}
    else:
        raise ValueError(f"prior must be balanced, clinical or a mapping class -> weight, got {prior!r}")
    total = sum(weights.values())
    return {c: max(MIN_CLINICAL, int(round(5 * n * w / total))) for c, w in weights.items()}


# ---------------------------------------------------------------------------------------------- drawing
def _gauss_kernel(sigma: float) -> np.ndarray:
    r = max(1, int(np.ceil(3 * sigma)))
    x = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of an ``H x W`` or ``H x W x C`` float array (reflected borders)."""
    if sigma <= 0:
        return img
    k = _gauss_kernel(sigma)
    r = len(k) // 2
    out = img.astype(np.float64, copy=False)
    for axis in (0, 1):
        if out.shape[axis] <= r:
            pad_mode = "edge"
        else:
            pad_mode = "reflect"
        width = [(0, 0)] * out.ndim
        width[axis] = (r, r)
        padded = np.pad(out, width, mode=pad_mode)
        n = out.shape[axis]
        acc = np.zeros_like(out)
        for j, w in enumerate(k):
            acc += w * np.take(padded, np.arange(j, j + n), axis=axis)
        out = acc
    return out


def _disc(xx, yy, cx, cy, r, wobble=0.0, phase=0.0, lobes=5):
    ang = np.arctan2(yy - cy, xx - cx)
    rr = r * (1 + wobble * np.sin(lobes * ang + phase))
    return (xx - cx) ** 2 + (yy - cy) ** 2 < rr ** 2


def _segment(xx, yy, p, q, width):
    """Pixels within ``width`` of the segment p-q."""
    px, py = p
    qx, qy = q
    dx, dy = qx - px, qy - py
    L2 = dx * dx + dy * dy or 1e-9
    t = np.clip(((xx - px) * dx + (yy - py) * dy) / L2, 0, 1)
    return (xx - px - t * dx) ** 2 + (yy - py - t * dy) ** 2 < width ** 2


def _nucleus_mask(cls: str, rng, xx, yy, cx, cy, R, scale):
    if cls == "neutrophil":
        n = int(rng.integers(3, 6))
        a0 = rng.uniform(0, 2 * np.pi)
        span = rng.uniform(2.2, 3.6)
        rad = 0.5 * R
        lobes = []
        for j in range(n):
            a = a0 + span * j / max(1, n - 1)
            lobes.append((cx + rad * np.cos(a) * rng.uniform(0.8, 1.1), cy + rad * np.sin(a) * rng.uniform(0.8, 1.1)))
        mask = np.zeros(xx.shape, bool)
        for j, (lx, ly) in enumerate(lobes):
            mask |= _disc(xx, yy, lx, ly, rng.uniform(0.24, 0.32) * R, 0.1, rng.uniform(0, 6.3))
            if j:
                mask |= _segment(xx, yy, lobes[j - 1], (lx, ly), 0.07 * R + 0.4 * scale)
        return mask
    if cls == "lymphocyte":
        ox, oy = rng.normal(0, 0.06 * R, 2)
        return _disc(xx, yy, cx + ox, cy + oy, rng.uniform(0.76, 0.88) * R, 0.05, rng.uniform(0, 6.3))
    if cls == "monocyte":
        a = rng.uniform(0, 2 * np.pi)
        rn = rng.uniform(0.58, 0.7) * R
        e = rng.uniform(1.05, 1.3)
        u = ((xx - cx) * np.cos(a) + (yy - cy) * np.sin(a)) / (rn * e)
        v = (-(xx - cx) * np.sin(a) + (yy - cy) * np.cos(a)) / (rn / e)
        body = u * u + v * v < 1
        bite = rng.uniform(0.45, 0.7) * rn
        bx, by = cx + np.cos(a + np.pi / 2) * rn * rng.uniform(0.8, 1.05), cy + np.sin(a + np.pi / 2) * rn * rng.uniform(0.8, 1.05)
        return body & ~_disc(xx, yy, bx, by, bite)
    if cls == "eosinophil":
        a = rng.uniform(0, 2 * np.pi)
        d = rng.uniform(0.32, 0.42) * R
        r = rng.uniform(0.28, 0.36) * R
        p = (cx + d * np.cos(a), cy + d * np.sin(a))
        q = (cx - d * np.cos(a), cy - d * np.sin(a))
        return (_disc(xx, yy, *p, r, 0.08, rng.uniform(0, 6.3)) | _disc(xx, yy, *q, r, 0.08, rng.uniform(0, 6.3))
                | _segment(xx, yy, p, q, 0.08 * R))
    # basophil: a lobed nucleus, mostly hidden under the granules
    a = rng.uniform(0, 2 * np.pi)
    d = 0.22 * R
    r = rng.uniform(0.34, 0.44) * R
    return (_disc(xx, yy, cx + d * np.cos(a), cy + d * np.sin(a), r, 0.12, rng.uniform(0, 6.3))
            | _disc(xx, yy, cx - d * np.cos(a), cy - d * np.sin(a), r * 0.85, 0.12, rng.uniform(0, 6.3)))


def _granules(rng, shape, cx, cy, R, count, radius):
    """A smooth granule density field: points inside the cell, splatted and blurred to ``radius``."""
    h, w = shape
    field = np.zeros(shape)
    if count <= 0:
        return field
    rr = R * np.sqrt(rng.uniform(0, 0.92, count))
    aa = rng.uniform(0, 2 * np.pi, count)
    x = np.clip(np.round(cx + rr * np.cos(aa)).astype(int), 0, w - 1)
    y = np.clip(np.round(cy + rr * np.sin(aa)).astype(int), 0, h - 1)
    np.add.at(field, (y, x), rng.uniform(0.7, 1.3, count))
    field = gaussian_blur(field, max(0.5, radius * 0.7))
    peak = field.max()
    return np.clip(field / (peak * 0.6), 0, 1) if peak > 0 else field


def render_cell(cls: str, domain: str, rng: np.random.Generator, size: int = 64) -> np.ndarray:
    """One SYNTHETIC ``size x size`` RGB uint8 crop of class ``cls`` in acquisition domain ``domain``."""
    st = DOMAIN_STYLE[check_domain(domain)]
    look = _LOOK[cls]
    s = size / 64.0 * st["scale"]
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    # look borrowed in part from another class (colours and granules), so classes overlap
    mix = 0.0
    other = _LOOK[CLASSES[int(rng.integers(len(CLASSES)))]]
    if rng.uniform() < BORROW_P:
        mix = rng.uniform(0, BORROW_MAX)

    def blend(a, b):
        return tuple((1 - mix) * np.asarray(a, float) + mix * np.asarray(b, float))

    nuc_b, nuc_a = blend(look["nucleus"], other["nucleus"])
    cyt_b, cyt_a = blend(look["cyto"], other["cyto"])
    g_lo, g_hi, g_r, g_b, g_a = look["granules"]
    og_lo, og_hi, _og_r, og_b, og_a = other["granules"]
    g_b, g_a = blend((g_b, g_a), (og_b, og_a))
    n_gran = int(rng.integers(g_lo, g_hi + 1) * (1 - mix) + rng.integers(og_lo, og_hi + 1) * mix)
    stain_jit = rng.uniform(0.85, 1.15, 2)  # per-slide stain intensity (basic, acid)
    # dye concentration maps
    basic = np.zeros((size, size))
    acid = np.zeros((size, size))
    acid += rng.uniform(*st["plasma"])
    for _ in range(int(rng.integers(st["rbc"][0], st["rbc"][1] + 1))):  # red cells: pink discs, pale centre
        rx, ry = rng.uniform(-4, size + 4, 2)
        rr = rng.uniform(6.5, 8.5) * s
        d2 = ((xx - rx) ** 2 + (yy - ry) ** 2) / (rr * rr)
        disc = d2 < 1
        acid[disc] = np.maximum(acid[disc], (0.42 + 0.12 * rng.normal()) * (0.65 + 0.35 * d2[disc]))
    R = rng.uniform(*look["radius"]) * s * rng.uniform(0.92, 1.08)
    cx, cy = size / 2 + rng.normal(0, 2.5 * s, 2)
    cell = _disc(xx, yy, cx, cy, R, rng.uniform(0.02, 0.06), rng.uniform(0, 6.3), int(rng.integers(3, 7)))
    basic[cell] = cyt_b * rng.uniform(0.8, 1.2)
    acid[cell] = cyt_a * rng.uniform(0.8, 1.2)
    nuc = _nucleus_mask(cls, rng, xx, yy, cx, cy, R, s) & cell
    chrom = 1 + 0.18 * gaussian_blur(rng.normal(0, 1, (size, size)), 0.8 * s)  # chromatin texture
    basic[nuc] = nuc_b * chrom[nuc]
    acid[nuc] = nuc_a * chrom[nuc]
    if cls == "monocyte":  # a few vacuoles
        for _ in range(int(rng.integers(0, 4))):
            ang, dist = rng.uniform(0, 2 * np.pi), rng.uniform(0.55, 0.85) * R
            v = _disc(xx, yy, cx + dist * np.cos(ang), cy + dist * np.sin(ang), rng.uniform(0.7, 1.4) * s) & cell & ~nuc
            basic[v] *= 0.3
            acid[v] *= 0.3
    gran = _granules(rng, (size, size), cx, cy, R, n_gran, g_r * s) * cell
    basic = basic * (1 - gran) + gran * g_b
    acid = acid * (1 - gran) + gran * g_a
    # Beer-Lambert with the domain's dyes
    hue = np.asarray(st["hue"])
    basic_od = np.clip(_BASIC + hue, 0.02, None) * st["basic"] * stain_jit[0]
    acid_od = np.clip(_ACID + hue[::-1] * 0.5, 0.02, None) * st["acid"] * stain_jit[1]
    od = basic[..., None] * basic_od + acid[..., None] * acid_od + np.asarray(st["tint"])
    rgb = 255.0 * st["illum"] * rng.uniform(0.97, 1.01) * np.exp(-od)
    rgb = gaussian_blur(rgb, st["blur"] * size / 64.0 * rng.uniform(0.85, 1.15))
    rgb += rng.normal(0, st["noise"], rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def draw_domain(domain: str, counts: Mapping[str, int], size: int = 64, seed: int = 0):
    """Yield ``(class, index, image)`` for every image of a domain (deterministic, see the module doc)."""
    d_idx = DOMAINS.index(check_domain(domain))
    for c_idx, cls in enumerate(CLASSES):
        for i in range(int(counts.get(cls, 0))):
            rng = np.random.default_rng([int(seed), d_idx, c_idx, i])
            yield cls, i, render_cell(cls, domain, rng, size)


def ensure_hema_demo(domain: str, n_per_class: int = 40, prior: Any = "balanced", size: int = 64,
                     seed: int = 0) -> Path:
    """Generate (once, into the data cache) and return the flat image-folder root of one demo domain."""
    from PIL import Image

    from prism_plugin.data import demo
    from prism_plugin.storage import naming

    counts = class_counts(n_per_class, prior)
    spec = {"kind": "hema_demo", "domain": check_domain(domain), "counts": counts, "size": int(size),
            "seed": int(seed), "version": GENERATOR_VERSION}

    def write(tmp: Path) -> None:
        for cls in CLASSES:
            (tmp / cls).mkdir(parents=True)
        for cls, i, img in draw_domain(domain, counts, int(size), int(seed)):
            target = tmp / cls / f"{cls}_{i:04d}.png"
            with naming(target):
                Image.fromarray(img, "RGB").save(target, optimize=False)

    n_images = sum(counts.values())
    return demo.materialise(f"demo-hema-{domain}", spec, n_images * (int(size) ** 2 * 3 + demo.TILE_OVERHEAD), write,
                            what="the SYNTHETIC hematology demo images",
                            note="SYNTHETIC white-cell crops generated by prism_plugin.data.hema_demo (not real data)\n")


class HemaDemoSource(ImageFolderSource):
    """SYNTHETIC white-cell crops of one acquisition domain, generated once into the data cache, read
    as a flat image folder (``<root>/<class>/<image>``; the task's ``split:`` carves train/held-out)."""

    type_name = "hema_demo"
    OPTIONS = frozenset({"domain", "n_per_class", "prior", "size", "seed"})
    REQUIRED = frozenset({"domain"})
    LAYOUT = "generated on first use (SYNTHETIC hematology demo)"

    def __init__(self, task, domain: str = "", n_per_class: int = 40, prior: Any = "balanced", size: int = 64,
                 seed: int = 0, **options: Any):
        Source.__init__(self, task, domain=domain, n_per_class=n_per_class, prior=prior, size=size, seed=seed,
                        **options)
        problem = source_problem({"domain": domain, "n_per_class": n_per_class, "prior": prior, "size": size,
                                  "seed": seed})
        if problem:
            raise PrismError(f"{task.file}: source.{problem[0]}: {problem[1]}")
        self.layout = "flat"
        self.domain = domain
        self.root = ensure_hema_demo(domain, int(n_per_class), prior, int(size), int(seed))

    def describe(self) -> str:
        return f"SYNTHETIC hematology demo domain {self.domain} ({self.root})"

    @classmethod
    def check_spec(cls, options, located) -> None:
        problem = source_problem(options)
        if problem:
            key, msg = problem
            raise keyed_error(PrismError(f"{located.where('source.' + key)}: source.{key}: {msg}"), f"source.{key}")


def source_problem(options: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(option, message)`` for the first bad ``hema_demo`` source option, else ``None``."""
    domain = options.get("domain")
    if domain not in DOMAIN_STYLE:
        return "domain", (f"must be one of {', '.join(DOMAINS)} (fictitious acquisition domains), got {domain!r}"
                          f"{suggest(str(domain), DOMAINS)}")
    for key, lo, hi in (("n_per_class", 2, 100_000), ("size", 16, 1024), ("seed", 0, 2**32 - 1)):
        value = options.get(key, 0 if key == "seed" else lo)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            return key, f"must be an integer in [{lo}, {hi}], got {value!r}"
    prior = options.get("prior", "balanced")
    if isinstance(prior, Mapping):
        bad = [k for k in prior if k not in CLASSES]
        if bad:
            return "prior", f"class {bad[0]!r} is not one of {', '.join(CLASSES)}{suggest(str(bad[0]), CLASSES)}"
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in prior.values()) \
                or not sum(prior.values()) > 0:
            return "prior", "weights must be non-negative numbers, not all zero"
    elif prior not in PRIORS:
        return "prior", (f"must be balanced, clinical or a mapping class -> weight, got {prior!r}"
                         f"{suggest(str(prior), PRIORS)}")
    return None


__all__ = ["CLASSES", "DOMAINS", "DOMAIN_STYLE", "PRIORS", "CLINICAL_PRIOR", "class_counts", "render_cell",
           "draw_domain", "ensure_hema_demo", "gaussian_blur",
           "source_problem", "HemaDemoSource"]
