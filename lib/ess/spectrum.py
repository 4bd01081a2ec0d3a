"""Effective state-size of a causal operator, from the singular values of its Hankel blocks.

A causal sequence model applied to a fixed input acts on one channel as ``y = T u`` with
``T`` lower triangular (ℓ × ℓ). At position ``i`` (0-based) the block

    H_i = T[i:, :i]          (all present/future outputs × all strictly past inputs)

is the only way the past can influence the future, so any recurrent realisation factors it as
``H_i = O_i R_i`` through its state at ``i`` and ``rank H_i`` is the smallest state that can
carry the past forward: the *effective state-size* ``ESS_i``.

Two ways to count, both computed here from the singular values ``σ_1 ≥ σ_2 ≥ …`` of ``H_i``:

* tolerance-ESS: ``#{m : σ_m > τ σ_1}`` (relative tolerance ``τ``; ``τ=None`` uses NumPy's
  numerical-rank threshold ``σ_1 · max(shape) · eps``, the "exact" rank in floating point);
* entropy-ESS: ``exp(−Σ p_m log p_m)`` with ``p_m = σ_m / Σ σ`` (singular values below the
  numerical-rank threshold count as zero, so entropy-ESS never exceeds the numerical rank).

The fp64 numerical rank resolves a direction only if its singular value exceeds the SVD's
rounding error, about ``eps · σ_1`` (``eps = 2.2e−16``). A draw close to the non-generic set can
have a true rank-``r`` block whose ``σ_r / σ_1`` lies below that: a convolution's Hankel block
is a triangular corner with the last filter tap ``h_{k−1}`` on its diagonal, so
``σ_1 ⋯ σ_{k−1} = |h_{k−1}|^{k−1}`` and a last tap of 0.004 puts ``σ_{k−1} / σ_1`` near 1e−17.
No tolerance on the fp64 singular values can resolve such a direction.
:func:`resolution_margin` measures how far a block's ``r``-th singular value lies above the
rounding threshold (below 1: unresolvable in fp64). Where the stored entries *are* the
operator — banded operators whose zeros are structural, such as convolutions and sliding-window
attention, whose entries are either exact zeros or the computed weights themselves —
:func:`exact_rank` decides the rank of the stored block exactly, by fraction-free elimination on
the binary fractions that fp64 numbers are (:func:`exact_ess` per position).

Every array here is fp64 and batched over leading dimensions: ``T`` has shape ``(..., ℓ, ℓ)``
and the per-position results ``(..., ℓ)`` (``ESS_0 = 0``: nothing lies in the past).

For operators given in factored diagonal form (linear attention, gated linear attention,
diagonal SSMs, scalar recurrences),

    T[r, j] = Σ_n C[r, n] · exp(Σ_{t=j+1}^{r} log_a[t, n]) · B[j, n]        (j ≤ r),

:func:`factored_singular_values` never builds ``H_i``: it QR-factors the two thin factors
``O_i`` ((ℓ−i) × N) and ``R_iᵀ`` (i × N) and takes the singular values of the small product of
their triangular parts, O(ℓ N²) per position instead of a dense SVD.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hankel_singular_values", "factored_singular_values", "factored_error", "factored_operator",
           "tolerance_ess", "entropy_ess", "ess_profile", "exact_rank", "exact_ess",
           "resolution_margin"]


def _check_square(T: np.ndarray) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    if T.ndim < 2 or T.shape[-1] != T.shape[-2]:
        raise ValueError(f"expected an operator of shape (..., ℓ, ℓ), got {T.shape}")
    return T


def hankel_singular_values(T: np.ndarray) -> list[np.ndarray]:
    """Singular values of ``H_i = T[..., i:, :i]`` for every position ``i``.

    Returns a list of length ℓ; entry ``i`` has shape ``(..., min(i, ℓ−i))`` (entry 0 is empty),
    sorted in decreasing order.
    """
    T = _check_square(T)
    ell = T.shape[-1]
    batch = T.shape[:-2]
    out = [np.zeros(batch + (0,))]
    for i in range(1, ell):
        out.append(np.linalg.svd(T[..., i:, :i], compute_uv=False))
    return out


def _segment_products(log_a: np.ndarray) -> np.ndarray:
    """``P[..., r, j, n] = exp(Σ_{t=j+1}^{r} log_a[..., t, n])`` for j ≤ r, 0 above the diagonal.

    Built from the prefix sums of ``log_a`` with the upper triangle masked *before* the
    exponential (so nothing overflows); fp64 keeps the subtraction accurate for the short
    sequences of this chapter.
    """
    S = np.cumsum(log_a, axis=-2)                       # (..., ℓ, N)
    diff = S[..., :, None, :] - S[..., None, :, :]      # (..., ℓ, ℓ, N): S_r − S_j
    ell = log_a.shape[-2]
    lower = np.tril(np.ones((ell, ell), dtype=bool))[..., None]
    return np.where(lower, np.exp(np.where(lower, diff, -np.inf)), 0.0)


def factored_operator(C: np.ndarray, B: np.ndarray, log_a: np.ndarray | None = None) -> np.ndarray:
    """The dense operator ``T`` of a diagonal recurrence given by ``C, B, log_a`` (each
    ``(..., ℓ, N)``; ``log_a=None`` means no decay, i.e. linear attention)."""
    C, B = np.asarray(C, np.float64), np.asarray(B, np.float64)
    if log_a is None:
        return np.tril(C @ np.swapaxes(B, -1, -2))
    P = _segment_products(np.asarray(log_a, np.float64))
    return np.einsum("...rn,...rjn,...jn->...rj", C, P, B)


def factored_singular_values(C: np.ndarray, B: np.ndarray,
                             log_a: np.ndarray | None = None) -> list[np.ndarray]:
    """Singular values of every ``H_i`` of a diagonal recurrence, from its factors.

    ``H_i = O_i R_i`` with ``O_i[r, n] = C[r, n] · Π_{t=i}^{r} a[t, n]`` (rows r ≥ i) and
    ``R_i[n, j] = Π_{t=j+1}^{i−1} a[t, n] · B[j, n]`` (columns j < i). With ``O_i = Q_o U_o`` and
    ``R_iᵀ = Q_r U_r`` (thin QR), ``H_i = Q_o (U_o U_rᵀ) Q_rᵀ`` has the singular values of the
    small matrix ``U_o U_rᵀ``. Same output layout as :func:`hankel_singular_values`.
    """
    C, B = np.asarray(C, np.float64), np.asarray(B, np.float64)
    if C.shape != B.shape or C.ndim < 2:
        raise ValueError(f"C and B must share a shape (..., ℓ, N); got {C.shape} and {B.shape}")
    log_a = np.zeros_like(C) if log_a is None else np.asarray(log_a, np.float64)
    if log_a.shape != C.shape:
        raise ValueError(f"log_a must have the shape of C, {C.shape}; got {log_a.shape}")
    ell = C.shape[-2]
    S = np.cumsum(log_a, axis=-2)            # S[t] = Σ_{s ≤ t} log a[s]
    batch = C.shape[:-2]
    out = [np.zeros(batch + (0,))]
    for i in range(1, ell):
        # Π_{t=i}^{r} a_t = exp(S_r − S_{i−1});  Π_{t=j+1}^{i−1} a_t = exp(S_{i−1} − S_j)
        ref = S[..., i - 1:i, :]
        O = C[..., i:, :] * np.exp(S[..., i:, :] - ref)
        R = B[..., :i, :] * np.exp(ref - S[..., :i, :])
        U_o = np.linalg.qr(O, mode="r")
        U_r = np.linalg.qr(R, mode="r")
        small = U_o @ np.swapaxes(U_r, -1, -2)
        s = np.linalg.svd(small, compute_uv=False)
        k = min(i, ell - i)                 # pad with exact zeros to the layout of the dense path
        pad = np.zeros(batch + (max(k - s.shape[-1], 0),))
        out.append(np.concatenate([s[..., :k], pad], axis=-1))
    return out


def factored_error(factors, dense: list[np.ndarray]) -> float:
    """The largest difference between :func:`factored_singular_values` of ``factors`` ``(C, B, log_a)``
    and ``dense``, the same operator's :func:`hankel_singular_values`, relative to σ_1 of each block,
    over the positions 1 … ℓ−1 (0 where they agree)."""
    worst = 0.0
    for fast, d in zip(factored_singular_values(*factors)[1:], dense[1:]):
        worst = max(worst, float(np.max(np.abs(fast - d) / d[..., :1])))
    return worst


def _rank_threshold(s: np.ndarray, i: int, ell: int) -> np.ndarray:
    """NumPy's numerical-rank threshold ``σ_1 · max(ℓ−i, i) · eps`` for the block at position i."""
    return s[..., :1] * max(i, ell - i) * np.finfo(np.float64).eps


def _per_position(svals: list[np.ndarray], count) -> np.ndarray:
    """Apply ``count(s, threshold)`` to every position's singular values ``s`` (shape
    ``(..., m)``), with ``threshold`` NumPy's numerical-rank threshold for that block; returns
    ``(..., ℓ)`` with 0 at positions whose block is empty."""
    ell = len(svals)
    ess = np.zeros(svals[0].shape[:-1] + (ell,))
    for i, s in enumerate(svals):
        if s.shape[-1]:
            ess[..., i] = count(s, _rank_threshold(s, i, ell))
    return ess


def tolerance_ess(svals: list[np.ndarray], tau: float | None = None) -> np.ndarray:
    """``#{σ_m > τ σ_1}`` per position, shape ``(..., ℓ)``. ``tau=None``: NumPy's numerical
    rank threshold ``σ_1 · max(ℓ−i, i) · eps`` (the rank of the exact operator up to rounding)."""
    def count(s, rank_thr):
        smax = s[..., :1]
        thr = rank_thr if tau is None else smax * tau
        return np.sum((s > thr) & (smax > 0), axis=-1)

    return _per_position(svals, count)


def entropy_ess(svals: list[np.ndarray]) -> np.ndarray:
    """``exp(H(p))`` with ``p = σ / Σσ`` per position, shape ``(..., ℓ)`` (0 where H_i = 0);
    rounding-level singular values (as in ``tolerance_ess(·, None)``) are set to zero first."""
    def count(s, rank_thr):
        # singular values at rounding level (below the numerical-rank threshold) are zeros of
        # the exact operator: drop them, so entropy-ESS ≤ numerical rank holds exactly
        s = np.where(s > rank_thr, s, 0.0)
        total = s.sum(axis=-1, keepdims=True)
        p = np.divide(s, total, out=np.zeros_like(s), where=total > 0)
        plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
        return np.where(total[..., 0] > 0, np.exp(-plogp.sum(axis=-1)), 0.0)

    return _per_position(svals, count)


def ess_profile(svals: list[np.ndarray], taus=(None, 1e-6, 1e-3, 1e-2)) -> dict[str, np.ndarray]:
    """Tolerance-ESS at each ``τ`` (keys ``"tol=exact"``, ``"tol=1e-06"``, …) and entropy-ESS
    (key ``"entropy"``), each ``(..., ℓ)``."""
    out = {("tol=exact" if t is None else f"tol={t:g}"): tolerance_ess(svals, t) for t in taus}
    out["entropy"] = entropy_ess(svals)
    return out


def exact_rank(M: np.ndarray) -> int:
    """The exact rank of a real matrix whose fp64 entries are taken as the exact binary
    fractions they are: every entry is scaled to an integer by one common power of two and the
    rank is found by fraction-free (Bareiss) Gaussian elimination on Python integers, so no
    rounding occurs. Rows and columns that are entirely zero are dropped first; cost is cubic in
    the size of what is left, so use it on small (or sparse, banded) blocks."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError("exact_rank needs finite entries")
    M = M[np.any(M != 0, axis=1)][:, np.any(M != 0, axis=0)]
    if M.size == 0:
        return 0
    ratios = [[float(x).as_integer_ratio() for x in row] for row in M]
    shift = max(d.bit_length() - 1 for row in ratios for _, d in row)   # denominators: powers of 2
    A = [[n << (shift - (d.bit_length() - 1)) for n, d in row] for row in ratios]
    rows, cols = len(A), len(A[0])
    rank, prev = 0, 1
    for c in range(cols):
        pivot = next((r for r in range(rank, rows) if A[r][c] != 0), None)
        if pivot is None:
            continue
        A[rank], A[pivot] = A[pivot], A[rank]
        p = A[rank][c]
        for r in range(rank + 1, rows):
            a = A[r][c]
            A[r] = [(p * A[r][j] - a * A[rank][j]) // prev for j in range(cols)]
        prev = p
        rank += 1
        if rank == rows:
            break
    return rank


def exact_ess(T: np.ndarray) -> np.ndarray:
    """``rank H_i`` of every position, decided exactly (:func:`exact_rank`) on the stored
    operator ``T`` of shape ``(..., ℓ, ℓ)``; returns ``(..., ℓ)``. Meaningful where the stored
    entries are the operator (structural zeros exact), e.g. convolutions and windowed
    attention; for operators formed by rounded products (``C Bᵀ``) the stored block is
    generically of full rank and the numerical rank is the right count."""
    T = _check_square(T)
    ell = T.shape[-1]
    flat = T.reshape(-1, ell, ell)
    out = np.zeros((flat.shape[0], ell))
    for b in range(flat.shape[0]):
        for i in range(1, ell):
            out[b, i] = exact_rank(flat[b, i:, :i])
    return out.reshape(T.shape[:-2] + (ell,))


def resolution_margin(svals: list[np.ndarray], rank: np.ndarray) -> np.ndarray:
    """How far the ``rank``-th singular value of each block lies above the fp64 rounding
    threshold ``σ_1 · max(ℓ−i, i) · eps`` (NumPy's numerical-rank threshold): ``σ_r / threshold``
    per position, shape ``(..., ℓ)`` (``inf`` where ``rank`` is 0). Below 1 the numerical rank
    cannot see the ``r``-th direction whatever the tolerance; ``rank`` broadcasts against
    ``(..., ℓ)``."""
    ell = len(svals)
    batch = svals[0].shape[:-1]
    rank = np.broadcast_to(np.asarray(rank), batch + (ell,)).astype(int)
    out = np.full(batch + (ell,), np.inf)
    for i, s in enumerate(svals):
        r = rank[..., i]
        if not s.shape[-1] or not np.any(r > 0):
            continue
        if np.any(r > s.shape[-1]):
            raise ValueError(f"rank exceeds the block size at position {i}")
        thr = _rank_threshold(s, i, ell)[..., 0]
        sr = np.take_along_axis(s, np.maximum(r - 1, 0)[..., None], axis=-1)[..., 0]
        out[..., i] = np.where(r > 0, sr / np.where(thr > 0, thr, np.finfo(float).tiny), np.inf)
    return out
