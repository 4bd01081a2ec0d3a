"""lib.stats against scipy and hand-checked cases; the band helpers of lib.plotting draw what
they say."""

import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats as sps  # noqa: E402

from lib import plotting as P  # noqa: E402
from lib import stats as S  # noqa: E402


def test_t_interval_is_scipys():
    v = np.array([1.0, 2.0, 4.0, 7.0])
    lo, hi = sps.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=sps.sem(v))
    assert S.t_interval(v) == pytest.approx((v.mean(), lo, hi))
    mean, half = S.mean_ci(np.stack([v, 2 * v]), axis=-1)
    assert mean == pytest.approx([3.5, 7.0]) and half == pytest.approx([hi - v.mean(), 2 * (hi - v.mean())])
    assert S.mean_ci([3.0], axis=-1)[1] == 0  # one seed: no interval, not NaN


def test_mean_se():
    assert S.mean_se([1.0, 3.0]) == pytest.approx((2.0, 1.0))
    assert S.mean_se([5.0]) == (5.0, 0.0)


def test_wilson_stays_in_the_unit_interval_and_matches_the_formula():
    lo, hi = S.wilson(np.array([0, 5, 10]), 10)
    assert (lo >= 0).all() and (hi <= 1).all() and lo[0] == pytest.approx(0, abs=1e-15)
    assert hi[0] == pytest.approx(1.96**2 / (10 + 1.96**2), rel=1e-3)  # k = 0: z²/(n + z²)
    assert (lo[1] + hi[1]) / 2 == pytest.approx(0.5)


def test_one_sided_wilson_bounds_have_their_level_at_one_half_by_brute_force():
    """At a true rate of 1/2 (the level chapter 01's rules test) the lower bound exceeds it, and
    the upper bound falls below it, with probability alpha to within 10 % (exact binomial sums; a
    two-sided level would give half of it). Away from 1/2 Wilson is cruder: at n = 40, p = 0.1
    its lower tail is 5·alpha."""
    alpha = 1e-3
    for n in (256, 1024):
        k = np.arange(n + 1)
        lower, upper = S.one_sided_wilson(k / n, n, alpha)
        assert (lower <= k / n + 1e-12).all() and (upper >= k / n - 1e-12).all()
        assert 0.9 * alpha <= sps.binom.pmf(k, n, 0.5)[lower > 0.5].sum() <= 1.1 * alpha
        assert 0.9 * alpha <= sps.binom.pmf(k, n, 0.5)[upper < 0.5].sum() <= 1.1 * alpha
    z = sps.norm.ppf(1 - alpha)  # the one-sided quantile: k = 0's upper bound is z²/(n + z²)
    assert upper[0] == pytest.approx(z**2 / (n + z**2))


def test_geometric_mean_and_interval():
    assert S.geometric_mean([[1.0, 100.0]]) == pytest.approx([10.0])
    assert np.isinf(S.geometric_mean([1.0, np.inf]))  # a censored run censors the mean
    centre, lo, hi = S.geometric_ci([1.0, 10.0, 100.0])
    assert centre == pytest.approx(10.0) and 0 < lo < centre < hi


def test_bootstrap_mean_is_seeded_and_brackets_the_mean():
    v = np.random.default_rng(0).exponential(size=200)
    a = S.bootstrap_mean(v, np.random.default_rng(1))
    assert a == S.bootstrap_mean(v, np.random.default_rng(1))
    assert a[1] < a[0] < a[2] and a[1] > 0
    se = v.std(ddof=1) / np.sqrt(v.size)  # the percentile interval is about ±1.96 se here
    assert (a[2] - a[1]) / (2 * 1.96 * se) == pytest.approx(1.0, abs=0.15)


def test_bootstrap_slope_se():
    x = np.array([10.0, 100.0, 1000.0])
    exact = np.repeat((x ** -0.5)[:, None], 8, axis=1)
    assert S.bootstrap_slope_se(x, exact, np.random.default_rng(0)) == pytest.approx(0, abs=1e-12)
    noisy = exact * np.random.default_rng(1).lognormal(0, 0.3, exact.shape)
    assert 0 < S.bootstrap_slope_se(x, noisy, np.random.default_rng(0)) < 0.2


def test_t_pvalues_are_scipys():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.4])
    assert S.t_pvalue_greater(d) == pytest.approx(sps.ttest_1samp(d, 0, alternative="greater").pvalue)
    rows = np.random.default_rng(2).normal(size=(3, 6))
    curve = np.array([0.0, 0.5, -0.2])
    expected = [sps.ttest_1samp(r, c).pvalue for r, c in zip(rows, curve)]
    assert S.t_pvalues_against(rows, curve) == pytest.approx(expected)
    # seeds that agree exactly and miss the curve reject it outright, quietly (no red box in a book)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert S.t_pvalues_against(np.ones((1, 3)), np.array([0.5])).tolist() == [0.0]


def test_power_of_ten():
    assert P.power_of_ten(1e-3) == "10⁻³"
    assert P.power_of_ten(2.5e6) == "2.5 × 10⁶"


def test_bands_draw_mean_and_range():
    fig, ax = P.figure()
    s = np.array([[0.0, 1.0], [0.5, 0.7]])
    line = P.range_band(ax, [0, 1], s, label="acc")
    assert line.get_ydata().tolist() == [0.5, 0.6]
    band = ax.collections[-1].get_paths()[0].vertices[:, 1]
    assert band.min() == 0.0 and band.max() == 1.0
    line = P.geometric_band(ax, [0, 1], np.array([[1.0, 100.0], [10.0, 10.0]]))
    assert line.get_ydata() == pytest.approx([10.0, 10.0])
    matplotlib.pyplot.close(fig)


def test_seed_test_against_scipy_and_by_hand():
    from scipy import stats as st

    d = [0.3, 0.5, 0.1, 0.4, 0.2]
    r = S.seed_test(d, alpha=1e-3)
    assert r.mean == pytest.approx(0.3) and r.se == pytest.approx(np.std(d, ddof=1) / np.sqrt(5))
    assert r.t == pytest.approx(st.ttest_1samp(d, 0.0).statistic)
    # the critical value: P(T_4 > crit) = 1e-3 (scipy's one-sided p-value at t = crit)
    assert st.ttest_1samp(np.asarray(d) - r.mean + r.crit * r.se, 0.0, alternative="greater").pvalue == \
        pytest.approx(1e-3, rel=1e-6)
    assert r.mde == pytest.approx((r.crit + st.t.ppf(0.8, 4)) * r.se)
    assert r.above() == (r.t > r.crit) and not r.below()
    assert S.seed_test([-1.0, -1.1, -0.9, -1.0, -1.05], alpha=1e-3).below()


def test_jackknife_se_of_a_mean_is_the_standard_error():
    x = np.random.default_rng(4).normal(size=(10, 3))
    se = S.jackknife_se(list(x), lambda m: float(m[0]))
    assert np.isclose(se, x[:, 0].std(ddof=1) / np.sqrt(10))


def test_house_style_finds_matplotlibs_own_fonts():
    """mathtext's fallback font is found without a `findfont` warning, whatever font list the
    user's matplotlib cache holds (a list written by another environment can lack it)."""
    from matplotlib import font_manager

    P.use_style()
    assert font_manager.findfont("STIXGeneral", fallback_to_default=False).endswith("STIXGeneral.ttf")
