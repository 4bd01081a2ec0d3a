"""Theory of the chapter: the max-sum ratio, Lemma 7's W_KQ and Proposition 8's linear program.

Max-sum ratio (Definition 4), ``S`` the support of ``D_ℓ``::

    R(D_ℓ) = max_{ℓ∈S} (q_ℓ/ℓ) / Σ_{ℓ∈S} (q_ℓ/ℓ)

Lemma 7 (mechanism). After Algorithm 1 the only keys that raise the output's logit are the
output position ``ℓ+2`` (its token is ``o``, its previous token the trigger ``w``) and
``ℓ+3`` (previous token ``o``); each enters the ``W_KQ`` gradient with weight ``∝ 1/T(ℓ)``,
``T(ℓ) = 2ℓ+3``. To leading order

    W_KQ ∝ E_{ℓ,w}[ (1/T(ℓ)) (p_{ℓ+2} + p_{ℓ+3} + ẽ_w)(p_{T(ℓ)} + e_w)ᵀ ]

(``ẽ`` the previous-token block, ``e`` the token block): a positional block
``q_ℓ/T(ℓ)`` at (key ``ℓ+2``/``ℓ+3``, query ``T(ℓ)``), an induction block ``E[1/T]/N_trg``
at (previous token ``w``, current token ``w``) and two cross terms. The ratio of the largest
positional entry to the induction entry is therefore

    N_trg · max_ℓ (q_ℓ/T(ℓ)) / Σ_ℓ (q_ℓ/T(ℓ))  ≍  N_trg · R(D_ℓ).

Proposition 8: the pretraining distribution on ``{1..U}`` of least cost ``Σ q_ℓ ℓ²`` subject to
``R(q) ≤ 1/N_trg`` is ``q_ℓ = ℓ/Z`` for ``ℓ ≤ N_trg`` (``Z = N_trg(N_trg+1)/2``), of cost
``N_trg(N_trg+1)/2``.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from lib.induction.data import LengthDist


def sequence_length(ell):
    """``T(ℓ) = 2ℓ + 3``: position of the second trigger when ``ℓ1 = ℓ2 = ℓ``."""
    return 2 * np.asarray(ell) + 3


def max_sum_ratio(dist: LengthDist, distance=None) -> float:
    """``R(D_ℓ) = max(q_ℓ/d(ℓ)) / Σ q_ℓ/d(ℓ)`` with ``d(ℓ) = ℓ`` (Definition 4) unless another
    ``distance`` function is given (``sequence_length`` gives Lemma 7's exact weights)."""
    d = dist.lengths.astype(float) if distance is None else np.asarray(distance(dist.lengths),
                                                                        dtype=float)
    w = dist.probs / d
    return float(w.max() / w.sum())


def lemma7_ratio(dist: LengthDist, n_trg: int) -> float:
    """Leading-order (largest positional entry)/(induction entry) of ``W_KQ`` (Lemma 7):
    ``N_trg · max(q_ℓ/T(ℓ)) / Σ q_ℓ/T(ℓ)``."""
    return n_trg * max_sum_ratio(dist, distance=sequence_length)


def next_order_weight(ell):
    """Lemma 7's weight of a length to next order in ``1/T``: ``(T−2)/T²``, ``T = 2ℓ+3``.

    The gradient of the output key ``ℓ+2`` is ``(1/T)(v_{ℓ+2} − v̄)``. To leading order only the
    two keys that carry ``o`` raise its logit, ``ℓ+2`` (token ``o``) and ``ℓ+3`` (previous token
    ``o``), with the same value ``v_o`` (the token and previous-token diagonals of ``W_V`` after
    step 1 are equal: each sequence has one ``o`` token and one ``o`` previous token). So
    ``v̄ = 2 v_o/T`` and ``E[v_{ℓ+2} − v̄] = v_o (1 − 2/T)``: every length's weight ``1/T`` becomes
    ``(1 − 2/T)/T``, in the positional and in the induction entry alike. Fillers equal to ``o``
    add a further relative ``O(1/N)``."""
    T = sequence_length(ell).astype(float)
    return (T - 2) / T**2


def lemma7_ratio_next(dist: LengthDist, n_trg: int) -> float:
    """The ratio of Lemma 7 to next order: ``N_trg · max(q_ℓ w_ℓ) / Σ q_ℓ w_ℓ`` with
    ``w_ℓ = (T−2)/T²`` (:func:`next_order_weight`)."""
    return n_trg * max_sum_ratio(dist, distance=lambda ell: 1.0 / next_order_weight(ell))


def lemma7_w_kq(dist: LengthDist, n_trg: int, n_vocab: int, n_pos: int) -> np.ndarray:
    """Lemma 7's leading-order ``W_KQ`` (``D × D``, up to a positive factor):
    ``E_{ℓ,w}[(1/T)(p_{ℓ+2} + p_{ℓ+3} + ẽ_w)(p_T + e_w)ᵀ]``, in the layout of
    :class:`lib.induction.one_layer.Embedding` (0-based indices: key positions ``ℓ+1, ℓ+2``,
    query position ``T−1``)."""
    L, N = n_pos, n_vocab
    w = np.zeros((L + 2 * N, L + 2 * N))
    for ell, q in zip(dist.lengths, dist.probs):
        T = int(sequence_length(ell))
        if T > L:
            raise ValueError(f"n_pos={L} is too small for ℓ={ell}")
        for trig in range(n_trg):
            key = np.zeros(L + 2 * N)
            key[[ell + 1, ell + 2]] = 1.0
            key[L + N + trig] = 1.0
            query = np.zeros(L + 2 * N)
            query[T - 1] = 1.0
            query[L + trig] = 1.0
            w += (q / n_trg / T) * np.outer(key, query)
    return w


def measured_ratio(w_kq, n_pos: int, n_vocab: int, n_trg: int) -> dict:
    """The two entries Lemma 7 compares, read off a ``W_KQ``: the largest entry of the
    position×position block and the mean induction entry (previous token ``w`` × current
    token ``w`` over triggers ``w``)."""
    w = np.asarray(w_kq, dtype=float)
    L, N = n_pos, n_vocab
    positional = float(w[:L, :L].max())
    trig = np.arange(n_trg)
    induction = float(w[L + N + trig, L + trig].mean())
    return {"positional": positional, "induction": induction, "ratio": positional / induction}


def uniform_window_to_reach(n_trg: int, l0: int, max_width: int = 10**7) -> int | None:
    """Smallest width ``K`` with ``R(Unif{l0..l0+K−1}) ≤ 1/N_trg`` (``None`` beyond
    ``max_width``). ``R = (1/l0)/Σ_{k<K} 1/(l0+k)``, so this is the first ``K`` at which the
    partial harmonic sum reaches ``N_trg/l0``."""
    target = n_trg / l0
    s, k = 0.0, 0
    while k < max_width:
        s += 1.0 / (l0 + k)
        k += 1
        if s >= target * (1 - 1e-12):
            return k
    return None


def cost(lengths, probs) -> float:
    """Expected per-sample compute ``Σ q_ℓ ℓ²`` (attention is quadratic in the length)."""
    return float(np.sum(np.asarray(probs) * np.asarray(lengths, dtype=float) ** 2))


def optimal_distribution_lp(n_trg: int, upper: int) -> tuple[np.ndarray, float]:
    """Proposition 8's linear program over ``q ∈ Δ({1..upper})``:
    minimise ``Σ q_ℓ ℓ²`` s.t. ``q_ℓ/ℓ ≤ (1/N_trg) Σ_j q_j/j`` for every ``ℓ`` (i.e.
    ``R(q) ≤ 1/N_trg``). Returns ``(q, cost)`` from scipy's HiGHS solver."""
    if upper < n_trg:
        raise ValueError(f"the program is infeasible for upper={upper} < n_trg={n_trg}")
    ell = np.arange(1, upper + 1, dtype=float)
    inv = 1.0 / ell
    a_ub = np.diag(inv) - np.outer(np.ones_like(ell), inv) / n_trg
    res = linprog(c=ell**2, A_ub=a_ub, b_ub=np.zeros(upper), A_eq=np.ones((1, upper)),
                  b_eq=[1.0], bounds=[(0, None)] * upper, method="highs")
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    return res.x, float(res.fun)


def optimal_distribution_closed_form(n_trg: int, upper: int) -> tuple[np.ndarray, float]:
    """Proposition 8's optimum: ``q_ℓ = ℓ/Z`` on ``1..N_trg``, cost ``N_trg(N_trg+1)/2``."""
    ell = np.arange(1, upper + 1, dtype=float)
    z = n_trg * (n_trg + 1) / 2
    q = np.where(ell <= n_trg, ell / z, 0.0)
    return q, n_trg * (n_trg + 1) / 2


def uniform_window_cost(n_trg: int, l0: int) -> tuple[int, float]:
    """Width and cost ``Σ q_ℓ ℓ²`` of the narrowest uniform window starting at ``l0`` that
    reaches ``R ≤ 1/N_trg`` (Example 3: shifting the window right is cheaper than widening)."""
    k = uniform_window_to_reach(n_trg, l0)
    if k is None:
        raise ValueError(f"no window from l0={l0} reaches R ≤ 1/{n_trg} within the search")
    ell = np.arange(l0, l0 + k, dtype=float)
    return k, float(np.mean(ell**2))
