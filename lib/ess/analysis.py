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


def run_share_test(resets, alpha: float, effect: float = RESET_SHARE, power: float = 0.8) -> dict:
    """Do independent training runs show a behaviour, with the run as the unit? ``resets``: per run,
    whether its own tests (each at ``alpha_run = alpha / n``) resolved the behaviour. Under the null
    that no run has it, each run passes with probability at most ``alpha_run``, so the count ``k`` is
    at most Binomial(n, alpha_run) and ``p = P(Bin(n, alpha_run) ≥ k)``; the claim holds when
    ``p < alpha`` (one run suffices: ``1 − (1 − alpha/n)ⁿ < alpha``). Its design: ``detectable``,
    the smallest share q of runs having the behaviour at which the rule holds with probability
    ``power`` (``1 − (1 − q)ⁿ ≥ power``, runs passing their own tests whenever they have it, which
    the positive control checks); ``ceiling`` 1; ``effect`` as given. Also ``k``, ``n``, ``share``."""
    resets = np.asarray(resets, dtype=bool)
    if resets.ndim != 1 or resets.size < 1:
        raise ValueError("resets must be a 1-d boolean array, one run or more")
    if not (0 < alpha < 1 and 0 < power < 1 and 0 < effect <= 1):
        raise ValueError("need 0 < alpha, power < 1 and 0 < effect ≤ 1")
    n, k = resets.size, int(resets.sum())
    alpha_run = alpha / n
    p = float(stats.binom.sf(k - 1, n, alpha_run)) if k else 1.0
    return {"k": k, "n": n, "share": k / n, "alpha_run": alpha_run, "p": p, "holds": bool(p < alpha),
            "detectable": float(1.0 - (1.0 - power) ** (1.0 / n)), "ceiling": 1.0, "effect": float(effect)}


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
    control). Tests, each a one-sided sign-flip test over the sequences (:func:`sign_flip_p`, exact
    up to 32 sequences, else Monte Carlo from ``rng``) at ``alpha``, on every seed: ``drop`` (mean
    drop > 0) and, per comparison ``c``, ``c`` (mean of drops − c's drops > 0). A replicate resets
    (``resets``, one flag per replicate) when every test rejects (intersection–union: a run without a reset passes
    with probability ≤ ``alpha``); the same tests on ``positive`` give ``resets_positive``, and
    ``control_passes`` is True when the hard reset is detected on every seed.

    Returns per test the p-values over seeds (``p``), the smallest mean each seed's test detects with
    probability ``power`` (``mde``, the largest over seeds, by the t approximation), ``holds`` (every
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
        p = {k: np.array([sign_flip_p(d, rng) for d in v]) for k, v in diffs.items()}
        mde = {k: float(t_power * np.max(v.std(axis=1, ddof=1)) / np.sqrt(n)) for k, v in diffs.items()}
        return p, mde, {k: v.mean(axis=1) for k, v in diffs.items()}

    p, mde, means = tests(drops)
    p_pos, _, means_pos = tests(positive)
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
            "decided": bool(not unresolved.size or not resolved.size or below), "n_sequences": n}


def did_not_train(accuracy, chance: float, factor: float = 2.0) -> np.ndarray:
    """Which models did not train: accuracy at most ``factor`` times ``chance`` (the accuracy of a
    uniform guess among the answers). A boolean array; the models stay in every test (dropping them
    would select on the outcome), this only names them."""
    if not 0 < chance < 1 or factor < 1:
        raise ValueError("need 0 < chance < 1 and factor ≥ 1")
    return np.asarray(accuracy, dtype=float) <= factor * chance


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


def paired_gain_test(before, after, alpha: float, rng: np.random.Generator | None = None,
                     effect: float = REGULARISER_GAIN, power: float = 0.8) -> dict:
    """Does a treatment raise accuracy, paired by seed? ``before`` and ``after``: one accuracy per seed
    (same seeds, same order) without and with it. The rule: the one-sided sign-flip test
    (:func:`sign_flip_p`, exact up to 32 seeds, else Monte Carlo from ``rng``) of the mean difference
    ``after − before`` > 0, rejecting at ``alpha`` (``holds``). ``reachable``: whether n seeds can
    reach ``alpha`` at all (the smallest sign-flip p is 2⁻ⁿ); where they cannot, the test cannot hold
    and the design detects nothing. Its design: ``detectable``, the smallest true mean gain it detects
    with probability ``power`` (the paired t's (t_{1−α} + t_power)·sd/√n, which the sign-flip test
    approaches; with the observed spread ``sd``); ``ceiling``, ``mean(1 − before)`` (accuracy cannot
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
    return {"mean": float(d.mean()), "sd": sd, "se": float(sd / np.sqrt(n)), "p": p, "holds": bool(p < alpha), "n": n,
            "n_positive": int((d > 0).sum()), "detectable": width(n), "ceiling": float(np.mean(1.0 - before)),
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
