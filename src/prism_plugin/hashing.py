"""The one file hasher: blake2b over a file's bytes, read in chunks (standard library only).

Every content digest of a file in prism-plugin comes from here, each caller with the digest size
its stored format has always used, so the values written to disk never change:

* ``embed.cache.file_checksum`` -- 20 bytes (the embedding-cache manifest's ``*_checksum`` fields);
* ``embed.adapter.file_content_digest`` -- 20 bytes, memoised (weight files, several GB);
* ``data.precomputed`` -- 16 bytes (fingerprints of precomputed embedding folders).

The chunk size changes only memory use and speed, never the digest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DEFAULT_CHUNK = 1 << 22  # 4 MiB

_MEMO: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: str | os.PathLike, digest_size: int = 16, chunk: int = DEFAULT_CHUNK) -> str:
    """Hex blake2b (``digest_size`` bytes) of the file's contents."""
    h = hashlib.blake2b(digest_size=digest_size)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def memoised_file_digest(path: str | os.PathLike, digest_size: int = 16, chunk: int = 1 << 24) -> str:
    """:func:`file_digest`, remembered per (resolved path, size, mtime) for this process.

    For large files hashed repeatedly (model weights): a file rewritten in place gets a new size or
    modification time and is hashed again.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, int(digest_size))
    if key not in _MEMO:
        _MEMO[key] = file_digest(path, digest_size, chunk)
    return _MEMO[key]


__all__ = ["DEFAULT_CHUNK", "file_digest", "memoised_file_digest"]
