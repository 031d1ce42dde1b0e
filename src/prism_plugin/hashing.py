"""The one file hasher: a hash object fed a file's bytes in chunks (standard library only).

Every content digest of a file in prism-plugin reads the file through :func:`update_from_file`,
each caller with the algorithm and digest size its stored format has always used, so the values
written to disk never change:

* ``embed.cache.file_checksum`` -- blake2b, 20 bytes (the embedding-cache manifest's
  ``*_checksum`` fields);
* ``embed.adapter.file_content_digest`` -- blake2b, 20 bytes, memoised (weight files, several GB);
* ``data.precomputed`` -- blake2b, 16 bytes (fingerprints of precomputed embedding folders);
* ``data.fingerprints.split_fingerprint`` -- item bytes fed into the split's running blake2b;
* ``commands.reference`` -- SHA-256 of the shipped reference files.

The chunk size changes only memory use and speed, never the digest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

DEFAULT_CHUNK = 1 << 22  # 4 MiB

_MEMO: dict[tuple[str, int, int, int], str] = {}


def update_from_file(h: Any, path: str | os.PathLike, chunk: int = DEFAULT_CHUNK) -> Any:
    """Feed the file's bytes into the hash object ``h`` (anything with ``update``), ``chunk`` bytes at a
    time; returns ``h``."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h


def file_digest(path: str | os.PathLike, digest_size: int = 16, chunk: int = DEFAULT_CHUNK) -> str:
    """Hex blake2b (``digest_size`` bytes) of the file's contents."""
    return update_from_file(hashlib.blake2b(digest_size=digest_size), path, chunk).hexdigest()


def memoised_file_digest(path: str | os.PathLike, digest_size: int) -> str:
    """:func:`file_digest`, remembered per (resolved path, size, mtime) for this process.

    For large files hashed repeatedly (model weights): a file rewritten in place gets a new size or
    modification time and is hashed again.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, int(digest_size))
    if key not in _MEMO:
        _MEMO[key] = file_digest(path, digest_size)
    return _MEMO[key]


__all__ = ["DEFAULT_CHUNK", "update_from_file", "file_digest", "memoised_file_digest"]
