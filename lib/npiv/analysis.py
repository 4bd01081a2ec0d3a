"""Fits that turn runs into the chapter's numbers: how the spread of the stationary Lagrangian
over initialisations scales with the particle number, first-passage times, and the
bias-plus-variance form of the test error against λ."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import polygamma


@dataclass
class BiasVarianceFit:
    a: float
    b: float
    c: float
    r2: float

    def __call__(self, lam):
        lam = np.asarray(lam, float)
        return self.a / lam + self.b * lam + self.c

    @property
    def argmin(self) -> float:
        """Minimiser of a/λ + bλ + c (when a, b > 0): λ* = √(a/b)."""
        return float(np.sqrt(self.a / self.b)) if self.a > 0 and self.b > 0 else float("nan")


def fit_bias_variance(lam: np.ndarray, err: np.ndarray) -> BiasVarianceFit:
    """Least squares of ``err ≈ a/λ + bλ + c`` (unconstrained, so a or b may come out ≤ 0)."""
    lam, err = np.asarray(lam, float), np.asarray(err, float)
    X = np.stack([1 / lam, lam, np.ones_like(lam)], 1)
    (a, b, c), *_ = np.linalg.lstsq(X, err, rcond=None)
    pred = X @ np.array([a, b, c])
    ss = float(((err - err.mean()) ** 2).sum())
    return BiasVarianceFit(float(a), float(b), float(c),
                           1 - float(((err - pred) ** 2).sum()) / ss if ss > 0 else float("nan"))


def first_passage(t: np.ndarray, gap: np.ndarray, level: float) -> float:
    """The first sample time at which ``gap`` is ≤ ``level`` (NaN if it never is)."""
    hit = np.flatnonzero(np.asarray(gap, float) <= level)
    return float(np.asarray(t, float)[hit[0]]) if len(hit) else float("nan")


@dataclass
class VarianceSlope:
    """The slope of log(sample variance) against log N, with one intercept per data set."""

    slope: float
    se: float              # its standard error, exact for Gaussian samples
    log_var: np.ndarray    # (K, D) log sample variances

    def z(self, predicted: float) -> float:
        """(slope − predicted)/se."""
        return (self.slope - predicted) / self.se


def log_variance_slope(x, samples) -> VarianceSlope:
    """Slope of ``log s²`` against ``log x``, where ``s²`` is the sample variance of
    ``samples[k, d, :]`` (M values at ``x[k]`` on data set ``d``), fitted with one intercept per
    data set. For Gaussian samples ``(M − 1) s²/v`` is χ² with M − 1 degrees of freedom, so
    ``log s²`` scatters around ``log v`` + const with variance ψ'((M − 1)/2) (the trigamma
    function) whatever ``v`` is: the slope's standard error is known, not estimated."""
    x = np.log(np.asarray(x, float))
    s = np.asarray(samples, float)
    K, D, M = s.shape
    y = np.log(s.var(-1, ddof=1))                 # (K, D)
    xc = x - x.mean()
    slope = float((xc[:, None] * (y - y.mean(0))).sum() / (D * (xc ** 2).sum()))
    se = float(np.sqrt(polygamma(1, (M - 1) / 2) / (D * (xc ** 2).sum())))
    return VarianceSlope(slope, se, y)
