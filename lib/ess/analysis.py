"""Small statistics for the chapter's comparisons across trained models."""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

__all__ = ["spearman_gap_bootstrap"]


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
    gaps = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(y), len(y))
        g = rho(a, idx) - rho(b, idx)
        if np.isfinite(g):
            gaps.append(g)
    gaps = np.array(gaps)
    lo, hi = (np.percentile(gaps, [2.5, 97.5]) if gaps.size else (np.nan, np.nan))
    return {"rho_a": float(rho(a, full)), "rho_b": float(rho(b, full)), "gap_low": float(lo),
            "gap_high": float(hi), "p_a_better": float(np.mean(gaps > 0)) if gaps.size else np.nan,
            "n_valid": int(gaps.size)}
