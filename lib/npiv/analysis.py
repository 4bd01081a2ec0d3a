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


def _log_slope_of_log_t(t: np.ndarray) -> float:
    """Least-squares slope of ``log t`` against ``t`` on the sample times ``t``."""
    return float(np.polyfit(t, np.log(t), 1)[0])


@dataclass
class RateFade:
    """Whether one run's decay rate fades on a fixed flow-time window as a power law's does.

    The window's sample times are split into a first and a second half; on each half the
    decay rate is the least-squares slope of ``−log gap`` against ``t``. Exponential decay
    keeps its rate (``ratio`` = 1; a rate that rises after a slow stretch gives > 1). A power
    law ``c·t^{−p}`` from the flow's start has local rate ``p/t``, so on the same sample times
    ``ratio`` equals ``power_ratio`` whatever ``p`` and ``c`` are. ``fade`` =
    log(ratio)/log(power_ratio) puts the two on one scale: 0 for an exponential, 1 for any
    power law."""

    rate_first: float
    rate_second: float
    power_ratio: float     # the ratio any power law c·t^(−p) gives on these sample times
    n_points: int
    fitted: bool           # False: a gap ≤ 0 in the window, too few points, or no decay
    log_gap_start: float = float("nan")  # first half's line at the window's first sample
    log_gap_end: float = float("nan")    # second half's line at the window's last sample
    t_end: float = float("nan")          # the window's last sample time (after censoring)

    @property
    def decades(self) -> float:
        """How far the gap falls across the window, log10(gap(start)/gap(end)), read off the
        two half-window line fits (so single noisy samples do not count)."""
        return (self.log_gap_start - self.log_gap_end) / np.log(10) if self.fitted else float("nan")

    @property
    def ratio(self) -> float:
        """Decay rate on the second half over that on the first half."""
        return self.rate_second / self.rate_first if self.fitted else float("nan")

    @property
    def fade(self) -> float:
        """log(ratio)/log(power_ratio): 0 for exponential decay, 1 for a power law; +inf when
        the second half does not decay at all, NaN when the run cannot be fitted."""
        if not self.fitted:
            return float("nan")
        if self.ratio <= 0:
            return float("inf")
        return float(np.log(self.ratio) / np.log(self.power_ratio))


def censored_end(t: np.ndarray, gap: np.ndarray, t_lo: float, t_hi: float,
                 level: float) -> float:
    """The end of the window ``[t_lo, t_hi]`` censored where the gap reaches ``level``: the
    last sample time before the first one in the window whose gap is ≤ ``level`` (``t_hi``'s
    last sample if none is). ``level`` is fixed in advance (the resolution below which the
    gap is not measured), so the end is a first-passage time, not a choice made from the
    fit. NaN when the window's first sample is already at or below ``level``."""
    t, gap = np.asarray(t, float), np.asarray(gap, float)
    idx = np.flatnonzero((t >= t_lo) & (t <= t_hi))
    if len(idx) == 0:
        return float("nan")
    below = np.flatnonzero(~(gap[idx] > level))  # NaN counts as reached
    if len(below) == 0:
        return float(t[idx[-1]])
    return float(t[idx[below[0] - 1]]) if below[0] > 0 else float("nan")


def rate_fade(t: np.ndarray, gap: np.ndarray, t_lo: float, t_hi: float,
              min_points: int = 10, level: float | None = None) -> RateFade:
    """The :class:`RateFade` of one run's gap on the window ``t_lo ≤ t ≤ t_hi`` (fixed in
    advance), ended early where the gap first reaches ``level`` if one is given
    (:func:`censored_end`; ``t_end`` records where the window ended). A window with a
    non-positive gap, fewer than ``min_points`` points or no decay on its first half cannot
    be fitted (``fitted`` False: a claim over runs must fail)."""
    t, gap = np.asarray(t, float), np.asarray(gap, float)
    if level is not None:
        t_hi = censored_end(t, gap, t_lo, t_hi, level)
    sel = (t >= t_lo) & (t <= t_hi)  # empty when t_hi is NaN
    n = int(sel.sum())
    nan = float("nan")
    if n < min_points or t_lo <= 0:
        return RateFade(nan, nan, nan, n, False, t_end=float(t_hi))
    ts, gs = t[sel], gap[sel]
    m = n // 2
    power_ratio = _log_slope_of_log_t(ts[m:]) / _log_slope_of_log_t(ts[:m])
    if not np.all(gs > 0):
        return RateFade(nan, nan, power_ratio, n, False, t_end=float(ts[-1]))
    y = np.log(gs)
    (s1, i1), (s2, i2) = np.polyfit(ts[:m], y[:m], 1), np.polyfit(ts[m:], y[m:], 1)
    return RateFade(-float(s1), -float(s2), power_ratio, n, bool(s1 < 0),
                    float(s1 * ts[0] + i1), float(s2 * ts[-1] + i2), float(ts[-1]))


def local_rates(t: np.ndarray, gap: np.ndarray, block: float,
                floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The local decay rate −d log(gap)/dt of one run, as the least-squares slope of ``−log gap``
    over consecutive blocks of ``block`` flow time (from t = 0 on), stopping at the first block
    where the gap is not above ``floor``. Returns the blocks' centres and rates. An exponential
    gives a constant; a power law c·t^(−p) gives ≈ p/t."""
    t, gap = np.asarray(t, float), np.asarray(gap, float)
    centres, rates = [], []
    for lo in np.arange(0.0, t[-1], block):
        sel = (t >= lo) & (t < lo + block)
        if sel.sum() < 3:
            continue
        if not np.all(gap[sel] > floor) or not np.all(gap[sel] > 0):
            break
        centres.append(float(t[sel].mean()))
        rates.append(-float(np.polyfit(t[sel], np.log(gap[sel]), 1)[0]))
    return np.array(centres), np.array(rates)
