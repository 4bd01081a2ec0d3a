"""The chapter's sweeps: one point is data, gradient flow and its bound report."""

from __future__ import annotations

from lib.lpk.bounds import bound_report
from lib.lpk.data import digits_1v7, gaussian_mixture
from lib.lpk.flow import gradient_flow


def run(dataset: str, n: int, width: int, noise: float, seed: int, T: float, step: float,
        method: str = "rk4", loss_cap: float = 3.0, delta: float = 0.01) -> dict:
    """One sweep point: data, gradient flow, and its :class:`BoundReport` as a dict (for
    :func:`lib.sweep.sweep`)."""
    if dataset == "digits":
        split = digits_1v7(n, noise=noise, seed=seed)
    elif dataset == "gaussian":
        split = gaussian_mixture(n, noise=noise, seed=seed)
    else:
        raise ValueError(f"dataset must be 'digits' or 'gaussian', got {dataset!r}")
    traj = gradient_flow(split, width, T, step, method=method, seed=seed)
    return bound_report(traj, split, loss_cap=loss_cap, delta=delta).as_dict()


def run_sweeps(grids: dict[str, dict], seeds, **sweep_kw):
    """Several named grids of :func:`run`, each configuration run once even when grids share it
    (e.g. the width sweep's default width is also a point of the noise sweep). Returns a pandas
    DataFrame with one row per (sweep, configuration, seed) and a ``sweep`` column."""
    import pandas as pd

    from lib.sweep import grid_points, sweep

    named = [(name, point) for name, g in grids.items() for point in grid_points(g)]
    unique = list({tuple(sorted(p.items())): p for _, p in named}.values())
    records = sweep(run, unique, seeds=seeds, desc="gradient-flow runs", **sweep_kw)
    by_key = {}
    for r in records:
        key = tuple(sorted((k, r[k]) for k in unique[0]))
        by_key.setdefault(key, []).append(r)
    rows = [{**r, "sweep": name} for name, p in named for r in by_key[tuple(sorted(p.items()))]]
    return pd.DataFrame(rows)
