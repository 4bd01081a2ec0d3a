"""The mean-field network's pre-activations and particle gradient compiled (numba), each one pass
over the (B, n, N) hidden activations.

:func:`pre_activation` writes ``wᵀz + b`` (torch's ``baddbmm`` with an inner dimension of 3 ran
at a third of this speed); the ``tanh`` stays torch's, in place.

For weights ``r`` (B, n), activations ``s = tanh(wᵀz + b)`` (B, n, N) and output weights
``g = R tanh(c)`` (B, N), the gradient of particle ``i`` is

    m_ji = r_j (1 − s_ji²) g_i,   ∇_w = Σ_j m_ji z_j,   ∇_b = Σ_j m_ji,   ∇_c = R (1 − tanh²c_i) Σ_j r_j s_ji.

:func:`particle_grad` computes them in one pass. In torch these are eight passes over the
activations (``s²``, ``1 − ·``, ``r ·``, ``· g``, the product with ``z``, two sums and ``r s``),
each reading and writing a tensor of several megabytes; here one row of ``N`` activations at a
time is read once and the sums are accumulated in a (d + 2, N) block that stays in cache. ``m``
is computed with torch's operations in torch's order; the sums over samples run in sample
order, and the pre-activations' three products in input order, so both differ from torch's in
the last bits at most (tested against them).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _accumulate(acc, s, z, r, g, b):
    """Add sample rows of run ``b`` to ``acc`` (d + 2, N): ``Σ_j m_j z_j``, ``Σ_j m_j`` and
    ``Σ_j r_j s_j``."""
    n, N = s.shape[1], s.shape[2]
    d = z.shape[2]
    one = s.dtype.type(1.0)
    m = np.empty(N, s.dtype)
    for j in range(n):
        rj = r[b, j]
        row = s[b, j]
        for i in range(N):
            m[i] = rj * (one - row[i] * row[i]) * g[b, i]
        for k in range(d):
            zk = z[b, j, k]
            for i in range(N):
                acc[k, i] += m[i] * zk
        for i in range(N):
            acc[d, i] += m[i]
            acc[d + 1, i] += rj * row[i]


@numba.njit(cache=True)
def particle_grad(s, z, r, s2, z2, r2, g, scale_c, out):
    """Write ``[∇_w, ∇_b, ∇_c]`` of every particle into ``out`` (B, N, d + 2).

    ``s`` (B, n, N), ``z`` (B, n, d), ``r`` (B, n): activations, inputs and weights of the
    samples; ``s2, z2, r2`` a second set of terms added to the first (the next-state treatment
    of off-policy evaluation; ``n = 0`` for none); ``g`` (B, N) the output weights and
    ``scale_c`` (B, N) the factor ``R (1 − tanh²c)`` of ``∇_c``. All float32 or all float64."""
    B, N = s.shape[0], s.shape[2]
    d = z.shape[2]
    acc = np.empty((d + 2, N), s.dtype)
    for b in range(B):
        acc[:] = 0
        _accumulate(acc, s, z, r, g, b)
        _accumulate(acc, s2, z2, r2, g, b)
        for i in range(N):
            for k in range(d + 1):
                out[b, i, k] = acc[k, i]
            out[b, i, d + 1] = scale_c[b, i] * acc[d + 1, i]


@numba.njit(cache=True)
def pre_activation(x, z, out):
    """``out[b, j, i] = w_i · z_j + b_i`` (B, n, N) for particles ``x`` (B, N, d + 2) with columns
    ``[w, b, c]`` and inputs ``z`` (B, n, d)."""
    B, N = x.shape[0], x.shape[1]
    n, d = z.shape[1], z.shape[2]
    xt = np.empty((d + 1, N), x.dtype)
    for b in range(B):
        for i in range(N):
            for k in range(d + 1):
                xt[k, i] = x[b, i, k]
        for j in range(n):
            row = out[b, j]
            for i in range(N):
                row[i] = z[b, j, 0] * xt[0, i]
            for k in range(1, d):
                zk = z[b, j, k]
                for i in range(N):
                    row[i] += zk * xt[k, i]
            for i in range(N):
                row[i] += xt[d, i]
