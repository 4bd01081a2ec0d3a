"""The CPU fast path: SWR as a compiled streaming loop (numba), forward and backward, on all
cores; and the full recurrence as a compiled sequential scan built the same way
(:func:`scan_compiled`, the benchmark's CPU baseline).

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

The package holds one job per module: :mod:`~kernels.swr.compiled.loops` (the streaming loops,
forward and backward, of the SWR operator and of the full scan), :mod:`~kernels.swr.compiled.rows`
(the same loops with each token's row of channels as one vector operation),
:mod:`~kernels.swr.compiled.threads` (how one call is split over threads) and
:mod:`~kernels.swr.compiled.buffers` (aligned and recycled output buffers); this module is the
autograd functions and the two entry points, :func:`swr_compiled` and :func:`scan_compiled`.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels.swr.compiled.buffers import CACHE_LINE, _empty, aligned_empty  # noqa: F401  (CACHE_LINE: the tests)
from kernels.swr.compiled.loops import _backward_kernel, _forward_kernel, _scan_backward_kernel, _scan_forward_kernel
from kernels.swr.compiled.rows import _vector_kernels, vector_width_ok
from kernels.swr.compiled.threads import _parallel, _threads_for, plan


def _flat(a: torch.Tensor, u: torch.Tensor):
    B, H, L, D = u.shape
    a_np = a.detach().contiguous().reshape(B * H, L).numpy()
    u_np = u.detach().contiguous().reshape(B * H, L, D).numpy()
    return a_np, u_np


#: Whether the kernels do each token's row with the vector intrinsics (where the width allows,
#: :func:`vector_width_ok`) or with the channel loops; the benchmark times both.
VECTOR_ROWS = True


def _kernel(which: int, loop, use_vector: bool, itemsize: int):
    """A callable taking the loop kernel's arguments (the range last) that runs vector kernel
    ``which`` of :func:`_vector_kernels` on ranges whose width it takes and ``loop`` on the
    others."""
    def run(*args):
        width = args[-1] - args[-2]
        if use_vector and vector_width_ok(width, itemsize):
            return _vector_kernels(width)[which](*args)
        return loop(*args)
    return run


def _use_vector(vector: bool | None) -> bool:
    return VECTOR_ROWS if vector is None else bool(vector)


class SWRCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block, threads, vector):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        carry = aligned_empty((B * H, -(-L // block), D), u_np.dtype)  # every block's end state
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        kernel = _kernel(0, _forward_kernel, vector, u_np.itemsize)
        outside = _parallel(kernel, ranges, lambda j, r: (a_np, u_np, block, y, carry, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out, torch.from_numpy(carry))
        ctx.block, ctx.threads, ctx.vector = block, threads, vector
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
        kernel = _kernel(1, _backward_kernel, ctx.vector, y_np.itemsize)
        _parallel(kernel, ranges,
                  lambda j, r: (a_np, y_np, carry_np, dy_np, ctx.block, du,
                                das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None, None, None)


class ScanCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, threads, vector):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        kernel = _kernel(2, _scan_forward_kernel, vector, u_np.itemsize)
        outside = _parallel(kernel, ranges, lambda j, r: (a_np, u_np, y, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out)
        ctx.threads, ctx.vector = threads, vector
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
        kernel = _kernel(3, _scan_backward_kernel, ctx.vector, y_np.itemsize)
        _parallel(kernel, ranges,
                  lambda j, r: (a_np, y_np, dy_np, du, das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None, None)


def scan_compiled(a: torch.Tensor, u: torch.Tensor, *, threads: int | None = None,
                  vector: bool | None = None) -> torch.Tensor:
    """The full recurrence as a compiled sequential scan (CPU tensors, ``a`` cast to ``u``'s
    dtype), forward and backward: O(L·D) work, one read of the input and one write of the
    output, heads (or channel groups) on ``threads`` threads and token rows as vectors
    (``vector``) exactly as for :func:`swr_compiled`, so that the two differ only in the
    recurrence they evaluate."""
    if u.device.type != "cpu":
        raise ValueError("the compiled scan runs on CPU tensors only")
    return ScanCompiled.apply(a.to(u.dtype), u, threads, _use_vector(vector))


def swr_compiled(a: torch.Tensor, u: torch.Tensor, block: int, *,
                 threads: int | None = None, vector: bool | None = None) -> torch.Tensor:
    """Compiled streaming SWR (CPU tensors, ``a`` and ``u`` of the same float dtype).

    ``threads``: ``None`` (default) uses ``torch.get_num_threads()`` threads for calls of at
    least :data:`MIN_PARALLEL_WORK` elements and one below; an integer forces that many ranges
    (tests use it to exercise every split on any machine). ``vector``: each token's row of
    channels as one vector operation (the default, :data:`VECTOR_ROWS`) or as the channel
    loops (``False``; the benchmark's "before")."""
    if u.device.type != "cpu":
        raise ValueError("impl='compiled' runs on CPU tensors only")
    return SWRCompiled.apply(a.to(u.dtype), u, block, threads, _use_vector(vector))
