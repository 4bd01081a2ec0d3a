"""The chapter's decision rules and the small statistics its tables show.

Every statistical claim of the chapter is decided by :func:`tested`: its ``m`` p-values at level
``alpha/m`` each (Bonferroni within the claim), ``alpha`` per claim, so that one run raises at
most ``chapter_rate`` false alarms over its ``n_claims`` statistical claims."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from lib.claims import Alternative, Claim, Claims, Control
from lib.tmc.experiments import mean_above_p
from lib.tmc.odes import kl_tilt
from lib.tmc.policy import softmax
from lib.tmc.selection import dprm_h_transform, orm_best_of_n, prm_greedy, soft_best_of_n
from lib.tmc.tree import Setting, coverage, path_probs


def claim_rule(p_values, bound: float, effect: bool) -> bool:
    """Whether p-values pass a claim's rule at ``bound`` per test: an effect (a difference in the
    predicted direction) needs every p-value below ``bound``, a fit (data that agree with a
    prediction) every p-value at or above it."""
    q = np.atleast_1d(p_values)
    return bool(q.max() < bound) if effect else bool(q.min() >= bound)  # every test must agree


def tested(claims: Claims, id: str, statement: str, p_values, what: str, alternative=None, effect: bool = False,
           kind: str = "theorem", control=None, *, alpha: float, chapter_rate: float, n_claims: int,
           **kw) -> Claim:
    """Record a claim decided by its ``m`` p-values at level ``alpha/m`` each (:func:`claim_rule`).
    ``what`` names the tests in the tolerance; ``alternative``: (statement, p-values of the data
    under it), rejected when its smallest p-value is below the level; ``control``: (statement,
    p-values of the negative control), judged by the same rule. ``chapter_rate`` and ``n_claims``
    (the false-alarm rate of a run over its statistical claims) only enter the words; ``kw`` goes
    to :meth:`Claims.record`."""
    p = np.atleast_1d(p_values)
    bound = alpha / p.size
    holds = claim_rule(p, bound, effect)
    if control is not None:
        q = np.atleast_1d(control[1])
        kw["control"] = Control(control[0], float(q.max() if effect else q.min()), holds=claim_rule(q, bound, effect))
    alt = None if alternative is None else Alternative(  # its prediction: the same statistic under it
        alternative[0], float(np.min(alternative[1])), rejected=bool(np.min(alternative[1]) < bound))
    rate = (f"≤ {alpha:.0e} for this claim, ≤ {chapter_rate:.0e} over the chapter's {n_claims} "
            "statistical claims")
    tol = (f"largest one-sided p-value of {p.size} {what} < {alpha:.0e}/{p.size} (chance of holding "
           f"without the effect {rate})"
           if effect else f"smallest p-value of {p.size} {what} ≥ {alpha:.0e}/{p.size} (Bonferroni: "
           f"false-alarm rate {rate})")
    return claims.record(id, statement, theory=bound, simulation=float(p.max() if effect else p.min()),
                         holds=holds, tolerance=tol, kind=kind, alternative=alt, false_alarm=alpha,
                         source="reconstruction" if kind == "theorem" else None, **kw)


def mean_z_test(samples: np.ndarray, exact) -> tuple:
    """Two-sided z-tests of the column means of ``samples`` (rows: independent draws) against
    ``exact``: the means, their standard errors, the z-scores and the two-sided normal p-values."""
    mean, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(len(samples))
    z = (mean - exact) / se
    return mean, se, z, 2 * stats.norm.sf(np.abs(z))


def seed_stack(records: list[dict], key: str) -> np.ndarray:
    """The runs' ``key`` arrays stacked along a last axis of seeds: shape ``(..., n_runs)``."""
    return np.stack([r[key] for r in records], axis=-1)


def geometric_midpoint(a: float, b: float) -> float:
    """√(ab): the point halfway between ``a`` and ``b`` in log ratio."""
    return float(np.sqrt(a * b))


def crossing_p(passes: np.ndarray, base_pass) -> list[float]:
    """One-sided t-test p-values, over seeds, that trained policies raise pass@1 above the base's and
    lower pass@K_max below it. ``passes``: pass@K per K (rows, K = 1 … K_max) and seed (columns);
    ``base_pass``: the base model's pass@K at the same K."""
    return [mean_above_p(passes[0], base_pass[0]), mean_above_p(-passes[-1], -base_pass[-1])]


def inference_coverages(base_logits, setting: Setting, *, best_of: int, kappa: float, lam: float,
                        beta: float) -> dict:
    """Class coverage (easy, hard, invalid mass) of each inference-time method applied to the base
    policy on one task: ORM and soft best-of-N, greedy PRM, the distributional PRM and the KL tilt."""
    pi = path_probs(softmax(base_logits), setting.paths)
    dists = {"ORM best-of-N": orm_best_of_n(pi, setting.rex, best_of),
             "soft best-of-N": soft_best_of_n(pi, setting.rex, best_of, kappa),
             "PRM (greedy)": prm_greedy(pi, setting.paths, setting.rex),
             "dPRM (h-transform)": dprm_h_transform(pi, setting.rex, lam),
             "KL tilt (closed form)": kl_tilt(pi, setting.rex, beta)}
    return {k: coverage(v, setting.classes) for k, v in dists.items()}


def count_wins(ratios) -> int:
    """How many ratios exceed 1."""
    return int((ratios > 1).sum())


def median_or_nan(values) -> float:
    """The median of a pandas Series (nan when it is empty)."""
    return float(values.median()) if len(values) else math.nan
