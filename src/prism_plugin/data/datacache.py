"""Which folder the data sources of one job cache into (generated demo tiles, datasets downloads).

The cache of a job is ``--cache-dir`` when given, else :func:`prism_plugin.paths.cache_root`
(``$PRISM_CACHE_DIR`` or the default). The embedding cache gets the folder as an argument;
the data sources are built from the task alone, so the job states it once around their use::

    with using_cache_dir(opts.cache_dir):
        source = open_source(task, host=host)
        ...

and the sources ask :func:`data_cache_root`. Outside such a block (the API, tests) it is
:func:`~prism_plugin.paths.cache_root`. The setting is a context variable: threads and
concurrent jobs each see their own.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator

from prism_plugin.paths import cache_root

_CACHE_DIR: ContextVar[Path | None] = ContextVar("prism_data_cache_dir", default=None)


def data_cache_root() -> Path:
    """The cache folder of the current job: ``--cache-dir`` inside :func:`using_cache_dir`, else the default."""
    override = _CACHE_DIR.get()
    return override if override is not None else cache_root()


@contextmanager
def using_cache_dir(path: str | os.PathLike | None) -> Iterator[Path]:
    """Within the block, data sources cache under ``path`` (``None``: the default cache)."""
    token = _CACHE_DIR.set(Path(path).expanduser() if path is not None else None)
    try:
        yield data_cache_root()
    finally:
        _CACHE_DIR.reset(token)


__all__ = ["data_cache_root", "using_cache_dir"]
