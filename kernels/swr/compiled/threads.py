"""How one call of :mod:`kernels.swr.compiled` uses the cores.

Heads are independent, and so are channels except through ``da``, which is a sum
over channels (``dg`` and the ``λ·h`` term are both linear in the channels, so ``da`` of a
channel group is a partial sum and the groups' partials add up). Each kernel therefore takes a
range of heads and a range of channels, and :func:`_parallel` runs one range per thread: the
``B·H`` heads split into contiguous ranges, or — when there are fewer heads than threads — the
channels split into groups of whole cache lines (so that no two threads write the same line;
with ``D·itemsize`` under two cache lines there is nothing to split and the call stays on one
thread). The threads are plain Python threads in a small pool, each calling the compiled kernel
with the GIL released (``nogil=True``): they sleep on a queue between calls instead of spinning,
so they neither compete with PyTorch's OpenMP workers nor depend on numba's process-wide
threading layer (of which only ``omp`` and ``workqueue`` are installed here: ``tbb`` is not, and
``workqueue`` cost ~0.2 ms per call). The thread count follows ``torch.get_num_threads()`` (the
runner and the benchmark set it), and calls with fewer than :data:`MIN_PARALLEL_WORK` elements
stay on the calling thread, where the hand-off (tens of µs) would cost more than it saves.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from kernels.swr.compiled.buffers import CACHE_LINE

#: Below this many elements (``B·H·L·D``) of ``u`` a call runs on one thread. Measured on the
#: book's 2-core machines (16 heads × 16 channels, float32): two threads cost 30–60 µs more per
#: call at L ≤ 1024 and only start to win between L = 4096 (1M elements, still in cache) and
#: L = 16384 (4M); on a loaded machine the second core is often busy and the crossover moves up.
MIN_PARALLEL_WORK = 1 << 22
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] = (0, 0)  # (process id, workers): a forked child builds its own


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_key
    if _pool is None or _pool_key[0] != os.getpid() or _pool_key[1] < workers:
        if _pool is not None and _pool_key[0] == os.getpid():
            _pool.shutdown(wait=False)
        _pool = ThreadPoolExecutor(workers, thread_name_prefix="swr-compiled")
        _pool_key = (os.getpid(), workers)
    return _pool


def plan(n_heads: int, dim: int, itemsize: int, threads: int) -> list[tuple[int, int, int, int]]:
    """The ranges ``(h0, h1, d0, d1)`` one call is split into for ``threads`` threads:
    contiguous head ranges when there are at least as many heads as threads, otherwise channel
    groups of whole cache lines over all heads (one range when the channels fill less than two
    lines)."""
    if threads <= 1:
        return [(0, n_heads, 0, dim)]
    if n_heads >= threads:
        cuts = np.linspace(0, n_heads, threads + 1).round().astype(int)
        return [(int(s), int(e), 0, dim) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]
    per_line = max(1, CACHE_LINE // itemsize)
    lines = -(-dim // per_line)
    groups = min(threads, lines)
    cuts = [min(dim, per_line * round(g * lines / groups)) for g in range(groups + 1)]
    return [(0, n_heads, s, e) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]


def _threads_for(work: int, threads: int | None) -> int:
    if threads is not None:
        return max(1, int(threads))
    return torch.get_num_threads() if work >= MIN_PARALLEL_WORK else 1


def _parallel(kernel, ranges, args_for) -> list:
    """Run ``kernel(*args_for(j, ranges[j]))`` for every range ``j``: the last on this thread,
    the others in the pool; returns the results in order."""
    if len(ranges) == 1:
        return [kernel(*args_for(0, ranges[0]))]
    pool = _executor(len(ranges) - 1)
    futures = [pool.submit(kernel, *args_for(j, r)) for j, r in enumerate(ranges[:-1])]
    last = kernel(*args_for(len(ranges) - 1, ranges[-1]))
    return [f.result() for f in futures] + [last]
