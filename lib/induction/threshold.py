"""Theorems 5–6 in the population limit: which pretraining windows make every OOD answer right.

In the regime of Theorem 5 (population gradients, ``N → ∞`` so that ``N_trg = o(N^{1/3})``,
``η_V η_KQ → ∞``) the one-step ``W_KQ`` is Lemma 7's leading-order matrix
(:func:`lib.induction.theory.lemma7_w_kq`) and attention is hard: each OOD query attends to the
keys of largest score. Lemma 7's matrix has no entry for an ordinary token, so a key's score
depends only on its position and on whether its previous token is the trigger ``w``:

    score(t) = P_ℓ [t ∈ {ℓ+2, ℓ+3}] + C(t−2) + C(t−3) + [t = ℓ1+2] (I + Q_ℓ)

(1-based positions, test length ``ℓ = (ℓ1+ℓ2)/2``, ``T = 2ℓ+3``), with ``P_ℓ = q_ℓ/T(ℓ)`` the
positional entry, ``I = Σ_j q_j/(N_trg T(j))`` the induction entry, ``C(j) = q_j/(N_trg T(j))``
the key-position × query-token cross term and ``Q_ℓ = q_ℓ/(N_trg T(ℓ))`` the previous-token ×
query-position cross term. The answer is ``o`` for every choice of the fillers exactly when the
output key ``ℓ1+2`` (token ``o``) is a largest-score key and the only other key that may tie
with it is ``ℓ1+3`` (previous token ``o``): any other key in the argmax set copies a filler.
So "every OOD answer right" is decided exactly, over every ``(ℓ, ℓ1)`` of the OOD test, with no
sampling.

Threshold statistic (grid-independent): over a family of windows ``Unif{a..b}``, the largest
``R`` of a window where every OOD answer is right and the smallest ``R`` of a window where some is
wrong (:func:`threshold_statistic`). Theorems 5–6 say both are ``Θ(1/N_trg)``.
"""

from __future__ import annotations

import numpy as np

from lib.induction.data import LengthDist
from lib.induction.theory import max_sum_ratio, sequence_length


def _weights(dist: LengthDist, n_trg: int, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``P[ℓ] = q_ℓ/T(ℓ)`` and ``C[ℓ] = P[ℓ]/N_trg`` on ``0..size−1`` (zero off the support)
    and the induction entry ``I = Σ C``."""
    p = np.zeros(size)
    p[dist.lengths] = dist.probs / sequence_length(dist.lengths)
    c = p / n_trg
    return p, c, float(c.sum())


def ood_all_right(dist: LengthDist, n_trg: int) -> bool:
    """Whether Lemma 7's leading-order ``W_KQ`` with hard attention answers every OOD sequence
    of ``dist`` right, whatever the fillers (see the module docstring). The OOD test is that of
    :func:`lib.induction.data.ood_lengths`: ``ℓ ∈ ℓ_min+1..ℓ_max``, ``ℓ1 ∈ {1..2ℓ−1} \\ {ℓ}``."""
    return worst_margin(dist, n_trg) > 0


def worst_margin(dist: LengthDist, n_trg: int) -> float:
    """Smallest, over the OOD configurations ``(ℓ, ℓ1)``, of ``score(ℓ1+2) − max score`` of the
    keys other than ``ℓ1+2`` and ``ℓ1+3`` (and ``score(ℓ1+2) − score(ℓ1+3)``, where a tie is
    allowed and counted as ``+tiny``); positive iff every OOD answer is right. The test lengths
    are ``ℓ_min+1..ℓ_max`` of the support (the paper's test for a window)."""
    return float(config_margins(dist, n_trg)[2].min())


def config_margins(dist: LengthDist, n_trg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ℓ, ℓ1, margin)`` for every OOD configuration (see :func:`worst_margin`): the answer of
    Lemma 7's hard-attention model is ``o`` whatever the fillers iff ``margin > 0``."""
    l_min, l_max = dist.l_min, dist.l_max
    if l_max <= l_min:
        raise ValueError("the OOD test needs ℓ_max > ℓ_min")
    size = 2 * l_max + 8
    p, c, ind = _weights(dist, n_trg, size)
    ell, l1 = ood_configurations(l_min, l_max)
    t_max = 2 * l_max + 3
    t = np.arange(1, t_max + 1)                               # key positions, 1-based
    base = c[t - 2] * (t >= 2) + c[np.maximum(t - 3, 0)] * (t >= 3)   # C(t−2) + C(t−3)
    score = np.broadcast_to(base, (ell.size, t_max)).copy()
    rows = np.arange(ell.size)
    score[rows, ell + 1] += p[ell]                            # key ℓ+2 (index ℓ+1)
    score[rows, ell + 2] += p[ell]                            # key ℓ+3
    score[t[None, :] > (2 * ell + 3)[:, None]] = -np.inf      # keys beyond the query T
    own = score[rows, l1 + 1] + ind + c[ell]                  # the output key ℓ1+2
    after = score[rows, l1 + 2]                               # key ℓ1+3: may tie, not win
    score[rows, l1 + 1] = -np.inf
    score[rows, l1 + 2] = -np.inf
    margin = own - score.max(axis=1)
    margin = np.where(own < after, np.minimum(margin, own - after), margin)
    return ell, l1, margin


def ood_accuracy(dist: LengthDist, n_trg: int) -> float:
    """The probability, under the OOD test distribution (``ℓ`` uniform on ``ℓ_min+1..ℓ_max``,
    ``ℓ1`` uniform on ``{1..2ℓ−1} \\ {ℓ}``), of a configuration whose answer is ``o`` whatever the
    fillers (``margin > 0``, :func:`config_margins`): exact, no sampling."""
    ell, _, margin = config_margins(dist, n_trg)
    weight = 1.0 / ((dist.l_max - dist.l_min) * (2 * ell - 2))
    return float(1.0 - np.sum(weight * (margin <= 0)))  # exactly 1 when every answer is right


def ood_configurations(l_min: int, l_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Every OOD configuration ``(ℓ, ℓ1)``: ``ℓ ∈ l_min+1..l_max``, ``ℓ1 ∈ {1..2ℓ−1} \\ {ℓ}``
    (the support of :func:`lib.induction.data.ood_lengths`)."""
    ell = np.arange(l_min + 1, l_max + 1, dtype=np.int64)
    count = 2 * ell - 2                                       # ℓ1 ∈ 1..2ℓ−1 without ℓ
    ell = np.repeat(ell, count)
    rank = np.arange(ell.size) - np.repeat(np.cumsum(count) - count, count)  # 0..2ℓ−3
    return ell, rank + 1 + (rank + 1 >= ell)


def window_family(l_hi: int, l_lo: int = 1) -> list[tuple[int, int]]:
    """Every window ``(a, b)`` with ``l_lo ≤ a < b ≤ l_hi``: the family the threshold statistic
    ranges over (all of them, so no choice of grid enters)."""
    return [(a, b) for a in range(l_lo, l_hi) for b in range(a + 1, l_hi + 1)]


def threshold_statistic(r, ok) -> dict:
    """``r_ok``: the largest ``R`` with every OOD answer right; ``r_fail``: the smallest ``R``
    with some answer wrong (``nan`` where no such window exists); ``r_star``: their geometric
    mean, and ``monotone``: whether ``r_ok < r_fail`` (the family is then split by one
    threshold)."""
    r = np.asarray(r, dtype=float)
    ok = np.asarray(ok, dtype=bool)
    r_ok = float(r[ok].max()) if ok.any() else float("nan")
    r_fail = float(r[~ok].min()) if (~ok).any() else float("nan")
    return {"r_ok": r_ok, "r_fail": r_fail, "r_star": float(np.sqrt(r_ok * r_fail)),
            "monotone": bool(r_ok < r_fail)}


def mechanism_thresholds(n_trg: int, l_hi: int, l_lo: int = 1) -> dict:
    """The threshold statistic of Lemma 7's hard-attention model over every window of
    :func:`window_family`."""
    wins = window_family(l_hi, l_lo)
    r = [max_sum_ratio(LengthDist.uniform(a, b)) for a, b in wins]
    ok = [ood_all_right(LengthDist.uniform(a, b), n_trg) for a, b in wins]
    return {"n_trg": n_trg, **threshold_statistic(r, ok), "windows": len(wins)}
