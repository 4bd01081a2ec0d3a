"""Fits that turn runs into the chapter's numbers: how the spread of the stationary Lagrangian
over initialisations scales with the particle number, first-passage times, and the
bias-plus-variance form of the test error against λ."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import polygamma
from scipy.stats import t as student_t


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
    """The slope of log(sample variance) against log N, with one intercept per data set, and its
    standard error estimated from the scatter of the log variances around the fit."""

    slope: float
    se: float              # standard error from the residual scatter (``df`` degrees of freedom)
    df: int                # residual degrees of freedom, K·D − D − 1
    se_gaussian: float     # what the error would be for Gaussian samples (ψ'((M − 1)/2) scatter)
    residual_var: float    # the estimated variance of one log sample variance around the fit
    log_var: np.ndarray    # (K, D) log sample variances

    def z(self, predicted: float) -> float:
        """(slope − predicted)/se (±inf where the fit is exact and the slope differs)."""
        return float(np.divide(self.slope - predicted, self.se)) if self.se > 0 else (
            0.0 if self.slope == predicted else float(np.copysign(np.inf, self.slope - predicted)))

    def critical(self, false_alarm: float) -> float:
        """Two-sided Student-t critical value at ``false_alarm`` on ``df`` degrees of freedom."""
        return float(student_t.isf(false_alarm / 2, self.df))

    def interval(self, predicted: float, false_alarm: float) -> tuple[float, float]:
        """The slopes a two-sided test of ``predicted`` accepts at ``false_alarm``."""
        half = self.critical(false_alarm) * self.se
        return predicted - half, predicted + half


def log_variance_slope(x, samples) -> VarianceSlope:
    """Slope of ``log s²`` against ``log x``, where ``s²`` is the sample variance of
    ``samples[k, d, :]`` (M values at ``x[k]`` on data set ``d``), fitted by least squares with
    one intercept per data set.

    The model is ``log s²[k, d] = a_d + β log x[k] + e[k, d]`` with independent errors of one
    variance. For Gaussian samples that variance is ψ'((M − 1)/2) (the trigamma function: the
    log of a χ² with M − 1 degrees of freedom), kept as ``se_gaussian``; for other laws it is
    larger by about κ/M (κ the excess kurtosis, by the delta method: Var s²/σ⁴ = 2/(M − 1) + κ/M),
    and a variance that itself varies between (N, data set) cells adds to it. The standard error
    ``se`` therefore estimates the error variance from the residuals of the fit, on
    ``K·D − D − 1`` degrees of freedom, and tests use Student's t on those degrees of freedom —
    exact when the errors are Gaussian, whatever their variance."""
    x = np.log(np.asarray(x, float))
    s = np.asarray(samples, float)
    K, D, M = s.shape
    y = np.log(s.var(-1, ddof=1))                 # (K, D)
    xc = x - x.mean()
    sxx = D * float((xc ** 2).sum())
    slope = float((xc[:, None] * (y - y.mean(0))).sum() / sxx)
    resid = y - y.mean(0) - slope * xc[:, None]
    df = K * D - D - 1
    if df < 1:
        raise ValueError("the error needs K·D − D − 1 ≥ 1 (more particle numbers or data sets)")
    s2 = float((resid ** 2).sum() / df)
    return VarianceSlope(slope, float(np.sqrt(s2 / sxx)), df,
                         float(np.sqrt(polygamma(1, (M - 1) / 2) / sxx)), s2, y)
