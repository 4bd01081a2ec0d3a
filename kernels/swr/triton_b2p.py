"""Fused block two-pass (B2P) SWR in Triton, forward and backward.

One program per (head, block ``t``); programs never talk to each other. Each loads its own block
and its left neighbour, builds the ``ℓ×ℓ`` transfer matrix in log space (segment sums
``Σ_{k=c+1}^{r} log a_k`` summed directly under a mask, not as differences of prefix sums),
applies it to the block (``w_t = L_t u_t``, a tensor-core product on GPUs), recomputes the
neighbour's carrier ``v_{t−1}`` (one row of its transfer matrix times its inputs) and writes
``y_t = w_t + g_t ⊗ v_{t−1}``. Reading the neighbour again costs a second read of the input
instead of a second kernel launch or inter-block synchronisation. The backward program for
block ``t`` mirrors it with block ``t+1`` (see :mod:`kernels.swr.chunk` for the formulas).

Status: verified against the reference only in Triton's CPU interpreter (``TRITON_INTERPRET=1``,
read when this module is imported) at small sizes; not yet run on a GPU. ``impl="auto"``
therefore picks it on CUDA only after a numerical self-check against ``chunked`` for the dtype
and block at hand (:func:`kernels.swr.triton_verified`). ``block`` must be a
power of two. It computes in float32 whatever the input dtype (use ``chunked`` or ``compiled``
for float64). The block-local products are written as broadcast sums so that any power-of-two
``ℓ`` and any ``D`` work; a GPU build would switch them to ``tl.dot`` for ``ℓ, D ≥ 16``.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is optional
    triton = None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def available(device: torch.device | str = "cuda") -> bool:
    """Whether the kernel can run on ``device``: CUDA with triton installed, or CPU tensors
    under Triton's interpreter (``TRITON_INTERPRET=1``, for tests)."""
    if triton is None:
        return False
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available()
    return device.type == "cpu" and _interpreting()


if triton is not None:

    @triton.jit
    def _segsum_exp(la, BLOCK: tl.constexpr):
        """``L[r, c] = exp(Σ_{k=c+1}^{r} la_k)`` for ``r ≥ c`` else 0."""
        r = tl.arange(0, BLOCK)[:, None, None]
        c = tl.arange(0, BLOCK)[None, :, None]
        k = tl.arange(0, BLOCK)[None, None, :]
        inside = (k > c) & (k <= r)
        seg = tl.sum(tl.where(inside, la[None, None, :], 0.0), axis=2)
        lower = tl.arange(0, BLOCK)[:, None] >= tl.arange(0, BLOCK)[None, :]
        return tl.where(lower, tl.exp(seg), 0.0)

    @triton.jit
    def _prefix_exp(la, BLOCK: tl.constexpr, inclusive: tl.constexpr):
        """``exp(Σ_{k≤i} la_k)`` (or ``k<i``) for every ``i``, by masked sums."""
        i = tl.arange(0, BLOCK)[:, None]
        k = tl.arange(0, BLOCK)[None, :]
        keep = (k <= i) if inclusive else (k < i)
        return tl.exp(tl.sum(tl.where(keep, la[None, :], 0.0), axis=1))

    @triton.jit
    def _carrier(la, u, BLOCK: tl.constexpr):
        """End state of a block from a zero start: ``Σ_j exp(Σ_{k>j} la_k) u_j``."""
        j = tl.arange(0, BLOCK)[:, None]
        k = tl.arange(0, BLOCK)[None, :]
        row = tl.exp(tl.sum(tl.where(k > j, la[None, :], 0.0), axis=1))
        return tl.sum(row[:, None] * u, axis=0)

    @triton.jit
    def _load_block(a_ptr, u_ptr, head, t, L, D, BLOCK: tl.constexpr, DP: tl.constexpr):
        pos = t * BLOCK + tl.arange(0, BLOCK)
        ok = (pos >= 0) & (pos < L)
        la = tl.log(tl.load(a_ptr + head * L + pos, mask=ok, other=1.0).to(tl.float32))
        d = tl.arange(0, DP)
        m2 = ok[:, None] & (d[None, :] < D)
        u = tl.load(u_ptr + (head * L + pos[:, None]) * D + d[None, :], mask=m2, other=0.0)
        return la, u.to(tl.float32), pos, m2

    @triton.jit
    def _forward(a_ptr, u_ptr, y_ptr, L, D, BLOCK: tl.constexpr, DP: tl.constexpr):
        head = tl.program_id(0)
        t = tl.program_id(1)
        la, u, pos, m2 = _load_block(a_ptr, u_ptr, head, t, L, D, BLOCK, DP)
        la_p, u_p, _, _ = _load_block(a_ptr, u_ptr, head, t - 1, L, D, BLOCK, DP)
        Lt = _segsum_exp(la, BLOCK)
        w = tl.sum(Lt[:, :, None] * u[None, :, :], axis=1)
        v_prev = _carrier(la_p, u_p, BLOCK)
        g = _prefix_exp(la, BLOCK, True)
        y = w + g[:, None] * v_prev[None, :]
        d = tl.arange(0, DP)
        tl.store(y_ptr + (head * L + pos[:, None]) * D + d[None, :], y, mask=m2)

    @triton.jit
    def _backward(a_ptr, u_ptr, dy_ptr, du_ptr, da_ptr, L, D, BLOCK: tl.constexpr, DP: tl.constexpr):
        head = tl.program_id(0)
        t = tl.program_id(1)
        la, u, pos, m2 = _load_block(a_ptr, u_ptr, head, t, L, D, BLOCK, DP)
        la_p, u_p, _, _ = _load_block(a_ptr, u_ptr, head, t - 1, L, D, BLOCK, DP)
        la_n, _, _, _ = _load_block(a_ptr, u_ptr, head, t + 1, L, D, BLOCK, DP)
        d = tl.arange(0, DP)
        dy = tl.load(dy_ptr + (head * L + pos[:, None]) * D + d[None, :], mask=m2, other=0.0).to(tl.float32)
        pos_n = pos + BLOCK
        m2n = (pos_n < L)[:, None] & (d[None, :] < D)
        dy_n = tl.load(dy_ptr + (head * L + pos_n[:, None]) * D + d[None, :], mask=m2n, other=0.0).to(tl.float32)
        # adjoint of this block's carrier, collected by block t+1
        dv = tl.sum(_prefix_exp(la_n, BLOCK, True)[:, None] * dy_n, axis=0)
        last = (tl.arange(0, BLOCK) == BLOCK - 1)[:, None]
        dw = dy + tl.where(last, dv[None, :], 0.0)
        Lt = _segsum_exp(la, BLOCK)
        du = tl.sum(Lt[:, :, None] * dw[:, None, :], axis=0)  # L_tᵀ dw
        # local state one step back: h_{i−1} = Σ_{j<i} exp(Σ_{k=j+1}^{i−1} la_k) u_j
        r = tl.arange(0, BLOCK)[:, None, None]
        c = tl.arange(0, BLOCK)[None, :, None]
        k = tl.arange(0, BLOCK)[None, None, :]
        seg = tl.sum(tl.where((k > c) & (k < r), la[None, None, :], 0.0), axis=2)
        below = tl.arange(0, BLOCK)[:, None] > tl.arange(0, BLOCK)[None, :]
        Lshift = tl.where(below, tl.exp(seg), 0.0)
        h_prev = tl.sum(Lshift[:, :, None] * u[None, :, :], axis=1)
        v_prev = _carrier(la_p, u_p, BLOCK)
        dg = tl.sum(dy * v_prev[None, :], axis=1)
        suffix = tl.sum(Lt * dg[:, None], axis=0)  # (L_tᵀ dg)_i
        g_prev = _prefix_exp(la, BLOCK, False)
        da = tl.sum(du * h_prev, axis=1) + g_prev * suffix
        tl.store(du_ptr + (head * L + pos[:, None]) * D + d[None, :], du, mask=m2)
        tl.store(da_ptr + head * L + pos, da, mask=pos < L)


def _launch_shape(u: torch.Tensor, block: int):
    B, H, L, D = u.shape
    return (B * H, triton.cdiv(L, block)), triton.next_power_of_2(D)


class SWRTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block):
        a, u = a.contiguous(), u.contiguous()
        y = torch.empty_like(u)
        grid, DP = _launch_shape(u, block)
        _forward[grid](a, u, y, u.shape[2], u.shape[3], BLOCK=block, DP=DP)
        ctx.save_for_backward(a, u)
        ctx.block = block
        return y

    @staticmethod
    def backward(ctx, dy):
        a, u = ctx.saved_tensors
        dy = dy.contiguous()
        du = torch.empty_like(u)
        da = torch.empty_like(a, dtype=torch.float32 if a.dtype != torch.float64 else a.dtype)
        grid, DP = _launch_shape(u, ctx.block)
        _backward[grid](a, u, dy, du, da, u.shape[2], u.shape[3], BLOCK=ctx.block, DP=DP)
        return da.to(a.dtype), du, None


def swr_triton(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    """Fused B2P SWR (CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``)."""
    if triton is None or not available(u.device):
        raise ValueError("impl='triton' needs triton and a CUDA device (or TRITON_INTERPRET=1 on CPU)")
    if block & (block - 1):
        raise ValueError(f"impl='triton' needs a power-of-two block, got {block}")
    return SWRTriton.apply(a, u, block)
