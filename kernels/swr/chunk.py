"""Block two-pass (B2P) SWR in PyTorch ops, with a hand-written backward.

This is the readable form of the blocked algorithm the GPU kernel runs (see ``triton_b2p``):

* pass 1, every block at once: build the block's ``ℓ×ℓ`` transfer matrix ``L_t`` in log
  space (segment sums ``Σ_{k=c+1}^{r} log a_k`` accumulated directly, never as differences of
  prefix sums) and apply it to the block's inputs with one batched matmul, ``w_t = L_t u_t``;
  the block's carrier is its last row, ``v_t = w_t[ℓ−1]`` (its end state from a zero start);
* pass 2, every block at once: ``y_t = w_t + g_t ⊗ v_{t−1}`` with ``g_t`` the inclusive
  cumulative product of ``a`` inside block ``t`` (block 0 receives nothing).

Backward (the adjoint is again a jagged recurrence, now run right to left), with ``dy`` the
output gradient:

* the carrier's adjoint ``dv_{t−1} = Σ_i g_{t,i} dy_{t,i}`` enters the last row of block ``t−1``;
* ``du_t = L_tᵀ (dy_t + e_last ⊗ dv_t)``;
* ``da_i = Σ_d du_i h_{i−1} + g_{i−1} · (L_tᵀ dg)_i`` with ``h_{i−1} = w_{t,i−1}`` (0 at the
  block start), ``g_{i−1}`` (1 at the block start) and ``dg_i = Σ_d dy_i v_{t−1}``; the second
  term is the suffix sum ``Σ_{j≥i} dg_j a_{i+1}⋯a_j`` — no division by ``a``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _to_blocks(a: torch.Tensor, u: torch.Tensor, block: int):
    length = u.shape[-2]
    nb = -(-length // block)
    pad = nb * block - length
    a_b = F.pad(a, (0, pad), value=1.0).unflatten(-1, (nb, block))
    u_b = F.pad(u, (0, 0, 0, pad)).unflatten(-2, (nb, block))
    return a_b, u_b, pad


def block_operators(a_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``L_t`` (``(..., nb, ℓ, ℓ)``) and ``g_t`` (``(..., nb, ℓ)``) from blocked ``a``."""
    block = a_b.shape[-1]
    la = torch.log(a_b)
    strict = torch.ones(block, block, dtype=torch.bool, device=a_b.device).tril(-1)
    # seg[..., r, c] = Σ_{k=c+1}^{r} log a_k, accumulated down each column
    seg = torch.cumsum(la[..., :, None].expand(*la.shape, block).masked_fill(~strict, 0.0), dim=-2)
    lower = torch.ones(block, block, dtype=torch.bool, device=a_b.device).tril()
    Lt = torch.exp(seg.masked_fill(~lower, float("-inf")))
    g = torch.exp(torch.cumsum(la, dim=-1))
    return Lt, g


def _shift_blocks(v: torch.Tensor) -> torch.Tensor:
    """``v_{t−1}`` for every block ``t`` (zeros for block 0); ``v`` is ``(..., nb, D)``."""
    return torch.cat([torch.zeros_like(v[..., :1, :]), v[..., :-1, :]], dim=-2)


def _forward(a_b, u_b):
    Lt, g = block_operators(a_b)
    w = Lt @ u_b
    v_prev = _shift_blocks(w[..., -1, :])
    return w + g[..., None] * v_prev[..., None, :], (Lt, g, w, v_prev)


class SWRChunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block):
        a_b, u_b, pad = _to_blocks(a, u, block)
        y, _ = _forward(a_b, u_b)
        ctx.save_for_backward(a, u)
        ctx.block = block
        return y.flatten(-3, -2)[..., : u.shape[-2], :]

    @staticmethod
    def backward(ctx, dy):
        a, u = ctx.saved_tensors
        block = ctx.block
        a_b, u_b, pad = _to_blocks(a, u, block)
        _, (Lt, g, w, v_prev) = _forward(a_b, u_b)  # recompute instead of storing L·ℓ floats
        dy_b = F.pad(dy, (0, 0, 0, pad)).unflatten(-2, (a_b.shape[-2], block))
        LtT = Lt.transpose(-1, -2)
        dv = (g[..., None] * dy_b).sum(-2)  # adjoint of v_{t−1} collected in block t
        dv = torch.cat([dv[..., 1:, :], torch.zeros_like(dv[..., :1, :])], dim=-2)  # of v_t
        dw = dy_b.clone()
        dw[..., -1, :] += dv
        du_b = LtT @ dw
        h_prev = torch.cat([torch.zeros_like(w[..., :1, :]), w[..., :-1, :]], dim=-2)
        g_prev = torch.cat([torch.ones_like(g[..., :1]), g[..., :-1]], dim=-1)
        dg = (dy_b * v_prev[..., None, :]).sum(-1)
        da_b = (du_b * h_prev).sum(-1) + g_prev * (LtT @ dg[..., None])[..., 0]
        length = u.shape[-2]
        da = da_b.flatten(-2)[..., :length] if ctx.needs_input_grad[0] else None
        du = du_b.flatten(-3, -2)[..., :length, :] if ctx.needs_input_grad[1] else None
        return da, du, None


def swr_chunked(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    """B2P SWR with the hand-written backward above."""
    return SWRChunked.apply(a, u, block)
