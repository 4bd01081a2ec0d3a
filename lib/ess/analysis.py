"""Small statistics for the chapter's comparisons across trained models."""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

__all__ = ["FAR_BETTER_GAP", "detectable_gap", "spearman_rows", "spearman_gap_bootstrap",
           "within_family_spearman"]

#: The effect this chapter takes as the paper's "ESS/κ predicts accuracy far better than TSS/κ",
#: on the scale of the claim's statistic (the mean over the families of ρ_ESS − ρ_TSS, Spearman).
#: The paper's text, as far as we could find it, gives no correlation coefficients, so the effect
#: is fixed a priori from Cohen's (1988) conventions for a correlation (0.1 small, 0.3 medium,
#: 0.5 large): "far better" is read as at least a medium correlation's worth of difference. It is
#: the smallest gap one could still call "far", so that an experiment too weak to see it cannot
#: call the finding not reproduced. It does not depend on any run of this chapter.
FAR_BETTER_GAP = 0.3


def detectable_gap(se: float, alpha: float, power: float = 0.8) -> float:
    """Smallest true gap a one-sided test at level ``alpha`` detects with probability ``power``
    when its estimate is normal with standard error ``se``: (z_{1−α} + z_{power})·se (at
    ``power = 0.5`` it is the rejection threshold z_{1−α}·se itself)."""
    if not (0 < alpha < 1 and 0 < power < 1) or not se >= 0:
        raise ValueError("need 0 < alpha, power < 1 and se ≥ 0")
    return float((stats.norm.isf(alpha) + stats.norm.ppf(power)) * se)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of every row of ``x`` with the same row of ``y`` (both ``(m, n)``): the
    Pearson correlation of their average ranks, NaN for a row where either is constant —
    ``scipy.stats.spearmanr`` for many resamples at once."""
    rx = stats.rankdata(np.asarray(x, dtype=float), axis=-1)
    ry = stats.rankdata(np.asarray(y, dtype=float), axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(-1) * (ry ** 2).sum(-1))
    num = (rx * ry).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def spearman_gap_bootstrap(a, b, y, rng: np.random.Generator, n_boot: int = 2000) -> dict:
    """How robustly does predictor ``a`` rank ``y`` better than predictor ``b``?

    Returns the Spearman correlations ``rho_a``, ``rho_b`` on the data, and over ``n_boot``
    resamples of the models (with replacement) the 95% percentile interval of
    ``rho_a − rho_b`` and the fraction of resamples in which ``rho_a > rho_b``. Resamples where
    either correlation is undefined (a constant column) are skipped."""
    a, b, y = (np.asarray(v, dtype=float) for v in (a, b, y))
    if not a.shape == b.shape == y.shape or a.ndim != 1:
        raise ValueError("a, b and y must be 1-d arrays of equal length")

    def rho(x, idx):
        with warnings.catch_warnings():      # a resample with a constant column: skipped below
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            return stats.spearmanr(x[idx], y[idx]).statistic

    full = np.arange(len(y))
    idx = rng.integers(0, len(y), (n_boot, len(y)))
    g = spearman_rows(a[idx], y[idx]) - spearman_rows(b[idx], y[idx])
    gaps = g[np.isfinite(g)]
    lo, hi = (np.percentile(gaps, [2.5, 97.5]) if gaps.size else (np.nan, np.nan))
    return {"rho_a": float(rho(a, full)), "rho_b": float(rho(b, full)), "gap_low": float(lo),
            "gap_high": float(hi), "p_a_better": float(np.mean(gaps > 0)) if gaps.size else np.nan,
            "n_valid": int(gaps.size)}


def within_family_spearman(a, b, y, family, rng: np.random.Generator, n_boot: int = 4000) -> dict:
    """Does predictor ``a`` rank ``y`` better than ``b`` *within* each family (architecture)?

    For every family ``f`` the Spearman correlations ``rho_a[f]``, ``rho_b[f]`` of ``y`` with
    ``a`` and with ``b`` over that family's models only (so that differences between
    architectures cannot drive them), and their gap averaged over the families,
    ``mean_gap = mean_f (rho_a[f] − rho_b[f])``. Its uncertainty comes from a stratified bootstrap:
    each resample draws every family's models with replacement within the family; returned are the
    95% percentile interval of the mean gap, its bootstrap standard error ``se`` (the standard
    deviation of the resampled mean gaps) and ``p_not_better``, the share of resamples with
    mean gap ≤ 0 (resamples where a correlation is undefined are skipped; ``n_valid`` counts the
    rest). A family whose correlation is undefined on the data (a constant column) is dropped
    and listed in ``undefined``; with no family left every statistic is NaN."""
    a, b, y = (np.asarray(v, dtype=float) for v in (a, b, y))
    family = np.asarray(family)
    if not a.shape == b.shape == y.shape == family.shape or a.ndim != 1:
        raise ValueError("a, b, y and family must be 1-d arrays of equal length")

    def rho(x, idx):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            return stats.spearmanr(x[idx], y[idx]).statistic

    groups = {f: np.flatnonzero(family == f) for f in dict.fromkeys(family.tolist())}
    per = {f: (float(rho(a, idx)), float(rho(b, idx))) for f, idx in groups.items()}
    undefined = [f for f, r in per.items() if not np.all(np.isfinite(r))]
    groups = {f: idx for f, idx in groups.items() if f not in undefined}
    if not groups:              # e.g. one model per family: nothing to rank
        return {"rho_a": {f: per[f][0] for f in per}, "rho_b": {f: per[f][1] for f in per},
                "mean_gap": np.nan, "gap_low": np.nan, "gap_high": np.nan, "se": np.nan,
                "p_not_better": np.nan,
                "n_valid": 0, "undefined": undefined}
    gap = float(np.mean([per[f][0] - per[f][1] for f in groups]))
    g = np.zeros(n_boot)
    for idx in groups.values():
        res = idx[rng.integers(0, len(idx), (n_boot, len(idx)))]
        g = g + spearman_rows(a[res], y[res]) - spearman_rows(b[res], y[res])
    gaps = g[np.isfinite(g)] / len(groups)
    lo, hi = (np.percentile(gaps, [2.5, 97.5]) if gaps.size else (np.nan, np.nan))
    return {"rho_a": {f: per[f][0] for f in per}, "rho_b": {f: per[f][1] for f in per},
            "mean_gap": gap, "gap_low": float(lo), "gap_high": float(hi),
            "se": float(np.std(gaps, ddof=1)) if gaps.size > 1 else np.nan,
            "p_not_better": float(np.mean(gaps <= 0)) if gaps.size else np.nan,
            "n_valid": int(gaps.size), "undefined": undefined}
