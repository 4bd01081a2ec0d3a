"""The chapter's sweeps (one point is data, gradient flow and its bound report) and the
step-size study of the kernel-machine identity."""

from __future__ import annotations

import numpy as np

from lib.lpk.bounds import bound_report, identity_error, kernel_machine
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


def step_convergence(split, width: int, T: float, gd_steps, rk4_steps, *, beta: float, root: int,
                     key: tuple = ()) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """The kernel-machine identity as the step shrinks: one run of horizon ``T`` per step, by
    gradient descent (``"euler"``, learning rates ``gd_steps``) and by RK4 (``rk4_steps``), all
    from the data ``split`` and the w_0 of sub-stream ``key``. Returns the relative identity
    error per method and step, and for gradient descent what the accumulated second-order Taylor
    term S₂ leaves of the gap network − kernel machine, and what S₂ + S₃ leave (largest over test
    points, in units of the largest change of a test loss)."""
    conv, resid, resid3 = {}, [], []
    for method, steps in (("euler", gd_steps), ("rk4", rk4_steps)):
        conv[method] = []
        for h in steps:
            tr = gradient_flow(split, width, T, h, method=method, beta=beta, root=root, key=key, kernels=True,
                               taylor_order=3 if method == "euler" else 0, remainder_nodes=0)
            k = kernel_machine(tr, split, beta)
            conv[method].append(identity_error(k))
            if method == "euler":
                g = k["network"] - k["machine"]
                scale = np.abs(k["initial"] - k["network"]).max()   # the identity error's units
                t2, t3 = tr.extras["taylor"]
                resid.append(float(np.abs(g - t2).max() / scale))
                resid3.append(float(np.abs(g - t2 - t3).max() / scale))
    return conv, resid, resid3
