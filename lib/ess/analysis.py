"""Small statistics for the chapter's comparisons across trained models."""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

__all__ = ["FAR_BETTER_GAP", "SATURATED_ACCURACY", "REGULARISER_GAIN", "TRACKING_CORRELATION", "attainable_gap",
           "oracle_ceiling", "delimiter_test", "detectable_gap", "did_not_train", "gap_design", "paired_gain_test",
           "gain_tracking_test", "spearman", "spearman_rows", "spearman_gap_bootstrap", "within_family_spearman"]

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


def oracle_ceiling(y, config, family, rho_b: dict, undefined=(),
                   saturated: float = SATURATED_ACCURACY) -> dict:
    """The largest mean gap any configuration-level measure could show over ``rho_b``, family by
    family: the in-sample oracle that gives every model its configuration's mean ``y`` (``config``
    labels a model's configuration, e.g. width and κ; replicates share it) ranks ``y`` as well as
    anything that depends on the configuration alone can, so no such measure (ESS/κ included) beats
    the rival by more than ``ρ_oracle[f] − rho_b[f]`` (floored at 0) in family ``f``; the rest is
    training noise between replicates. A family where at least half the models reach
    ``saturated`` is *saturated*: there the oracle's ρ ranks near-ties, so it contributes 0
    (no memory measure can show that one solved model is better than another). Families in
    ``undefined`` (or with a rival correlation that is NaN) are left out, as the statistic leaves
    them out. Returns ``per_family`` (the ceilings), ``rho_oracle``, ``saturated`` (the saturated
    families) and ``ceiling``, their mean (NaN when no family is left)."""
    y = np.asarray(y, dtype=float)
    config = np.asarray(config)
    family = np.asarray(family)
    if not y.shape == config.shape == family.shape or y.ndim != 1:
        raise ValueError("y, config and family must be 1-d arrays of equal length")
    per, rho_o, sat = {}, {}, []
    for f in dict.fromkeys(family.tolist()):
        if f in set(undefined) or f not in rho_b or not np.isfinite(rho_b[f]):
            continue
        idx = np.flatnonzero(family == f)
        keys = config[idx]
        oracle = np.array([y[idx][keys == k].mean() for k in keys])
        r = float(spearman_rows(oracle[None], y[idx][None])[0])
        rho_o[f] = r
        if np.mean(y[idx] >= saturated) >= 0.5:
            sat.append(f)
            per[f] = 0.0
        else:
            per[f] = max(0.0, r - float(rho_b[f])) if np.isfinite(r) else 0.0
    return {"per_family": per, "rho_oracle": rho_o, "saturated": sat,
            "ceiling": float(np.mean(list(per.values()))) if per else float("nan")}


def gap_design(fam: dict, alpha: float, n_seeds: int, effect: float = FAR_BETTER_GAP,
               power: float = 0.8, ceiling: float | None = None) -> dict:
    """What a :func:`within_family_spearman` result ``fam`` can show, for ``lib.claims.Power``:
    ``detectable``, the smallest mean gap its one-sided test at ``alpha`` detects with probability
    ``power`` (:func:`detectable_gap` of its bootstrap standard error); ``ceiling``, the largest
    gap the design can show at all (``ceiling`` where given, e.g. :func:`oracle_ceiling`'s; else
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


def _t_sf(d: np.ndarray, n: int) -> float:
    """One-sided p-value of "mean of d > 0" (Student t, n − 1 degrees of freedom); where every
    difference is equal, 0 for a positive one and 1 otherwise."""
    se = d.std(ddof=1) / np.sqrt(n)
    if se == 0:
        return 0.0 if d.mean() > 0 else 1.0
    return float(stats.t.sf(d.mean() / se, n - 1))


def delimiter_test(drops: np.ndarray, comparisons: dict, positive: np.ndarray, alpha: float,
                   power: float = 0.8) -> dict:
    """The delimiter claim's intersection–union test, per seed, over test sequences.

    ``drops`` (seeds, sequences): each test sequence's entropy-ESS drop after delimiters of the model
    under test; ``comparisons``: name → (seeds, sequences) drops of comparison models measured on the
    same sequences (paired); ``positive``: the same model's drops with a hard reset (the positive
    control). Tests, each one-sided Student t over the sequences at ``alpha``, on every seed:
    ``drop`` (mean drop > 0) and, per comparison ``c``, ``c`` (mean of drops − c's drops > 0). The
    claim holds when every test rejects on every seed (false-alarm rate ≤ ``alpha``). The positive
    control applies the same tests to ``positive`` in place of ``drops``.

    Returns per test the p-values over seeds (``p``), the smallest mean each seed's test detects with
    probability ``power`` (``mde``, the largest over seeds), ``holds``, ``control_passes``, and the
    replicates whose own drop is not resolved: ``unresolved`` (indices), their drop's upper
    ``alpha`` bound (``drop_upper``), the smallest resolved mean drop, and ``decided``: False where
    some replicates resolve a drop and an unresolved one cannot be bounded below the smallest of
    those (a small reset and none cannot be told apart there)."""
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
        p = {k: np.array([_t_sf(d, n) for d in v]) for k, v in diffs.items()}
        mde = {k: float(t_power * np.max(v.std(axis=1, ddof=1)) / np.sqrt(n)) for k, v in diffs.items()}
        return p, mde, {k: v.mean(axis=1) for k, v in diffs.items()}

    p, mde, means = tests(drops)
    p_pos, _, means_pos = tests(positive)
    holds = bool(all(np.all(v < alpha) for v in p.values()))
    control = bool(all(np.all(v < alpha) for v in p_pos.values()))
    drop_means = means["drop"]
    drop_upper = drop_means + t_reject * drops.std(axis=1, ddof=1) / np.sqrt(n)
    unresolved = np.flatnonzero(p["drop"] >= alpha)
    resolved = np.flatnonzero(p["drop"] < alpha)
    smallest = float(drop_means[resolved].min()) if resolved.size else float("nan")
    below = bool(unresolved.size and resolved.size and drop_upper[unresolved].max() < smallest)
    return {"p": p, "mde": mde, "means": means, "p_positive": p_pos, "means_positive": means_pos,
            "holds": holds, "control_passes": control, "unresolved": unresolved, "resolved": resolved,
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


def paired_gain_test(before, after, alpha: float, effect: float = REGULARISER_GAIN, power: float = 0.8) -> dict:
    """Does a treatment raise accuracy, paired by seed? ``before`` and ``after``: one accuracy per seed
    (same seeds, same order) without and with it. The rule: a one-sided paired Student t-test of the
    mean difference ``after − before`` > 0 over the seeds, rejecting at ``alpha`` (``holds``). Its
    design: ``detectable``, the smallest true mean gain it detects with probability ``power``
    ((t_{1−α} + t_power)·sd/√n, n − 1 degrees of freedom, with the observed spread ``sd`` of the
    differences); ``ceiling``, the largest mean gain possible at all, ``mean(1 − before)`` (accuracy
    cannot exceed 1); ``effect`` as given; ``seeds_needed``, the seeds at which the same spread would
    bring ``detectable`` down to ``effect`` (None if none up to 10⁵). Also ``mean``, ``sd``, ``se``,
    ``p``, ``n`` and ``n_positive`` (seeds with a gain)."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape or before.ndim != 1 or before.size < 2:
        raise ValueError("before and after must be 1-d arrays of one length, two seeds or more")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("need 0 < alpha, power < 1")
    d = after - before
    n = d.size
    sd = float(d.std(ddof=1))

    def width(k):
        return float((stats.t.isf(alpha, k - 1) + stats.t.ppf(power, k - 1)) * sd / np.sqrt(k))

    p = _t_sf(d, n)
    return {"mean": float(d.mean()), "sd": sd, "se": float(sd / np.sqrt(n)), "p": p, "holds": bool(p < alpha), "n": n,
            "n_positive": int((d > 0).sum()), "detectable": width(n), "ceiling": float(np.mean(1.0 - before)),
            "effect": float(effect), "seeds_needed": _seeds_for(width, effect) if sd > 0 else n}


def gain_tracking_test(d_measure, d_accuracy, alpha: float, effect: float = TRACKING_CORRELATION,
                       power: float = 0.8) -> dict:
    """Does the paired change of a measure (e.g. ESS) explain the paired change in accuracy over seeds?
    The rule: Pearson's r between ``d_measure`` and ``d_accuracy`` (one value per seed each) > 0, the
    one-sided t-test of r with n − 2 degrees of freedom, rejecting at ``alpha`` (``holds``). Its
    design: ``detectable``, the smallest true correlation it detects with probability ``power``
    (Fisher's z: tanh((z_{1−α} + z_power)/√(n − 3))); ``ceiling`` 1 (a correlation); ``effect`` as
    given; ``seeds_needed``, the smallest n whose detectable correlation is at most ``effect``. Also
    ``r``, ``p``, ``n`` and, for the measure's change itself, its mean ``measure_mean`` and the
    one-sided paired p-value of ``measure_mean`` > 0 (``measure_p``), reported beside the rule."""
    x, y = np.asarray(d_measure, dtype=float), np.asarray(d_accuracy, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 4:
        raise ValueError("d_measure and d_accuracy must be 1-d arrays of one length, four seeds or more")
    if not (0 < alpha < 1 and 0 < power < 1 and 0 < effect < 1):
        raise ValueError("need 0 < alpha, power, effect < 1")
    n = x.size
    if x.std() == 0 or y.std() == 0:
        r, p = float("nan"), 1.0
    else:
        r = float(np.corrcoef(x, y)[0, 1])
        r_c = min(r, 1.0 - 1e-15)
        p = float(stats.t.sf(r_c * np.sqrt((n - 2) / (1.0 - r_c ** 2)), n - 2))
    z = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    return {"r": r, "p": p, "holds": bool(p < alpha), "n": n, "detectable": float(np.tanh(z / np.sqrt(n - 3))),
            "ceiling": 1.0, "effect": float(effect),
            "seeds_needed": int(np.ceil((z / np.arctanh(effect)) ** 2 + 3)),
            "measure_mean": float(x.mean()), "measure_p": _t_sf(x, n)}
