"""Reading ``.npy`` files a user hands over: one clear line naming the file for every way one can be bad.

:func:`read_npy` reads the header itself before NumPy loads the data, so an empty (0-byte) file, a
file that is not a ``.npy`` array (a corrupt or foreign header), a truncated file, a file with bytes after
its array (``np.load`` would ignore them: a second save appended, a wrong header) and an object array (which
would need pickle) each get their own message and the fix -- re-save the array with ``numpy.save`` -- and
never NumPy's advice to load the file unsafely. Pickle is never enabled.

:func:`read_features` / :func:`read_labels` add the shape and dtype rules of embedding features
(a 2-D real matrix; float16 and 8/16-bit integer features come back as float32, exactly, so no arithmetic
runs in the narrow type; an inf that float16 stored for a value above 65504 is named) and labels (1-D
integers, :func:`prism_plugin.protocol.inputs.as_labels` with ``strict=True``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prism_plugin.errors import PrismError

_RESAVE = "re-save it with numpy.save"
_CHUNK = 65536


def _header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, data offset) from the file's own header, or a PrismError naming the file."""
    fmt = np.lib.format
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PrismError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if size == 0:
        raise PrismError(f"{path}: the file is empty (0 bytes), not a .npy array; {_RESAVE}")
    try:
        with open(path, "rb") as fh:
            try:
                version = fmt.read_magic(fh)
            except ValueError:
                raise PrismError(f"{path}: not a valid .npy array (no NumPy header: another format or a corrupt "
                                 f"file); {_RESAVE}") from None
            try:
                if version == (1, 0):
                    shape, _fortran, dtype = fmt.read_array_header_1_0(fh)
                elif version in ((2, 0), (3, 0)):  # 3.0 differs from 2.0 only in utf-8 field names
                    shape, _fortran, dtype = fmt.read_array_header_2_0(fh)
                else:
                    raise ValueError(f"format version {version}")
            except (ValueError, SyntaxError, TypeError, EOFError, KeyError, UnicodeDecodeError):
                raise PrismError(f"{path}: not a valid .npy array (its header is corrupt or truncated); "
                                 f"{_RESAVE}") from None
            offset = fh.tell()
    except OSError as exc:
        raise PrismError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if dtype.hasobject:
        raise PrismError(f"{path}: holds Python objects (dtype object), which are never read without pickle; "
                         "save a plain numeric array with numpy.save")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size - offset < expected:
        raise PrismError(f"{path}: truncated ({size - offset} of {expected} data bytes for shape {tuple(shape)}); "
                         f"{_RESAVE} (or copy it again)")
    if size - offset > expected:  # np.load would ignore them: another array appended, or a wrong header
        raise PrismError(f"{path}: {size - offset - expected} bytes after the array's {expected} data bytes (shape "
                         f"{tuple(shape)}, {dtype}); not a single .npy array (two saves into one file, or a corrupt "
                         f"header); {_RESAVE}")
    return tuple(int(d) for d in shape), dtype, offset


def read_npy(path: str | Path, mmap: bool = False) -> np.ndarray:
    """The array in ``path`` (memory-mapped when ``mmap``), checked as the module docstring says."""
    path = Path(path)
    shape, dtype, _offset = _header(path)
    try:
        return np.load(path, mmap_mode="r" if mmap and len(shape) else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise PrismError(f"{path}: not a valid .npy array ({type(exc).__name__}); {_RESAVE}") from None


def read_features(path: str | Path, mmap: bool = True) -> np.ndarray:
    """A 2-D real (samples x dims) matrix from ``path``."""
    path = Path(path)
    X = read_npy(path, mmap=mmap)
    if X.dtype.kind not in "fiu":
        raise PrismError(f"{path}: features must be real numbers, got dtype {X.dtype}; save a float32 (N x D) "
                         "matrix with numpy.save")
    if X.ndim != 2:
        what = "a single value (a 0-d array)" if X.ndim == 0 else f"shape {X.shape}"
        hint = "; save X.reshape(-1, 1) for one feature per sample" if X.ndim == 1 else ""
        raise PrismError(f"{path}: features must be a 2-D (samples x dims) matrix, got {what}{hint}")
    if X.shape[1] == 0:
        raise PrismError(f"{path}: features have 0 dimensions (shape {X.shape})")
    if X.dtype.kind == "f":
        f32_max = float(np.finfo(np.float32).max)
        for start in range(0, X.shape[0], _CHUNK):  # bounded memory on memory maps
            block = np.asarray(X[start:start + _CHUNK])
            if not np.isfinite(block).all():
                row = start + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                narrow = (f" ({X.dtype} holds at most {float(np.finfo(X.dtype).max):g}: larger values were stored "
                          "as inf; save the features as float32)") if X.dtype.itemsize < 4 else ""
                raise PrismError(f"{path}: features contain NaN or inf (first in row {row}){narrow}; re-extract "
                                 "the embeddings or drop those rows")
            if block.dtype.itemsize > 4 and block.size and float(np.abs(block).max()) > f32_max:
                raise PrismError(f"{path}: features exceed the float32 range (|x| > 3.4e38); rescale them "
                                 "(PRISM probes L2-normalised embeddings)")
    return _widened(X)


def _widened(X: np.ndarray) -> np.ndarray:
    """Features narrower than float32 (float16, 8/16-bit integers) as float32, exactly (every such value is a
    float32), so no later arithmetic runs in the narrow type (NumPy's "overflow encountered in cast")."""
    if X.dtype.itemsize >= 4 or X.dtype == np.float32:
        return X
    return np.asarray(X, dtype=np.float32)


def read_labels(path: str | Path, n_classes: int | None = None) -> np.ndarray:
    """1-D integer labels (int64) from ``path``."""
    from prism_plugin.protocol.inputs import as_labels

    path = Path(path)
    return as_labels(read_npy(path), str(path), n_classes, strict=True)


__all__ = ["read_npy", "read_features", "read_labels"]
