"""Fits that turn runs into the chapter's numbers: exponential rates of the Lagrangian gap
and the bias-plus-variance form of the test error against λ."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RateFit:
    rate: float     # fitted decay per iteration of log(gap)
    r2: float       # coefficient of determination of the linear fit
    start: int      # first and last index of the fitted window
    stop: int
    floor: float    # the gap level treated as the stationary fluctuation


TAIL = 0.25  # the last quarter of a run is its stationary phase


def gap_to_settled(L: np.ndarray, tail: float = TAIL) -> np.ndarray:
    """``|L_k − L̄|`` along the first axis, where ``L̄`` is the value the run settles at (the
    mean over its last ``tail`` fraction). Under Langevin noise the running minimum is an
    extreme of the fluctuations, and the tracked Lagrangian may dip below its limit while
    the inner systems catch up, so the settled value is the reference."""
    L = np.asarray(L, float)
    return np.abs(L - L[int(len(L) * (1 - tail)):].mean(axis=0))


def transient_window(gap: np.ndarray, tail: float = TAIL, top: float = 50.0,
                     bottom: float = 5.0) -> tuple[int, int, float]:
    """The last decade of a decaying gap curve's transient, where its slowest mode rules:
    from the first index where the gap is below ``top`` × the stationary level (the largest
    gap over the last ``tail`` of the run) to the first after it below ``bottom`` × that
    level (so the fluctuations are at most a fifth of the fitted gap). Returns (start, stop,
    stationary level)."""
    floor = float(gap[int(len(gap) * (1 - tail)):].max())
    start = int(np.argmax(gap <= top * floor))
    below = np.flatnonzero(gap[start:] <= bottom * floor)
    stop = start + (int(below[0]) if below.size else len(gap) - 1 - start)
    return start, stop, floor


def linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares line ``y ≈ slope·x + intercept`` and its R²."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return float(slope), float(intercept), r2


def fit_rate(steps: np.ndarray, L: np.ndarray, **window) -> RateFit:
    """Exponential rate of one run's Lagrangian gap (to its settled value) over its
    transient: the slope of log-gap against iteration (needs ≥ 5 points; otherwise rate and
    R² are NaN)."""
    gap = gap_to_settled(L, window.get("tail", TAIL))
    start, stop, floor = transient_window(gap, **window)
    if stop - start + 1 < 5:
        return RateFit(float("nan"), float("nan"), start, stop, floor)
    sl = slice(start, stop + 1)
    slope, _, r2 = linear_fit(steps[sl], np.log(gap[sl]))
    return RateFit(-slope, r2, start, stop, floor)


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
