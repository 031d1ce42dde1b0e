"""Versions of the libraries a run's numbers can depend on (recorded in summary.json and the cache)."""

from __future__ import annotations

import platform

from prism_plugin import __version__

#: Libraries whose versions can change the numbers; part of the run fingerprint.
NUMERIC_LIBS = ("numpy", "scipy", "scikit-learn")


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "prism-plugin": __version__}
    for lib in ("numpy", "scipy", "scikit-learn", "pandas", "torch", "torchvision", "timm", "pluggy"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = "absent"
    return out
