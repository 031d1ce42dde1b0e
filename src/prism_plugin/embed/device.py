"""The device an extraction runs on: ``--device`` checked up front, and ``auto`` resolved (CUDA, then MPS, then CPU).

Its own module so that the adapter's precision record and the extraction resolve a device one way, with no
import between them."""

from __future__ import annotations

import re

from prism_plugin.errors import PrismError

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"
_DEVICE_RE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")


def check_device(request: str | None = "auto") -> str:
    """The normalised ``--device`` value, or a one-line error if this machine cannot use it.

    ``auto`` and ``cpu`` always work (torch is not even imported); ``cuda`` needs a CUDA device,
    ``cuda:N`` one with that index, ``mps`` Apple's Metal backend. Checked before any work, so a
    wrong device fails at once instead of after the data are loaded.
    """
    raw = "auto" if request is None else str(request)
    value = raw.strip().lower()
    if value in ("auto", ""):
        return "auto"
    match = _DEVICE_RE.match(value)
    if match is None:
        raise PrismError(f"--device {raw} is not a device this tool can use; choose {DEVICE_CHOICES}")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index not in (None, "0"):
            raise PrismError(f"--device {raw}: there is one CPU device; use --device cpu")
        return "cpu"
    import torch

    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = (f"this torch {torch.__version__} is built without CUDA" if torch.version.cuda is None
                     else "no CUDA device is visible (driver missing, CUDA_VISIBLE_DEVICES empty, or no GPU)")
            raise PrismError(f"--device {raw}: {build}; use --device cpu (or auto)")
        if index is not None and int(index) >= count:
            raise PrismError(f"--device {raw}: this machine has {count} CUDA device(s) (cuda:0 to cuda:{count - 1}); "
                             "pick one of those, or --device cuda")
        return value
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        raise PrismError(f"--device {raw}: Apple's MPS backend is not available on this machine; "
                         "use --device cpu (or auto)")
    if index not in (None, "0"):
        raise PrismError(f"--device {raw}: there is one MPS device; use --device mps")
    return "mps"


def pick_device(request: str = "auto"):
    import torch

    request = check_device(request)
    if request != "auto":
        return torch.device(request)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
