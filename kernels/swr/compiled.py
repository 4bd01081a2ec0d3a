"""The CPU fast path: SWR as a compiled streaming loop (numba), forward and backward.

On a CPU the cheapest exact form of the SWR operator is not the blocked two-pass algorithm
(O(L·ℓ·D) work, built for tensor cores) but the streaming two-state loop of the decoder
(O(L·D) work, one read of the input and one write of the output), parallel across heads and
vectorised across a head's channels. Per head, ``h`` is the block-local state, ``c_prev`` the
previous block's end state and ``r`` the product of ``a`` since the block start::

    h ← a_i·h + u_i;  r ← a_i·r;  y_i = h + r·c_prev;  at a block end: c_prev ← h, h ← 0, r ← 1

The forward also stores the block end states (``L/ℓ × D`` floats, the carriers) for the
backward, which walks blocks right to left. Inside block ``t`` it recomputes the local states
``h`` and prefix products ``g`` into a small ``ℓ × D`` buffer and runs the adjoint::

    λ_i  = dy_i + a_{i+1}·λ_{i+1}          (λ_end = dy_end + dc_t, the carrier's adjoint)
    S_i  = dg_i + a_{i+1}·S_{i+1},         dg_i = Σ_d dy_i·c_{t−1}
    du_i = λ_i,   da_i = Σ_d λ_i·h_{i−1} + g_{i−1}·S_i,   dc_{t−1} = Σ_i g_i·dy_i

(``h_{i−1} = 0`` and ``g_{i−1} = 1`` at the block start). The kernels are JIT-compiled on
first use and cached on disk (``cache=True``), once per dtype.
"""

from __future__ import annotations

import numba
import numpy as np
import torch


@numba.njit(parallel=True, cache=True, nogil=True)
def _forward_kernel(a, u, block, y, carry):  # pragma: no cover - compiled
    n_heads, length, dim = u.shape
    for n in numba.prange(n_heads):
        h = np.zeros(dim, dtype=u.dtype)
        c_prev = np.zeros(dim, dtype=u.dtype)
        r = a[n, 0] * 0 + 1
        k = 0
        t = 0
        for i in range(length):
            ai = a[n, i]
            r = r * ai
            for d in range(dim):
                hd = ai * h[d] + u[n, i, d]
                h[d] = hd
                y[n, i, d] = hd + r * c_prev[d]
            k += 1
            if k == block:
                for d in range(dim):
                    carry[n, t, d] = h[d]
                    c_prev[d] = h[d]
                    h[d] = 0
                r = r * 0 + 1
                k = 0
                t += 1


@numba.njit(parallel=True, cache=True, nogil=True)
def _backward_kernel(a, u, carry, dy, block, du, da):  # pragma: no cover - compiled
    n_heads, length, dim = u.shape
    n_blocks = (length + block - 1) // block
    for n in numba.prange(n_heads):
        hbuf = np.empty((block, dim), dtype=u.dtype)
        gbuf = np.empty(block, dtype=u.dtype)
        lam = np.empty(dim, dtype=u.dtype)
        dc = np.zeros(dim, dtype=u.dtype)       # adjoint of this block's carrier
        dc_prev = np.zeros(dim, dtype=u.dtype)  # adjoint of the previous block's carrier
        for t in range(n_blocks - 1, -1, -1):
            s = t * block
            e = min(s + block, length)
            # recompute the block's local states and prefix products
            g = a[n, s] * 0 + 1
            for i in range(s, e):
                ai = a[n, i]
                g = g * ai
                gbuf[i - s] = g
                for d in range(dim):
                    prev = hbuf[i - s - 1, d] if i > s else 0
                    hbuf[i - s, d] = ai * prev + u[n, i, d]
            for d in range(dim):
                lam[d] = dc[d]
                dc_prev[d] = 0
            S = a[n, s] * 0
            a_next = a[n, s] * 0
            for i in range(e - 1, s - 1, -1):
                k = i - s
                dg = a[n, s] * 0
                acc = a[n, s] * 0
                gi = gbuf[k]
                for d in range(dim):
                    dyd = dy[n, i, d]
                    lam[d] = dyd + a_next * lam[d] if i < e - 1 else dyd + lam[d]
                    du[n, i, d] = lam[d]
                    if t > 0:
                        dg += dyd * carry[n, t - 1, d]
                        dc_prev[d] += gi * dyd
                    if k > 0:
                        acc += lam[d] * hbuf[k - 1, d]
                S = dg + a_next * S
                g_prev = gbuf[k - 1] if k > 0 else g * 0 + 1
                da[n, i] = acc + g_prev * S
                a_next = a[n, i]
            for d in range(dim):
                dc[d] = dc_prev[d]


def _flat(a: torch.Tensor, u: torch.Tensor):
    B, H, L, D = u.shape
    a_np = a.detach().contiguous().reshape(B * H, L).numpy()
    u_np = u.detach().contiguous().reshape(B * H, L, D).numpy()
    return a_np, u_np


class SWRCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = np.empty_like(u_np)
        n_blocks = -(-L // block)
        carry = np.zeros((B * H, n_blocks, D), dtype=u_np.dtype)
        _forward_kernel(a_np, u_np, block, y, carry)
        ctx.save_for_backward(a, u, torch.from_numpy(carry))
        ctx.block = block
        return torch.from_numpy(y).reshape(B, H, L, D)

    @staticmethod
    def backward(ctx, dy):
        a, u, carry = ctx.saved_tensors
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        dy_np = dy.detach().contiguous().reshape(B * H, L, D).numpy()
        du = np.empty_like(u_np)
        da = np.empty_like(a_np)
        _backward_kernel(a_np, u_np, carry.numpy(), dy_np, ctx.block, du, da)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None)


def swr_compiled(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    """Compiled streaming SWR (CPU tensors, ``a`` and ``u`` of the same float dtype)."""
    if u.device.type != "cpu":
        raise ValueError("impl='compiled' runs on CPU tensors only")
    return SWRCompiled.apply(a.to(u.dtype), u, block)
