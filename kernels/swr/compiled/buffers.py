"""The output buffers of :mod:`kernels.swr.compiled`: aligned to cache lines, and the large ones
recycled once no tensor refers to them."""

from __future__ import annotations

import math
import sys
import threading

import numpy as np

CACHE_LINE = 64  # bytes

#: Outputs of at least this many bytes come from :func:`_empty`'s recycled buffers. glibc
#: serves smaller allocations from its heap, reusing freed memory, but maps larger ones (above
#: 32 MiB) afresh on every call, and the kernel's page faults and zero-filling of a fresh
#: mapping cost about as much as the SWR pass itself (measured at L = 65536, 16×16 channels:
#: 5.7 ms with a fresh output against 3.3 ms with a reused one).
RECYCLE_MIN_BYTES = 32 << 20
RECYCLE_MAX = 4  # buffers kept
_recycled: list[np.ndarray] = []
_recycle_lock = threading.Lock()


def aligned_empty(shape: tuple, dtype, align: int = CACHE_LINE) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on an ``align``-byte boundary (NumPy's large arrays
    start 16 bytes past a page boundary, so every 64-byte row of the kernels would straddle two
    cache lines)."""
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    raw = np.empty(n * dtype.itemsize + align, np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip:skip + n * dtype.itemsize].view(dtype).reshape(shape)


def _empty(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, reusing a large buffer that no tensor refers to any more.

    A buffer handed out here is wrapped by ``torch.from_numpy``, whose storage holds a
    reference to it for as long as any tensor or view of that storage lives; a buffer whose
    only references are this list's and this function's (``sys.getrefcount`` of 3: the list,
    the local name, the call's argument) is free. At most :data:`RECYCLE_MAX` buffers are kept, the least
    recently handed out dropped first, like a (tiny) caching allocator."""
    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize < RECYCLE_MIN_BYTES:
        return aligned_empty(shape, dtype)
    with _recycle_lock:
        for j in range(len(_recycled)):
            buf = _recycled[j]
            if buf.shape == tuple(shape) and buf.dtype == dtype and sys.getrefcount(buf) == 3:
                _recycled.append(_recycled.pop(j))
                return buf
        buf = aligned_empty(shape, dtype)
        _recycled.append(buf)
        del _recycled[:-RECYCLE_MAX]
        return buf
