"""Algorithm 1's sparse sums compiled (numba): the mean embedding ``x̄`` of each sequence, the
first step's ``W_V`` gradient and the second step's ``W_KQ`` gradient, read straight from the
token ids (see :mod:`lib.induction.one_layer` for the closed forms).

Each ``x_t`` has three active features (position ``t``, token ``z_t``, previous token
``z_{t−1}``), so ``x̄`` has at most ``3T`` nonzeros and the query ``x_T`` three. In torch the
sums were dense: ``gᵀ x̄`` over the ``N`` outputs and ``keysᵀ query`` over all ``D × D``
feature pairs (``D = L + 2N``), most of them zero; at ``N = 512`` these two products were two
thirds of the work. Here the first step's gradient is ``(1/N) Σ_b x̄_b − Σ_b e_{o_b} x̄_bᵀ``
(``g = 1/N − e_o`` at ``W_V = 0``) and the second's adds each key weight ``c_t`` to the ``3 × 3``
feature pairs of key ``t`` and the query: ``B·T·9`` additions in place of ``2·B·D²`` flops.
The sums run in sequence order, so the result differs from the dense products in the last bits
only (tested against them).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def mean_embedding(tokens, length, n_pos, n_vocab):
    """``x̄_b = (1/T_b) Σ_t x_t`` for every sequence: ``(B, D)`` float64, ``D = n_pos + 2·n_vocab``
    (the same additions in the same order as the torch scatter: bitwise equal)."""
    n_seq = tokens.shape[0]
    prev0 = n_pos + n_vocab
    out = np.zeros((n_seq, n_pos + 2 * n_vocab))
    for b in range(n_seq):
        w = 1.0 / length[b]
        for t in range(length[b]):
            out[b, t] += w
            out[b, n_pos + tokens[b, t]] += w
            if t > 0:
                out[b, prev0 + tokens[b, t - 1]] += w
    return out


@numba.njit(cache=True)
def value_grad_at_zero(tokens, length, target, n_pos, n_vocab):
    """Sum over the batch of ``∂ℓ/∂W_V`` at ``W_V = W_KQ = 0``: ``(N, D)`` float64. The logits are
    zero, so ``g = 1/N − e_o`` and the sum is ``(1/N) Σ_b x̄_b − Σ_b e_{o_b} x̄_bᵀ``."""
    dim = n_pos + 2 * n_vocab
    prev0 = n_pos + n_vocab
    total = np.zeros(dim)
    own = np.zeros((n_vocab, dim))
    for b in range(tokens.shape[0]):
        w = 1.0 / length[b]
        o = target[b]
        for t in range(length[b]):
            total[t] += w
            own[o, t] += w
            total[n_pos + tokens[b, t]] += w
            own[o, n_pos + tokens[b, t]] += w
            if t > 0:
                total[prev0 + tokens[b, t - 1]] += w
                own[o, prev0 + tokens[b, t - 1]] += w
    out = np.empty((n_vocab, dim))
    for n in range(n_vocab):
        for i in range(dim):
            out[n, i] = total[i] / n_vocab - own[n, i]
    return out


@numba.njit(cache=True)
def key_query_grad(tokens, length, h, n_pos, n_vocab):
    """Sum over the batch of ``∂ℓ/∂W_KQ`` at ``W_KQ = 0`` given ``h_b = W_Vᵀ g_b`` (``(B, D)``):
    ``Σ_b Σ_t c_t x_t x_Tᵀ`` with ``v_t = h_b · x_t``, ``v̄`` their mean and
    ``c_t = (v_t − v̄)/T``. Returned as ``(D, D)`` float64 (rows: key features)."""
    dim = n_pos + 2 * n_vocab
    prev0 = n_pos + n_vocab
    grad_t = np.zeros((dim, dim))  # [query feature, key feature]: the rows a sequence hits
    vals = np.empty(tokens.shape[1])
    for b in range(tokens.shape[0]):
        n = length[b]
        total = 0.0
        for t in range(n):
            v = h[b, t] + h[b, n_pos + tokens[b, t]]
            if t > 0:
                v += h[b, prev0 + tokens[b, t - 1]]
            vals[t] = v
            total += v
        mean = total / n
        q0, q1, q2 = n - 1, n_pos + tokens[b, n - 1], prev0 + tokens[b, n - 2]
        for t in range(n):
            c = (vals[t] - mean) / n
            k1 = n_pos + tokens[b, t]
            grad_t[q0, t] += c
            grad_t[q1, t] += c
            grad_t[q2, t] += c
            grad_t[q0, k1] += c
            grad_t[q1, k1] += c
            grad_t[q2, k1] += c
            if t > 0:
                k2 = prev0 + tokens[b, t - 1]
                grad_t[q0, k2] += c
                grad_t[q1, k2] += c
                grad_t[q2, k2] += c
    return grad_t.T.copy()
