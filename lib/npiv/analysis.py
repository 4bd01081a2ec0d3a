"""Fits and tests that turn runs into the chapter's numbers: how the spread of a stationary
value over initialisations scales with the particle number (and the same test on the noiseless
control), first-passage times and the comparison of relaxation rates between temperatures, the
bias-plus-variance form of the test error against λ, the λ sweep's decision rule, claim and
metrics, and what the λ sweep and the off-policy comparison can read."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.special import polygamma
from scipy.stats import f as f_dist
from scipy.stats import norm as normal
from scipy.stats import t as student_t

from lib import stats as S
from lib.claims import Power


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


def largest_late_sd(t, gap, late_from: float) -> float:
    """The largest standard deviation of any run's ``gap`` (…, time) over the late stretch
    ``t ≥ late_from``: the size of a run's stationary fluctuation."""
    return float(np.asarray(gap)[..., np.asarray(t) >= late_from].std(-1).max())


def late_sd_by_gap(t, gaps: dict, late_from: float) -> dict:
    """:func:`largest_late_sd` of each named set of gaps (every gap a level is read on): the
    size of the largest stationary fluctuation of any of its runs."""
    return {name: largest_late_sd(t, g, late_from) for name, g in gaps.items()}


def level_reading(level: float, floors: dict, factor: float) -> str:
    """Words for the level ε against the largest stationary fluctuation of each set of gaps read
    at it (``floors``, from :func:`late_sd_by_gap`): each ratio, and which fall short of
    ``factor``, the margin the design fixed before the runs."""
    ratios = {k: level / v if v > 0 else float("inf") for k, v in floors.items()}
    text = "; ".join(f"{k} {v:.1e} (ε is {ratios[k]:.1f} times it)" for k, v in floors.items())
    short = [k for k, r in ratios.items() if r < factor]
    if not short:
        return text + f": every gap read at ε clears the margin of {factor:g} fixed in advance"
    return (text + f": {', '.join(short)} fall{'s' if len(short) == 1 else ''} short of the margin "
            f"of {factor:g} fixed in advance, so {'its' if len(short) == 1 else 'their'} readings "
            "at ε may carry part of a stationary fluctuation")


def margin_level(floors: dict, factor: float) -> float:
    """The lowest level at which every set of gaps in ``floors`` (:func:`late_sd_by_gap`) clears
    ``factor`` times its largest stationary fluctuation."""
    return float(factor * max(floors.values()))


def margin_rereading(level: float, margin: float, at_level: dict, at_margin: dict,
                     factor: float) -> str:
    """Words for the rate contrasts (name → :class:`DataSetContrast` of log rates, with "free
    energy", "bookkeeping rival" and "energy") read at ``level`` ε and again, on the same
    trajectories, at ``margin`` (:func:`margin_level`), with the direction of the bias a short
    margin can carry: a noisier decaying gap crosses a fixed level earlier, and the hottest
    temperature's gaps are the noisiest, so such a bias favours "hotter is faster"."""
    if margin <= level:
        return f"Every gap read at ε clears the margin of {factor:g}, so no such bias arises."

    def ratios(cs):
        share = cs["bookkeeping rival"].mean / cs["free energy"].mean
        return (f"free energy {np.exp(cs['free energy'].mean):.3f}, bookkeeping rival "
                f"{np.exp(cs['bookkeeping rival'].mean):.3f} ({share:.0%} of the free energy's "
                f"change in log rate), energy {np.exp(cs['energy'].mean):.3f}")

    return (f"A gap read at a level less than {factor:g} times its fluctuation can be biased in "
            "one direction: a noisier decaying gap crosses a fixed level earlier, and the hottest "
            "temperature's gaps fluctuate most, so such a bias favours 'hotter is faster'. Read "
            f"again on the same trajectories at {margin:.3g}, the lowest level at which every gap "
            f"clears the margin, the ratios of rates are {ratios(at_margin)} (at ε = {level:g}: "
            f"{ratios(at_level)}).")


def ratio_direction_reading(noises, ratios) -> str:
    """Words for which way ratios of median errors (the variant over DFIV, per noise level,
    ascending) point, read or not: where the variant is ahead (ratio below 1) and behind, and
    whether they point the paper's way (ahead at every level and the more so the noisier: the
    ratio falling with the noise) or against it."""
    noises, ratios = np.asarray(noises, float), np.asarray(ratios, float)
    if not np.isfinite(ratios).all():
        return "the ratios cannot be read"

    def fmt(m):
        return ", ".join(f"{v:g}" for v in noises[m])

    parts = [f"{'ahead of' if a else 'behind'} DFIV at noise {fmt(m)}"
             for a, m in ((True, ratios < 1), (False, ratios >= 1)) if m.any()]
    paper_way = bool((ratios < 1).all() and (np.diff(ratios) <= 0).all())
    return ("the variant is " + " and ".join(parts) + ": these numbers point "
            + ("the paper's way" if paper_way else
               "against the paper's 'ahead, the more so the noisier'"))


def correlation(a, b) -> float:
    """Pearson's correlation of two equally long samples."""
    return float(np.corrcoef(a, b)[0, 1])


def spread_scale(init_scale: float, sigma: float, t: float = 1.0) -> float:
    """The scale of a cloud started at ``init_scale`` after flow time ``t`` of pure noise at
    temperature ``sigma`` (variances add: s² + 2σt)."""
    return float(np.sqrt(init_scale ** 2 + 2 * sigma * t))


def first_passage(t: np.ndarray, gap: np.ndarray, level: float) -> float:
    """The first sample time at which ``gap`` is ≤ ``level`` (NaN if it never is)."""
    hit = np.flatnonzero(np.asarray(gap, float) <= level)
    return float(np.asarray(t, float)[hit[0]]) if len(hit) else float("nan")


def level_crossing(t, gap, level: float) -> float:
    """The flow time at which ``gap`` first reaches ``level``, interpolated linearly in log gap
    between the two records around it (exact for an exponential); NaN if it never does or
    already starts there."""
    t, gap = np.asarray(t, float), np.asarray(gap, float)
    hit = np.flatnonzero(gap <= level)
    if not len(hit) or hit[0] == 0 or gap[hit[0] - 1] <= 0:
        return float("nan")
    k = hit[0]
    if gap[k] <= 0:
        return float(t[k])
    a, b, c = np.log(gap[k - 1]), np.log(gap[k]), np.log(level)
    return float(t[k - 1] + (t[k] - t[k - 1]) * (a - c) / (a - b))


@dataclass
class DecayShape:
    """Whether a gap falls exponentially through a window: per unit (temperature, data set) the
    mean over its runs of log(d₁/d₂), where d₁ and d₂ are the times the gap takes to fall
    through the upper and the lower half (in log gap) of the window [``lo``, ``hi``]. An
    exponential takes equal times (0); a power law ``C·t^(−a)`` from the start takes times in
    the ratio of the crossing times, ``rival`` = −log(t_mid/t_hi) per unit. ``mean`` and ``se``
    are over units, ``df`` = units − 1."""

    log_ratio: np.ndarray   # (units,)
    rival: np.ndarray       # (units,)
    mean: float
    se: float
    df: int

    def critical(self, false_alarm: float) -> float:
        """Two-sided Student-t critical value at ``false_alarm`` on ``df`` degrees of freedom."""
        return float(student_t.isf(false_alarm / 2, self.df)) if self.df >= 1 else float("inf")

    def band(self, false_alarm: float) -> tuple[float, float]:
        """The means a two-sided test of 0 (an exponential) accepts at ``false_alarm``."""
        half = self.critical(false_alarm) * self.se
        return (-half, half) if np.isfinite(half) else (-np.inf, np.inf)


def decay_log_ratios(t, gap, hi: float, lo: float) -> tuple[np.ndarray, np.ndarray]:
    """Per run of ``gap`` (…, time): log(d₁/d₂), the times through the upper and the lower half
    (in log gap) of [``lo``, ``hi``], and the power law's prediction −log(t_mid/t_hi); NaN for a
    run that does not cross all three levels in order."""
    gap = np.asarray(gap, float)
    mid = float(np.sqrt(hi * lo))
    ratio, rival = np.full(gap.shape[:-1], np.nan), np.full(gap.shape[:-1], np.nan)
    for i in np.ndindex(gap.shape[:-1]):
        th, tm, tl = (level_crossing(t, gap[i], v) for v in (hi, mid, lo))
        if np.isfinite([th, tm, tl]).all() and tm > th and tl > tm:
            ratio[i], rival[i] = np.log((tm - th) / (tl - tm)), -np.log(tm / th)
    return ratio, rival


def decay_shape(t, gap, hi: float, lo: float) -> DecayShape:
    """:class:`DecayShape` of ``gap`` (temperature, data set, run, time) through [``lo``, ``hi``]
    (runs that never cross a level are left out of their unit's mean)."""
    ratio, rival = decay_log_ratios(t, gap, hi, lo)
    with warnings.catch_warnings():  # a unit none of whose runs crossed: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        r, rv = np.nanmean(ratio, -1).ravel(), np.nanmean(rival, -1).ravel()
    n = len(r)
    se = float(np.std(r, ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return DecayShape(r, rv, float(np.mean(r)), se, n - 1)


@dataclass
class ShapeShift:
    """How much closer to an exponential (log(d₁/d₂) larger) the runs ``hot`` decay than the
    runs ``cold`` through one window: the difference of their mean per-run log ratios, its
    Welch standard error and degrees of freedom, and the one-sided p-value of "larger"."""

    hot: float
    cold: float
    diff: float
    se: float
    df: float
    p_value: float

    def larger(self, false_alarm: float) -> bool:
        """Whether the one-sided Welch test says ``hot`` decays closer to an exponential."""
        return bool(np.isfinite(self.p_value) and self.p_value <= false_alarm)


def decay_shift(t, gap_hot, gap_cold, hi: float, lo: float) -> ShapeShift:
    """:class:`ShapeShift` between two sets of runs (any shape, time last), each run's
    log(d₁/d₂) from :func:`decay_log_ratios` (runs that do not cross every level are left out;
    fewer than two on a side: NaN)."""
    a, b = (decay_log_ratios(t, g, hi, lo)[0].ravel() for g in (gap_hot, gap_cold))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2:
        return ShapeShift(*(float("nan"),) * 6)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(va + vb))
    df = float((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))) if se > 0 \
        else float(len(a) + len(b) - 2)
    diff = float(a.mean() - b.mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        p = float(student_t.sf(diff / se, df)) if se > 0 else float(diff <= 0)
    return ShapeShift(float(a.mean()), float(b.mean()), diff, se, df, p)


def energy_share(ratio: float, energy_ratio: float) -> float:
    """The share of the free energy's log-rate change that its energy alone shows:
    log(energy_ratio) / log(ratio) (NaN where the free energy's rate does not change)."""
    lr = float(np.log(ratio))
    return float(np.log(energy_ratio) / lr) if np.isfinite(lr) and lr != 0 else float("nan")


def entropy_share_reading(ratio: float, energy_ratio: float) -> str:
    """Words for :func:`energy_share`: whether most of the free energy's speed-up is its entropy
    part or the energy's own."""
    share = energy_share(ratio, energy_ratio)
    if not np.isfinite(share):
        return "the free energy's rate does not change, and neither share can be read"
    return ("most of the speed-up is the entropy part of the free energy relaxing" if share < 0.5
            else "most of the speed-up is the energy's own")


def shape_reading(mean: float, se: float, z: float = 2.0) -> str:
    """Words for a mean log(d₁/d₂) with standard error ``se``: within ``z`` standard errors of 0
    (an exponential), above (the lower half faster) or below (the decay slowing down)."""
    if not np.isfinite(mean) or not np.isfinite(se):
        return f"{mean:+.3f} (no standard error)"
    where = ("within two standard errors of 0, consistent with an exponential at this resolution"
             if abs(mean) <= z * se else
             "above 0, the lower half a little faster" if mean > 0 else
             "below 0, the decay still slowing down")
    return f"{mean:+.3f} ± {se:.3f}, {where}"


def decay_by_sigma(t, gap, hi: float, lo: float) -> tuple[np.ndarray, np.ndarray]:
    """Per temperature (first axis of ``gap``): the mean of the per-run log(d₁/d₂) and its
    standard error over data sets (the second axis; each data set's runs averaged first)."""
    ratio = decay_log_ratios(t, gap, hi, lo)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        unit = np.nanmean(ratio, -1)                       # (σ, data set)
    n = unit.shape[1]
    se = unit.std(1, ddof=1) / np.sqrt(n) if n > 1 else np.full(len(unit), np.nan)
    return unit.mean(1), se


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


@dataclass
class SpreadTest:
    """The two-sided Student-t test of a log-variance slope against ``predicted`` at
    ``false_alarm`` (:class:`VarianceSlope`), and the same rule — the same band, from the tested
    fit's error — applied to a negative control's slope."""

    fit: VarianceSlope
    control: VarianceSlope | None
    predicted: float
    false_alarm: float

    @property
    def band(self) -> tuple[float, float]:
        return self.fit.interval(self.predicted, self.false_alarm)

    @property
    def critical(self) -> float:
        return self.fit.critical(self.false_alarm)

    def passes(self, slope: float) -> bool:
        lo, hi = self.band
        return bool(np.isfinite(slope) and lo <= slope <= hi)

    @property
    def holds(self) -> bool:
        return self.passes(self.fit.slope)

    @property
    def control_holds(self) -> bool | None:
        return None if self.control is None else self.passes(self.control.slope)


def spread_test(x, samples, control_samples=None, *, predicted: float = -1.0,
                false_alarm: float = 1e-3) -> SpreadTest:
    """:func:`log_variance_slope` of ``samples`` (K, D, M) tested against ``predicted``, and of
    ``control_samples`` (the same design with the mechanism removed) judged by the same band."""
    fit = log_variance_slope(x, samples)
    control = None if control_samples is None else log_variance_slope(x, control_samples)
    return SpreadTest(fit, control, float(predicted), float(false_alarm))


@dataclass
class RateComparison:
    """Relaxation rates at the largest against the smallest temperature: the one-sided p-value
    of a paired t-test of the log-rate difference over (data set, initialisation) pairs, and the
    geometric-mean rate of every temperature."""

    p_value: float
    rate_mean: np.ndarray  # (σ,)

    @property
    def ratio(self) -> float:
        return float(self.rate_mean[-1] / self.rate_mean[0])

    def faster(self, false_alarm: float) -> bool:
        """Whether the test says the highest temperature relaxes faster (NaN p: it cannot)."""
        return bool(np.isfinite(self.p_value) and self.p_value <= false_alarm)


def rate_comparison(rate) -> RateComparison:
    """``rate`` (σ, data set, initialisation), temperatures ascending; a pair with a run that
    never relaxed (NaN) makes the p-value NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):  # a run with no rate (NaN, ≤ 0) has no log
        log_rate = np.log(np.asarray(rate, float))
    diff = (log_rate[-1] - log_rate[0]).ravel()
    p = S.t_pvalue_greater(diff) if np.all(np.isfinite(diff)) else float("nan")
    with np.errstate(invalid="ignore"):
        mean = np.exp(np.nanmean(log_rate.reshape(len(log_rate), -1), axis=1))
    return RateComparison(float(p), mean)


@dataclass
class EscapeTaus:
    """Mean relaxation times (over data sets and initialisations) of the saddle-escape comparison:
    the coldest and the hottest temperature from the small initialisation, and the coldest from
    the wider cloud the hottest one's noise alone spreads the small start to."""

    cold_small: float
    hot_small: float
    cold_spread: float

    @property
    def explained(self) -> bool:
        """Whether the wider start alone makes the cold run at least as fast as the hot one: then
        noise-assisted escape from the small-initialisation saddle accounts for the hot run's
        speed-up from that start."""
        return bool(self.cold_spread <= self.hot_small)


def escape_taus(small_tau, spread_tau) -> EscapeTaus:
    """``small_tau`` (2, data set, initialisation): first-passage times of the coldest and hottest
    temperature from the small start; ``spread_tau`` (1, …): the coldest from the wider cloud
    (NaN, a run that never relaxed, is left out of the means)."""
    small, spread = np.asarray(small_tau, float), np.asarray(spread_tau, float)
    return EscapeTaus(float(np.nanmean(small[0])), float(np.nanmean(small[-1])),
                      float(np.nanmean(spread[0])))


@dataclass
class SweepReadability:
    """What the λ sweep can read: ``drift`` (per λ, the relative change of the mean test error
    between half and full flow time), ``collapsed`` (per λ, whether the mean test error is within
    ``collapse_tol`` of the zero function's), and, in the units of a U shape's rise (relative to
    the minimum), the smallest rise the design resolves (the largest drift), the stated rise it
    looks for and the largest it can show (0 when a λ has collapsed: its arm then measures the
    confinement, not the trade-off; None otherwise)."""

    drift: np.ndarray
    collapsed: np.ndarray
    detectable: float
    effect: float
    ceiling: float | None


def sweep_readability(mse, mse_half, mse_zero: float, *, effect: float = 0.1,
                      collapse_tol: float = 0.1) -> SweepReadability:
    """``mse``, ``mse_half``: (λ, seed) test errors at full and half flow time; ``mse_zero``
    the zero function's test error."""
    mse, mse_half = np.asarray(mse, float), np.asarray(mse_half, float)
    mean = mse.mean(1)
    drift = np.abs(mse - mse_half).mean(1) / mean
    collapsed = mean >= (1 - collapse_tol) * mse_zero
    return SweepReadability(drift, collapsed, float(drift.max()), float(effect),
                            0.0 if collapsed.any() else None)


def best_penalty(lam, err) -> float:
    """The λ of the grid ``lam`` with the smallest error ``err`` (the first on a tie)."""
    return float(np.asarray(lam)[np.argmin(err)])


def u_shape_holds(lam, best: float, fit: BiasVarianceFit) -> bool:
    """The λ trade-off's decision rule: the grid's minimiser ``best`` is strictly inside the grid
    ``lam`` and the fitted a/λ + bλ + c has a > 0 and b > 0."""
    lam = np.asarray(lam)
    return bool(lam.min() < best < lam.max() and fit.a > 0 and fit.b > 0)


#: The λ sweep's claim id and its section of the metrics, as the records know them.
SWEEP_CLAIM, SWEEP_METRICS = "lambda-u-shape", "lambda"


def u_shape_claim(lam, best: float, fit: BiasVarianceFit, readability: SweepReadability,
                  mse_zero: float) -> dict:
    """The λ sweep's claim as keyword arguments of ``Claims.record``: the grid's minimiser
    ``best`` of the mean test error is interior and the fitted ``a/λ + bλ + c`` has a, b > 0
    (:func:`u_shape_holds`), with what the design can read (``readability``, from
    :func:`sweep_readability`; ``mse_zero`` the zero function's test error) as its power."""
    lam = np.asarray(lam)
    rd = readability
    return dict(
        id=SWEEP_CLAIM,
        statement="At equal flow time, the test-MSE minimiser over the λ grid is strictly inside it, "
                  "and the fitted a/λ + bλ + c has a > 0 and b > 0.",
        theory="argmin interior, a > 0, b > 0",
        simulation={"argmin": best, "a": fit.a, "b": fit.b},
        holds=u_shape_holds(lam, best, fit),
        tolerance="all three conditions hold", kind="empirical", quick=False,
        power=Power("In units of the U's rise above its minimum (relative test error): the design "
                    f"resolves rises above {rd.detectable:.0%}, the largest change of any λ's test error "
                    f"between half and full flow time (at λ = {float(lam[np.argmax(rd.drift)]):g}); "
                    f"the effect looked for is a rise of {rd.effect:.0%} (the paper gives no size); at "
                    f"{int(rd.collapsed.sum())} of {len(lam)} λ the test error is within 10% of the "
                    f"zero function's ({mse_zero:.2f}): there h_a has collapsed under its confinement, "
                    "those arms measure the regularisation, not the trade-off, and the design can show "
                    "no trade-off at all (ceiling 0; none where no λ collapses).",
                    detectable=rd.detectable, effect=rd.effect, ceiling=rd.ceiling,
                    value={"largest change T/2 to T": rd.detectable,
                           "lambdas at the zero function's error": lam[rd.collapsed].tolist()}))


def sweep_metrics(lams, sweep: dict, fit: BiasVarianceFit) -> dict:
    """The λ sweep's section of the chapter's metrics, under its key :data:`SWEEP_METRICS`, from
    the grid ``lams``, the runs of :func:`lib.npiv.experiments.lambda_sweep` and the fit."""
    return {SWEEP_METRICS: {
        "sweep_lams": lams, "sweep_flow_time": sweep["flow_time"],
        "sweep_steps": sweep["steps"], "sweep_mse": sweep["mse"],
        "sweep_mse_half": sweep["mse_half"],
        "sweep_fit": {"a": fit.a, "b": fit.b, "c": fit.c, "r2": fit.r2},
        "baselines_mse": sweep["baselines"]}}


#: The readability rule of the OPE comparison: the variant's median estimate at least this
#: fraction of the true value at every compared noise level (below it its errors are the values).
OPE_MOVED_MIN = 0.5
#: The lowest noise level the released variant runs at (the levels of the paper's box plot).
RELEASED_MIN_NOISE = 0.2


def ope_readable(moved: np.ndarray, control_errors: dict[str, float], *,
                 moved_min: float = OPE_MOVED_MIN,
                 control_max: float = 0.25) -> bool:
    """Whether the off-policy comparison can be read: the estimates being compared have left
    zero (median estimate ≥ ``moved_min`` of the true value at every compared noise level) and
    every estimator in ``control_errors`` (median relative error on the positive control) is
    within ``control_max``."""
    return bool(np.min(moved) >= moved_min and max(control_errors.values()) <= control_max)


def ope_summary(ope: dict, ctrl: dict, released: dict, released_ctrl: dict, noises,
                lams) -> dict:
    """The off-policy section's numbers from the runs of :func:`lib.npiv.experiments.ope` (``ope``
    at the noise levels ``noises``, ``ctrl`` the positive control at one noise level) and
    :func:`~lib.npiv.experiments.ope_released` (``released`` at the levels ≥ 0.2, its first
    replicates, one discount; ``released_ctrl`` on the control):

    - ``ctrl_truth`` and ``ctrl_rel``: the control's true value and every method's median
      relative error there (the mean-field F²BMLD at the first λ as ``"F²BMLD"``);
    - ``rel_noises``, ``rel_truth``: the released variant's noise levels and true values;
    - ``rel_ratio``: per level, its median error over DFIV's on the same data sets;
    - ``rel_moved``: per level, its median estimate over the true value (≥ ½: off zero);
    - ``rel_ctrl_err``: its median relative error on the control;
    - ``med``: every method's median error per noise level (mean-field F²BMLD per λ first)."""
    noises = np.asarray(noises, float)
    ctrl_truth = float(ctrl["truth"][0])
    ctrl_rel = {"F²BMLD": float(np.median(ctrl["err_f2bmld"][0, 0])) / ctrl_truth,
                **{k: float(np.median(v[0])) / ctrl_truth for k, v in ctrl["err"].items()}}
    high = noises >= RELEASED_MIN_NOISE
    est = np.asarray(released["est"][0], float)                     # (noise, replicate)
    rel_truth = np.asarray(released["truth"][0], float)
    rel_err = np.abs(est - rel_truth[:, None])
    dfiv_paired = np.asarray(ope["err"]["DFIV"])[high][:, :est.shape[1]]  # the same data sets
    methods = {f"F²BMLD (λ = {lam:g})": ope["err_f2bmld"][i] for i, lam in enumerate(lams)}
    methods.update(ope["err"])
    return {"ctrl_truth": ctrl_truth, "ctrl_rel": ctrl_rel,
            "rel_noises": noises[high].tolist(), "rel_truth": rel_truth,
            "rel_err": rel_err, "dfiv_paired": dfiv_paired,
            "rel_ratio": np.median(rel_err, axis=1) / np.median(dfiv_paired, axis=1),
            "rel_moved": np.median(est, axis=1) / rel_truth,
            "rel_ctrl_err": float(np.median(released_ctrl["rel_err"][0, 0])),
            "methods": methods, "med": {k: np.median(v, axis=1) for k, v in methods.items()}}


#: The paper's box plot (hudsonchen/F2BMLD, figures/box_plot.pdf): median absolute errors of
#: F²BMLD and DFIV per noise level, where both are read.
PAPER_OPE_MEDIANS = {0.2: (0.26, 2.2), 0.3: (0.94, 5.4), 0.4: (6.5, 12.2)}


def ope_power(summary: dict, control_errors: dict[str, float], statement: str, *,
              control_max: float = 0.25) -> Power:
    """The power of the claim "the released variant's median error is at most DFIV's at every
    compared noise level" (largest ratio of medians ≤ 1), in that ratio's units, from
    :func:`ope_summary`'s numbers:

    - ``effect``: how far below 1 the paper's own largest ratio sits at the compared levels
      (:data:`PAPER_OPE_MEDIANS`; None where it reads none of them);
    - ``detectable``: 1 − e^(−2s), s the standard error of a log ratio of medians from the
      scatter of the log errors over data sets (1.2533·sd/√n per arm; a single data set of the
      variant borrows DFIV's scatter; None where neither arm has two);
    - ``ceiling``: the largest advantage the runs can show at all: an estimate that has moved a
      fraction m of the way to the true value v has error (1 − m)·v at its worst level, so the
      ratio cannot fall below (1 − m)·v over DFIV's median there (0 where that floor is above
      DFIV's median: the variant cannot come out ahead);
    - ``control``: the positive control (every estimator in ``control_errors`` within
      ``control_max`` relative error);
    - ``matched``: the variant's median estimate is at least half the value at every level
      (below it its errors are the values themselves)."""
    noises = summary["rel_noises"]
    rel_err, dfiv = np.asarray(summary["rel_err"], float), np.asarray(summary["dfiv_paired"], float)
    moved, truth = np.asarray(summary["rel_moved"], float), np.asarray(summary["rel_truth"], float)
    paper = [PAPER_OPE_MEDIANS[nz][0] / PAPER_OPE_MEDIANS[nz][1] for nz in noises
             if nz in PAPER_OPE_MEDIANS]
    effect = 1.0 - max(paper) if paper else None

    def log_var(err):
        v = np.log(err).var(-1, ddof=1) if err.shape[-1] > 1 else np.full(len(err), np.nan)
        return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")

    var_d = log_var(dfiv)
    var_f = log_var(rel_err)
    var_f = var_d if not np.isfinite(var_f) else var_f
    se = 1.2533 * np.sqrt(var_f / rel_err.shape[-1] + var_d / dfiv.shape[-1])
    detectable = float(1.0 - np.exp(-2 * se)) if np.isfinite(se) else None
    floor = (1.0 - np.clip(moved, 0.0, 1.0)) * truth / np.median(dfiv, axis=-1)
    ceiling = float(max(0.0, 1.0 - floor.max()))
    return Power(statement, detectable=detectable, effect=effect, ceiling=ceiling,
                 control=bool(max(control_errors.values()) <= control_max),
                 matched=bool(np.min(moved) >= OPE_MOVED_MIN),
                 value={"smallest median estimate / true value": float(np.min(moved)),
                        "ratios of medians": summary["rel_ratio"],
                        "control median relative error": control_errors,
                        "standard error of a log ratio": float(se)})


@dataclass
class ValueByN:
    """The stationary Lagrangian against the particle number: ``mean`` per N (over data sets and
    initialisations), ``drop`` the mean over data sets of (value at the smallest N − value at the
    largest) with ``drop_se`` its standard error over data sets, and ``bias_drop`` the drop the
    uncorrected Gaussian entropy stand-in of the treatment system would add over the same range
    (σ · ½ (|b(N_small)| − |b(N_large)|), b = :func:`lib.npiv.meanfield.logdet_bias`; the
    instrument systems enter as λσ(Ent w̃ − Ent w), two clouds of equal dimension and N, whose
    biases cancel)."""

    mean: np.ndarray
    drop: float
    drop_se: float
    bias_drop: float


def value_by_n(late, particles, sigma: float, dim: int) -> ValueByN:
    """``late`` (N, data set, initialisation) stationary values of runs with ``dim``-dimensional
    treatment particles at temperature ``sigma``."""
    from lib.npiv.meanfield import logdet_bias

    late = np.asarray(late, float)
    per_set = late.mean(-1)                        # (N, data set)
    d = per_set[0] - per_set[-1]
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    small, large = int(particles[0]), int(particles[-1])
    bias = 0.5 * sigma * (abs(logdet_bias(small, dim)) - abs(logdet_bias(large, dim)))
    return ValueByN(per_set.mean(-1), float(d.mean()), se, float(bias))


@dataclass
class ParticleBias:
    """The stationary value against the particle number, fitted as ``a_d + b·N^(−p)`` (one
    intercept per data set, a common ``b`` and exponent ``p``), by least squares weighted with
    each particle number's standard error of a cell mean; ``se`` is the exponent's standard
    error with the residual variance estimated from the fit (``df`` = K·D − D − 2 degrees of
    freedom), as in :func:`log_variance_slope`; NaN when ``df`` < 1."""

    b: float
    p: float
    se: float
    df: int
    intercepts: np.ndarray  # (D,) the fitted limits L∞ per data set

    def critical(self, false_alarm: float) -> float:
        """Two-sided Student-t critical value at ``false_alarm`` on ``df`` degrees of freedom
        (infinite where the error cannot be estimated)."""
        return float(student_t.isf(false_alarm / 2, self.df)) if self.df >= 1 else float("inf")

    def band(self, false_alarm: float, predicted: float = 1.0) -> tuple[float, float]:
        """The exponents a two-sided test of ``predicted`` accepts at ``false_alarm`` (the whole
        line where the error is NaN)."""
        half = self.critical(false_alarm) * self.se
        if not np.isfinite(half):
            return -np.inf, np.inf
        return predicted - half, predicted + half

    def needed_se(self, rival: float = 0.5, predicted: float = 1.0,
                  false_alarm: float = 1e-4) -> float:
        """The largest exponent error at which a two-sided normal test of ``predicted`` at
        ``false_alarm`` could reject ``rival`` at all (its band then just excludes it)."""
        return abs(predicted - rival) / float(normal.isf(false_alarm / 2))

    def runs_factor(self, rival: float = 0.5, predicted: float = 1.0,
                    false_alarm: float = 1e-4) -> float:
        """How many times this design's runs (the error falls like 1/√runs) the test of
        :meth:`needed_se` needs, at the least."""
        return float((self.se / self.needed_se(rival, predicted, false_alarm)) ** 2)


#: The exponents :func:`particle_bias` searches; at an edge (as p → 0, b·N^(−p) turns into a
#: constant that trades with the limits) the exponent is not estimated and its error is NaN.
P_RANGE = (0.05, 5.0)


def particle_bias(late, particles) -> ParticleBias:
    """``late`` (N, data set, run) stationary values at particle numbers ``particles``; the
    exponent is searched in :data:`P_RANGE` (NaN error at its edge)."""
    late = np.asarray(late, float)
    N = np.asarray(particles, float)
    cell = late.mean(-1)                                            # (K, D)
    K, D = cell.shape
    w = 1.0 / (late.std(-1, ddof=1).mean(-1) / np.sqrt(late.shape[-1]))  # (K,)

    def residuals(th):
        return ((cell - th[:D] - th[D] * N[:, None] ** (-th[D + 1])) * w[:, None]).ravel()

    # start from the least-squares fit at p = 1
    X = np.concatenate([np.kron(np.ones((K, 1)), np.eye(D)), np.repeat(1 / N, D)[:, None]], 1)
    start, *_ = np.linalg.lstsq(X * np.repeat(w, D)[:, None], (cell * w[:, None]).ravel(),
                                rcond=None)
    lo, hi = P_RANGE
    bound = np.full(D + 2, np.inf)
    fit = least_squares(residuals, np.r_[start, 1.0], bounds=(np.r_[-bound[:-1], lo],
                                                               np.r_[bound[:-1], hi]))
    df = K * D - D - 2
    se = float("nan")  # no degrees of freedom left, or an exponent at the edge of its range
    edge = min(fit.x[D + 1] - lo, hi - fit.x[D + 1]) <= 1e-6 * (hi - lo)
    if df >= 1 and not edge:
        s2 = float((fit.fun ** 2).sum() / df)
        se = float(np.sqrt((np.linalg.pinv(fit.jac.T @ fit.jac) * s2)[-1, -1]))
    return ParticleBias(float(fit.x[D]), float(fit.x[D + 1]), se, df, fit.x[:D].copy())


#: The finite-particle bias claim's id.
BIAS_CLAIM = "particle-bias-order-1-over-n"


def bias_order_claim(fit: ParticleBias, control: ParticleBias, false_alarm: float, *,
                     sigma: float, particles, runs: int) -> dict:
    """The claim that the stationary value's finite-particle bias is of order 1/N, as keyword
    arguments of ``Claims.record``: an empirical claim (a measurement with its power), since no
    run of this pipeline removes what makes it 1/N — any smooth functional of the measure, at
    its minimum, moves to second order in the particle fluctuation, with or without the noise.
    It holds only where the fitted exponent ``fit.p`` (:func:`particle_bias`) lies in the
    two-sided Student-t band of half-width h around 1 at ``false_alarm``, the rival ½ (the 1/√N
    of the classical Wasserstein-1 propagation-of-chaos bound) lies outside it (|p − ½| > h),
    *and* h < ¼, so that the bands of half-width h around 1 and around ½ do not overlap (with
    ¼ ≤ h < ½ an estimate could lie in both, and the rule would accept 1 without excluding ½).
    Its power is the design's: ``detectable`` 2h (the separation the two bands need, h being the
    exponent difference at which the test has 50% power), ``effect`` ½ (1 against ½).
    ``control`` (the same fit on the runs' late |E tanh c|) is reported beside it."""
    lo, hi = fit.band(false_alarm)
    crit = fit.critical(false_alarm)
    h = (hi - lo) / 2
    inside = bool(np.isfinite(fit.p) and lo <= fit.p <= hi)
    rival_out = bool(np.isfinite(fit.p) and abs(fit.p - 0.5) > h)
    separated = bool(np.isfinite(h) and h < 0.25)
    Ns = ", ".join(str(int(v)) for v in particles)
    statement = (f"At σ = {sigma:g} the stationary Lagrangian of N particles per measure exceeds "
                 f"its limit by a bias of order 1/N: fitted as L∞ + b·N^(−p) over N = {Ns} "
                 f"({runs} runs per N, one limit per data set), the exponent p is 1, not the ½ "
                 "of a 1/√N error.")
    tolerance = (f"|p − 1| ≤ h = {crit:.2f} × its standard error {fit.se:.3f} (Student t on "
                 f"{fit.df} degrees of freedom, the error from the fit's residual scatter)")
    return dict(
        id=BIAS_CLAIM, statement=statement,
        theory="|p − 1| ≤ h, |p − ½| > h and h < ¼",
        simulation={"p": fit.p, "se": fit.se, "h": h}, holds=inside and rival_out and separated,
        tolerance=tolerance + "; the rival: |p − ½| > h; and h < ¼ (bands around 1 and ½ disjoint)",
        kind="empirical", quick=False, false_alarm=false_alarm,
        power=Power(("The exponent is at the edge of the range searched, so the fit estimates "
                     "neither it nor its error: the design tells nothing here. " if not
                     np.isfinite(fit.se) else "") +
                    f"The band's half-width h = {crit * fit.se:.2f} is this design's 50%-power "
                    "point (the exponent difference it detects half the time at its false-alarm "
                    "rate); telling 1/N from 1/√N needs the bands of half-width h around 1 and ½ "
                    f"disjoint, 2h < ½, an error below {0.25 / crit:.3f} (this design: "
                    f"{fit.se:.3f}; the error falls like 1/√runs, so about "
                    f"{(fit.se * crit / 0.25) ** 2:.1f} times these runs).",
                    **(dict(detectable=2 * crit * fit.se, effect=0.5, ceiling=None)
                       if np.isfinite(crit * fit.se) else dict(control=False)),
                    value={"p": fit.p, "se": fit.se, "control p (|asymmetry|)": control.p}))


def relative_test_error(test_mse, zero_mse: float) -> float:
    """The mean test error of the runs at the largest particle number (``test_mse``: (N, …))
    over the zero function's: 1 is a model that learned nothing, 0 the structural function."""
    return float(np.asarray(test_mse, float)[-1].mean() / zero_mse)


@dataclass
class RestartCheck:
    """The largest particle number's runs (restarts from different initial laws) against the
    limit extrapolated from the smaller particle numbers alone: ``predicted`` (D,) is
    L∞ + b·N^(−p) of :func:`particle_bias` fitted on every particle number but the largest,
    ``dev`` (D, M) each restart's stationary value minus its data set's prediction, ``z`` that
    deviation over the restarts' own standard deviation (their stationary fluctuation)."""

    predicted: np.ndarray
    dev: np.ndarray
    z: np.ndarray
    limit: np.ndarray     # (D,) the extrapolated L∞ itself
    p: float

    @property
    def mean(self) -> float:
        """The mean deviation over every restart."""
        return S.mean_se(self.dev.ravel())[0]

    @property
    def se(self) -> float:
        """The standard error of :attr:`mean` over restarts (:func:`lib.stats.mean_se`)."""
        return S.mean_se(self.dev.ravel())[1]

    @property
    def best(self) -> float:
        """The lowest restart's value minus its prediction (negative: a run below the limit)."""
        return float(self.dev.min())

    @property
    def z_min(self) -> float:
        return float(self.z.min())


def restart_check(late, particles) -> RestartCheck:
    """:class:`RestartCheck` of ``late`` (N, data set, run) at ``particles`` (three or more)."""
    late = np.asarray(late, float)
    N = np.asarray(particles, float)
    fit = particle_bias(late[:-1], N[:-1])
    predicted = fit.intercepts + fit.b * N[-1] ** (-fit.p)
    dev = late[-1] - predicted[:, None]
    sd = late[-1].std(-1, ddof=1)[:, None]
    return RestartCheck(predicted, dev, dev / sd, fit.intercepts.copy(), fit.p)


@dataclass
class IndependentRestarts:
    """Independent runs of the same dynamics at the largest particle number (``late`` (D, M):
    each restart's stationary value) against the limit fitted to the main runs at every particle
    number: ``predicted`` (D,) is L∞ + b·N^(−p) of :func:`particle_bias` on the main runs,
    evaluated at that N; ``dev`` (D, M) each restart's value minus its data set's prediction;
    ``sd`` (D,) the main runs' standard deviation of their late means at that N; ``restart_sd``
    (D,) the restarts' own; ``paired`` (D,) each data set's restart mean minus its main runs'
    mean there (no fit at all); ``main_runs`` the main runs per data set. Data sets are the unit
    of every interval (their restarts share a prediction)."""

    predicted: np.ndarray
    dev: np.ndarray
    sd: np.ndarray
    paired: np.ndarray
    level: float = 0.95
    restart_sd: np.ndarray | None = None
    main_runs: int = 0

    def __post_init__(self):
        if self.restart_sd is None:
            self.restart_sd = self.dev.std(-1, ddof=1)

    @property
    def by_data_set(self) -> np.ndarray:
        return self.dev.mean(-1)

    def _interval(self, values) -> tuple[float, float, float]:
        if len(values) < 2:  # one data set: no interval
            return float(np.mean(values)), float("nan"), float("nan")
        return S.t_interval(values, self.level)

    @property
    def mean(self) -> tuple[float, float, float]:
        """``(mean, low, high)``: the mean deviation and its Student-t interval over data sets
        (:func:`lib.stats.t_interval`; NaN bounds for one data set)."""
        return self._interval(self.by_data_set)

    @property
    def paired_mean(self) -> tuple[float, float, float]:
        """The same for :attr:`paired`."""
        return self._interval(self.paired)

    @property
    def best(self) -> float:
        """The lowest restart's value minus its prediction (negative: below the limit)."""
        return float(self.dev.min())

    @property
    def best_z(self) -> float:
        """:attr:`best` in its data set's spread of restarts (:attr:`restart_sd`, the restarts'
        own stationary spread of late means)."""
        d, m = np.unravel_index(np.argmin(self.dev), self.dev.shape)
        return float(self.dev[d, m] / self.restart_sd[d])

    @property
    def variance_ratio(self) -> tuple[float, int, int, float]:
        """``(F, df_main, df_restarts, p)``: the main runs' pooled variance of late means over the
        restarts' (each pooled over data sets, equal runs per data set), its degrees of freedom
        and the one-sided p-value of "the main runs spread more" (F test); NaN without them."""
        d, m = self.dev.shape
        df_main, df_rest = d * (self.main_runs - 1), d * (m - 1)
        if df_main < 1 or df_rest < 1:
            return float("nan"), df_main, df_rest, float("nan")
        ratio = float(np.mean(self.sd ** 2) / np.mean(self.restart_sd ** 2))
        return ratio, df_main, df_rest, float(f_dist.sf(ratio, df_main, df_rest))


def independent_restarts(late, main_late, particles, level: float = 0.95) -> IndependentRestarts:
    """:class:`IndependentRestarts` of restarts ``late`` (D, M) at ``particles[-1]`` against the
    main runs ``main_late`` (N, D, run) at ``particles`` (three or more)."""
    late, main = np.asarray(late, float), np.asarray(main_late, float)
    N = np.asarray(particles, float)
    fit = particle_bias(main, N)
    predicted = fit.intercepts + fit.b * N[-1] ** (-fit.p)
    return IndependentRestarts(predicted, late - predicted[:, None], main[-1].std(-1, ddof=1),
                               late.mean(-1) - main[-1].mean(-1), level,
                               late.std(-1, ddof=1), main.shape[-1])


def _side(interval) -> str:
    """Where an interval ``(mean, low, high)`` lies against 0: "holds", "below" or "above"."""
    _, lo, hi = interval
    return "holds" if lo <= 0 <= hi else "below" if hi < 0 else "above"


def independent_reading(check: IndependentRestarts, z: float = 4.0) -> str:
    """Words for :class:`IndependentRestarts`, fixed before the run, from both intervals (against
    the fitted limit and, with no fit, against the main runs' own mean). The restarts run the same
    N-particle diffusion at the same σ, N, λ and ζ, which has one stationary law whatever the
    objective, so agreement shows mixing, not optimality: runs from very different initial laws
    along a different temperature path reach the same stationary value within the flow time.
    A disagreement means that one set of runs has not mixed within the flow time (the set that
    ends higher) or that the fit misses at this N (the fitted interval off 0, the paired one on
    it); it never means another optimum. Then: whether the best restart lies within ``z`` restart
    standard deviations (the restarts' own spread) of the prediction, more than that below it, or
    (even the best) above."""
    pct = f"{check.level:.0%}"
    if not np.isfinite(check.mean[1]):
        return "with one data set there is no interval"
    words = {"holds": "holds 0", "below": "lies wholly below 0", "above": "lies wholly above 0"}
    fit, paired = _side(check.mean), _side(check.paired_mean)
    if fit == paired == "holds":
        where = (f"both {pct} intervals of their mean deviation, from the fitted limit and from the "
                 "main runs' own mean, hold 0: runs from very different initial laws, annealed "
                 "along a different temperature path, reach the same stationary value in their "
                 "means, at this resolution, within the flow time (the limit is not an imprint of "
                 "the main runs' starts)")
    else:
        where = (f"the {pct} interval of their mean deviation from the fitted limit "
                 f"{words[fit]} and the one from the main runs' own mean {words[paired]}: ")
        if paired == "holds":
            where += ("the restarts agree with the main runs but not with the fitted limit, so the "
                      "fit misses at this N")
        elif paired == "below":
            where += ("the restarts end lower than the main runs, so the main runs had not reached "
                      "the stationary law within the flow time")
        else:
            where += ("the restarts end higher than the main runs, so the restarts had not reached "
                      "the stationary law within the flow time")
    spread = "restart standard deviations"
    if check.best_z < -z:
        best = f"and the best restart lies more than {z:g} {spread} below the prediction"
    elif check.best_z > z:
        best = f"and even the best restart lies more than {z:g} {spread} above the prediction"
    else:
        best = f"and the best restart lies within {z:g} {spread} of the prediction"
    return f"{where}, {best}"


def spread_reading(check: IndependentRestarts, false_alarm: float = 0.05) -> str:
    """Words for :attr:`IndependentRestarts.variance_ratio`: whether the main runs' late means
    spread more than the restarts' at one-sided ``false_alarm`` (then single main runs keep
    offsets set by their starts through the late stretch: one main run has not mixed within the
    flow time, whatever their mean does), less, or neither at this resolution."""
    ratio, df1, df2, p = check.variance_ratio
    if not np.isfinite(ratio):
        return "the two spreads cannot be compared"
    head = f"a variance ratio of {ratio:.1f} on ({df1}, {df2}) degrees of freedom (one-sided p = {p:.1e})"
    if p < false_alarm:
        return (head + ": the main runs spread more than the restarts, so single main runs keep "
                "offsets set by their starts that persist through the late stretch: one main run "
                "has not mixed within the flow time, whatever their mean does")
    if f_dist.sf(1 / ratio, df2, df1) < false_alarm:
        return head + ": the restarts spread more than the main runs"
    return head + ": the two spreads do not differ at this resolution"


@dataclass
class DataSetContrast:
    """A paired contrast of two arms with the data set as the statistical unit: ``diff`` (D,) one
    difference per data set (each arm's mean over its runs of that data set), with their mean,
    standard error, degrees of freedom and the one-sided p-value of "larger than 0" (Student t);
    NaN where fewer than two data sets give a finite difference."""

    diff: np.ndarray
    mean: float
    se: float
    df: int
    p_value: float

    def detectable(self, false_alarm: float) -> float:
        """The design's 50%-power point: the true mean difference that the one-sided test at
        ``false_alarm`` detects half the time, t-critical × standard error."""
        return float(student_t.isf(false_alarm, self.df) * self.se) if self.df > 0 else float("nan")


def data_set_contrast(hot, cold) -> DataSetContrast:
    """:class:`DataSetContrast` of per-run values ``hot`` and ``cold`` (data set, run), paired by
    data set (runs of one data set share it, so they are not independent units); NaN runs are
    left out of their data set's mean."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a data set with no finite run: NaN
        d = np.nanmean(np.asarray(hot, float), axis=-1) - np.nanmean(np.asarray(cold, float), axis=-1)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return DataSetContrast(d, float("nan"), float("nan"), 0, float("nan"))
    m, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))
    p = float(student_t.sf(m / se, len(d) - 1)) if se > 0 else float(m <= 0)
    return DataSetContrast(d, m, se, len(d) - 1, p)


def interpolated_rates(t, gap, level: float) -> np.ndarray:
    """Each run's mean rate log(gap(0)/``level``)/τ, τ the crossing of ``level`` interpolated in
    log gap (:func:`level_crossing`); ``gap`` (…, time); NaN where it never crosses."""
    gap = np.asarray(gap, float)
    out = np.full(gap.shape[:-1], np.nan)
    for i in np.ndindex(gap.shape[:-1]):
        tau = level_crossing(t, gap[i], level)
        if np.isfinite(tau) and tau > 0 and gap[i][0] > level:
            out[i] = np.log(gap[i][0] / level) / tau
    return out


def bookkeeping_gap(gap, energy_gap) -> np.ndarray:
    """The bookkeeping rival's runs: the coldest temperature's energy gap plus the hottest one's
    σ·Ent part (its free-energy gap minus its energy gap), run by run; ``gap``, ``energy_gap``
    (σ, data set, run, time), temperatures ascending. It has no temperature-dependent dynamics at
    all, only the hottest σ's larger weight on a cloud that shrinks from its start to its
    stationary spread; a free-energy contrast that it matches is that artefact."""
    gap, energy_gap = np.asarray(gap, float), np.asarray(energy_gap, float)
    return energy_gap[0] + (gap[-1] - energy_gap[-1])


def rate_contrast(t, gap_hot, gap_cold, level: float) -> DataSetContrast:
    """Log relaxation rates (:func:`interpolated_rates`), ``gap_hot`` against ``gap_cold``
    (data set, run, time), paired by data set."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return data_set_contrast(np.log(interpolated_rates(t, gap_hot, level)),
                                 np.log(interpolated_rates(t, gap_cold, level)))


def shape_contrast(t, gap_hot, gap_cold, hi: float, lo: float) -> DataSetContrast:
    """Per-run log(d₁/d₂) (:func:`decay_log_ratios`), ``gap_hot`` against ``gap_cold`` (data set,
    run, time), paired by data set."""
    return data_set_contrast(decay_log_ratios(t, gap_hot, hi, lo)[0],
                             decay_log_ratios(t, gap_cold, hi, lo)[0])


#: The paper's box plot of F²BMLD's absolute OPE error: median and quartiles [Q1, Q3] per noise
#: (hudsonchen/F2BMLD at bf35f1b, figures/box_plot.pdf).
PAPER_OPE_F2BMLD_QUARTILES = {0.2: (0.26, 0.14, 0.40), 0.3: (0.94, 0.49, 1.61), 0.4: (6.5, 3.2, 8.7)}
#: The authors' OPE design (hudsonchen/F2BMLD at bf35f1b, scripts/myriad/configs_noise_*.txt):
#: logged episodes, seeds, noise levels, the released variant's iterations (--max_steps) on every
#: logged transition, and the paper's γ and λ.
PAPER_OPE_EPISODES = 2000
PAPER_OPE_SEEDS = 11
PAPER_OPE_NOISES = (0.0, 0.1, 0.2, 0.3, 0.4)
PAPER_OPE_ITERATIONS = 80_000
PAPER_OPE_GAMMA, PAPER_OPE_LAM = 0.99, 0.3
#: The released variant's cost per iteration on one thread, profiled (3.6 ms; 80 000 iterations
#: about five CPU-minutes).
RELEASED_SECONDS_PER_ITERATION = 3.6e-3


def paper_ope_cpu_hours(seconds_per_iteration: float = RELEASED_SECONDS_PER_ITERATION) -> float:
    """CPU-hours of the released variant alone at the authors' scale: their seeds × noise levels
    × iterations at ``seconds_per_iteration``."""
    return PAPER_OPE_SEEDS * len(PAPER_OPE_NOISES) * PAPER_OPE_ITERATIONS * seconds_per_iteration / 3600


def power_of_ten(x: float) -> str:
    """``x`` as 10 with a superscript exponent where it is a power of ten (to rounding), else in
    scientific notation."""
    e = np.log10(float(x))
    if abs(e - round(e)) > 1e-9:
        return f"{x:.1e}"
    sup = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
    return "10" + str(int(round(e))).translate(sup)


def ope_regime_text(gamma: float, lam: float, episodes: int, n: int, seeds: int, steps: int,
                    released_iterations: int) -> str:
    """Words for how this run's OPE design stands to the paper's: γ and λ, the logged episodes,
    and what every fit sees and runs (a subsample of ``n`` transitions, ``released_iterations``
    of the released variant, ``steps`` mean-field steps, ``seeds`` data sets per noise level),
    against the authors' every transition, :data:`PAPER_OPE_ITERATIONS` and
    :data:`PAPER_OPE_SEEDS`. It never calls a run with subsampled fits the paper's regime."""
    same = gamma == PAPER_OPE_GAMMA and lam == PAPER_OPE_LAM
    text = (f"at the paper's γ = {gamma:g} and λ = {lam:g}" if same else
            f"at γ = {gamma:g} and λ = {lam:g} (the paper's: {PAPER_OPE_GAMMA:g}, {PAPER_OPE_LAM:g})")
    text += (f", with {episodes} logged episodes per data set"
             + (" as in the paper" if episodes == PAPER_OPE_EPISODES else
                f" (the paper's {PAPER_OPE_EPISODES})"))
    return text + (f", but smaller than the paper's regime in what the fits see and run: each "
                   f"fit sees {n} transitions subsampled from them (the authors' fits see every "
                   f"logged transition), the released variant runs {released_iterations} "
                   f"iterations (theirs {PAPER_OPE_ITERATIONS}) and the mean-field version "
                   f"{steps} steps, over {seeds} data set{'s' if seeds != 1 else ''} per noise "
                   f"level (the paper's {PAPER_OPE_SEEDS} seeds)")


#: The authors' true policy values at γ = 0.99 per noise (their DQN target policy under
#: CartPole-v1's episode cap; plotting_notebooks/plotting.ipynb at the same commit).
PAPER_OPE_TRUE_VALUES = {0.0: 99.343, 0.1: 99.246, 0.2: 99.120, 0.3: 96.328, 0.4: 83.693}
#: CartPole-v1's episode cap (gymnasium's registration, max_episode_steps), which bounds the
#: authors' returns.
CARTPOLE_V1_CAP = 500


def long_run_reading(iterations, estimate, truth: float, gamma: float, noise: float,
                     transitions: int, horizon: int, tail: int = 4) -> str:
    """Words for the released variant's long run (estimates ``estimate`` after ``iterations``):
    its start and end, the largest estimate against the largest possible value 1/(1 − γ) (a
    reward of 1 per step), the reading closest to ``truth`` and whether the run passes it on a
    swing (it is not the last reading and later ones move away again), the spread of the last
    ``tail`` readings (settled or not), and the final error against the paper's median and
    quartiles at ``noise`` (:data:`PAPER_OPE_F2BMLD_QUARTILES`) where the paper reports them,
    saying that the two errors are about different true values: ``truth`` is that of this
    chapter's target policy over ``horizon`` steps, the paper's (:data:`PAPER_OPE_TRUE_VALUES`)
    that of the authors' DQN policy under CartPole-v1's cap (:data:`CARTPOLE_V1_CAP`)."""
    it, est = np.asarray(iterations), np.asarray(estimate, float)
    vmax = 1.0 / (1.0 - gamma)
    best = int(np.argmin(np.abs(est - truth)))
    last = est[-tail:]
    spread = float(last.max() - last.min())
    err = abs(float(est[-1]) - truth)
    text = (f"Run for {int(it[-1])} iterations on all {transitions} logged transitions of the first "
            f"data set at noise {noise:g} (true value {truth:.1f}), the released variant's estimate "
            f"is {est[0]:.1f} after {int(it[0])} iterations and {est[-1]:.1f} at the end")
    hi = int(np.argmax(est))
    if est[hi] > vmax:
        text += (f"; it passes above {vmax:.0f}, the largest value any policy can have "
                 f"(1/(1 − γ)), reaching {est[hi]:.1f} after {int(it[hi])} iterations")
    swing = best < len(est) - 1 and abs(est[-1] - truth) > abs(est[best] - truth)
    text += (f"; it comes closest to the value after {int(it[best])} iterations ({est[best]:.1f})"
             + (", a point it passes on a swing, not where it settles" if swing else ""))
    text += (f"; its last {len(last)} readings span {spread:.1f}"
             + (", so the run has not settled" if spread > 0.05 * max(truth, 1.0) else ""))
    text += f"; its final error is {err:.1f}"
    q = PAPER_OPE_F2BMLD_QUARTILES.get(round(float(noise), 2))
    if q is not None:
        text += (f", against the paper's median {q[0]:g} (quartiles [{q[1]:g}, {q[2]:g}]) at this "
                 "noise level")
        paper_truth = PAPER_OPE_TRUE_VALUES.get(round(float(noise), 2))
        if paper_truth is not None:
            text += (f", though the two errors are about different values: {truth:.1f} here is the "
                     f"value of this chapter's hand-written controller over a {horizon}-step "
                     f"horizon, the paper's {paper_truth:.2f} that of the authors' DQN policy under "
                     f"CartPole-v1's {CARTPOLE_V1_CAP}-step cap")
    return text


def contrast_glue(kind: str, contrasts: dict, false_alarm: float) -> dict:
    """The words and numbers the chapter shows for one family of :class:`DataSetContrast`
    (``contrasts``: name → contrast, with "free energy", "bookkeeping rival" and "energy"):
    ``kind`` "rate" (log rates: shown as ratios, e^mean) or "shape" (log(d₁/d₂): shown as
    differences); the energy's value against its 50%-power point at one-sided ``false_alarm``,
    and the rival's share of the free energy's contrast."""
    scale = np.exp if kind == "rate" else (lambda v: v)
    e = contrasts["energy"]
    resolved = e.mean >= e.detectable(false_alarm)
    return {
        f"{kind}_contrast_text": "; ".join(f"{q} {float(scale(c.mean)):.3f} (one-sided p = "
                                           f"{c.p_value:.1e})" for q, c in contrasts.items()),
        f"{kind}_energy_detect": float(scale(e.detectable(false_alarm))),
        f"{kind}_energy_value": float(scale(e.mean)),
        f"{kind}_book_share": float(contrasts["bookkeeping rival"].mean / contrasts["free energy"].mean),
        f"{kind}_energy_reading": ("above it, resolvable with these data sets" if resolved else
                                   "below it: an effect of this size is not resolvable with these "
                                   "data sets")}


def restart_reading(check: RestartCheck, z: float = 2.0) -> str:
    """Words for :class:`RestartCheck`: whether the restarts' mean deviation from the prediction is
    within ``z`` standard errors of 0, and how it compares with the spread over runs (each run's
    deviation in units of its data set's standard deviation over restarts)."""
    shift = check.mean / check.se if check.se > 0 else float("nan")
    zmax = float(np.abs(check.z).max())
    where = (f"their mean deviation is within {z:g} standard errors of 0" if abs(shift) <= z else
             f"their mean deviation, {check.mean:+.4f}, is {shift:+.1f} standard errors over runs "
             "from 0 (runs of one data set share its prediction, and that error leaves out the "
             "prediction's own, so it overstates how well the shift is resolved)")
    return (f"{where}, and no run lies further than {zmax:.1f} of its data set's standard "
            "deviations over runs from the prediction")
