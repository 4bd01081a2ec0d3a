"""The chapter's decision rules: test levels, the slope claims, the exact binomial and skew-aware
tests of the test-time procedures, and the small summaries (medians of solve times) its tables show.

Every test of the chapter is sized by one weighted Bonferroni split (:func:`chapter_levels`): the
paper's own iterative cells share half of the false-alarm budget ``alpha``, the other tests the
other half, one level per test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from lib.claims import Alternative, Claims, Control
from lib.curriculum.inference import mean_test_z, rejection_cost
from lib.curriculum.one_step import slope_half_width
from lib.curriculum.training import samples_to_solve
from lib.stats import geometric_mean


def chapter_levels(alpha: float, n_tests: int, gap_tests: int) -> dict:
    """Per-test levels of a chapter run with at most ``alpha`` false alarms: ``gap_crit`` for each of
    the ``gap_tests`` tests of the paper's iterative cells (half of ``alpha`` when there are any),
    ``p_crit`` for each of the other ``n_tests`` tests, and ``z_crit`` the two-sided normal
    critical value at ``p_crit``."""
    other_share = alpha / 2 if gap_tests else alpha
    gap_crit = (alpha - other_share) / gap_tests if gap_tests else 0.0
    z_crit = float(stats.norm.isf(other_share / (2 * n_tests)))
    return {"other_share": other_share, "gap_crit": gap_crit, "z_crit": z_crit, "p_crit": other_share / n_tests}


def proportion_z(rate: float, p: float, n: int, centre: float | None = None) -> float:
    """|z| of an observed success ``rate`` over ``n`` trials against a success probability ``p``
    (normal approximation, the standard error under ``p``); with ``centre``, the distance to
    ``centre`` in units of that same standard error (an alternative judged on the null's scale)."""
    return abs(rate - (p if centre is None else centre)) / math.sqrt(p * (1 - p) / n)


def binomial_two_sided_p(k: int, n: int, p: float) -> float:
    """Two-sided p-value of ``k`` successes in ``n`` Binomial(n, p) trials: twice the smaller tail,
    at most 1."""
    return float(min(1.0, 2 * min(stats.binom.cdf(k, n, p), stats.binom.sf(k - 1, n, p))))


def binomial_upper_p(k: int, n: int, p: float) -> float:
    """One-sided p-value of at least ``k`` successes in ``n`` Binomial(n, p) trials."""
    return float(stats.binom.sf(k - 1, n, p))


def binomial_lower_p(k: int, n: int, p: float) -> float:
    """One-sided p-value of at most ``k`` successes in ``n`` Binomial(n, p) trials."""
    return float(stats.binom.cdf(k, n, p))


def route_label(route: str) -> str:
    """A route's name in the tables: the curricula are called curricula."""
    return route if route == "direct" else f"{route} curriculum"


def slope_claim(claims: Claims, id: str, statement: str, fits: dict, theory: dict, neighbours: dict | None = None,
                alt_statement: str | None = None, kind: str = "theorem", control: tuple | None = None, *,
                p_crit: float, level: str) -> dict:
    """Record the two-sided test of every fitted slope in ``fits`` (k* → :func:`slope_fit`) against its
    ``theory`` value, at level ``p_crit`` each: it holds when |slope − theory| ≤ t·se at every k*.
    A theorem claim also records its alternative (every fit's ``neighbours`` exponents outside the band)
    and its negative control, ``(statement, fits of the control)``, judged by the same rule with the
    control's own standard errors. ``level`` is the words that say how the level was sized. Returns
    the half-widths t·se per k*."""
    half = {k: slope_half_width(f, p_crit) for k, f in fits.items()}
    holds = all(abs(f["slope"] - theory[k]) <= half[k] for k, f in fits.items())
    one = len(fits) == 1
    k0 = next(iter(fits))
    tol = (f"|slope − theory| ≤ t·se at every k* (at most ±{max(half.values()):.3f}; se from the "
           f"seeds' scatter, Satterthwaite df; {level})")
    extra = {}
    if kind == "theorem":
        rejected = all(abs(f["slope"] - p) > half[k] for k, f in fits.items() for p in neighbours[k])
        cfits = control[1]
        passes = all(abs(f["slope"] - theory[k]) <= slope_half_width(f, p_crit) for k, f in cfits.items())
        extra = dict(source="reconstruction",
                     alternative=Alternative(alt_statement, neighbours[k0] if one else [neighbours[k] for k in fits],
                                             rejected=rejected),
                     control=Control(control[0], cfits[k0]["slope"] if one else [cfits[k]["slope"] for k in fits],
                                     holds=passes))
    claims.record(
        id, statement, theory=theory[k0] if one else [theory[k] for k in fits],
        simulation=fits[k0]["slope"] if one else [fits[k]["slope"] for k in fits], holds=holds,
        tolerance=tol, kind=kind, quick=False, false_alarm=p_crit * len(fits), **extra)
    return half


def calls_z(calls: np.ndarray, law: dict, mean: str = "calls") -> float:
    """|z| of the mean of ``calls`` under ``law`` (its exact mean ``law[mean]``, variance
    ``law[mean + "_var"]`` and third cumulant ``law[mean + "_k3"]``): the skew-aware test of
    :func:`mean_test_z` on the lattice of whole calls."""
    return mean_test_z(calls.mean(), calls.size, law[mean], law[f"{mean}_var"], law[f"{mean}_k3"], lattice=1)


def no_hacking(d: int, depths: int, m: int) -> dict:
    """The rejection sampler's law if wrong candidates failed their first call (q = 0): candidates
    right with probability d^−depths, ``m`` calls to accept."""
    return rejection_cost(1 / d**depths, 0.0, m)


def inference_checks(per_width: list[dict], k: int, repeats: int) -> dict:
    """The tests of the test-time procedures at every width (``per_width``: the records of
    :func:`best_of_n_vs_ltar`, depth ``k``, ``repeats`` repeats each).

    * best-of-n's mean calls against the exact law (``best_zs``) and against the law without reward
      hacking (``best_alt``, ``best_alt_zs``);
    * LTAR's mean calls over the repeats without a false commit before the last depth (``ltar_zs``),
      and against k* depths without hacking (``ltar_alt_zs``);
    * the number of repeats with such a false commit against its binomial law (two-sided
      ``ltar_ps``; ``dirty_counts`` and ``dirty_expected``);
    * ``ltar_all_z``: every repeat's mean calls against the exact mean by a plain z;
    * ``conf_p``: the smallest one-sided binomial p-value of the wrong answers against the exact
      failure probability, and ``conf_alt`` the same under one oracle call per candidate."""
    best_th = [w["th"]["best_of_n"] for w in per_width]
    best_zs = [calls_z(w["b"]["calls"], th) for w, th in zip(per_width, best_th)]
    best_alt = [no_hacking(w["d"], k, th["m"]) for w, th in zip(per_width, best_th)]
    best_alt_zs = [calls_z(w["b"]["calls"], alt) for w, alt in zip(per_width, best_alt)]
    ltar_zs, ltar_alt_zs, ltar_ps, dirty_counts, dirty_expected = [], [], [], [], []
    for w in per_width:
        clean, th = w["lt"]["clean"], w["th"]["ltar"]
        ltar_zs.append(calls_z(w["lt"]["calls"][clean], th, mean="clean_calls"))
        alt = no_hacking(w["d"], 1, th["m"])
        ltar_alt_zs.append(mean_test_z(w["lt"]["calls"][clean].mean(), int(clean.sum()), k * alt["calls"],
                                       k * alt["calls_var"], k * alt["calls_k3"], lattice=1))
        dirty, p_dirty = int((~clean).sum()), 1 - th["clean"]
        ltar_ps.append(binomial_two_sided_p(dirty, repeats, p_dirty))
        dirty_counts.append(dirty)
        dirty_expected.append(repeats * p_dirty)
    ltar_all_z = max(abs(w["lt"]["calls"].mean() - w["th"]["ltar"]["calls"])
                     / math.sqrt(w["th"]["ltar"]["calls_var"] / repeats) for w in per_width)
    conf_p, conf_alt = 1.0, 1.0
    for w in per_width:
        for key, th_key in (("b", "best_of_n"), ("lt", "ltar")):
            wrong = int((~w[key]["right"]).sum())
            conf_p = min(conf_p, binomial_upper_p(wrong, repeats, 1 - w["th"][th_key]["success"]))
            # the alternative: one oracle call per candidate (no repeated verification)
            c1 = 1 / w["d"] ** k if key == "b" else 1 / w["d"]
            one_call = rejection_cost(c1, 0.5, 1)["success"] ** (1 if key == "b" else k)
            conf_alt = min(conf_alt, binomial_lower_p(wrong, repeats, 1 - one_call))
    return {"best_th": best_th, "best_zs": best_zs, "best_alt": best_alt, "best_alt_zs": best_alt_zs,
            "ltar_zs": ltar_zs, "ltar_alt_zs": ltar_alt_zs, "ltar_ps": ltar_ps, "dirty_counts": dirty_counts,
            "dirty_expected": dirty_expected, "ltar_all_z": ltar_all_z, "conf_p": conf_p, "conf_alt": conf_alt}


def log_growth_rate(x, samples) -> float:
    """Least-squares slope of the log of the seeds' geometric mean against ``x`` (``samples``: one row
    per ``x``, one column per seed): the growth rate per unit of ``x`` of a quantity that grows
    geometrically."""
    return float(np.polyfit(x, np.log(geometric_mean(samples)), 1)[0])


def median_samples_to_solve(run: dict, level: float = 0.99) -> float:
    """Median over seeds of the rollouts a run needs to reach ``level`` test accuracy (infinite where
    more than half never do)."""
    return np.median(samples_to_solve(run, level))


def median_finite(values) -> float:
    """Median of the finite entries of ``values`` (nan when there are none)."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else math.nan


def solved_medians(runs: pd.DataFrame, by: list[str]) -> pd.Series:
    """Median ``solved_at`` of the runs that solved, per group of the columns ``by``."""
    return runs[runs["solved"]].groupby(by)["solved_at"].median()


def median_solved_at(runs: pd.DataFrame) -> float:
    """Median ``solved_at`` over the runs that solved (nan when none did)."""
    return float(runs.loc[runs["solved"], "solved_at"].median()) if runs["solved"].any() else math.nan
