"""The statistics of the chapter's rate claims: the fitted log–log slope of the mean error and its
band, a bias floor's predicted slope (the nearest rival of a vanishing error), the rate constant's
tolerance, and a one-sided bound on the error at the largest N.

Why the slope is fitted from ``fit_from`` on: the delta method describes the estimators once every
output is seen often. Below that the Bradley–Terry plug-in's mean error sits a few per cent above
its C/√N over K = 8 outputs: 2 to 4 % at N = 100 and about 1 % from N = 1000 under chapter seed 0's
four structures (400 replicates per N), 5 to 8 % up to N = 1000 on a setup whose rarest output has
probability 0.007 (100 replicates). That steepens a slope fitted from N = 100 by a sizeable share of
the standard error of a 40-replicate study, enough to push it out of a band sized for 10⁻³ on some
setups. The bootstrap standard error of the slope itself is accurate (its mean equals the spread of
fitted slopes over 50 independent 40-replicate studies).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from lib.stats import bootstrap_slope_se, loglog_slope

__all__ = ["slope_fit", "floor_slope", "rate_tolerance", "upper_bound", "margin_test"]


def slope_fit(Ns, samples, rng: np.random.Generator, fa: float, fit_from: int = 0, reps: int = 200) -> dict:
    """The log–log slope of the replicate means over the ``Ns`` ≥ ``fit_from`` (``samples[i]``: the
    replicates at ``Ns[i]``), its bootstrap standard error (replicates resampled independently at
    each N) and the two-sided band ``−0.5 ± z·se`` with ``z`` the normal quantile for a false-alarm
    rate ``fa``. Returns ``{slope, se, z, half, low, high, Ns}`` (the Ns fitted). Needs two Ns."""
    Ns = np.asarray(Ns, float)
    s = np.asarray(samples, float)
    keep = Ns >= fit_from
    if keep.sum() < 2:
        raise ValueError(f"the slope needs two pair counts ≥ {fit_from}, got {Ns[keep].tolist()}")
    if not 0 < fa < 1:
        raise ValueError("fa must lie in (0, 1)")
    slope = loglog_slope(Ns[keep], s[keep].mean(axis=1))
    se = bootstrap_slope_se(Ns[keep], s[keep], rng, reps)
    z = float(stats.norm.isf(fa / 2))
    return {"slope": slope, "se": se, "z": z, "half": z * se, "low": -0.5 - z * se, "high": -0.5 + z * se,
            "Ns": Ns[keep].astype(int).tolist()}


def floor_slope(C: float, Ns, N_max: float, share: float = 0.5) -> float:
    """The slope a fit over ``Ns`` would show if the mean error were ``C/√N + c`` with a bias floor
    ``c = share·C/√N_max`` (a floor ``share`` times the predicted error at the largest N): the rival
    of an estimator that converges to a slightly wrong distribution."""
    Ns = np.asarray(Ns, float)
    if C <= 0 or share <= 0:
        raise ValueError("C and share must be positive")
    return loglog_slope(Ns, C / np.sqrt(Ns) + share * C / np.sqrt(N_max))


def rate_tolerance(scaled, fa: float) -> dict:
    """√N·TV of the replicates at one N: its mean and the two-sided Student-t tolerance
    ``q·se`` for a false-alarm rate ``fa`` (``q`` the quantile, ``se`` the standard error)."""
    v = np.asarray(scaled, float)
    if v.size < 2:
        raise ValueError("need two replicates")
    se = float(v.std(ddof=1) / np.sqrt(v.size))
    q = float(stats.t.isf(fa / 2, v.size - 1))
    return {"mean": float(v.mean()), "se": se, "q": q, "tol": q * se, "n": int(v.size)}


def upper_bound(values, fa: float) -> float:
    """One-sided Student-t upper bound at level 1 − ``fa`` of the mean of ``values`` (a bias floor c
    satisfies c ≤ E TV at every N, so this bounds it at the largest N)."""
    v = np.asarray(values, float)
    return float(v.mean() + stats.t.isf(fa, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))


def margin_test(values, margin: float, fa: float, power: float = 0.8) -> dict:
    """One-sided Student-t test that the mean of ``values`` exceeds ``margin`` at false-alarm rate
    ``fa``: ``holds`` when the lower confidence bound at level 1 − ``fa`` lies above the margin;
    ``detectable``, the smallest true mean the test detects with probability ``power``
    (``margin`` plus :func:`lib.stats.seed_test`'s detectable excess)."""
    from lib.stats import seed_test

    v = np.asarray(values, float)
    t = seed_test(v - margin, fa, power)
    return {"mean": float(v.mean()), "se": t.se, "lower": float(v.mean() - t.crit * t.se), "holds": bool(t.above()),
            "detectable": float(margin + t.mde), "n": t.n, "crit": t.crit}
