"""Small statistics for the chapter's comparisons across trained models."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
from scipy import stats

__all__ = ["FAR_BETTER_GAP", "SATURATED_ACCURACY", "REGULARISER_GAIN", "TRACKING_CORRELATION", "RESET_SHARE",
           "attainable_gap", "rival_ceiling", "ranked_families", "capped_tss", "delimiter_test", "detectable_gap",
           "did_not_train", "gap_design", "paired_gain_test", "gain_tracking_test", "sign_flip_p",
           "sign_test_p", "sign_test_power", "sign_test_detectable", "intersection_power", "reset_run_power",
           "RESET_SEQUENCE_SHARE", "design_run_power", "reset_share_flip_point", "pairs_trained",
           "delimiter_negative_control", "origin_mediation",
           "sign_flip_power", "sign_flip_detectable", "correlation_contrast_test", "exact_gain_design",
           "permutation_correlation_p", "rival_comparison", "run_share_test", "spearman", "spearman_rows",
           "spearman_gap_bootstrap", "within_family_spearman"]

#: The effect this chapter takes as the paper's "ESS/κ predicts accuracy far better than TSS/κ",
#: on the scale of the claim's statistic (the mean over the families of ρ_ESS − ρ_TSS, Spearman).
#: The paper's text, as far as we could find it, gives no correlation coefficients, so the effect
#: is fixed a priori from Cohen's (1988) conventions for a correlation (0.1 small, 0.3 medium,
#: 0.5 large): "far better" is read as at least a medium correlation's worth of difference. It is
#: the smallest gap one could still call "far", so that an experiment too weak to see it cannot
#: call the finding not reproduced. It does not depend on any run of this chapter.
FAR_BETTER_GAP = 0.3

#: An accuracy at or above which a model has solved the task: a family where at least half the
#: models reach it is saturated, its ranking of models is a ranking of near-ties.
SATURATED_ACCURACY = 0.975

#: The accuracy gain this chapter takes as the paper's "the regulariser mitigates collapse" on MQAR,
#: on the scale of the regulariser claim's statistic (the mean over seeds of the paired accuracy
#: difference, regularised minus not). The paper reports the regulariser's benefit without a number
#: we could read, so the effect is fixed a priori: a tenth of the queries answered correctly, the
#: smallest gain on a recall task one would call an improvement rather than noise. It does not
#: depend on any run of this chapter.
REGULARISER_GAIN = 0.10

#: The correlation this chapter takes as "the change in ESS explains the change in accuracy" (the
#: regulariser's gain goes through the memory it makes the model use): Pearson's r between the
#: paired changes over seeds, fixed a priori at Cohen's (1988) large correlation, 0.5 (a quarter of
#: the gain's variance explained by the ESS change). It does not depend on any run of this chapter.
TRACKING_CORRELATION = 0.5


#: The share of training runs that reset their state after delimiters which this chapter takes as the
#: paper's "models reset at delimiters", on the scale of the delimiter claim's statistic (the share of
#: independent training runs whose own tests resolve a reset): fixed a priori at one half (a behaviour
#: that a typical training run shows), independent of any run of this chapter.
RESET_SHARE = 0.5

#: The share of a resetting run's test sequences in which its reset shows (each per-run test's
#: difference positive), on the scale of the per-run sign tests' statistic: this chapter's own choice,
#: not a number from the paper (whose text was not available to us; the research notes record only a
#: graded effect, stronger in some architectures than in others). It reads: a run that resets shows a
#: positive difference in 19 sequences of 20. It sets the per-run power of the delimiter claim
#: (:func:`design_run_power`); how much the design hinges on it is :func:`reset_share_flip_point`, the
#: share below which the claim no longer detects its stated share of resetting runs.
RESET_SEQUENCE_SHARE = 0.95


def capped_tss(tss, start: int = 1) -> float:
    """The position-capped TSS of a model on sequences of length ℓ: the mean over positions
    ``i ≥ start`` of ``min(TSS_i, i, ℓ − i)`` (``tss``: the TSS per position, length ℓ). No
    operator on ℓ tokens can have a Hankel block of rank above ``min(i, ℓ − i)``, whatever its
    state, so this is the largest mean ESS the architecture *and the sequence's shape* allow; it
    is the nearest rival of ESS as a predictor (a measure that only knows the configuration)."""
    t = np.asarray(tss, dtype=float)
    if t.ndim != 1 or t.size <= start:
        raise ValueError("tss must be a 1-d profile longer than start")
    i = np.arange(t.size)
    return float(np.mean(np.minimum(t, np.minimum(i, t.size - i))[start:]))


def ranked_families(y, family, saturated: float = SATURATED_ACCURACY) -> tuple[list, list]:
    """Which families of models can be ranked by accuracy ``y`` at all: a family where at least half
    the models reach ``saturated`` ranks near-ties (solved models differ by noise) and is left out of
    the statistic *and* of its ceiling alike. Returns ``(kept, saturated_families)`` in order of
    appearance."""
    y, family = np.asarray(y, dtype=float), np.asarray(family)
    if y.shape != family.shape or y.ndim != 1:
        raise ValueError("y and family must be 1-d arrays of equal length")
    fams = list(dict.fromkeys(family.tolist()))
    sat = [f for f in fams if np.mean(y[family == f] >= saturated) >= 0.5]
    return [f for f in fams if f not in sat], sat


def rival_ceiling(rho_b: dict, rho_ab: dict, undefined=()) -> dict:
    """The largest mean gap ``mean_f (ρ(a, y) − ρ(b, y))`` the data could show, over the families the
    statistic uses (those in ``rho_b`` not in ``undefined``, with finite values), whatever ``y``:
    per family ``min(1 − ρ_b, √(2(1 − ρ_ab)))``, where ``ρ_ab`` is the Spearman correlation of the
    two predictors. The first bound is a perfect ranking by ``a``; the second holds because a
    Spearman ρ is the inner product of unit rank vectors, so ``ρ(a, y) − ρ(b, y) = ⟨â − b̂, ŷ⟩ ≤
    ‖â − b̂‖ = √(2(1 − ρ_ab))``: two predictors that rank the models alike cannot be told apart by
    any accuracy. Returns ``per_family``, ``separable`` (the second bound per family) and
    ``ceiling``, their mean (NaN when no family is left)."""
    per, sep = {}, {}
    for f, rb in rho_b.items():
        if f in set(undefined) or not np.isfinite(rb) or not np.isfinite(rho_ab.get(f, np.nan)):
            continue
        sep[f] = float(np.sqrt(max(0.0, 2.0 * (1.0 - float(rho_ab[f])))))
        per[f] = float(min(1.0 - float(rb), sep[f]))
    return {"per_family": per, "separable": sep,
            "ceiling": float(np.mean(list(per.values()))) if per else float("nan")}


def sign_flip_p(d, rng: np.random.Generator | None = None, n_mc: int = 2 ** 17, exact_max: int = 32) -> float:
    """One-sided p-value of "the mean of ``d`` is positive" by sign flipping: the share of the 2ⁿ sign
    patterns ±d whose sum is at least the observed one (the observed pattern included, so p ≥ 2⁻ⁿ).
    Exact, with no distributional assumption but a null distribution symmetric about 0, for
    ``n ≤ exact_max`` (the two halves' sums enumerated and met by a sorted search); beyond, Monte
    Carlo over ``n_mc`` random patterns drawn from ``rng``, p = (1 + #{≥})/(1 + n_mc), itself a
    valid p-value."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or d.size < 1 or not np.all(np.isfinite(d)):
        raise ValueError("d must be a finite 1-d array")
    n, obs = d.size, float(d.sum())
    slack = 1e-9 * (float(np.abs(d).sum()) + 1e-300)     # rounding of equal sums
    if n <= exact_max:
        h = n // 2

        def sums(v):
            signs = 1 - 2 * ((np.arange(2 ** v.size)[:, None] >> np.arange(v.size)) & 1)
            return signs @ v if v.size else np.zeros(1)

        s1, s2 = sums(d[:h]), np.sort(sums(d[h:]))
        count = (s2.size - np.searchsorted(s2, obs - slack - s1, side="left")).sum()
        return float(count) / 2.0 ** n
    if rng is None:
        raise ValueError(f"n = {n} > exact_max: the Monte Carlo p-value needs rng")
    count = 0
    for start in range(0, n_mc, 8192):
        k = min(8192, n_mc - start)
        signs = rng.integers(0, 2, (k, n)) * 2 - 1
        count += int(((signs @ d) >= obs - slack).sum())
    return (1.0 + count) / (1.0 + n_mc)


def permutation_correlation_p(x, y, rng: np.random.Generator | None = None, n_mc: int = 2 ** 17,
                              exact_max: int = 8) -> tuple[float, float]:
    """Pearson's r of ``x`` with ``y`` and its one-sided permutation p-value for r > 0: the share of
    the n! pairings whose correlation is at least the observed one (observed included, p ≥ 1/n!),
    exact under the null that the two are independent (exchangeable) for ``n ≤ exact_max``; beyond,
    Monte Carlo over ``n_mc`` random permutations from ``rng`` (p = (1 + #{≥})/(1 + n_mc)). A
    constant ``x`` or ``y`` gives ``(nan, 1.0)``."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError("x and y must be 1-d arrays of one length, two or more")
    if x.std() == 0 or y.std() == 0:
        return float("nan"), 1.0
    xc, yc = x - x.mean(), y - y.mean()
    r = float(xc @ yc / np.sqrt((xc @ xc) * (yc @ yc)))
    obs = float(xc @ yc)
    slack = 1e-9 * float(np.abs(xc).sum() * np.abs(yc).max())
    n = x.size
    if n <= exact_max:
        perms = np.array(list(itertools.permutations(range(n))))
        return r, float(np.mean(yc[perms] @ xc >= obs - slack))
    if rng is None:
        raise ValueError(f"n = {n} > exact_max: the Monte Carlo p-value needs rng")
    count = 0
    for start in range(0, n_mc, 4096):
        k = min(4096, n_mc - start)
        perms = rng.permuted(np.broadcast_to(np.arange(n), (k, n)), axis=1)
        count += int((yc[perms] @ xc >= obs - slack).sum())
    return r, (1.0 + count) / (1.0 + n_mc)


def run_share_test(resets, alpha: float, effect: float = RESET_SHARE, power: float = 0.8,
                   run_power: float = 1.0) -> dict:
    """Do independent training runs show a behaviour, with the run as the unit? ``resets``: per run,
    whether its own tests (each at ``alpha_run = alpha / n``) resolved the behaviour. Under the null
    that no run has it, each run passes with probability at most ``alpha_run``, so the count ``k`` is
    at most Binomial(n, alpha_run) and ``p = P(Bin(n, alpha_run) ≥ k)``; the claim holds when
    ``p < alpha`` (one run suffices: ``1 − (1 − alpha/n)ⁿ < alpha``). Its design: ``detectable``,
    the smallest share q of runs having the behaviour at which the rule holds with probability
    ``power`` (``1 − (1 − q)ⁿ ≥ power``, runs passing their own tests whenever they have it, which
    when ``run_power`` is 1; a resetting run passing its tests with probability ``run_power`` makes
    it 1 − (1 − q·run_power)ⁿ, so the detectable share is divided by ``run_power``; it can exceed the
    ceiling 1); ``ceiling`` 1; ``effect`` as given. Also ``k``, ``n``, ``share``, ``run_power``."""
    resets = np.asarray(resets, dtype=bool)
    if resets.ndim != 1 or resets.size < 1:
        raise ValueError("resets must be a 1-d boolean array, one run or more")
    if not (0 < alpha < 1 and 0 < power < 1 and 0 < effect <= 1):
        raise ValueError("need 0 < alpha, power < 1 and 0 < effect ≤ 1")
    n, k = resets.size, int(resets.sum())
    alpha_run = alpha / n
    p = float(stats.binom.sf(k - 1, n, alpha_run)) if k else 1.0
    return {"k": k, "n": n, "share": k / n, "alpha_run": alpha_run, "p": p, "holds": bool(p < alpha),
            "detectable": float((1.0 - (1.0 - power) ** (1.0 / n)) / max(run_power, 1e-12)), "ceiling": 1.0,
            "effect": float(effect), "run_power": float(run_power)}


def detectable_gap(se: float, alpha: float, power: float = 0.8) -> float:
    """Smallest true gap a one-sided test at level ``alpha`` detects with probability ``power``
    when its estimate is normal with standard error ``se``: (z_{1−α} + z_{power})·se (at
    ``power = 0.5`` it is the rejection threshold z_{1−α}·se itself)."""
    if not (0 < alpha < 1 and 0 < power < 1) or not se >= 0:
        raise ValueError("need 0 < alpha, power < 1 and se ≥ 0")
    return float((stats.norm.isf(alpha) + stats.norm.ppf(power)) * se)


def attainable_gap(rho_b: dict, undefined=()) -> float:
    """The largest mean gap ``mean_f (ρ_a[f] − ρ_b[f])`` a design can show (the ceiling of
    :func:`within_family_spearman`'s statistic): every family's ``ρ_a`` at its maximum, 1 (a
    perfect ranking; ties in the ranked quantity do not lower it, since a quantity ranks itself
    with ρ = 1), so the ceiling is ``mean_f (1 − ρ_b[f])`` over the families whose correlations are
    defined (those in ``undefined`` are left out, as the statistic leaves them out). Where the
    rival predictor ``b`` already ranks a family almost perfectly, no predictor can beat it by
    much there. NaN when no family is left."""
    values = [1.0 - float(r) for f, r in rho_b.items() if f not in set(undefined) and np.isfinite(r)]
    if any(not -1.0 - 1e-12 <= 1.0 - v <= 1.0 + 1e-12 for v in values):
        raise ValueError("a Spearman correlation lies in [-1, 1]")
    return float(np.mean(values)) if values else float("nan")


def gap_design(fam: dict, alpha: float, n_seeds: int, effect: float = FAR_BETTER_GAP,
               power: float = 0.8, ceiling: float | None = None) -> dict:
    """What a :func:`within_family_spearman` result ``fam`` can show, for ``lib.claims.Power``:
    ``detectable``, the smallest mean gap its one-sided test at ``alpha`` detects with probability
    ``power`` (:func:`detectable_gap` of its bootstrap standard error); ``ceiling``, the largest
    gap the design can show at all (``ceiling`` where given, e.g. :func:`rival_ceiling`'s; else
    :func:`attainable_gap`, a perfect ranking in every family); ``effect`` as given; and
    ``seeds_needed``, the seeds per configuration at which the same spread (se ∝ 1/√seeds) would
    bring ``detectable`` down to ``effect``. ``defined`` is False (and the numbers None) when no
    family has defined correlations."""
    se = float(fam.get("se", float("nan")))
    if ceiling is None:
        ceiling = attainable_gap(fam["rho_b"], fam.get("undefined", ()))
    ceiling = float(ceiling)
    if not (np.isfinite(se) and np.isfinite(ceiling)):
        return {"defined": False, "se": None, "detectable": None, "ceiling": None, "effect": float(effect),
                "seeds_needed": None}
    detectable = detectable_gap(se, alpha, power)
    return {"defined": True, "se": se, "detectable": detectable, "ceiling": ceiling, "effect": float(effect),
            "seeds_needed": int(np.ceil(n_seeds * (detectable / effect) ** 2))}


def spearman(x, y) -> float:
    """Spearman's ρ of ``x`` with ``y`` (``scipy.stats.spearmanr``): NaN, with a warning, where either
    is constant."""
    return stats.spearmanr(x, y).statistic


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


def delimiter_test(drops: np.ndarray, comparisons: dict, positive: np.ndarray, alpha: float,
                   power: float = 0.8, rng: np.random.Generator | None = None) -> dict:
    """One training run's (seed's) tests of a reset after delimiters, over its test sequences, for
    every seed.

    ``drops`` (seeds, sequences): each test sequence's entropy-ESS drop after delimiters of the model
    under test; ``comparisons``: name → (seeds, sequences) drops of comparison models measured on the
    same sequences (paired); ``positive``: the same model's drops with a hard reset (the positive
    control). Tests, each a one-sided exact sign test over the sequences (:func:`sign_test_p`: a
    sequence's difference is more often positive than not; valid for skewed differences, unlike a
    sign-flip test of the mean; ``rng`` is unused) at ``alpha``, on every seed: ``drop`` (mean
    drop > 0) and, per comparison ``c``, ``c`` (mean of drops − c's drops > 0). A replicate resets
    (``resets``, one flag per replicate) when every test rejects (intersection–union: a run without a reset passes
    with probability ≤ ``alpha``); the same tests on ``positive`` give ``resets_positive``, and
    ``control_passes`` is True when the hard reset is detected on every seed.

    Returns per test the p-values over seeds (``p``), each run's share of positive differences
    (``positive_share``), the smallest such share each run's test detects with probability ``power``
    (``share_detectable``), the mean the paired t-test would detect (``mde``, the largest over seeds;
    descriptive, not this test's power), ``holds`` (every
    seed resets), and the replicates whose own drop is not resolved: ``unresolved`` (indices), their
    drop's upper ``alpha`` bound (``drop_upper``, t approximation), the smallest resolved mean drop,
    ``below_resolved`` and ``decided`` (False where some replicates resolve a drop and an unresolved
    one cannot be bounded below the smallest of those)."""
    drops = np.asarray(drops, dtype=float)
    positive = np.asarray(positive, dtype=float)
    if drops.ndim != 2 or positive.shape != drops.shape or drops.shape[1] < 2:
        raise ValueError("drops and positive must be (seeds, sequences) arrays of one shape, two sequences or more")
    comps = {k: np.asarray(v, dtype=float) for k, v in comparisons.items()}
    if any(v.shape != drops.shape for v in comps.values()):
        raise ValueError("every comparison must be measured on the same (seeds, sequences)")
    n = drops.shape[1]
    t_reject = float(stats.t.isf(alpha, n - 1))
    t_power = t_reject + float(stats.t.ppf(power, n - 1))

    def tests(x):
        diffs = {"drop": x, **{k: x - v for k, v in comps.items()}}
        p = {k: np.array([sign_test_p(d) for d in v]) for k, v in diffs.items()}
        mde = {k: float(t_power * np.max(v.std(axis=1, ddof=1)) / np.sqrt(n)) for k, v in diffs.items()}
        share = {k: (v > 0).mean(axis=1) for k, v in diffs.items()}
        return p, mde, {k: v.mean(axis=1) for k, v in diffs.items()}, share

    p, mde, means, positive_share = tests(drops)
    p_pos, _, means_pos, _ = tests(positive)
    resets = np.all([v < alpha for v in p.values()], axis=0)
    resets_pos = np.all([v < alpha for v in p_pos.values()], axis=0)
    drop_means = means["drop"]
    drop_upper = drop_means + t_reject * drops.std(axis=1, ddof=1) / np.sqrt(n)
    unresolved = np.flatnonzero(p["drop"] >= alpha)
    resolved = np.flatnonzero(p["drop"] < alpha)
    smallest = float(drop_means[resolved].min()) if resolved.size else float("nan")
    below = bool(unresolved.size and resolved.size and drop_upper[unresolved].max() < smallest)
    return {"p": p, "mde": mde, "means": means, "p_positive": p_pos, "means_positive": means_pos,
            "resets": resets, "resets_positive": resets_pos, "holds": bool(resets.all()),
            "control_passes": bool(resets_pos.all()), "unresolved": unresolved, "resolved": resolved,
            "drop_upper": drop_upper, "smallest_resolved": smallest, "below_resolved": below,
            "decided": bool(not unresolved.size or not resolved.size or below), "n_sequences": n,
            "positive_share": positive_share, "share_detectable": sign_test_detectable(n, alpha, power)}


def reset_run_power(dt: dict, alpha: float) -> dict:
    """The per-run power of :func:`delimiter_test`'s result ``dt`` (tests at ``alpha``) for a run that
    resets as the observed ones do: per test, the exact sign test's power (:func:`sign_test_power`)
    at the share of positive differences pooled over the runs that reset (over every run where none
    does), and their intersection's Bonferroni lower bound (:func:`intersection_power`). An estimate
    from the partial resets this design produced, not a priori; ``basis`` names the runs used."""
    runs = np.flatnonzero(dt["resets"])
    basis = "resetting" if runs.size else "all"
    runs = runs if runs.size else np.arange(dt["resets"].size)
    q = {k: float(v[runs].mean()) for k, v in dt["positive_share"].items()}
    per_test = {k: sign_test_power(v, dt["n_sequences"], alpha) for k, v in q.items()}
    return {"share": q, "per_test": per_test, "power": intersection_power(per_test.values()), "basis": basis}


def design_run_power(q: float, n_sequences: int, alpha: float, n_tests: int, power: float = 0.8) -> dict:
    """The per-run power of :func:`delimiter_test`'s rule fixed in advance from the design: each of its
    ``n_tests`` exact sign tests at ``alpha`` over ``n_sequences`` sequences, when a resetting run's
    difference is positive in a share ``q`` of sequences (stated a priori, e.g.
    :data:`RESET_SEQUENCE_SHARE`). ``per_test``: the exact power :func:`sign_test_power`; ``power``:
    the intersection's Bonferroni lower bound (:func:`intersection_power`); ``share_detectable``: the
    smallest share each test detects with probability ``power`` (:func:`sign_test_detectable`);
    ``ceiling`` 1 (a share cannot exceed it); ``detects``: share_detectable ≤ q ≤ 1."""
    if not (0 < q <= 1 and n_tests >= 1):
        raise ValueError("need 0 < q ≤ 1 and one test or more")
    per = sign_test_power(q, n_sequences, alpha)
    detectable = sign_test_detectable(n_sequences, alpha, power)
    return {"share": float(q), "per_test": per, "power": intersection_power([per] * n_tests),
            "share_detectable": detectable, "ceiling": 1.0, "detects": bool(detectable <= q <= 1.0),
            "n_sequences": int(n_sequences), "n_tests": int(n_tests), "basis": "the chapter's choice"}


def reset_share_flip_point(n_sequences: int, alpha_run: float, n_tests: int, n_runs: int,
                           effect: float = RESET_SHARE, power: float = 0.8) -> float:
    """The per-sequence share q of a resetting run below which the delimiter claim's rule no longer
    detects its stated share ``effect`` of resetting runs: the smallest q at which
    :func:`run_share_test`'s detectable share (over ``n_runs`` runs, probability ``power``), with the
    per-run power :func:`design_run_power` at q (``n_tests`` exact sign tests at ``alpha_run`` over
    ``n_sequences`` sequences, Bonferroni), is at most ``effect``. The run power grows with q, so a
    bisection on (½, 1]; NaN when even q = 1 does not reach it."""
    def detectable(q):
        rp = design_run_power(q, n_sequences, alpha_run, n_tests)["power"]
        return (1.0 - (1.0 - power) ** (1.0 / n_runs)) / max(rp, 1e-12)

    if detectable(1.0) > effect:
        return float("nan")
    lo, hi = 0.5, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if detectable(mid) > effect else (lo, mid)
    return hi


def delimiter_negative_control(drops: np.ndarray, comparisons: dict, alpha_run: float, alpha: float) -> dict:
    """The delimiter claim's rule applied to a model that cannot reset (the negative control): per run,
    the one-sided exact sign tests (:func:`sign_test_p`) of its own drop and of its drop minus each
    comparison's, at ``alpha_run``; a run "resets" when all reject; the count against
    Binomial(runs, alpha / runs) (:func:`run_share_test`) at ``alpha``. ``holds`` is the rule's outcome,
    which must be False for the control to fail. Also each test's p-values and shares of positive
    differences per run."""
    drops = np.asarray(drops, dtype=float)
    comps = {k: np.asarray(v, dtype=float) for k, v in comparisons.items()}
    if drops.ndim != 2 or any(v.shape != drops.shape for v in comps.values()):
        raise ValueError("drops and every comparison must be (runs, sequences) arrays of one shape")
    diffs = {"drop": drops, **{k: drops - v for k, v in comps.items()}}
    p = {k: np.array([sign_test_p(row) for row in v]) for k, v in diffs.items()}
    resets = np.all([v < alpha_run for v in p.values()], axis=0)
    share = run_share_test(resets, alpha)
    return {"p": p, "positive_share": {k: (v > 0).mean(axis=1) for k, v in diffs.items()},
            "resets": resets, "k": share["k"], "n": share["n"], "p_share": share["p"], "holds": share["holds"]}


def origin_mediation(x_treat, y_treat, x_ctl, y_ctl, rng: np.random.Generator, n_boot: int = 4000,
                     level: float = 0.95) -> dict:
    """The mediation reading of the regulariser's gain: the control pairs' least-squares line of y
    (accuracy change) on x (ESS change) *through the origin* (a control pair is the difference of two
    runs drawn alike, so its expected change is 0 at x = 0 by symmetry, and fitting an intercept only
    adds noise), slope b = Σxy/Σx²; it predicts the treatment's mean gain from its mean ESS change,
    ``predicted`` = b·mean x_T; ``residual`` = mean y_T − predicted, near 0 if the ESS change accounts
    for the gain, near the gain itself if it accounts for none. Percentile bootstrap intervals at
    ``level`` of the residual (``low``, ``high``) and of the predicted gain (``pred_low``, ``pred_high``:
    whether the ESS change accounts for none of the gain is read from this one, which leaves out the
    treatment mean's own noise), resampling the pairs of each group independently (``n_boot`` draws
    from ``rng``). Descriptive: no claim's rule."""
    xt, yt, xc, yc = (np.asarray(v, dtype=float) for v in (x_treat, y_treat, x_ctl, y_ctl))
    if xt.shape != yt.shape or xc.shape != yc.shape or xt.ndim != 1 or xc.ndim != 1 or min(xt.size, xc.size) < 2:
        raise ValueError("each group needs 1-d x and y of one length, two pairs or more")

    def residual(it, ic):
        sxx = (xc[ic] ** 2).sum(axis=-1)
        slope = np.divide((xc[ic] * yc[ic]).sum(axis=-1), sxx, out=np.zeros(np.shape(sxx)), where=sxx > 0)
        return yt[it].mean(axis=-1) - slope * xt[it].mean(axis=-1), slope

    obs, slope = residual(np.arange(xt.size), np.arange(xc.size))
    it = rng.integers(0, xt.size, (n_boot, xt.size))
    boot, _ = residual(it, rng.integers(0, xc.size, (n_boot, xc.size)))
    pred_boot = yt[it].mean(axis=-1) - boot          # b·mean x_T of each resample
    tail = (1 - level) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    pred_low, pred_high = np.quantile(pred_boot, [tail, 1 - tail])
    gain = float(yt.mean())
    return {"slope": float(slope), "predicted": float(gain - obs), "gain": gain, "residual": float(obs),
            "low": float(low), "high": float(high), "level": level, "n_treat": int(xt.size), "n_ctl": int(xc.size),
            "pred_low": float(pred_low), "pred_high": float(pred_high),
            "predicted_excludes_zero": bool(pred_low > 0 or pred_high < 0),
            "excludes_zero": bool(low > 0 or high < 0), "excludes_gain": bool(low > gain or high < gain)}


def did_not_train(accuracy, chance: float, factor: float = 2.0) -> np.ndarray:
    """Which models did not train: accuracy at most ``factor`` times ``chance`` (the accuracy of a
    uniform guess among the answers). A boolean array; the models stay in every test (dropping them
    would select on the outcome); the chapter names them and reports its descriptive mediation reading
    both with them and without them (:func:`pairs_trained`)."""
    if not 0 < chance < 1 or factor < 1:
        raise ValueError("need 0 < chance < 1 and factor ≥ 1")
    return np.asarray(accuracy, dtype=float) <= factor * chance


def pairs_trained(pairs, chance: float, factor: float = 2.0) -> np.ndarray:
    """Per pair (rows of a table with columns ``accuracy_0`` and ``accuracy_1``, its two runs), whether
    both runs trained (neither :func:`did_not_train` at ``chance`` and ``factor``): the pairs kept by
    the reading that leaves out every pair containing a run that did not train."""
    return ~(did_not_train(pairs["accuracy_0"], chance, factor) | did_not_train(pairs["accuracy_1"], chance, factor))


def _seeds_for(width, effect: float, n_max: int = 100_000) -> int | None:
    """The smallest n ≥ 3 with ``width(n) ≤ effect`` (``width`` decreasing in n), by bisection; None
    beyond ``n_max``."""
    if width(n_max) > effect:
        return None
    lo, hi = 3, n_max
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if width(mid) <= effect else (mid + 1, hi)
    return lo


def exact_gain_design(sd: float, n: int, alpha: float, effect: float, rng: np.random.Generator | None = None,
                      power: float = 0.8, exact_max: int = 32) -> tuple[float, float]:
    """The exact one-sided sign-flip test's design on ``n`` paired differences drawn Normal(μ, ``sd``²):
    the smallest μ it detects with probability ``power`` at ``alpha`` and its power at μ = ``effect``.
    Where 2⁻⁽ⁿ⁻¹⁾ ≥ alpha the test rejects only when all n differences are positive, so the power is
    Φ(μ/σ)ⁿ in closed form; otherwise, up to ``exact_max`` seeds (where the test is exact), by
    simulation (:func:`sign_flip_detectable`, :func:`sign_flip_power`, from ``rng``); beyond, by the
    paired t-test's (noncentral t), which the sign-flip test approaches. (inf, 0) when 2⁻ⁿ ≥ alpha."""
    if 2.0 ** -n >= alpha:
        return float("inf"), 0.0
    if sd <= 0:
        return 0.0, 1.0
    if 2.0 ** -(n - 1) >= alpha:
        return (float(sd * stats.norm.ppf(power ** (1.0 / n))), float(stats.norm.cdf(effect / sd) ** n))
    if n > exact_max:        # the Monte Carlo test is too dear to simulate; its null is close to Normal here
        t = float(stats.t.isf(alpha, n - 1))
        return (float((t + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n)),
                float(stats.nct.sf(t, n - 1, effect / sd * np.sqrt(n))))
    if rng is None:
        raise ValueError("the sign-flip test's power beyond the all-positive case is simulated: it needs rng")
    return (sign_flip_detectable(sd, n, alpha, rng, power), sign_flip_power(effect / sd, n, alpha, rng))


def paired_gain_test(before, after, alpha: float, rng: np.random.Generator | None = None,
                     effect: float = REGULARISER_GAIN, power: float = 0.8, design: bool = True) -> dict:
    """Does a treatment raise accuracy, paired by seed? ``before`` and ``after``: one accuracy per seed
    (same seeds, same order) without and with it. The rule: the one-sided sign-flip test
    (:func:`sign_flip_p`, exact up to 32 seeds, else Monte Carlo from ``rng``) of the mean difference
    ``after − before`` > 0, rejecting at ``alpha`` (``holds``). ``reachable``: whether n seeds can
    reach ``alpha`` at all (the smallest sign-flip p is 2⁻ⁿ); where they cannot, the test cannot hold
    and the design detects nothing. Its design: ``detectable``, the smallest true mean gain the exact
    test detects with probability ``power`` for Normal differences of the observed spread ``sd``
    (:func:`exact_gain_design`; ``power_at_effect`` its power at ``effect``, ``all_positive_only``
    whether only n positive differences reach ``alpha``; ``detectable_t`` the paired t's value; NaN
    with ``design=False``, which skips the simulation); ``ceiling``, ``mean(1 − before)`` (accuracy cannot
    exceed 1); ``effect`` as given; ``seeds_needed``, the seeds at which the level is reachable and the
    same spread would bring ``detectable`` down to ``effect`` (None if none up to 10⁵). Also ``mean``,
    ``sd``, ``se``, ``p``, ``n`` and ``n_positive`` (seeds with a gain)."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape or before.ndim != 1 or before.size < 2:
        raise ValueError("before and after must be 1-d arrays of one length, two seeds or more")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("need 0 < alpha, power < 1")
    d = after - before
    n = d.size
    sd = float(d.std(ddof=1))
    n_level = int(np.floor(np.log2(1.0 / alpha))) + 1          # smallest n with 2⁻ⁿ < alpha

    def width(k):
        return float((stats.t.isf(alpha, k - 1) + stats.t.ppf(power, k - 1)) * sd / np.sqrt(k))

    p = sign_flip_p(d, rng)
    need = _seeds_for(width, effect) if sd > 0 else n
    detectable, power_at = (exact_gain_design(sd, n, alpha, effect, rng, power) if design
                            else (float("nan"), float("nan")))
    return {"mean": float(d.mean()), "sd": sd, "se": float(sd / np.sqrt(n)), "p": p, "holds": bool(p < alpha), "n": n,
            "n_positive": int((d > 0).sum()), "detectable": detectable, "power_at_effect": power_at,
            "detectable_t": width(n), "all_positive_only": bool(2.0 ** -(n - 1) >= alpha),
            "ceiling": float(np.mean(1.0 - before)),
            "effect": float(effect), "reachable": bool(2.0 ** -n < alpha), "n_level": n_level,
            "seeds_needed": None if need is None else max(need, n_level)}


def gain_tracking_test(d_measure, d_accuracy, alpha: float, rng: np.random.Generator | None = None,
                       effect: float = TRACKING_CORRELATION, power: float = 0.8) -> dict:
    """Does the paired change of a measure (e.g. ESS) go with the paired change in accuracy over seeds?
    The rule: Pearson's r between ``d_measure`` and ``d_accuracy`` (one value per seed each) > 0 by
    the one-sided permutation test (:func:`permutation_correlation_p`: exact up to 8 seeds, else
    Monte Carlo from ``rng``), rejecting at ``alpha`` (``holds``). ``reachable``: whether n seeds
    can reach ``alpha`` at all (the smallest permutation p is 1/n!, and 1/(1 + 2¹⁷) by Monte
    Carlo). Its design: ``detectable``, the smallest true correlation it detects with probability
    ``power`` (Fisher's z: tanh((z_{1−α} + z_power)/√(n − 3))); ``ceiling`` 1; ``effect`` as given;
    ``seeds_needed``, the smallest n whose detectable correlation is at most ``effect`` and whose
    level is reachable. Also ``r``, ``p``, ``n`` and, for the measure's change itself, its mean
    ``measure_mean`` and its one-sided sign-flip p-value for a rise (``measure_p``), reported beside
    the rule."""
    x, y = np.asarray(d_measure, dtype=float), np.asarray(d_accuracy, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 4:
        raise ValueError("d_measure and d_accuracy must be 1-d arrays of one length, four seeds or more")
    if not (0 < alpha < 1 and 0 < power < 1 and 0 < effect < 1):
        raise ValueError("need 0 < alpha, power, effect < 1")
    n = x.size
    r, p = permutation_correlation_p(x, y, rng)
    n_level = next(k for k in range(2, 100) if 1.0 / math.factorial(k) < alpha)
    z = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    return {"r": r, "p": p, "holds": bool(p < alpha), "n": n, "detectable": float(np.tanh(z / np.sqrt(n - 3))),
            "ceiling": 1.0, "effect": float(effect), "reachable": bool(1.0 / math.factorial(n) < alpha),
            "n_level": n_level, "seeds_needed": max(n_level, int(np.ceil((z / np.arctanh(effect)) ** 2 + 3))),
            "measure_mean": float(x.mean()), "measure_p": sign_flip_p(x, rng)}


def rival_comparison(a, rivals: dict, y, family, rng: np.random.Generator, alpha: float, n_seeds: int,
                     effect: float = FAR_BETTER_GAP, n_boot: int = 20000,
                     saturated: float = SATURATED_ACCURACY) -> dict:
    """Does predictor ``a`` rank ``y`` better than *every* rival (``rivals``: name → predictor) within
    each family? The families are those :func:`ranked_families` keeps (a saturated family is left
    out of the statistic and its ceiling alike); per rival, :func:`within_family_spearman` of ``a``
    against it over those families (its ``p_not_better``), the Spearman correlation of ``a`` with the
    rival in each family (``rho_ab``), the ceiling of :func:`rival_ceiling` on the same families and
    :func:`gap_design`'s numbers with it. The rule is an intersection–union test: it holds when every
    rival is beaten, each at ``alpha`` (false-alarm rate ≤ ``alpha``). Its design: ``detectable`` the
    largest of the rivals' detectable gaps, ``ceiling`` the smallest of their ceilings (the rule
    needs every gap), ``defined`` False where some rival's design is undefined (no family to rank).
    Returns ``per_rival`` (name → ``{fam, rho_ab, ceiling, design}``), ``kept``, ``saturated``,
    ``holds``, ``detectable``, ``ceiling``, ``effect``, ``defined``."""
    a, y, family = np.asarray(a, dtype=float), np.asarray(y, dtype=float), np.asarray(family)
    kept, sat = ranked_families(y, family, saturated)
    mask = np.isin(family, kept)
    per = {}
    for name, b in rivals.items():
        b = np.asarray(b, dtype=float)
        if b.shape != a.shape:
            raise ValueError("every rival must have one value per model")
        fam = within_family_spearman(a[mask], b[mask], y[mask], family[mask], rng, n_boot=n_boot)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            rho_ab = {f: float(stats.spearmanr(a[family == f], b[family == f]).statistic) for f in kept}
        ceil = rival_ceiling(fam["rho_b"], rho_ab, fam["undefined"])
        per[name] = {"fam": fam, "rho_ab": rho_ab, "ceiling": ceil,
                     "design": gap_design(fam, alpha, n_seeds, effect=effect, ceiling=ceil["ceiling"])}
    defined = bool(per) and all(r["design"]["defined"] for r in per.values())
    holds = bool(defined and all(r["fam"]["p_not_better"] < alpha for r in per.values()))
    return {"per_rival": per, "kept": kept, "saturated": sat, "holds": holds, "defined": defined,
            "detectable": max(r["design"]["detectable"] for r in per.values()) if defined else None,
            "ceiling": min(r["design"]["ceiling"] for r in per.values()) if defined else None,
            "effect": float(effect)}


def sign_test_p(d) -> float:
    """One-sided exact sign test of "a value of ``d`` is more often positive than not": with k of the
    n values strictly positive, p = P(Binomial(n, ½) ≥ k). Valid whatever the values' distribution
    (skewed or not) under the null P(d > 0) ≤ ½, i.e. a median at or below 0; ties (d = 0) count as
    not positive, which only makes it conservative."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or d.size < 1 or not np.all(np.isfinite(d)):
        raise ValueError("d must be a finite 1-d array")
    k = int((d > 0).sum())
    return float(stats.binom.sf(k - 1, d.size, 0.5))


def sign_test_power(q: float, n: int, alpha: float) -> float:
    """The exact sign test's power (:func:`sign_test_p` at ``alpha`` on ``n`` values) when each value is
    positive with probability ``q``, independently: P(Binomial(n, q) ≥ k*), k* the smallest count
    with P(Binomial(n, ½) ≥ k*) < alpha (0 when no count reaches ``alpha``)."""
    if not (0 < alpha < 1 and 0 <= q <= 1 and n >= 1):
        raise ValueError("need 0 < alpha < 1, 0 ≤ q ≤ 1, n ≥ 1")
    ks = np.arange(n + 1)
    ok = ks[stats.binom.sf(ks - 1, n, 0.5) < alpha]
    return float(stats.binom.sf(ok[0] - 1, n, q)) if ok.size else 0.0


def sign_test_detectable(n: int, alpha: float, power: float = 0.8) -> float:
    """The smallest share q of positive values at which :func:`sign_test_power` reaches ``power``
    (bisection; 1.0 if even q = 1 does not, i.e. n values cannot reach ``alpha``)."""
    if sign_test_power(1.0, n, alpha) < power:
        return 1.0
    lo, hi = 0.5, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sign_test_power(mid, n, alpha) < power else (lo, mid)
    return hi


def intersection_power(powers) -> float:
    """A lower bound on the probability that every one of several tests rejects, from each one's power
    (Bonferroni: 1 − Σ(1 − πₜ), at least 0), valid however the tests depend on each other."""
    return float(max(0.0, 1.0 - sum(1.0 - float(p) for p in powers)))


def sign_flip_power(mu_over_sd: float, n: int, alpha: float, rng: np.random.Generator,
                    n_sim: int = 2000) -> float:
    """The exact one-sided sign-flip test's (:func:`sign_flip_p`) power at ``alpha`` on ``n`` paired
    differences drawn Normal(μ, σ²) with μ/σ = ``mu_over_sd``, by simulation (``n_sim`` draws from
    ``rng``; the test is scale-free, so only μ/σ matters). With 2⁻ⁿ⁺¹ ≥ alpha the test rejects only
    when every difference is positive, so the power is Φ(μ/σ)ⁿ, which the unit tests check."""
    z = rng.standard_normal((n_sim, n))
    return float(np.mean([sign_flip_p(row + mu_over_sd, rng) < alpha for row in z]))


def sign_flip_detectable(sd: float, n: int, alpha: float, rng: np.random.Generator, power: float = 0.8,
                         n_sim: int = 2000, hi: float = 20.0) -> float:
    """The smallest mean μ at which the exact sign-flip test on ``n`` Normal(μ, ``sd``²) differences
    rejects at ``alpha`` with probability ``power`` (:func:`sign_flip_power` with common random
    numbers, bisection on μ/σ to 1e-3); inf when the n seeds cannot reach ``alpha``."""
    if 2.0 ** -n >= alpha:
        return float("inf")
    z = rng.standard_normal((n_sim, n))     # the same draws at every μ (common random numbers)

    def pw(m):
        return float(np.mean([sign_flip_p(row + m, rng) < alpha for row in z]))

    lo = 0.0
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pw(mid) < power else (lo, mid)
    return float(hi * sd)


def correlation_contrast_test(x_treat, y_treat, x_ctl, y_ctl, alpha: float, rng: np.random.Generator,
                              effect: float = float(np.arctanh(TRACKING_CORRELATION)), power: float = 0.8,
                              n_perm: int = 2 ** 15) -> dict:
    """Is the correlation of the treatment pairs' changes (``x_treat``, ``y_treat``: one value per pair)
    larger than that of the control pairs' (``x_ctl``, ``y_ctl``)? Statistic r_T − r_C (Pearson);
    one-sided permutation test that reassigns the pooled pairs between the two groups (sizes kept),
    p = (1 + #{≥ observed})/(1 + ``n_perm``), valid when the pairs of both groups are exchangeable
    under the null (drawn from one distribution). ``holds``: p < ``alpha``. Its design, in Fisher-z
    units: ``detectable`` = (z_{1−α} + z_power)·√(1/(n_T − 3) + 1/(n_C − 3)); ``effect`` as given
    (default atanh 0.5 − atanh 0: the treatment's changes correlate at 0.5, a generic co-variation at
    0); no ceiling. ``z_diff`` is the observed atanh r_T − atanh r_C. The mediation reading beside it:
    the control pairs' least-squares line of y on x predicts the treatment's mean y from its mean x
    (``predicted``); ``residual`` = mean y_T − predicted, near 0 if the treatment's mean change in y
    is what its mean change in x brings in runs without it."""
    xt, yt, xc, yc = (np.asarray(v, dtype=float) for v in (x_treat, y_treat, x_ctl, y_ctl))
    if xt.shape != yt.shape or xc.shape != yc.shape or xt.ndim != 1 or xc.ndim != 1 or min(xt.size, xc.size) < 4:
        raise ValueError("each group needs 1-d x and y of one length, four pairs or more")
    nt, nc = xt.size, xc.size
    x, y = np.concatenate([xt, xc]), np.concatenate([yt, yc])

    def r_rows(xs, ys):
        xs = xs - xs.mean(axis=-1, keepdims=True)
        ys = ys - ys.mean(axis=-1, keepdims=True)
        den = np.sqrt((xs ** 2).sum(-1) * (ys ** 2).sum(-1))
        return np.divide((xs * ys).sum(-1), den, out=np.zeros(den.shape), where=den > 0)

    r_t, r_c = float(r_rows(xt, yt)), float(r_rows(xc, yc))
    obs = r_t - r_c
    count = 0
    for start in range(0, n_perm, 4096):
        k = min(4096, n_perm - start)
        idx = rng.random((k, nt + nc)).argsort(axis=1)
        px, py = x[idx], y[idx]
        stat = r_rows(px[:, :nt], py[:, :nt]) - r_rows(px[:, nt:], py[:, nt:])
        count += int((stat >= obs - 1e-12).sum())
    p = (1.0 + count) / (1.0 + n_perm)
    z = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    slope, intercept = np.polyfit(xc, yc, 1) if np.ptp(xc) > 0 else (0.0, float(yc.mean()))
    predicted = float(intercept + slope * xt.mean())
    clip = 1 - 1e-12
    return {"r_treat": r_t, "r_ctl": r_c, "diff": obs, "p": p, "holds": bool(p < alpha), "n_treat": nt,
            "n_ctl": nc, "z_diff": float(np.arctanh(np.clip(r_t, -clip, clip)) - np.arctanh(np.clip(r_c, -clip, clip))),
            "detectable": float(z * np.sqrt(1 / (nt - 3) + 1 / (nc - 3))), "effect": float(effect),
            "ceiling": None, "predicted": predicted, "mean_treat": float(yt.mean()),
            "residual": float(yt.mean() - predicted), "floor": 1.0 / (1.0 + n_perm)}
