"""Chapter 03's loops run both ways in one process (``python -m lib.npiv.bench``): the F²BMLD
particle updates compiled and as torch operations, and the released variant's training written
out and with autograd and ``torch.optim.Adam``. Each prints the seconds of both, their ratio and
the largest difference of the results."""

from __future__ import annotations

import time

import numpy as np
import torch

from lib.npiv import demand, experiments
from lib.npiv import meanfield as mf
from lib.npiv.baselines import AdamF2BMLD
from lib.seeding import stream


def _timed(fn, *args, **kwargs):
    start = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - start


def bench_particles(n_particles: int = 512, steps: int = 100, reps: int = 6, n_inits: int = 10,
                    n: int = 64, root: int = 0) -> dict:
    """One stationarity point of the chapter (``reps × n_inits`` runs of F²BMLD in one batch,
    three tracker steps per step, a record every 5 steps), truncated to ``steps`` steps."""
    samples = [demand.sample(n, stream(root, "stationarity-data", s)) for s in range(reps)]
    data = experiments.demand_batch([x for x in samples for _ in range(n_inits)])
    scales = np.tile(np.geomspace(0.05, 1.0, n_inits), reps)
    cfg = mf.F2BMLDConfig(n_particles=n_particles, steps=steps, eta=0.2, zeta=0.5, sigma=1e-3,
                          record_every=5, tracker_steps=3, flow_step=0.1,
                          init_scale=torch.as_tensor(scales, dtype=mf.DTYPE))
    runs, secs = {}, {}
    for compiled in (True, False):
        runs[compiled], secs[compiled] = _timed(mf.f2bmld, data, 1.0, cfg, root,
                                                ("stationarity", n_particles), compiled=compiled)
    L1, L0 = runs[True].L_tracker, runs[False].L_tracker
    return {"torch_s": secs[False], "compiled_s": secs[True],
            "ratio": secs[False] / secs[True],
            "max_rel_diff_L": float(np.max(np.abs(L1 - L0) / np.abs(L0))),
            "max_abs_diff_x": float((runs[True].a.x - runs[False].a.x).abs().max())}


def bench_lambda(lam: float = 0.01, reps: int = 2, n: int = 256, root: int = 0) -> dict:
    """One λ-sweep point of the chapter (flow time 50, both replicates in one batch)."""
    train = [demand.sample(n, stream(root, "sweep-train", s)) for s in range(reps)]
    data = experiments.demand_batch(train)
    k = int(np.ceil(50.0 * (1 + lam) / 0.2))
    cfg = mf.F2BMLDConfig(n_particles=64, eta=0.2, zeta=0.5, sigma=1e-3, steps=k, record_every=k)
    runs, secs = {}, {}
    for compiled in (True, False):
        runs[compiled], secs[compiled] = _timed(mf.f2bmld, data, lam, cfg, root,
                                                ("lambda-sweep", lam), compiled=compiled)
    return {"steps": k, "torch_s": secs[False], "compiled_s": secs[True],
            "ratio": secs[False] / secs[True],
            "max_abs_diff_x": float((runs[True].a.x - runs[False].a.x).abs().max())}


def bench_released(iterations: int = 200, noise: float = 0.2, gamma: float = 0.99,
                   root: int = 0) -> dict:
    """The released variant's fit on the chapter's first OPE data set at ``noise`` and discount
    ``gamma``."""
    p = experiments._ope_problem(root, noise, 0, 50, 256, gamma)
    model = AdamF2BMLD(lam=0.3, iterations=iterations)
    est, secs = {}, {}
    for autograd in (False, True):
        fit, secs[autograd] = _timed(model.fit, p.z, p.W, p.Y / (1 - gamma), root,
                                     ("ope-released", noise, gamma, 0), z_next=p.z_next,
                                     kappa=p.kappa, autograd=autograd)
        est[autograd] = fit.predict(p.z_start)
    return {"autograd_s": secs[True], "written_out_s": secs[False],
            "ratio": secs[True] / secs[False],
            "max_abs_diff": float(np.max(np.abs(est[True] - est[False])))}


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name, fn in (("particles (stationarity point, N = 512)", bench_particles),
                     ("particles (λ-sweep point, λ = 0.01)", bench_lambda),
                     ("released variant", bench_released)):
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in fn().items()})
