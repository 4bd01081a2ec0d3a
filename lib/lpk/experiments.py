"""The chapter's sweeps: one point is data, gradient flow and its bound report."""

from __future__ import annotations

from lib.lpk.bounds import bound_report
from lib.lpk.data import digits_1v7, gaussian_mixture
from lib.lpk.flow import gradient_flow


def run(dataset: str, n: int, width: int, noise: float, seed: int, T: float, step: float,
        method: str = "rk4", loss_cap: float = 3.0, delta: float = 0.01, *, root: int) -> dict:
    """One sweep point: data, gradient flow, and its :class:`~lib.lpk.bounds.BoundReport` as a
    dict (for :func:`lib.sweep.sweep`). ``seed`` is the replicate index and ``root`` the chapter
    seed: replicate ``seed`` draws its data and w_0 from the sub-streams keyed ``(seed,)``, so the
    points of a grid share them (the same images and w_0 at every noise level and width). The gap
    is measured on test labels with the training labels' noise (:meth:`~lib.lpk.data.Split.with_noisy_test`),
    the distribution the bound covers; ``gap_clean`` against the clean labels."""
    if dataset == "digits":
        split = digits_1v7(n, noise=noise, root=root, key=(seed,))
    elif dataset == "gaussian":
        split = gaussian_mixture(n, noise=noise, root=root, key=(seed,))
    else:
        raise ValueError(f"dataset must be 'digits' or 'gaussian', got {dataset!r}")
    split = split.with_noisy_test()
    traj = gradient_flow(split, width, T, step, method=method, root=root, key=(seed,))
    return bound_report(traj, split, loss_cap=loss_cap, delta=delta).as_dict()


def run_sweeps(grids: dict[str, dict], seeds, *, root: int, **sweep_kw):
    """Several named grids of :func:`run` for the replicates ``seeds`` (``range(k)``) of chapter
    seed ``root``, each configuration run once even when grids share it (e.g. the width sweep's
    default width is also a point of the noise sweep). Returns a pandas DataFrame with one row per
    (sweep, configuration, seed) and a ``sweep`` column."""
    from functools import partial

    import pandas as pd

    from lib.sweep import grid_points, sweep

    named = [(name, point) for name, g in grids.items() for point in grid_points(g)]
    unique = list({tuple(sorted(p.items())): p for _, p in named}.values())
    records = sweep(partial(run, root=root), unique, seeds=seeds, desc="gradient-flow runs", **sweep_kw)
    by_key = {}
    for r in records:
        key = tuple(sorted((k, r[k]) for k in unique[0]))
        by_key.setdefault(key, []).append(r)
    rows = [{**r, "sweep": name} for name, p in named for r in by_key[tuple(sorted(p.items()))]]
    return pd.DataFrame(rows)
