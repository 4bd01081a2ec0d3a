"""The CPU fast path: SWR as a compiled streaming loop (numba), forward and backward, on all
cores.

On a CPU the cheapest exact form of the SWR operator is not the blocked two-pass algorithm
(O(L·ℓ·D) work, built for tensor cores) but the streaming two-state loop of the decoder
(O(L·D) work, one read of the input and one write of the output), vectorised across a head's
channels. Per head, ``h`` is the block-local state, ``c_prev`` the previous block's end state and
``r`` the product of ``a`` since the block start::

    h ← a_i·h + u_i;  r ← a_i·r;  y_i = h + r·c_prev;  at a block end: c_prev ← h, h ← 0, r ← 1

The forward also stores the block end states (``L/ℓ × D`` floats, the carriers ``c_t``) and
keeps its output ``y`` for the backward, which is one streaming pass right to left. With
``μ`` the adjoint restarted at every block end, ``P_i = a_{i+1}⋯a_{e−1}`` the product from ``i``
to the block's last position ``e−1``, ``g_{i−1} = a_s⋯a_{i−1}`` the prefix product from the
block start ``s`` and ``dc_t`` the adjoint of block ``t``'s carrier::

    μ_i  = dy_i + a_{i+1}·μ_{i+1}   (μ_{e−1} = dy_{e−1})
    du_i = λ_i = μ_i + P_i·dc_t,    dc_{t−1} = a_s·μ_s = Σ_{i∈t} g_i·dy_i
    da_i = Σ_d λ_i·h_{i−1} + g_{i−1}·Σ_d μ_i·c_{t−1}
         = Σ_d λ_i·z_{i−1} − g_{i−1}·P_i·κ_t,    κ_t = Σ_d dc_t·c_{t−1}

using ``h_{i−1} + g_{i−1}·c_{t−1} = y_{i−1}`` inside the block: ``z_{i−1} = y_{i−1}``, except
``z_{s−1} = c_{t−1}`` at the block start (where the local state ``h_{s−1}`` is zero). So the
backward reads ``a, dy, y`` and the carriers once and writes ``du, da`` once, with one reduction
over channels per position, and never recomputes the local states. The kernels are JIT-compiled
on first use and cached on disk (``cache=True``), once per dtype.

**Threads.** Heads are independent, and so are channels except through ``da``, which is a sum
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

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import torch

#: Below this many elements (``B·H·L·D``) of ``u`` a call runs on one thread. Measured on the
#: book's 2-core machines (16 heads × 16 channels, float32): two threads cost 30–60 µs more per
#: call at L ≤ 1024 and only start to win between L = 4096 (1M elements, still in cache) and
#: L = 16384 (4M); on a loaded machine the second core is often busy and the crossover moves up.
MIN_PARALLEL_WORK = 1 << 22
CACHE_LINE = 64  # bytes


@numba.njit(cache=True, nogil=True)
def _forward_kernel(a, u, block, y, carry, h0, h1, d0, d1):  # pragma: no cover - compiled
    """Heads ``h0:h1``, channels ``d0:d1``: writes ``y`` and the block end states ``carry``;
    returns how many ``a`` lie outside (0, 1]."""
    length = u.shape[1]
    width = d1 - d0
    one = np.ones(1, dtype=u.dtype)[0]
    outside = 0
    h = np.zeros(width, dtype=u.dtype)
    c_prev = np.zeros(width, dtype=u.dtype)
    for n in range(h0, h1):
        h[:] = 0
        c_prev[:] = 0
        r = one
        k = 0
        t = 0
        for i in range(length):
            ai = a[n, i]
            if not (ai > 0 and ai <= 1):
                outside += 1
            r = r * ai
            ui = u[n, i, d0:d1]
            yi = y[n, i, d0:d1]
            for d in range(width):
                hd = ai * h[d] + ui[d]
                h[d] = hd
                yi[d] = hd + r * c_prev[d]
            k += 1
            if k == block:
                carry[n, t, d0:d1] = h
                c_prev[:] = h
                h[:] = 0
                r = one
                k = 0
                t += 1
    return outside


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def _backward_kernel(a, y, carry, dy, block, du, da, h0, h1, d0, d1):  # pragma: no cover
    """Heads ``h0:h1``, channels ``d0:d1``: writes ``du`` and this channel range's part of
    ``da`` (the whole of it when ``d0:d1`` spans every channel). ``fastmath`` lets the
    channel sums be vectorised (reassociated); nothing else is approximated."""
    length = y.shape[1]
    width = d1 - d0
    n_blocks = (length + block - 1) // block
    one = np.ones(1, dtype=y.dtype)[0]
    zero = one - one
    gbuf = np.empty(block + 1, dtype=y.dtype)  # gbuf[k] = a_s⋯a_{s+k−1} (gbuf[0] = 1)
    mu = np.empty(width, dtype=y.dtype)
    dc = np.empty(width, dtype=y.dtype)        # adjoint of this block's carrier
    c_prev = np.empty(width, dtype=y.dtype)    # the previous block's carrier
    for n in range(h0, h1):
        dc[:] = 0  # the last block's carrier feeds nothing
        for t in range(n_blocks - 1, -1, -1):
            s = t * block
            e = min(s + block, length)
            gbuf[0] = one
            for k in range(e - s):
                gbuf[k + 1] = gbuf[k] * a[n, s + k]
            if t > 0:
                c_prev[:] = carry[n, t - 1, d0:d1]
            else:
                c_prev[:] = 0
            kappa = zero
            for d in range(width):
                kappa += dc[d] * c_prev[d]
            mu[:] = 0
            P = one
            a_next = one
            for i in range(e - 1, s - 1, -1):
                P = a_next * P
                dyi = dy[n, i, d0:d1]
                dui = du[n, i, d0:d1]
                z = y[n, i - 1, d0:d1] if i > s else c_prev
                acc = zero
                for d in range(width):
                    m = dyi[d] + a_next * mu[d]
                    mu[d] = m
                    lam = m + P * dc[d]
                    dui[d] = lam
                    acc += lam * z[d]
                da[n, i] = acc - gbuf[i - s] * P * kappa
                a_next = a[n, i]
            for d in range(width):
                dc[d] = a_next * mu[d]  # a_s·μ_s


@numba.njit(cache=True, nogil=True)
def _scan_forward_kernel(a, u, y, h0, h1, d0, d1):  # pragma: no cover - compiled
    """The full recurrence ``y_i = a_i·y_{i−1} + u_i`` from ``y_{−1} = 0``, heads ``h0:h1``,
    channels ``d0:d1``; returns how many ``a`` lie outside (0, 1]. The sequential scan a CPU
    user would write: one pass over the sequence, one state per channel, vectorised across
    channels, heads on separate threads."""
    length = u.shape[1]
    width = d1 - d0
    outside = 0
    h = np.zeros(width, dtype=u.dtype)
    for n in range(h0, h1):
        h[:] = 0
        for i in range(length):
            ai = a[n, i]
            if not (ai > 0 and ai <= 1):
                outside += 1
            ui = u[n, i, d0:d1]
            yi = y[n, i, d0:d1]
            for d in range(width):
                hd = ai * h[d] + ui[d]
                h[d] = hd
                yi[d] = hd
    return outside


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def _scan_backward_kernel(a, y, dy, du, da, h0, h1, d0, d1):  # pragma: no cover - compiled
    """The adjoint of :func:`_scan_forward_kernel`, right to left: ``μ_i = dy_i + a_{i+1}·μ_{i+1}``,
    ``du_i = μ_i``, ``da_i = Σ_d μ_i·y_{i−1}`` (``y_{−1} = 0``); this channel range's part of
    ``da``, as in :func:`_backward_kernel`."""
    length = y.shape[1]
    width = d1 - d0
    one = np.ones(1, dtype=y.dtype)[0]
    zero = one - one
    mu = np.empty(width, dtype=y.dtype)
    for n in range(h0, h1):
        mu[:] = 0
        a_next = one
        for i in range(length - 1, 0, -1):
            dyi = dy[n, i, d0:d1]
            dui = du[n, i, d0:d1]
            z = y[n, i - 1, d0:d1]
            acc = zero
            for d in range(width):
                m = dyi[d] + a_next * mu[d]
                mu[d] = m
                dui[d] = m
                acc += m * z[d]
            da[n, i] = acc
            a_next = a[n, i]
        dyi = dy[n, 0, d0:d1]
        dui = du[n, 0, d0:d1]
        for d in range(width):
            dui[d] = dyi[d] + a_next * mu[d]
        da[n, 0] = zero


# -- threads ----------------------------------------------------------------------------------
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


# -- output buffers ---------------------------------------------------------------------------
#: Outputs of at least this many bytes come from :func:`_empty`'s recycled buffers. glibc
#: serves smaller allocations from its heap, reusing freed memory, but maps larger ones (above
#: 32 MiB) afresh on every call, and the kernel's page faults and zero-filling of a fresh
#: mapping cost about as much as the SWR pass itself (measured at L = 65536, 16×16 channels:
#: 5.7 ms with a fresh output against 3.3 ms with a reused one).
RECYCLE_MIN_BYTES = 32 << 20
RECYCLE_MAX = 4  # buffers kept
_recycled: list[np.ndarray] = []
_recycle_lock = threading.Lock()


def _empty(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, reusing a large buffer that no tensor refers to any more.

    A buffer handed out here is wrapped by ``torch.from_numpy``, whose storage holds a
    reference to it for as long as any tensor or view of that storage lives; a buffer whose
    only references are this list's and this function's (``sys.getrefcount`` of 3: the list,
    the local name, the call's argument) is free. At most :data:`RECYCLE_MAX` buffers are kept, the least
    recently handed out dropped first, like a (tiny) caching allocator."""
    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize < RECYCLE_MIN_BYTES:
        return np.empty(shape, dtype)
    with _recycle_lock:
        for j in range(len(_recycled)):
            buf = _recycled[j]
            if buf.shape == tuple(shape) and buf.dtype == dtype and sys.getrefcount(buf) == 3:
                _recycled.append(_recycled.pop(j))
                return buf
        buf = np.empty(shape, dtype)
        _recycled.append(buf)
        del _recycled[:-RECYCLE_MAX]
        return buf


# -- autograd ---------------------------------------------------------------------------------
def _flat(a: torch.Tensor, u: torch.Tensor):
    B, H, L, D = u.shape
    a_np = a.detach().contiguous().reshape(B * H, L).numpy()
    u_np = u.detach().contiguous().reshape(B * H, L, D).numpy()
    return a_np, u_np


class SWRCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block, threads):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        carry = np.empty((B * H, -(-L // block), D), dtype=u_np.dtype)  # complete blocks only
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        outside = _parallel(_forward_kernel, ranges,
                            lambda j, r: (a_np, u_np, block, y, carry, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out, torch.from_numpy(carry))
        ctx.block, ctx.threads = block, threads
        return out

    @staticmethod
    def backward(ctx, dy):
        a, y, carry = ctx.saved_tensors
        B, H, L, D = y.shape
        a_np, y_np = _flat(a, y)
        dy_np = dy.detach().contiguous().reshape(B * H, L, D).numpy()
        carry_np = carry.numpy()
        du = _empty(y_np.shape, y_np.dtype)
        ranges = plan(B * H, D, y_np.itemsize, _threads_for(y_np.size, ctx.threads))
        # head ranges write disjoint rows of one da; channel groups each write a partial da
        split_channels = ranges[0][3] - ranges[0][2] < D
        das = [np.empty_like(a_np) for _ in ranges] if split_channels else [np.empty_like(a_np)]
        _parallel(_backward_kernel, ranges,
                  lambda j, r: (a_np, y_np, carry_np, dy_np, ctx.block, du,
                                das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None, None)


class ScanCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, threads):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        outside = _parallel(_scan_forward_kernel, ranges, lambda j, r: (a_np, u_np, y, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out)
        ctx.threads = threads
        return out

    @staticmethod
    def backward(ctx, dy):
        a, y = ctx.saved_tensors
        B, H, L, D = y.shape
        a_np, y_np = _flat(a, y)
        dy_np = dy.detach().contiguous().reshape(B * H, L, D).numpy()
        du = _empty(y_np.shape, y_np.dtype)
        ranges = plan(B * H, D, y_np.itemsize, _threads_for(y_np.size, ctx.threads))
        split_channels = ranges[0][3] - ranges[0][2] < D
        das = [np.empty_like(a_np) for _ in ranges] if split_channels else [np.empty_like(a_np)]
        _parallel(_scan_backward_kernel, ranges,
                  lambda j, r: (a_np, y_np, dy_np, du, das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D), None


def scan_compiled(a: torch.Tensor, u: torch.Tensor, *, threads: int | None = None) -> torch.Tensor:
    """The full recurrence as a compiled sequential scan (CPU tensors, ``a`` cast to ``u``'s
    dtype), forward and backward: O(L·D) work, one read of the input and one write of the
    output, heads (or channel groups) on ``threads`` threads as for :func:`swr_compiled`."""
    if u.device.type != "cpu":
        raise ValueError("the compiled scan runs on CPU tensors only")
    return ScanCompiled.apply(a.to(u.dtype), u, threads)


def swr_compiled(a: torch.Tensor, u: torch.Tensor, block: int, *,
                 threads: int | None = None) -> torch.Tensor:
    """Compiled streaming SWR (CPU tensors, ``a`` and ``u`` of the same float dtype).

    ``threads``: ``None`` (default) uses ``torch.get_num_threads()`` threads for calls of at
    least :data:`MIN_PARALLEL_WORK` elements and one below; an integer forces that many ranges
    (tests use it to exercise every split on any machine)."""
    if u.device.type != "cpu":
        raise ValueError("impl='compiled' runs on CPU tensors only")
    return SWRCompiled.apply(a.to(u.dtype), u, block, threads)
