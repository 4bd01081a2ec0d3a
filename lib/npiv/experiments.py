"""The chapter's three experiments, each one call: convergence of the Lagrangian, the λ
sweep on the demand design, and off-policy evaluation on CartPole. Every random draw comes
from the ``seed`` argument; independent runs advance together as one batch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from lib.npiv import analysis, cartpole, demand
from lib.npiv import meanfield as mf
from lib.npiv.baselines import DFIV, KernelIV, Sieve2SLS


def _tensor(x) -> torch.Tensor:
    return torch.as_tensor(np.array(x), dtype=mf.DTYPE)


def demand_batch(samples: list[demand.DemandSample]) -> mf.IVData:
    """Stack demand samples (one per run) into a batched NPIV problem."""
    return mf.IVData(mf.Inputs(_tensor(np.stack([s.A for s in samples]))),
                     _tensor(np.stack([s.W for s in samples])),
                     _tensor(np.stack([s.Y for s in samples])))


def convergence(lams, sigmas, seeds, n: int, cfg: mf.F2BMLDConfig, seed: int, rho: float = 0.5):
    """F²BMLD on the demand design for every (λ, σ, seed): the recorded Lagrangian and the
    fitted exponential rate of each run per unit flow time (and the R² the raw tracker's Lagrangian would give).
    Runs with the same seed share their data set."""
    grid = [(lam, sig, s) for lam in lams for sig in sigmas for s in seeds]
    samples = [demand.sample(n, np.random.default_rng([seed, 1, s])) for _, _, s in grid]
    data = demand_batch(samples)
    lam = np.array([g[0] for g in grid])
    cfg = replace(cfg, sigma=_tensor([g[1] for g in grid]))
    run = mf.f2bmld(data, lam, cfg, seed=hash((seed, 2)) % 2**31)
    # fit against flow time t = k·h (R² does not depend on the clock; the rate is per unit t)
    fits = [analysis.fit_rate(run.steps * run.dt[i], run.L[:, i]) for i in range(len(grid))]
    fits_tr = [analysis.fit_rate(run.steps * run.dt[i], run.L_tracker[:, i])
               for i in range(len(grid))]
    shape = (len(lams), len(sigmas), len(seeds))
    return {
        "steps": run.steps,
        "dt": run.dt.reshape(shape),
        "L": run.L.T.reshape(*shape, -1),
        "gap": analysis.gap_to_settled(run.L).T.reshape(*shape, -1),
        "rate": np.array([f.rate for f in fits]).reshape(shape),
        "r2": np.array([f.r2 for f in fits]).reshape(shape),
        "r2_tracker": np.array([f.r2 for f in fits_tr]).reshape(shape),
        "window": np.array([(f.start, f.stop) for f in fits]).reshape(*shape, 2),
        "floor": np.array([f.floor for f in fits]).reshape(shape),
    }


def lambda_sweep(lams, seeds, n: int, n_test: int, cfg: mf.F2BMLDConfig, seed: int,
                 rho: float = 0.5, snapshot_at: tuple[int, ...] = ()):
    """Test MSE of F²BMLD's structural function for every (λ, seed) on the demand design
    (one training set per seed, shared across λ), with sieve 2SLS and kernel IV on the
    same training sets for reference. Also returns the treatment particles of the run
    ``(λ = lams[len(lams)//2], seeds[0])`` at ``snapshot_at`` and its predictions."""
    train = {s: demand.sample(n, np.random.default_rng([seed, 3, s])) for s in seeds}
    test = demand.sample(n_test, np.random.default_rng([seed, 4]))
    grid = [(lam, s) for lam in lams for s in seeds]
    data = demand_batch([train[s] for _, s in grid])
    run = mf.f2bmld(data, np.array([g[0] for g in grid]), cfg, seed=hash((seed, 5)) % 2**31,
                    snapshot_at=snapshot_at)
    pred = run.a(mf.Inputs(_tensor(np.broadcast_to(test.A, (len(grid), *test.A.shape))))).numpy()
    mse = demand.test_mse(pred, test).reshape(len(lams), len(seeds))
    base = {"sieve 2SLS": [], "kernel IV": []}
    for s in seeds:
        tr, rng = train[s], np.random.default_rng([seed, 6, s])
        base["sieve 2SLS"].append(demand.test_mse(
            Sieve2SLS().fit(tr.A, tr.W, tr.Y, rng).predict(test.A), test))
        base["kernel IV"].append(demand.test_mse(
            KernelIV().fit(tr.A, tr.W, tr.Y, rng).predict(test.A), test))
    mid = (len(lams) // 2) * len(seeds)
    return {"mse": mse, "baselines": {k: np.array(v) for k, v in base.items()},
            "snapshots": [(k, x[mid].numpy().copy()) for k, x in run.snapshots],
            "pred": pred[mid], "test": test, "lam_shown": lams[len(lams) // 2]}


def ope(noises, seeds, n_episodes: int, n: int, lams, cfg: mf.F2BMLDConfig,
        dfiv: DFIV, seed: int, n_starts: int = 1000, gamma: float = cartpole.GAMMA):
    """|estimated − true| policy value of F²BMLD (for every λ in ``lams``) and DFIV on
    CartPole for every (noise, seed). The truth is a Monte-Carlo value per noise level."""
    truth = np.array([cartpole.true_value(nz, np.random.default_rng([seed, 7, i]), n_starts,
                                          gamma=gamma) for i, nz in enumerate(noises)])
    P = []
    for i, nz in enumerate(noises):
        for s in seeds:
            rng = np.random.default_rng([seed, 8, i, s])
            P.append(cartpole.ope_problem(cartpole.collect(n_episodes, nz, rng), n, rng, gamma))
    runs = [p for _ in lams for p in P]

    def stack(attr):
        return _tensor(np.stack([getattr(p, attr) for p in runs]))

    data = mf.IVData(mf.Inputs(stack("z"), stack("z_next"), stack("kappa")), stack("W"),
                     stack("Y"))
    run = mf.f2bmld(data, np.repeat(np.asarray(lams, float), len(P)), cfg,
                    seed=hash((seed, 9)) % 2**31)
    q0 = run.a(mf.Inputs(stack("z_start"))).numpy()
    shape = (len(lams), len(noises), len(seeds))
    est_f = np.array([p.value(q) for p, q in zip(runs, q0)]).reshape(shape)
    est_d = np.array([p.value(dfiv.fit(p.z, p.W, p.Y, seed=hash((seed, 10, j)) % 2**31,
                                       z_next=p.z_next, kappa=p.kappa).predict(p.z_start))
                      for j, p in enumerate(P)]).reshape(shape[1:])
    return {"truth": truth,
            "err_f2bmld": np.abs(est_f - truth[:, None]),   # (λ, noise, seed)
            "err_dfiv": np.abs(est_d - truth[:, None]),     # (noise, seed)
            "est_f2bmld": est_f, "est_dfiv": est_d}
