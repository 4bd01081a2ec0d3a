"""The memory roof of the SWR benchmark: the STREAM triad ``a = b + s·c`` on three float32
arrays far larger than the caches, compiled and split over the SWR kernels' threads
(:class:`Roof`), and the PyTorch copy bandwidth it replaced (:func:`copy_bandwidth`)."""

from __future__ import annotations

import time

import numpy as np
import torch


def _triad_kernel():
    import numba

    @numba.njit(cache=True, nogil=True, fastmath=True)
    def triad(a, b, c, s, i0, i1):  # pragma: no cover - compiled
        for i in range(i0, i1):
            a[i] = b[i] + s * c[i]
    return triad


class Roof:
    """The STREAM triad ``a = b + s·c`` on three float32 arrays of ``mib`` MiB each, compiled
    (numba) and split over the threads the SWR kernels use (:mod:`kernels.swr.compiled`'s pool,
    ``torch.get_num_threads()`` contiguous ranges). :meth:`measure` runs it once and returns
    bytes per second, counting ``3·4`` bytes per element (two reads, one write; like the
    kernels' effective bandwidth, not the write-allocate traffic).

    The default, 256 MiB per array (768 MiB in all), is far beyond a core's private caches and
    larger than the whole last-level cache of the machines the book runs on (the 2-core VMs
    report 504 MiB of L3 shared with their host; one core's triad bandwidth is flat from 16 MiB
    to 1 GiB per array there)."""

    def __init__(self, mib: float = 256.0):
        from kernels.swr import compiled

        self._compiled = compiled
        self.n = max(1024, int(mib * 2**20) // 4)
        self.a, self.b, self.c = (compiled.aligned_empty((self.n,), np.float32) for _ in range(3))
        self.b.fill(1.0)
        self.c.fill(2.0)
        self._triad = _triad_kernel()
        self.measure()  # compile, and touch every page

    def _ranges(self) -> list[tuple[int, int]]:
        threads = max(1, torch.get_num_threads())
        cuts = [(self.n * j // threads) // 16 * 16 for j in range(threads)] + [self.n]
        return [(s, e) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]

    def measure(self) -> float:
        ranges = self._ranges()
        args = lambda j, r: (self.a, self.b, self.c, np.float32(3.0), *r)
        t0 = time.perf_counter()
        self._compiled._parallel(self._triad, ranges, args)
        return 3 * 4 * self.n / (time.perf_counter() - t0)



def copy_bandwidth(gib: float = 1.0, repeats: int = 3) -> float:
    """Bytes per second (read + write) copying a ``gib`` GiB float32 buffer into a
    preallocated destination with PyTorch, best of ``repeats`` (the roof used before
    :class:`Roof`; kept for comparison)."""
    n = int(gib * 2**30) // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page before timing
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best
