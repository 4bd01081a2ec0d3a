"""The statistics of the chapter's rate claims: the fitted log–log slope of the mean error and its
band, a bias floor's predicted slope (the nearest rival of a vanishing error), the rate constant's
tolerance, and a one-sided bound on the error at the largest N; the study's summaries by structure
(:func:`rate_study`, :func:`largest_n_summary`) and the GRU study's (:func:`gru_rate`,
:func:`fit_effort`, :func:`met_median`), and the Student-t quantile they use (:func:`t_quantile`).

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

from lib.stats import bootstrap_slope_se, loglog_slope, mean_se, t_interval

__all__ = ["slope_fit", "floor_slope", "rate_tolerance", "upper_bound", "margin_test", "t_quantile", "predicted_tv",
           "rate_study", "band_ratio", "largest_n_summary", "gru_rate", "fit_effort", "met_median", "rate_constant"]


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


def t_quantile(fa: float, df: int) -> float:
    """The upper ``fa`` quantile of Student's t with ``df`` degrees of freedom (one-sided critical
    value at false-alarm rate ``fa``; pass ``fa``/2 for a two-sided one). :mod:`lib.stats` uses
    these quantiles inside its intervals but exposes none on its own."""
    if not 0 < fa < 1 or df < 1:
        raise ValueError("need 0 < fa < 1 and df ≥ 1")
    return float(stats.t.isf(fa, df))


def predicted_tv(C: float, Ns) -> np.ndarray:
    """The delta-method prediction E TV ≈ C/√N at each pair count in ``Ns``."""
    return C / np.sqrt(np.asarray(Ns, float))


def rate_study(study, prefs, Ns, columns, rng: np.random.Generator, fa: float, fit_from: int,
               fitted=("ddro", "bt")) -> dict:
    """The categorical study's errors by structure and estimator: for each preference structure
    in ``prefs`` and column of ``study`` in ``columns``, the replicates at each N (``samples``, an
    (N, replicate) array), their 10 and 90 % percentiles (``bands``), the log–log slope of their
    means over N ≥ ``fit_from`` (``slopes``), the median over N of the 90/10 percentile ratio
    (``spread``), and, for the ``fitted`` columns, :func:`slope_fit` with its bootstrap drawn from
    ``rng`` (``fits``). All keyed by ``(structure name, column)``; the bootstraps draw in the
    order of ``prefs`` and then ``columns``."""
    Ns_arr = np.asarray(Ns, float)
    fit_rows = Ns_arr >= fit_from
    out = {"samples": {}, "bands": {}, "slopes": {}, "spread": {}, "fits": {}}
    for pref in prefs:
        d = study[study.structure == pref.name]
        for col in columns:
            key = (pref.name, col)
            samples = np.array([d[d.N == N][col].to_numpy() for N in Ns])
            lo10, hi90 = np.percentile(samples, [10, 90], axis=1)
            out["samples"][key], out["bands"][key] = samples, (lo10, hi90)
            out["slopes"][key] = loglog_slope(Ns_arr[fit_rows], samples[fit_rows].mean(1))
            out["spread"][key] = float(np.median(hi90 / lo10))
            if col in fitted:
                out["fits"][key] = slope_fit(Ns, samples, rng, fa, fit_from=fit_from)
    return out


def band_ratio(spread: dict, column: str = "ddro"):
    """The median over structures of :func:`rate_study`'s ``spread`` for one estimator."""
    return np.median([v for (_, c), v in spread.items() if c == column])


def largest_n_summary(study, prefs, N_max: int, slopes: dict, consts: dict, bt_consts: dict, limits: dict,
                      bt_limit_tv: dict) -> dict:
    """What the study shows at its largest pair count ``N_max``, over the structures: the range of
    the DDRO and plug-in slopes (``slopes`` from :func:`rate_study`) and of √N·mean TV over their
    constants (``c_ratio_*``, ``bt_c_ratio_*``), the range of the plug-in's constant over DDRO's,
    the plug-in's largest population TV, DPO's and the KTO-style fit's largest relative deviation
    from their population limits (``dpo_dev``, ``kto_dev``), and in how many runs DDRO beats both
    (``n_order`` of ``n_order_runs``)."""
    at_max = study[study.N == N_max]
    means_max = at_max.groupby("structure")[["ddro", "dpo", "kto", "bt"]].mean()
    c_ratio = [means_max.ddro[p.name] * np.sqrt(N_max) / consts[p.name] for p in prefs]
    bt_c_ratio = [means_max.bt[p.name] * np.sqrt(N_max) / bt_consts[p.name] for p in prefs]
    ddro_slopes = [slopes[(p.name, "ddro")] for p in prefs]
    bt_slopes = [slopes[(p.name, "bt")] for p in prefs]
    const_ratio = [bt_consts[p.name] / consts[p.name] for p in prefs]
    return {"ddro_slope_lo": min(ddro_slopes), "ddro_slope_hi": max(ddro_slopes),
            "bt_slope_lo": min(bt_slopes), "bt_slope_hi": max(bt_slopes),
            "bt_c_ratio_lo": min(bt_c_ratio), "bt_c_ratio_hi": max(bt_c_ratio),
            "const_ratio_lo": min(const_ratio), "const_ratio_hi": max(const_ratio),
            "bt_limit_max": max(bt_limit_tv.values()),
            "c_ratio_lo": min(c_ratio), "c_ratio_hi": max(c_ratio),
            **{f"{m}_dev": max(abs(means_max[m][p.name] / limits[p.name]["tv"][m] - 1) for p in prefs)
               for m in ("dpo", "kto")},
            "n_order": int(((at_max.ddro < at_max.dpo) & (at_max.ddro < at_max.kto)).sum()),
            "n_order_runs": len(at_max)}


def gru_rate(samples: dict, Ns, fa: float, C: float) -> dict:
    """The GRU study's rate statistics. ``samples[kind]`` (kind ``ddro`` and ``dpo``): TV to p₊,
    an (N, replicate) array over the pair counts ``Ns``. Per replicate the log–log slope over N
    (``seed_slopes``; the replicates are independent); per kind the mean slope and its two-sided
    Student-t interval at level 1 − ``fa`` (``slope``, ``low``, ``high``, and ``dpo_*``); the
    half-width of DDRO's interval (``half``); whether it excludes the non-vanishing limit's slope
    0 (``rival_rejected``) and whether DPO's excludes −0.5 (``control_rejects``); at the largest N,
    DDRO's mean TV, its standard error and one-sided upper bound at level 1 − ``fa``
    (``tv_mean``, ``tv_se``, ``tv_upper``); √N·mean TV over ``C`` at the smallest and largest N
    (``line_first``, ``line_last``); and the two-sided quantile ``q`` the interval uses."""
    n = samples["ddro"].shape[1]
    nn = np.asarray(Ns, float)
    seed_slopes = {kind: [loglog_slope(Ns, samples[kind][:, r]) for r in range(n)] for kind in ("ddro", "dpo")}
    slope, low, high = t_interval(seed_slopes["ddro"], level=1 - fa)
    dpo_slope, dpo_low, dpo_high = t_interval(seed_slopes["dpo"], level=1 - fa)
    tv_mean, tv_se = mean_se(samples["ddro"][-1])
    return {"seed_slopes": seed_slopes, "slope": slope, "low": low, "high": high,
            "dpo_slope": dpo_slope, "dpo_low": dpo_low, "dpo_high": dpo_high, "half": high - slope,
            "rival_rejected": not low <= 0.0 <= high, "control_rejects": not dpo_low <= -0.5 <= dpo_high,
            "tv_mean": tv_mean, "tv_se": tv_se, "tv_upper": tv_mean + t_quantile(fa, n - 1) * tv_se,
            "line_first": float(samples["ddro"][0].mean() * np.sqrt(nn[0]) / C),
            "line_last": float(tv_mean * np.sqrt(nn[-1]) / C), "q": t_quantile(fa / 2, n - 1)}


def fit_effort(neural) -> dict:
    """How close the GRU's DDRO fits came to the categorical optimum of their loss (``tv_optimum``
    over ``tv``: median and largest) and the median optimiser steps of the DDRO fits at the
    smallest and largest N. ``neural``: one row per run with ``kind``, ``N``, ``tv``,
    ``tv_optimum`` and ``steps``."""
    ddro_runs = neural[neural.kind == "ddro"]
    rel_opt = ddro_runs.tv_optimum / ddro_runs.tv
    steps_by = neural.groupby(["kind", "N"]).steps.median().unstack(0)
    return {"opt_med": float(rel_opt.median()), "opt_max": float(rel_opt.max()),
            "steps_ddro_first": int(steps_by["ddro"].iloc[0]), "steps_ddro_last": int(steps_by["ddro"].iloc[-1])}


def met_median(met):
    """The median step at which the runs met the stopping rule (``met`` ≥ 0; −1 for a run that
    did not), as an int; None when none did."""
    met = np.asarray(met)
    return int(np.median(met[met >= 0])) if (met >= 0).any() else None


def rate_constant(values, control, N: int, fa: float) -> dict:
    """:func:`rate_tolerance` of √``N``·``values`` (the replicates' TV at ``N``), and under
    ``control`` √``N`` times the mean of a control's TV at ``N`` (``control``: a pandas Series or an
    array)."""
    return {**rate_tolerance(values * np.sqrt(N), fa), "control": float(control.mean() * np.sqrt(N))}
