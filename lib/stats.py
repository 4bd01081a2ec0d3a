"""The statistics the chapters share: intervals that respect the quantity, t-tests over seeds,
bootstrap errors, power-law fits and a stable softmax. (Figures and number formatting live in
:mod:`lib.plotting`.)

One helper per kind of interval:

* :func:`mean_ci` / :func:`t_interval` — Student-t interval of a mean over seeds (unbounded
  quantities); :func:`mean_se` — the mean and its standard error;
* :func:`wilson` — a proportion's Wilson score interval (stays inside [0, 1]);
* :func:`geometric_ci` — geometric mean and interval (positive quantities, log axes);
* :func:`bootstrap_mean` — percentile bootstrap of a mean (heavy-tailed positive costs);
  :func:`bootstrap_slope_se` — bootstrap standard error of a fitted log-log slope.

Tests over seeds: :func:`seed_test` (one-sided Student-t of paired per-seed differences, with the
smallest effect it detects); :func:`jackknife_se` (delete-one error over batch means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


# -- intervals -----------------------------------------------------------------------------------
def mean_ci(samples, axis: int = -1, level: float = 0.95):
    """Mean and half-width of the Student-t interval over ``axis`` (0 width for one sample)."""
    s = np.asarray(samples, dtype=float)
    n = s.shape[axis]
    mean = np.nanmean(s, axis=axis)
    if n < 2:
        return mean, np.zeros_like(mean)
    sem = np.nanstd(s, axis=axis, ddof=1) / np.sqrt(n)
    return mean, stats.t.ppf(0.5 + level / 2, n - 1) * sem


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the Student-t interval of one set of per-seed values."""
    mean, half = mean_ci(np.asarray(values, dtype=float), level=level)
    return float(mean), float(mean - half), float(mean + half)


def mean_se(values) -> tuple[float, float]:
    """Mean of per-seed values and its standard error (0 for one value)."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0


def wilson(successes, trials, level: float = 0.95):
    """Wilson score interval ``(low, high)`` for a proportion: stays inside [0, 1]."""
    k, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    z = stats.norm.ppf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def one_sided_wilson(accuracy, trials: int, alpha: float):
    """One-sided Wilson bounds ``(lower, upper)`` at level ``alpha`` each for accuracies measured
    on ``trials`` items (rounded to whole successes): a true rate below ``lower`` (above
    ``upper``) gives such an accuracy with probability at most ``alpha``."""
    k = np.round(np.asarray(accuracy, dtype=float) * trials)
    return wilson(k, trials, level=1.0 - 2.0 * alpha)


def geometric_mean(samples, axis: int = -1):
    """``exp(mean(log samples))`` over ``axis``: inf where any sample is inf (a censored run)."""
    return np.exp(np.mean(np.log(np.asarray(samples, dtype=float)), axis=axis))


def geometric_ci(samples, axis: int = -1, level: float = 0.95):
    """Geometric mean and Student-t interval of ``log samples`` mapped back: ``(centre, low, high)``,
    all positive, for quantities drawn on log axes."""
    logs = np.log(np.asarray(samples, dtype=float))
    centre, half = mean_ci(logs, axis=axis, level=level)
    return np.exp(centre), np.exp(centre - half), np.exp(centre + half)


def bootstrap_mean(values, rng: np.random.Generator, reps: int = 1000, level: float = 0.95):
    """``(mean, low, high)``: the mean with a percentile-bootstrap interval (positive values give
    a positive interval)."""
    v = np.asarray(values, dtype=float)
    means = v[rng.integers(0, v.size, size=(reps, v.size))].mean(axis=1)
    tail = (100 - 100 * level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(v.mean()), float(low), float(high)


def bootstrap_slope_se(x, samples, rng: np.random.Generator, reps: int = 200) -> float:
    """Bootstrap standard error of the log-log slope of the seed means: ``samples[i]`` holds the
    replicates at ``x[i]``, resampled independently at each ``x``."""
    s = np.asarray(samples, dtype=float)
    idx = rng.integers(0, s.shape[1], (reps, *s.shape))
    means = np.take_along_axis(s[None], idx, axis=2).mean(2)
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(means.T), 1)[0].std(ddof=1))


# -- t-tests over seeds --------------------------------------------------------------------------
def t_pvalue_greater(differences) -> float:
    """One-sided p-value of a (paired) t-test of "the mean difference is > 0" over seeds."""
    d = np.asarray(differences, dtype=float)
    return float(stats.t.sf(d.mean() / (d.std(ddof=1) / np.sqrt(len(d))), len(d) - 1))


def t_pvalues_against(samples, curve) -> np.ndarray:
    """Two-sided t-test p-values of the seeds' mean (last axis of ``samples``) against ``curve``,
    one per row. Seeds that agree exactly (no spread) and miss the curve give t = ±inf and p = 0,
    the test's limit, without a warning."""
    s = np.asarray(samples, dtype=float)
    with np.errstate(divide="ignore"):
        t = (s.mean(-1) - curve) / (s.std(-1, ddof=1) / np.sqrt(s.shape[-1]))
    return 2 * stats.t.sf(np.abs(t), s.shape[-1] - 1)


# -- fits and small numerics ---------------------------------------------------------------------
def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` over the points where both are finite
    and positive (NaN when fewer than two remain)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """``exp(z) / Σ exp(z)`` along ``axis``, shifted by the maximum for stability."""
    z = np.asarray(logits, float)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# -- tests over seeds, and resampling errors -----------------------------------------------------

@dataclass(frozen=True)
class SeedTest:
    """A one-sided Student-t test of per-seed (paired) differences, at a false-alarm rate ``alpha``:
    ``mean``, ``se``, ``t = mean / se``, the critical value ``crit`` (n − 1 degrees of freedom) and
    ``mde``, the smallest true mean the test detects with probability ``power`` at that rate
    (``(crit + t_power) · se``, the standard-error scale of this experiment)."""

    mean: float
    se: float
    t: float
    crit: float
    mde: float
    n: int

    def above(self) -> bool:  # the mean is significantly > 0
        return self.t > self.crit

    def below(self) -> bool:  # the mean is significantly < 0
        return self.t < -self.crit


def seed_test(differences, alpha: float, power: float = 0.8) -> SeedTest:
    """:class:`SeedTest` of per-seed differences (at least two)."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    mean, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(n))
    crit = float(stats.t.isf(alpha, n - 1))
    t = mean / se if se > 0 else (0.0 if mean == 0 else np.sign(mean) * np.inf)
    return SeedTest(mean, se, float(t), crit, (crit + float(stats.t.isf(1 - power, n - 1))) * se, n)


def jackknife_se(parts, statistic) -> float:
    """Delete-one jackknife standard error of ``statistic(mean of parts)`` over equal-sized
    parts (batch means): ``sqrt((g−1)/g · Σ (θ_(i) − θ̄)²)``."""
    g = len(parts)
    if g < 2:
        return float("nan")
    total = np.sum(parts, axis=0)
    theta = np.array([statistic((total - p) / (g - 1)) for p in parts])
    return float(np.sqrt((g - 1) / g * np.sum((theta - theta.mean()) ** 2)))
