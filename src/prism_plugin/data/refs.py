"""Images read on demand: :class:`ImageRef` (an encoded image PIL opens like a file) and
:class:`ArrayImageRef` (one row of an image array, encoded as PNG when read).

A source's items are image files (:class:`~pathlib.Path`) or ``ImageRef`` objects; PIL opens both,
so the extraction loop needs no special case. Only the most recently read images keep their bytes
in memory (the live buffers below), so a pass over a large dataset does not accumulate them.
"""

from __future__ import annotations

import io
import weakref
from collections import deque

import numpy as np

_LIVE_BUFFERS: deque = deque()
_MAX_LIVE_BUFFERS = 32


class ImageRef:
    """An encoded image read on demand, opened by PIL like a file object.

    Subclasses implement :meth:`load_bytes` (the encoded image) or ``pixels()`` and may override
    :meth:`digest_bytes` (what the fingerprint hashes; default: the encoded bytes). Only the most recently read
    images keep their bytes in memory, so a pass over a large dataset does not accumulate them.
    """

    key: str = ""

    def load_bytes(self) -> bytes:
        """The encoded image: by default a PNG of the subclass's ``pixels()`` (a uint8 image array)."""
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(self.pixels()).save(out, format="PNG", compress_level=1)
        return out.getvalue()

    def digest_bytes(self) -> bytes:
        return self.load_bytes()

    # -- the file protocol PIL uses --
    def _buffer(self) -> io.BytesIO:
        buf = self.__dict__.get("_buf")
        if buf is None:
            buf = io.BytesIO(self.load_bytes())
            self.__dict__["_buf"] = buf
            _LIVE_BUFFERS.append(weakref.ref(self))
            while len(_LIVE_BUFFERS) > _MAX_LIVE_BUFFERS:
                old = _LIVE_BUFFERS.popleft()()
                if old is not None and old is not self:
                    old.__dict__.pop("_buf", None)
        return buf

    def read(self, size: int = -1) -> bytes:
        return self._buffer().read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._buffer().seek(offset, whence)

    def tell(self) -> int:
        return self._buffer().tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_buf", None)
        return state

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    def __str__(self) -> str:
        return self.key


class ArrayImageRef(ImageRef):
    """Row ``index`` of an image array (``H x W x C`` uint8), encoded as PNG when read."""

    def __init__(self, array, index: int, key: str):
        self.array = array
        self.index = int(index)
        self.key = key

    def pixels(self) -> np.ndarray:
        a = np.asarray(self.array[self.index])
        if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
            a = np.moveaxis(a, 0, -1)  # CHW -> HWC
        if a.ndim == 3 and a.shape[-1] == 1:
            a = a[..., 0]
        if a.dtype != np.uint8:
            if np.issubdtype(a.dtype, np.floating) and a.size and float(np.nanmax(a)) <= 1.0:
                a = a * 255.0
            a = np.clip(a, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(a)

    def digest_bytes(self) -> bytes:
        a = self.pixels()
        return f"{a.shape}|".encode() + a.tobytes()


__all__ = ["ImageRef", "ArrayImageRef"]
