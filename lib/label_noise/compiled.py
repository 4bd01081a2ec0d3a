"""Chapter 07's coefficient recursion compiled (numba): the elementwise part of one
:class:`~lib.label_noise.model.CoefficientGD` step fused into two loops, the same numbers as the
numpy step bit for bit.

A step of the numpy recursion is one small matrix product (ρ times the noise Gram matrix) and
some twenty elementwise numpy operations on ``(2, m, n)`` arrays, each a separate pass over memory
and a separate dispatch. Here the product stays in numpy (the same BLAS call) and the operations
around it are two compiled loops (:func:`margins_kernel` before ℓ′ and :func:`update_kernel` after
it), doing each operation in numpy's order: the same sums over filters (in filter order), the
same sum over samples (numpy's pairwise summation, :func:`pairwise_sum`), the same products left
to right. ℓ′ itself (``tanh``) is computed by numpy between the two, because the C library's
``tanh`` differs from numpy's in the last bit.

``python -m lib.label_noise.bench`` runs the benchmark: the chapter's runs both ways in one
process, their time ratio and largest difference.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _block_sum(a, lo, n):
    """numpy's sum of a block of at most 128 elements: eight running sums (sequential below 8)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r = a[lo:lo + 8].copy()
    i = 8
    while i < n - (n % 8):
        for k in range(8):
            r[k] += a[lo + i + k]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@numba.njit(cache=True)
def pairwise_sum(a, lo, n):
    """numpy's summation of ``a[lo:lo+n]`` (``np.add.reduce`` along a contiguous axis): blocks of
    at most 128 elements (:func:`_block_sum`), longer runs split in two halves (the first a
    multiple of 8) and summed left + right. numpy recurses; this walks the same tree with a stack
    (numba's cache does not keep recursive functions)."""
    spans = np.empty((64, 3), np.int64)  # (start, length, halves done) of the open runs
    partial = np.empty(64)               # finished sums, in order
    spans[0, 0], spans[0, 1], spans[0, 2] = lo, n, 0
    top, done = 1, 0
    while top:
        start, length, halves = spans[top - 1]
        if length <= 128:
            partial[done] = _block_sum(a, start, length)
            done += 1
            top -= 1
        elif halves < 2:
            half = length // 2
            half -= half % 8
            spans[top - 1, 2] = halves + 1
            spans[top, 0], spans[top, 1], spans[top, 2] = ((start, half, 0) if halves == 0
                                                           else (start + half, length - half, 0))
            top += 1
        else:
            partial[done - 2] = partial[done - 2] + partial[done - 1]
            done -= 1
            top -= 1
    return partial[0]


@numba.njit(cache=True)
def margins_kernel(gamma, from_rho, pre0_mu, pre0_xi, mu_xi, y, pre_mu, pre_xi, f):
    """Pre-activations and network outputs from the coefficients: ``pre_mu`` (2, m), ``pre_xi``
    (2, m, n) and ``f`` (n,) are written; ``from_rho`` is ρ times the noise Gram matrix."""
    m, n = gamma.shape[1], y.size
    total = np.zeros((2, n))
    for j in range(2):
        sign = 1.0 if j == 0 else -1.0
        for r in range(m):
            jg = sign * gamma[j, r]
            pre_mu[j, r] = pre0_mu[j, r] + jg + from_rho[j, r, 0]
            for i in range(n):
                pre_xi[j, r, i] = pre0_xi[j, r, i] + jg * mu_xi[i] + from_rho[j, r, 1 + i]
                total[j, i] += max(pre_mu[j, r] * y[i], 0.0) + max(pre_xi[j, r, i], 0.0)
    for i in range(n):
        f[i] = total[0, i] / m - total[1, i] / m


@numba.njit(cache=True)
def update_kernel(gamma, rho, pre_mu, pre_xi, lp, y, y_obs, mu2, xi2, scale):
    """The step itself, in place: γ ← γ − scale·‖μ‖²·Σ_i ℓ′_i·σ′·ỹ_i·y_i and
    ρ ← ρ − scale·‖ξ_i‖²·ℓ′_i·σ′·j·ỹ_i."""
    m, n = gamma.shape[1], y.size
    push = np.empty(n)
    terms = np.empty(n)
    for i in range(n):
        push[i] = lp[i] * y_obs[i] * y[i]
    for j in range(2):
        sign = 1.0 if j == 0 else -1.0
        for r in range(m):
            for i in range(n):
                terms[i] = (1.0 if pre_mu[j, r] * y[i] > 0 else 0.0) * push[i]
            gamma[j, r] = gamma[j, r] - scale * mu2 * pairwise_sum(terms, 0, n)
            for i in range(n):
                on = 1.0 if pre_xi[j, r, i] > 0 else 0.0
                rho[j, r, i] = rho[j, r, i] - scale * xi2[i] * lp[i] * on * sign * y_obs[i]


# ---------------------------------------------------------------------------------------------
# Benchmark: the chapter's runs both ways in one process
# ---------------------------------------------------------------------------------------------
