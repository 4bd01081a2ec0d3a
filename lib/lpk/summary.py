"""The sweeps' runs turned into the chapter's tables and numbers: each run counted once, a
quantity per level of a swept variable, the rank statistics of the bound against the gap and
the τ their tests detect, the bound over the gap against the training size, and the sentence
saying whether the bound is above the gap. ``runs`` is the frame of
:func:`lib.lpk.experiments.run_sweeps` (one row per sweep, configuration and seed)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lib.lpk.ranks import (kendall_detectable, kendall_tau, kendall_test, partial_kendall, spearman_rho,
                          stratified_kendall)
from lib.seeding import stream
from lib.stats import loglog_slope

#: The columns that name one run: a configuration and its replicate.
RUN_COLUMNS = ["dataset", "n", "width", "noise", "seed"]
#: Rivals of the LPK bound that the across-runs test is also applied to: the noise level itself,
#: Arora et al.'s bound and the training loss.
RIVALS = ("noise", "arora_bound", "train_loss")


def unique_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run once: a configuration shared by two sweeps (e.g. the default width, a point of
    both the noise and the width sweep) is one run, kept at its first row."""
    return runs.drop_duplicates(subset=RUN_COLUMNS)


def values_by_level(runs: pd.DataFrame, var: str, col: str) -> np.ndarray:
    """``col`` of ``runs`` as an array (level of ``var``, run), the levels ascending; every level
    must hold equally many runs."""
    return np.array([runs[runs[var] == x][col].to_numpy() for x in sorted(runs[var].unique())])


def rank_statistics(runs: pd.DataFrame, axis_of: dict[str, str], tested, alpha: float) -> dict:
    """The rank statistics of every sweep of ``runs`` (``axis_of``: each sweep's swept variable),
    each a dict by sweep name: ``tau`` and ``rho``, Kendall's τ and Spearman's ρ of the LPK bound
    with the gap; ``design_tau``, τ of the swept variable with the gap; ``partial``, the bound's
    partial τ given the swept variable; ``across``, the exact one-sided Kendall test over all the
    sweep's runs at false-alarm rate ``alpha``; ``within``, the exact within-level test. And
    ``controls``, keyed (sweep, column) for the sweeps in ``tested``: the across-runs test applied
    to each of :data:`RIVALS` in place of the bound."""
    groups = list(runs.groupby("sweep"))
    return {
        "tau": {name: kendall_tau(g["lpk_bound"], g["gap"]) for name, g in groups},
        "rho": {name: spearman_rho(g["lpk_bound"], g["gap"]) for name, g in groups},
        "design_tau": {name: kendall_tau(g[axis_of[name]], g["gap"]) for name, g in groups},
        "partial": {name: partial_kendall(g["lpk_bound"], g["gap"], g[axis_of[name]]) for name, g in groups},
        "across": {name: kendall_test(g["lpk_bound"], g["gap"], alpha=alpha) for name, g in groups},
        "controls": {(name, col): kendall_test(g[col], g["gap"], alpha=alpha)
                     for name, g in groups if name in tested for col in RIVALS},
        "within": {name: stratified_kendall(g["lpk_bound"], g["gap"], g[axis_of[name]], alpha=alpha)
                   for name, g in groups},
    }


def detectable_taus(runs: pd.DataFrame, axis_of: dict[str, str], tested, alpha: float,
                    root: int) -> tuple[dict, dict]:
    """For the sweeps in ``tested``: the sizes their two Kendall tests see (``"across"``: all the
    sweep's runs as one stratum; ``"within"``: the runs at each level of the swept variable), and
    the τ each test declares with 80 % power at false-alarm rate ``alpha``, keyed (sweep, test),
    simulated from the sub-stream ``("power", sweep, test)`` of chapter seed ``root``."""
    sizes = {name: {"across": [len(g)], "within": g.groupby(axis_of[name]).size().tolist()}
             for name, g in runs.groupby("sweep") if name in tested}
    detect80 = {(name, how): kendall_detectable(s, alpha, stream(root, "power", name, how))
                for name, ss in sizes.items() for how, s in ss.items()}
    return sizes, detect80


def median_positive_ratio(num, den) -> float:
    """The median of ``num / den`` over the entries where ``den`` > 0."""
    return float(np.median(num[den > 0] / den[den > 0]))


def bound_above_gap_text(unique: pd.DataFrame, axis_of: dict[str, str]) -> str:
    """Whether the LPK bound is at least the gap in every run of ``unique`` (each run once), and
    where not, in how many and where the largest shortfall is (``axis_of``: each sweep's swept
    variable, ``"noise"``, ``"width"`` or ``"n"``)."""
    margin = unique.lpk_bound - unique.gap
    n_below = int((margin < 0).sum())
    if n_below == 0:
        return (f"the bound is at least the measured gap in all {len(unique)} runs (smallest "
                f"bound − gap {margin.min():.3f})")
    worst = unique.loc[margin.idxmin()]
    var = axis_of[worst.sweep]
    where = {"noise": f"label noise {worst.noise:g}", "width": f"width {worst.width:g}",
             "n": f"n = {worst.n:g}"}[var]
    task = "the digits" if worst.dataset == "digits" else "the Gaussian task"
    return (f"the bound is below the measured gap in {n_below} of the {len(unique)} runs, "
            f"by up to {-margin.min():.3f} (on {task} at {where}); in the other "
            f"{len(unique) - n_below} it is at least the gap")


def bound_over_gap_by_n(runs: pd.DataFrame, names, loss_cap: float) -> pd.DataFrame:
    """One row per sweep of ``names`` (training-size sweeps) and training size: the number of
    runs, the ratios LPK bound / gap of its runs with a positive gap (an array), and how many of
    its runs have a bound below ``loss_cap`` (non-vacuous)."""
    rows = []
    for name in names:
        g = runs[runs.sweep == name]
        for x in sorted(g.n.unique()):
            r = g[g.n == x]
            pos = r[r.gap > 0]
            rows.append({"sweep": name, "n": int(x), "runs": len(r),
                         "ratio": (pos.lpk_bound / pos.gap).to_numpy(),
                         "non_vacuous": int((r.lpk_bound < loss_cap).sum())})
    return pd.DataFrame(rows)


def geometric_means(samples) -> list[float]:
    """The geometric mean of each array of positive values (NaN for an empty one)."""
    return [np.exp(np.mean(np.log(r))) if len(r) else np.nan for r in samples]


def by_n_summary(by_n: pd.DataFrame, names) -> tuple[dict, dict, dict]:
    """From :func:`bound_over_gap_by_n`: the geometric-mean bound / gap per (sweep, n) row (None
    where no run has a positive gap), its log-log slope against n per sweep of ``names``, and per
    sweep the share of non-vacuous runs at each n."""
    ratio_by_n = {f"{r.sweep}, n={r.n}": float(np.exp(np.mean(np.log(r.ratio)))) if len(r.ratio) else None
                  for r in by_n.itertuples()}
    ratio_slope = {name: loglog_slope(by_n[by_n.sweep == name].n, geometric_means(by_n[by_n.sweep == name].ratio))
                   for name in names}
    share = {name: (by_n[by_n.sweep == name].non_vacuous / by_n[by_n.sweep == name].runs).to_numpy()
             for name in names}
    return ratio_by_n, ratio_slope, share
