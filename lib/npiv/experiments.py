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


def convergence(lams, sigmas, seeds, n: int, cfg: mf.F2BMLDConfig, seed: int,
                windows, ref_from: float, rho: float = 0.5):
    """F²BMLD on the demand design for every (λ, σ, seed), all on one step h = ``cfg.flow_step``
    (so iteration k is flow time t = k·h for every λ). The gap of each run is measured to its
    reference value, the mean of its Lagrangian over flow times ``t ≥ ref_from`` (a stretch
    after the fit windows, where the run has settled); on the flow-time window fixed for its λ
    (``windows[i]`` for ``lams[i]``) the log-gap is fitted by an exponential and by a power law
    (:func:`analysis.compare_decay`), and the decay rates on its two halves are compared
    (:func:`analysis.rate_fade`). Runs with the same seed share their data set."""
    grid = [(lam, sig, s) for lam in lams for sig in sigmas for s in seeds]
    samples = [demand.sample(n, np.random.default_rng([seed, 1, s])) for _, _, s in grid]
    data = demand_batch(samples)
    lam = np.array([g[0] for g in grid])
    cfg = replace(cfg, sigma=_tensor([g[1] for g in grid]))
    run = mf.f2bmld(data, lam, cfg, seed=hash((seed, 2)) % 2**31)
    t = run.steps * float(run.dt[0])
    tail = t >= ref_from
    ref = run.L[tail].mean(0)
    gap = run.L - ref
    win = {lam: tuple(w) for lam, w in zip(lams, windows)}
    fits = [analysis.compare_decay(t, gap[:, i], *win[g[0]]) for i, g in enumerate(grid)]
    fades = [analysis.rate_fade(t, gap[:, i], *win[g[0]]) for i, g in enumerate(grid)]
    shape = (len(lams), len(sigmas), len(seeds))

    def per_run(attr, of=fits):
        return np.array([getattr(f, attr) for f in of], float).reshape(shape)

    return {
        "t": t,
        "L": run.L.T.reshape(*shape, -1),
        "gap": gap.T.reshape(*shape, -1),
        "ref": ref.reshape(shape),
        "tail_sd": run.L[tail].std(0).reshape(shape),
        "rate": per_run("rate"), "exponent": per_run("exponent"),
        "ratio": per_run("ratio"), "delta_aic": per_run("delta_aic"),
        "decades": per_run("decades"),
        "fitted": per_run("fitted").astype(bool) & per_run("fitted", fades).astype(bool),
        "rate_first": per_run("rate_first", fades), "rate_second": per_run("rate_second", fades),
        "rate_ratio": per_run("ratio", fades), "power_ratio": per_run("power_ratio", fades),
        "fade": per_run("fade", fades), "gap_decades": per_run("decades", fades),
    }


def lambda_sweep(lams, seeds, n: int, n_test: int, cfg: mf.F2BMLDConfig, seed: int,
                 flow_time: float, rho: float = 0.5, snapshot_at: tuple[int, ...] = ()):
    """Test MSE of F²BMLD's structural function for every (λ, seed) on the demand design
    (one training set per seed, shared across λ), every λ run for the same flow time: its
    step is h = η/(1 + λ) and it takes ⌈flow_time / h⌉ steps. Sieve 2SLS and kernel IV on the
    same training sets for reference. Also returns the treatment particles of the run
    ``(λ = lams[len(lams)//2], seeds[0])`` at ``snapshot_at`` (fractions of its run) and its
    predictions, and every run's test MSE at half its flow time (a convergence diagnostic)."""
    train = {s: demand.sample(n, np.random.default_rng([seed, 3, s])) for s in seeds}
    test = demand.sample(n_test, np.random.default_rng([seed, 4]))
    data = demand_batch([train[s] for s in seeds])
    A_test = mf.Inputs(_tensor(np.broadcast_to(test.A, (len(seeds), *test.A.shape))))
    mid = len(lams) // 2
    mse, mse_half, steps, snaps, pred_mid = [], [], [], [], None
    for i, lam in enumerate(lams):
        k = int(np.ceil(flow_time * (1 + lam) / cfg.eta))
        shown = tuple(int(round(f * k)) for f in snapshot_at) if i == mid else ()
        half = k // 2
        run = mf.f2bmld(data, float(lam), replace(cfg, steps=k, record_every=k),
                        seed=hash((seed, 5, i)) % 2**31, snapshot_at=(*shown, half))
        pred = run.a(A_test).numpy()
        mse.append(demand.test_mse(pred, test))
        x_half = next(x for kk, x in run.snapshots if kk == half)
        mse_half.append(demand.test_mse(mf.MeanFieldNet(x_half, cfg.R)(A_test).numpy(), test))
        steps.append(k)
        if i == mid:
            pred_mid = pred[0]
            snaps = [(kk, x[0].numpy().copy()) for kk, x in run.snapshots if kk in shown]
    base = {"sieve 2SLS": [], "kernel IV": []}
    for s in seeds:
        tr, rng = train[s], np.random.default_rng([seed, 6, s])
        base["sieve 2SLS"].append(demand.test_mse(
            Sieve2SLS().fit(tr.A, tr.W, tr.Y, rng).predict(test.A), test))
        base["kernel IV"].append(demand.test_mse(
            KernelIV().fit(tr.A, tr.W, tr.Y, rng).predict(test.A), test))
    return {"mse": np.array(mse), "mse_half": np.array(mse_half), "steps": np.array(steps),
            "flow_time": np.array(steps) * cfg.eta / (1 + np.asarray(lams, float)),
            "baselines": {k: np.array(v) for k, v in base.items()},
            "snapshots": snaps, "pred": pred_mid, "test": test, "lam_shown": lams[mid]}


def ope(noises, seeds, n_episodes: int, n: int, lams, cfg: mf.F2BMLDConfig,
        dfiv: DFIV, seed: int, n_starts: int = 1000, gamma: float = cartpole.GAMMA):
    """|estimated − true| policy value of F²BMLD (for every λ in ``lams``), DFIV, kernel IV
    and sieve 2SLS on CartPole for every (noise, seed). The truth is a Monte-Carlo value per
    noise level."""
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
    est = {"DFIV": [], "kernel IV": [], "sieve 2SLS": []}
    for j, p in enumerate(P):
        fn = dict(z_next=p.z_next, kappa=p.kappa)
        est["DFIV"].append(p.value(dfiv.fit(p.z, p.W, p.Y, seed=hash((seed, 10, j)) % 2**31,
                                            **fn).predict(p.z_start)))
        rng = np.random.default_rng([seed, 11, j])
        est["kernel IV"].append(p.value(KernelIV().fit(p.z, p.W, p.Y, rng, **fn)
                                        .predict(p.z_start)))
        est["sieve 2SLS"].append(p.value(Sieve2SLS().fit(p.z, p.W, p.Y, rng, **fn)
                                         .predict(p.z_start)))
    est = {k: np.array(v).reshape(shape[1:]) for k, v in est.items()}
    return {"truth": truth,
            "err_f2bmld": np.abs(est_f - truth[:, None]),   # (λ, noise, seed)
            "err": {k: np.abs(v - truth[:, None]) for k, v in est.items()},  # (noise, seed)
            "est_f2bmld": est_f, "est": est,
            "n_transitions": np.array([len(p.Y) for p in P]).reshape(shape[1:])}
