"""Rank correlations between bound and gap: Kendall's τ, Spearman's ρ, the partial τ given the
swept variable, and the exact within-stratum Kendall test."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def kendall_tau(a, b) -> float:
    """Kendall's τ_b between two sequences."""
    return float(stats.kendalltau(a, b).statistic)


def spearman_rho(a, b) -> float:
    return float(stats.spearmanr(a, b).statistic)


def partial_kendall(x, y, z) -> float:
    """Kendall's partial τ of x and y given z: (τ_xy − τ_xz·τ_yz)/√((1 − τ_xz²)(1 − τ_yz²));
    NaN where z orders x or y completely (nothing is left to correlate)."""
    txy, txz, tyz = kendall_tau(x, y), kendall_tau(x, z), kendall_tau(y, z)
    denominator = (1 - txz**2) * (1 - tyz**2)
    return (txy - txz * tyz) / math.sqrt(denominator) if denominator > 1e-12 else float("nan")


def kendall_s(x, y) -> int:
    """Kendall's S: concordant minus discordant pairs (tied pairs count 0)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    i, j = np.triu_indices(len(x), k=1)
    return int(np.sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])))


def kendall_s_null(k: int) -> dict[int, float]:
    """Exact distribution of Kendall's S for k items under independence (every permutation
    equally likely, no ties): S = C(k, 2) − 2·(inversions), and the number of permutations with
    q inversions is the Mahonian number, built up one item at a time."""
    counts = np.array([1.0])
    for j in range(1, k):                     # inserting item j+1 adds 0..j inversions
        counts = np.convolve(counts, np.ones(j + 1))
    pairs = k * (k - 1) // 2
    return {pairs - 2 * q: c / counts.sum() for q, c in enumerate(counts)}


def stratified_kendall(x, y, strata, alpha: float = 1e-3) -> dict:
    """Kendall's τ of x and y *within* strata (pairs in the same stratum only): S summed over
    strata over the number of such pairs. Under "x and y independent given the stratum" each
    stratum's S has the distribution of :func:`kendall_s_null`, independently, so the exact
    one-sided p-value P(S ≥ S_obs) is their convolution. Also returns ``critical``: the smallest
    τ that the test declares at level ``alpha`` (NaN where no τ can reach it)."""
    x, y, strata = np.asarray(x, float), np.asarray(y, float), np.asarray(strata)
    dist, pairs, s_obs = {0: 1.0}, 0, 0
    for level in np.unique(strata):
        sel = strata == level
        k = int(sel.sum())
        if k < 2:
            continue
        s_obs += kendall_s(x[sel], y[sel])
        pairs += k * (k - 1) // 2
        null = kendall_s_null(k)
        new: dict[int, float] = {}
        for a, pa in dist.items():
            for b, pb in null.items():
                new[a + b] = new.get(a + b, 0.0) + pa * pb
        dist = new
    values = np.array(sorted(dist))
    tail = np.cumsum([dist[v] for v in values[::-1]])[::-1]           # P(S ≥ v)
    p = float(tail[values >= s_obs][0]) if pairs else 1.0
    declared = values[tail <= alpha]
    critical = float(declared[0]) / pairs if len(declared) and pairs else float("nan")
    return {"tau": s_obs / pairs if pairs else float("nan"), "S": s_obs, "pairs": pairs, "p": p,
            "critical": critical}


def kendall_test(x, y, alpha: float = 1e-3) -> dict:
    """Kendall's τ of x and y over all pairs with the exact one-sided test of independence
    (:func:`stratified_kendall` with one stratum): ``tau``, ``p`` = P(S ≥ S_obs) and ``critical``,
    the smallest τ the test declares at level ``alpha``."""
    return stratified_kendall(x, y, np.zeros(len(np.asarray(x))), alpha=alpha)


def sign_test(wins: int, trials: int, alpha: float = 1e-3) -> dict:
    """Exact one-sided sign test of "one side wins more than half of the paired comparisons":
    ``p`` = P(Binomial(trials, ½) ≥ wins), ``share`` = wins/trials and ``critical``, the smallest
    share of wins the test declares at level ``alpha`` (NaN where none can)."""
    k = np.arange(trials + 1)
    tail = stats.binom.sf(k - 1, trials, 0.5)                          # P(X ≥ k)
    declared = k[tail < alpha]
    return {"p": float(tail[wins]) if trials else 1.0, "share": wins / trials if trials else float("nan"),
            "critical": float(declared[0]) / trials if len(declared) and trials else float("nan")}


def one_sided_z(alpha: float) -> float:
    """The standard normal quantile z with P(Z > z) = ``alpha``: a one-sided z-test's threshold."""
    return float(stats.norm.isf(alpha))


def _strata_sizes(sizes) -> list[int]:
    return [int(k) for k in sizes if int(k) >= 2]


def kendall_power(sizes, tau: float, alpha: float, rng: np.random.Generator, reps: int = 2000) -> float:
    """Simulated power of the exact within-stratum Kendall test (:func:`stratified_kendall`; one
    stratum of ``sizes[0]`` items is :func:`kendall_test`) against a rank correlation ``tau``:
    in each stratum of ``sizes`` the pairs are bivariate normal with Pearson r = sin(πτ/2)
    (Kendall's τ of a bivariate normal is (2/π)·arcsin r), and the share of ``reps`` draws that
    the test declares at level ``alpha``."""
    sizes = _strata_sizes(sizes)
    r = math.sin(math.pi * float(tau) / 2)
    return float(np.mean(_kendall_declared(sizes, r, alpha, rng, reps)))


def _kendall_s_draws(sizes, r: float, rng: np.random.Generator, reps: int) -> np.ndarray:
    total = np.zeros(reps, dtype=np.int64)
    for k in sizes:
        z1, z2 = rng.standard_normal((2, reps, k))
        x, y = z1, r * z1 + math.sqrt(max(1 - r * r, 0.0)) * z2
        i, j = np.triu_indices(k, k=1)
        total += np.sum(np.sign(x[:, i] - x[:, j]) * np.sign(y[:, i] - y[:, j]), axis=1).astype(np.int64)
    return total


def _kendall_critical_s(sizes, alpha: float) -> float:
    """The smallest S the exact within-stratum test declares at level ``alpha`` (inf if none)."""
    x = np.concatenate([np.arange(k, dtype=float) for k in sizes])
    strata = np.concatenate([np.full(k, s) for s, k in enumerate(sizes)])
    out = stratified_kendall(x, x, strata, alpha=alpha)
    return out["critical"] * out["pairs"] if np.isfinite(out["critical"]) else float("inf")


def _kendall_declared(sizes, r: float, alpha: float, rng: np.random.Generator, reps: int) -> np.ndarray:
    return _kendall_s_draws(sizes, r, rng, reps) >= _kendall_critical_s(sizes, alpha) - 1e-9


def kendall_detectable(sizes, alpha: float, rng: np.random.Generator, power: float = 0.8, reps: int = 2000,
                       tol: float = 0.005) -> float:
    """The smallest rank correlation τ that the exact within-stratum Kendall test (strata of
    ``sizes``; one stratum: :func:`kendall_test`) declares at level ``alpha`` with probability at
    least ``power`` (:func:`kendall_power`, bisection on τ with the same normal draws at every τ,
    to ``tol``); 1.0 if even τ → 1 does not reach it."""
    sizes = _strata_sizes(sizes)
    critical = _kendall_critical_s(sizes, alpha)
    z = [rng.standard_normal((2, reps, k)) for k in sizes]

    def declared_share(tau: float) -> float:
        r = math.sin(math.pi * tau / 2)
        total = np.zeros(reps)
        for k, (z1, z2) in zip(sizes, z):
            y = r * z1 + math.sqrt(max(1 - r * r, 0.0)) * z2
            i, j = np.triu_indices(k, k=1)
            total += np.sum(np.sign(z1[:, i] - z1[:, j]) * np.sign(y[:, i] - y[:, j]), axis=1)
        return float(np.mean(total >= critical - 1e-9))

    lo, hi = 0.0, 1.0
    if not np.isfinite(critical) or declared_share(hi - 1e-9) < power:
        return 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if declared_share(mid) >= power else (mid, hi)
    return hi


def sign_test_detectable(trials: int, alpha: float, power: float = 0.8) -> float:
    """The smallest true share of wins that the exact one-sided sign test (:func:`sign_test`) with
    ``trials`` comparisons declares at level ``alpha`` with probability at least ``power``
    (exact binomial; 1.0 if none)."""
    critical = sign_test(0, trials, alpha=alpha)["critical"]
    if not np.isfinite(critical):
        return 1.0
    need = int(round(critical * trials))
    from scipy.optimize import brentq

    reach = lambda q: float(stats.binom.sf(need - 1, trials, q)) - power  # noqa: E731
    return 1.0 if reach(1.0) < 0 else float(brentq(reach, 1e-12, 1.0, xtol=1e-6))
