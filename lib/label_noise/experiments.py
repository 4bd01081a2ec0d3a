"""The chapter's sweep points beyond the main runs: a run trained to a loss target at one d/n
(Theorem 4.2 and the d/n sweep), one point of the phase grid, and one run of the digits experiment.
Each takes the grid's values and the seed as :func:`lib.sweep.sweep` passes them; the chapter binds
the rest with ``functools.partial``."""

from __future__ import annotations

import numpy as np

from lib.label_noise.analysis import stage_one_appears
from lib.label_noise.digits import digits_task, train_digits
from lib.label_noise.training import run_synthetic, run_to_loss
from lib.seeding import stream

__all__ = ["dim_point", "phase_point", "digits_run"]


def dim_point(tau: float, ratio: float, seed: int, *, root: int, n: int, m: int, n_snr2: float, sigma_xi: float,
              sigma0: float, d_ref: int, target_loss: float, max_steps: int, n_test: int,
              sigma_zeta: float) -> dict:
    """One :func:`~lib.label_noise.training.run_to_loss` run at d = ``ratio``·``n`` (rounded), step
    η = 1/(σ_ξ²d) and initialisation scale ``sigma0``·√(``d_ref``/d) (the main runs' σ₀ at their
    d = ``d_ref``), tested on ``n_test`` fresh samples and as many of the paper's test distribution
    (fresh noise of standard deviation ``sigma_zeta``). Its draws come from sub-stream
    ``("stage2-dimension", seed)`` of chapter seed ``root`` when d = n² (the Theorem 4.2 runs) and
    from ``("stage2-sweep", ratio, seed)`` otherwise (the d/n sweep)."""
    dd = int(round(ratio * n))
    rng = stream(root, "stage2-dimension", seed) if dd == n**2 else stream(root, "stage2-sweep", ratio, seed)
    return run_to_loss(tau, rng, n=n, d=dd, m=m, n_snr2=n_snr2, sigma_xi=sigma_xi,
                       sigma0=sigma0 * np.sqrt(d_ref / dd), eta=1.0 / (sigma_xi**2 * dd), target_loss=target_loss,
                       max_steps=max_steps, n_test=n_test, n_reuse=n_test, sigma_zeta=sigma_zeta)


def phase_point(n_snr2: float, tau: float, seed: int, **common) -> dict:
    """One point of the phase grid: a symmetric-noise run (``experiment="phase"``, the other
    arguments of :func:`~lib.label_noise.training.run_synthetic` in ``common``); whether a clean
    Stage I appears (:func:`~lib.label_noise.analysis.stage_one_appears`) and the lowest accuracy
    on the noisy samples after step 0."""
    h = run_synthetic(tau, seed, experiment="phase", n_snr2=n_snr2, **common)["history"]
    return {"stage1": stage_one_appears(h), "min_noisy": float(np.nanmin(h.accuracy("noisy")[1:]))}


def digits_run(seed: int, *, root: int, classes, tau: float, test_fraction: float, epochs: int, lr: float,
               batch: int, width: int) -> dict:
    """One digits run: the task (split and flips) from sub-stream ``("digits-task", seed)`` of chapter
    seed ``root``, then :func:`~lib.label_noise.digits.train_digits` with that seed."""
    task = digits_task(tuple(classes), tau, test_fraction, stream(root, "digits-task", seed))
    return train_digits(task, epochs, lr, batch, seed=seed, width=width, root=root)
