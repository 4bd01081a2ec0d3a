"""The CPU fast path: SWR as a compiled streaming loop (numba), forward and backward.

On a CPU the cheapest exact form of the SWR operator is not the blocked two-pass algorithm
(O(L·ℓ·D) work, built for tensor cores) but the streaming two-state loop of the decoder
(O(L·D) work, one read of the input and one write of the output), vectorised across a head's
channels. The loop over heads is serial on purpose: on the 2-core machines the book targets the
kernel already runs at about the machine's copy bandwidth on one core, and numba's thread pool
spinning beside PyTorch's OpenMP pool made whole calls ~3× slower in our measurements
(``nogil=True`` lets callers run heads in threads if they want).

Per head, ``h`` is the block-local state, ``c_prev`` the previous block's end state and ``r``
the product of ``a`` since the block start::

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


@numba.njit(cache=True, nogil=True)
def _forward_kernel(a, u, block, y, carry):  # pragma: no cover - compiled
    """Writes ``y`` and the block end states ``carry``; returns how many ``a`` lie outside (0, 1]."""
    n_heads, length, dim = u.shape
    one = np.ones(1, dtype=u.dtype)[0]
    outside = 0
    for n in range(n_heads):
        h = np.zeros(dim, dtype=u.dtype)
        c_prev = np.zeros(dim, dtype=u.dtype)
        r = one
        k = 0
        t = 0
        for i in range(length):
            ai = a[n, i]
            if not (ai > 0 and ai <= 1):
                outside += 1
            r = r * ai
            ui = u[n, i]
            yi = y[n, i]
            for d in range(dim):
                hd = ai * h[d] + ui[d]
                h[d] = hd
                yi[d] = hd + r * c_prev[d]
            k += 1
            if k == block:
                carry[n, t] = h
                c_prev[:] = h
                h[:] = 0
                r = one
                k = 0
                t += 1
    return outside


@numba.njit(cache=True, nogil=True)
def _backward_kernel(a, u, carry, dy, block, du, da):  # pragma: no cover - compiled
    n_heads, length, dim = u.shape
    n_blocks = (length + block - 1) // block
    one = np.ones(1, dtype=u.dtype)[0]
    zero = one - one
    hbuf = np.empty((block + 1, dim), dtype=u.dtype)  # hbuf[k+1] = local state at offset k
    gbuf = np.empty(block + 1, dtype=u.dtype)          # gbuf[k+1] = prefix product to offset k
    lam = np.empty(dim, dtype=u.dtype)
    dc = np.empty(dim, dtype=u.dtype)       # adjoint of this block's carrier
    dc_prev = np.empty(dim, dtype=u.dtype)  # adjoint of the previous block's carrier
    c_prev = np.empty(dim, dtype=u.dtype)
    for n in range(n_heads):
        dc[:] = 0
        for t in range(n_blocks - 1, -1, -1):
            s = t * block
            e = min(s + block, length)
            # recompute the block's local states and prefix products from a zero start
            hbuf[0] = 0
            gbuf[0] = one
            for i in range(s, e):
                k = i - s
                ai = a[n, i]
                gbuf[k + 1] = gbuf[k] * ai
                ui = u[n, i]
                hk = hbuf[k]
                hk1 = hbuf[k + 1]
                for d in range(dim):
                    hk1[d] = ai * hk[d] + ui[d]
            if t > 0:
                c_prev[:] = carry[n, t - 1]
            else:
                c_prev[:] = 0
            # right to left: λ, the suffix sum S, and the adjoint of the previous carrier
            lam[:] = dc
            dc_prev[:] = 0
            S = zero
            a_next = one  # λ_end = dy_end + dc_t: the carrier enters with weight one
            for i in range(e - 1, s - 1, -1):
                k = i - s
                dyi = dy[n, i]
                dui = du[n, i]
                hprev = hbuf[k]
                gi = gbuf[k + 1]
                dg = zero
                acc = zero
                for d in range(dim):
                    ld = dyi[d] + a_next * lam[d]
                    lam[d] = ld
                    dui[d] = ld
                    dg += dyi[d] * c_prev[d]
                    dc_prev[d] += gi * dyi[d]
                    acc += ld * hprev[d]
                S = dg + a_next * S
                da[n, i] = acc + gbuf[k] * S
                a_next = a[n, i]
            dc[:] = dc_prev


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
        if _forward_kernel(a_np, u_np, block, y, carry):
            raise ValueError("the coefficients a must lie in (0, 1]")
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
