"""Fits that turn runs into the chapter's numbers: exponential against power-law decay of the
Lagrangian gap on a fixed window, and the bias-plus-variance form of the test error against λ."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


@dataclass
class DecayComparison:
    """Exponential against power-law decay of one run's gap on a fixed flow-time window."""

    rate: float            # α of the exponential fit log g ≈ a − α t
    exponent: float        # p of the power-law fit log g ≈ b − p log t
    rss_exp: float         # residual sums of squares of log g under each fit
    rss_pow: float
    decades: float         # log10 of the fitted exponential's decay over the window
    n_points: int
    fitted: bool           # False when a gap in the window is ≤ 0 or too few points

    @property
    def ratio(self) -> float:
        """Residual ratio RSS_power / RSS_exp (> 1: the exponential fits better)."""
        return self.rss_pow / self.rss_exp if self.fitted and self.rss_exp > 0 else float("nan")

    @property
    def delta_aic(self) -> float:
        """AIC(power) − AIC(exponential) = n log(RSS_pow / RSS_exp), both models having two
        parameters (positive: the exponential is preferred)."""
        return self.n_points * float(np.log(self.ratio)) if self.fitted else float("nan")


def compare_decay(t: np.ndarray, gap: np.ndarray, t_lo: float, t_hi: float,
                  min_points: int = 5) -> DecayComparison:
    """Fit ``log gap`` on the flow-time window ``t_lo ≤ t ≤ t_hi`` (fixed in advance, not read
    from the data) by a line in ``t`` (exponential decay) and by a line in ``log t`` (the
    power law ``c·t^{−p}`` from the flow's start, as gradient flow on a merely convex
    objective gives). A window with a non-positive gap or fewer than ``min_points`` points
    cannot be fitted: ``fitted`` is False and every number is NaN."""
    t, gap = np.asarray(t, float), np.asarray(gap, float)
    sel = (t >= t_lo) & (t <= t_hi)
    n = int(sel.sum())
    nan = float("nan")
    if n < min_points or t_lo <= 0 or not np.all(gap[sel] > 0):
        return DecayComparison(nan, nan, nan, nan, nan, n, False)
    y = np.log(gap[sel])
    s_exp, i_exp = np.polyfit(t[sel], y, 1)
    s_pow, i_pow = np.polyfit(np.log(t[sel]), y, 1)
    rss_exp = float(((y - (s_exp * t[sel] + i_exp)) ** 2).sum())
    rss_pow = float(((y - (s_pow * np.log(t[sel]) + i_pow)) ** 2).sum())
    return DecayComparison(float(-s_exp), float(-s_pow), rss_exp, rss_pow,
                           float(-s_exp * (t_hi - t_lo) / np.log(10)), n, True)
