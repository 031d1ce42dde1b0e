"""Where prism-plugin keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "PRISM_CACHE_DIR"


def cache_root() -> Path:
    """``$PRISM_CACHE_DIR``, else ``$XDG_CACHE_HOME/prism-plugin``, else ``~/.cache/prism-plugin``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "prism-plugin"
