"""The chapter's experiments, each one call: stationarity across initialisations and particle
numbers, relaxation at several temperatures, the λ sweep on the demand design, and off-policy
evaluation on CartPole. Every random draw comes
from the chapter seed ``root`` through a sub-stream named by what it draws and the values it
belongs to (λ, noise level, replicate ``rep``); independent runs advance together as one
batch."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import torch

from lib.npiv import analysis, cartpole, demand
from lib.npiv import meanfield as mf
from lib.npiv.baselines import DFIV, KernelIV, Sieve2SLS
from lib.seeding import stream
from lib.sweep import sweep


def _tensor(x) -> torch.Tensor:
    return torch.as_tensor(np.array(x), dtype=mf.DTYPE)


def demand_batch(samples: list[demand.DemandSample]) -> mf.IVData:
    """Stack demand samples (one per run) into a batched NPIV problem."""
    return mf.IVData(mf.Inputs(_tensor(np.stack([s.A for s in samples]))),
                     _tensor(np.stack([s.W for s in samples])),
                     _tensor(np.stack([s.Y for s in samples])))


def init_design(n_inits: int, init_scales: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """The initialisations of :func:`stationarity`: scales geometric over ``init_scales`` and the
    fraction of particles whose output weight starts at +m running from 1 (a unimodal cloud at
    c = +m) through ½ (bimodal, symmetric) to 0 (the mirror-image cloud at c = −m)."""
    return np.geomspace(*init_scales, n_inits), np.linspace(1.0, 0.0, n_inits)


def _stationarity_point(n_particles: int, seed: int, *, root: int, reps, n_inits: int, n: int,
                        lam: float, sigma: float, cfg: mf.F2BMLDConfig, init_scales,
                        offset: float, n_test: int, name: str = "stationarity") -> dict:
    """One particle number of :func:`stationarity`: every (data set, initialisation) in one batch
    (the sweep's ``seed`` is 0: the replicates are the batch)."""
    samples = [demand.sample(n, stream(root, f"{name}-data", s)) for s in reps]
    test = demand.sample(n_test, stream(root, f"{name}-test"))
    data = demand_batch([x for x in samples for _ in range(n_inits)])
    scales, plus = (np.tile(v, len(reps)) for v in init_design(n_inits, init_scales))
    run = mf.f2bmld(data, lam, replace(cfg, n_particles=n_particles, sigma=sigma,
                                       init_scale=_tensor(scales), init_offset=offset,
                                       init_plus=_tensor(plus)),
                    root, (name, n_particles))  # one stream for every σ: paired arms
    shape = (len(reps), n_inits, -1)
    A_test = mf.Inputs(_tensor(np.broadcast_to(test.A, (data.Y.shape[0], *test.A.shape))))
    return {"L": run.L_tracker.T.reshape(shape), "A": run.asymmetry.T.reshape(shape),
            "steps": run.steps, "dim": int(run.a.x.shape[-1]),
            "test_mse": demand.test_mse(run.a(A_test).numpy(), test).reshape(shape[:2]),
            "zero_mse": float(demand.test_mse(np.zeros(n_test), test))}


def stationarity(particles, reps, n_inits: int, n: int, lam: float, sigma: float,
                 cfg: mf.F2BMLDConfig, root: int, late_from: float,
                 init_scales: tuple[float, float] = (0.05, 1.0), offset: float = 0.0,
                 n_test: int = 1000, name: str = "stationarity") -> dict:
    """F²BMLD on the demand design from ``n_inits`` initialisations per data set (replicates
    ``reps``, sub-stream ``("stationarity-data", rep)``) for every particle number in
    ``particles`` (:func:`init_design`: the scales run geometrically over ``init_scales``; with
    ``offset`` m > 0 the initial output weights sit at ±m, the share at +m running from 1 to 0).
    Every run steps ``h = cfg.flow_step`` for ``cfg.steps`` steps at penalty ``lam`` and
    temperature ``sigma``; the Lagrangian is recorded with the tracker μ_w as the inner minimiser,
    and the treatment system's asymmetry ``E tanh(c)`` beside it (``dim``: the dimension of a
    treatment particle). A run's *late means* are both
    averaged over flow times ``t ≥ late_from``; ``spread`` and ``spread_A`` are the sample
    variances of the late means over the initialisations of one data set. ``test_mse``
    (N, rep, init) is the final treatment model's test error against h° on ``n_test`` fresh
    draws (sub-stream ``"stationarity-test"``), ``zero_mse`` the zero function's on the same
    draws; ``late_abs_A`` the late mean of ``|E tanh c|``. ``name`` names the streams
    (``(name + "-data", rep)``, ``name + "-test"``, ``(name, N)``), so a second design draws apart
    from the first. Each particle number is one :func:`lib.sweep.sweep` point."""
    particles, reps = [int(v) for v in particles], [int(s) for s in reps]
    runs = sweep(partial(_stationarity_point, root=root, reps=reps, n_inits=n_inits, n=n,
                         lam=float(lam), sigma=float(sigma), cfg=cfg,
                         init_scales=tuple(init_scales), offset=float(offset),
                         n_test=int(n_test), name=str(name)),
                 {"n_particles": particles}, desc="stationarity")
    t = np.asarray(runs[0]["steps"]) * float(cfg.flow_step)
    L = np.stack([r["L"] for r in runs])          # (N, rep, init, time)
    A = np.stack([r["A"] for r in runs])
    late_sel = t >= late_from
    late, late_A = L[..., late_sel].mean(-1), A[..., late_sel].mean(-1)   # (N, rep, init)
    scales, plus = init_design(n_inits, init_scales)
    return {"t": t, "L": L, "A": A, "late": late, "late_A": late_A,
            "late_abs_A": np.abs(A[..., late_sel]).mean(-1),
            "spread": late.var(-1, ddof=1), "spread_A": late_A.var(-1, ddof=1),
            "test_mse": np.stack([r["test_mse"] for r in runs]), "zero_mse": runs[0]["zero_mse"],
            "init_scales": scales, "init_plus": plus, "dim": runs[0]["dim"]}


def restarts(n_particles: int, reps, n_restarts: int, n: int, lam: float, sigma: float,
             cfg: mf.F2BMLDConfig, root: int, late_from: float, scales: tuple[float, float],
             anneal_factor: float, anneal_time: float) -> dict:
    """Independent restarts at one particle number on the stationarity design's data sets
    (sub-stream ``("stationarity-data", rep)``, the same draws): ``n_restarts`` runs per data
    set from initial laws unlike that design's, N(0, s² I) with the scale s geometric over
    ``scales`` and no mirror split, annealed: each starts at ``anneal_factor`` times every
    temperature, cools linearly to ``sigma`` over flow time ``anneal_time`` and holds it for the
    rest of ``cfg.steps`` steps of ``cfg.flow_step``. Its initial particles and noise come from
    the sub-stream ``("f2bmld", "restarts", n_particles)``, apart from the design's runs. Returns
    the recorded times ``t`` and Lagrangian ``L`` (data set, restart, time), measured at
    ``sigma`` throughout, ``late`` (data set, restart), its mean over ``t ≥ late_from``, and
    ``early``, its mean over the second half of the cooling (the same runs stopped early, still
    above σ: a negative control of the comparison), and ``settling``, its mean over the first half
    of the stretch at σ before ``late_from`` (the same runs stopped at σ but early: a control
    nearer the comparison's resolution; a re-read of the same trajectories)."""
    reps = [int(s) for s in reps]
    samples = [demand.sample(n, stream(root, "stationarity-data", s)) for s in reps]
    data = demand_batch([x for x in samples for _ in range(n_restarts)])
    init = np.tile(np.geomspace(*scales, n_restarts), len(reps))
    steps = int(round(anneal_time / float(cfg.flow_step)))
    run = mf.f2bmld(data, lam, replace(cfg, n_particles=int(n_particles), sigma=float(sigma),
                                       init_scale=_tensor(init), init_offset=0.0,
                                       anneal_factor=float(anneal_factor), anneal_steps=steps),
                    root, ("restarts", int(n_particles)))
    t = run.steps * float(cfg.flow_step)
    L = run.L_tracker.T.reshape(len(reps), n_restarts, -1)
    early = (t >= anneal_time / 2) & (t < anneal_time)
    settling = (t >= anneal_time) & (t < (anneal_time + late_from) / 2)
    return {"t": t, "L": L, "late": L[..., t >= late_from].mean(-1),
            "early": L[..., early].mean(-1), "settling": L[..., settling].mean(-1),
            "init_scales": init}


def _relaxed(t, L, late_from: float, level: float) -> dict:
    """Gap, first-passage time and mean rate of recorded values ``L`` (σ, rep, init, time) against
    each (σ, rep)'s mean over ``t ≥ late_from`` (see :func:`relaxation`)."""
    ref = L[..., t >= late_from].mean(-1).mean(-1)            # (σ, rep)
    gap = L - ref[..., None, None]
    flat = gap.reshape(-1, len(t))
    tau = np.array([analysis.first_passage(t, g, level) for g in flat]).reshape(gap.shape[:-1])
    cross = np.array([analysis.level_crossing(t, g, level) for g in flat]).reshape(gap.shape[:-1])
    with np.errstate(divide="ignore", invalid="ignore"):  # a run that starts at or below ε (τ = 0,
        rate = np.log(gap[..., 0] / level) / tau          # seen at `quick`) has no rate: ±inf or NaN
        rate_interp = np.log(gap[..., 0] / level) / cross
    return {"gap": gap, "ref": ref, "tau": tau, "rate": rate, "crossing": cross,
            "rate_interp": rate_interp}


def relaxation(sigmas, reps, n_inits: int, n: int, lam: float, cfg: mf.F2BMLDConfig, root: int,
               late_from: float, level: float) -> dict:
    """How fast F²BMLD forgets its initialisation at each temperature σ in ``sigmas`` (penalty
    ``lam``, ``n_inits`` initialisations at ``cfg.init_scale`` per data set, replicates ``reps``
    with sub-stream ``("relaxation-data", rep)``, all on the step ``cfg.flow_step``, one batch).
    The reference of a (σ, data set) is the mean of its runs' Lagrangians over ``t ≥ late_from``;
    a run's *gap* is its Lagrangian minus that reference; its first-passage time ``tau`` is the
    first recorded flow time where the gap is ≤ ``level`` (NaN if never), and its mean rate
    ``rate = log(gap(0)/level)/tau`` (what an exponential e^(−αt) from the start would need);
    ``crossing`` and ``rate_interp`` are the same with the crossing time interpolated in log gap
    between records (:func:`analysis.level_crossing`). ``energy`` holds the same for the
    Lagrangian without its σ·Ent terms (the energy, comparable across temperatures): ``E``,
    and its ``gap``, ``ref``, ``tau``, ``rate``, ``crossing``, ``rate_interp``."""
    sigmas, reps = [float(v) for v in sigmas], [int(s) for s in reps]
    grid = [(sg, s) for sg in sigmas for s in reps for _ in range(n_inits)]
    samples = {s: demand.sample(n, stream(root, "relaxation-data", s)) for s in reps}
    data = demand_batch([samples[s] for _, s, in grid])
    run = mf.f2bmld(data, lam, replace(cfg, sigma=_tensor([g[0] for g in grid])), root,
                    ("relaxation",))
    t = run.steps * float(cfg.flow_step)
    shape = (len(sigmas), len(reps), n_inits)
    L = run.L_tracker.T.reshape(*shape, -1)
    E = run.energy.T.reshape(*shape, -1)
    return {"t": t, "L": L, **_relaxed(t, L, late_from, level),
            "energy": {"E": E, **_relaxed(t, E, late_from, level)}}


def _sweep_data(root: int, reps, n: int, n_test: int):
    """The λ sweep's data: one training set per replicate (shared across λ) and one test set."""
    train = {s: demand.sample(n, stream(root, "sweep-train", s)) for s in reps}
    return train, demand.sample(n_test, stream(root, "sweep-test"))


def _lambda_point(lam: float, seed: int, *, root: int, reps, n: int, n_test: int,
                  cfg: mf.F2BMLDConfig, flow_time: float, snapshot_at: tuple[int, ...],
                  lam_shown: float) -> dict:
    """One λ of :func:`lambda_sweep`, every replicate's training set in one batch (the sweep's
    ``seed`` is 0: the replicates are the batch)."""
    train, test = _sweep_data(root, reps, n, n_test)
    data = demand_batch([train[s] for s in reps])
    A_test = mf.Inputs(_tensor(np.broadcast_to(test.A, (len(reps), *test.A.shape))))
    k = int(np.ceil(flow_time * (1 + lam) / cfg.eta))
    mid = lam == lam_shown
    shown = tuple(int(round(f * k)) for f in snapshot_at) if mid else ()
    half = k // 2
    run = mf.f2bmld(data, float(lam), replace(cfg, steps=k, record_every=k),
                    root, ("lambda-sweep", lam), snapshot_at=(*shown, half))
    pred = run.a(A_test).numpy()
    x_half = next(x for kk, x in run.snapshots if kk == half)
    return {"mse": demand.test_mse(pred, test), "steps": k,
            "mse_half": demand.test_mse(mf.MeanFieldNet(x_half, cfg.R)(A_test).numpy(), test),
            "pred": pred[0] if mid else None,
            "snapshots": [(kk, x[0].numpy().copy()) for kk, x in run.snapshots if kk in shown]}


def _baselines_point(seed: int, *, root: int, n: int, n_test: int) -> dict:
    """Sieve 2SLS and kernel IV on the λ sweep's training set of replicate ``seed`` (the sweep's
    replicate index)."""
    train, test = _sweep_data(root, [seed], n, n_test)
    tr = train[seed]
    sieve = Sieve2SLS().fit(tr.A, tr.W, tr.Y, stream(root, "sieve-centres", "lambda-sweep", seed))
    kiv = KernelIV().fit(tr.A, tr.W, tr.Y, stream(root, "kiv-split", "lambda-sweep", seed))
    return {"sieve 2SLS": demand.test_mse(sieve.predict(test.A), test),
            "kernel IV": demand.test_mse(kiv.predict(test.A), test)}


def lambda_sweep(lams, reps, n: int, n_test: int, cfg: mf.F2BMLDConfig, root: int,
                 flow_time: float, snapshot_at: tuple[int, ...] = ()):
    """Test MSE of F²BMLD's structural function for every (λ, replicate in ``reps``) on the
    demand design (one training set per replicate, shared across λ), every λ run for the same
    flow time: its step is h = η/(1 + λ) and it takes ⌈flow_time / h⌉ steps. Sieve 2SLS and
    kernel IV on the same training sets for reference. Also returns the treatment particles of
    the run ``(λ = lams[len(lams)//2], reps[0])`` at ``snapshot_at`` (fractions of its run) and
    its predictions, and every run's test MSE at half its flow time (a convergence diagnostic).
    Each λ, and each replicate's baselines, is one :func:`lib.sweep.sweep` point; every draw
    comes from chapter seed ``root``."""
    lams, reps = [float(v) for v in lams], [int(s) for s in reps]
    runs = sweep(partial(_lambda_point, root=root, reps=reps, n=n, n_test=n_test, cfg=cfg,
                         flow_time=flow_time, snapshot_at=tuple(snapshot_at),
                         lam_shown=lams[len(lams) // 2]),
                 {"lam": lams}, desc="λ sweep")
    base = sweep(partial(_baselines_point, root=root, n=n, n_test=n_test), {},
                 seeds=reps, desc="λ sweep baselines")
    mid = runs[len(lams) // 2]
    steps = np.array([r["steps"] for r in runs])
    return {"mse": np.array([r["mse"] for r in runs]),
            "mse_half": np.array([r["mse_half"] for r in runs]), "steps": steps,
            "flow_time": steps * cfg.eta / (1 + np.asarray(lams, float)),
            "baselines": {k: np.array([b[k] for b in base]) for k in ("sieve 2SLS", "kernel IV")},
            "snapshots": mid["snapshots"], "pred": mid["pred"],
            "test": _sweep_data(root, [], n, n_test)[1], "lam_shown": lams[len(lams) // 2]}


def _ope_problem(root: int, noise: float, rep: int, n_episodes: int, n: int, gamma: float):
    """The OPE problem of noise level ``noise`` and replicate ``rep``: logged episodes and the
    subsample, from the sub-stream ``("ope-data", noise, rep)`` of chapter seed ``root``."""
    rng = stream(root, "ope-data", noise, rep)
    return cartpole.ope_problem(cartpole.collect(n_episodes, noise, rng), n, rng, gamma)


def _ope_baselines_point(noise: float, seed: int, *, root: int, n_episodes: int, n: int,
                         gamma: float, dfiv: DFIV) -> dict:
    """DFIV, kernel IV and sieve 2SLS estimates on the OPE problem of noise level ``noise`` and
    replicate ``seed`` (the sweep's replicate index; the problem is rebuilt from its own
    stream where the point runs)."""
    p = _ope_problem(root, noise, seed, n_episodes, n, gamma)
    fn = dict(z_next=p.z_next, kappa=p.kappa)
    est = {"DFIV": p.value(dfiv.fit(p.z, p.W, p.Y, root, ("ope", noise, seed), **fn)
                           .predict(p.z_start))}
    kiv = KernelIV().fit(p.z, p.W, p.Y, stream(root, "kiv-split", "ope", noise, seed), **fn)
    est["kernel IV"] = p.value(kiv.predict(p.z_start))
    sieve = Sieve2SLS().fit(p.z, p.W, p.Y, stream(root, "sieve-centres", "ope", noise, seed), **fn)
    est["sieve 2SLS"] = p.value(sieve.predict(p.z_start))
    return est


def ope(noises, reps, n_episodes: int, n: int, lams, cfg: mf.F2BMLDConfig,
        dfiv: DFIV, root: int, n_starts: int = cartpole.N_STARTS, gamma: float = cartpole.GAMMA):
    """|estimated − true| policy value of F²BMLD (for every λ in ``lams``), DFIV, kernel IV
    and sieve 2SLS on CartPole for every (noise, replicate in ``reps``). The truth is a
    Monte-Carlo value per noise level. The baselines' fits, one per problem, are
    :func:`lib.sweep.sweep` points; every draw comes from chapter seed ``root``."""
    noises, reps = [float(v) for v in noises], [int(v) for v in reps]
    truth = np.array([cartpole.true_value(nz, stream(root, "ope-truth", nz), n_starts, gamma=gamma)
                      for nz in noises])
    P = [_ope_problem(root, nz, s, n_episodes, n, gamma) for nz in noises for s in reps]
    runs = [p for _ in lams for p in P]

    def stack(attr):
        return _tensor(np.stack([getattr(p, attr) for p in runs]))

    data = mf.IVData(mf.Inputs(stack("z"), stack("z_next"), stack("kappa")), stack("W"),
                     stack("Y"))
    run = mf.f2bmld(data, np.repeat(np.asarray(lams, float), len(P)), cfg, root, ("ope",))
    q0 = run.a(mf.Inputs(stack("z_start"))).numpy()
    shape = (len(lams), len(noises), len(reps))
    est_f = np.array([p.value(q) for p, q in zip(runs, q0)]).reshape(shape)
    base = sweep(partial(_ope_baselines_point, root=root, n_episodes=n_episodes, n=n, gamma=gamma,
                         dfiv=dfiv),
                 {"noise": noises}, seeds=reps, desc="OPE baselines")
    est = {k: [b[k] for b in base] for k in ("DFIV", "kernel IV", "sieve 2SLS")}
    est = {k: np.array(v).reshape(shape[1:]) for k, v in est.items()}
    return {"truth": truth,
            "err_f2bmld": np.abs(est_f - truth[:, None]),   # (λ, noise, replicate)
            "err": {k: np.abs(v - truth[:, None]) for k, v in est.items()},  # (noise, replicate)
            "est_f2bmld": est_f, "est": est,
            "n_transitions": np.array([len(p.Y) for p in P]).reshape(shape[1:])}


def _released_point(gamma: float, noise: float, seed: int, *, root: int, n_episodes: int, n: int,
                    model) -> dict:
    """The released variant's policy-value estimate on the OPE problem of noise level ``noise``,
    replicate ``seed`` and discount ``gamma`` (the logged data of :func:`ope`; unscaled rewards)."""
    p = _ope_problem(root, noise, seed, n_episodes, n, gamma)
    fit = model.fit(p.z, p.W, p.Y / (1 - gamma), root, ("ope-released", noise, gamma, seed),
                    z_next=p.z_next, kappa=p.kappa)
    return {"est": float(np.mean(fit.predict(p.z_start)))}


def ope_released(gammas, noises, reps, n_episodes: int, n: int, model, root: int,
                 n_starts: int = cartpole.N_STARTS) -> dict:
    """F²BMLD as the authors' released code trains it (``model``, an
    :class:`~lib.npiv.baselines.AdamF2BMLD`) on the logged data sets of :func:`ope` at every noise
    level in ``noises`` (replicates ``reps``), for every discount in ``gammas``: its estimates,
    shape (γ, noise, replicate), and the Monte-Carlo truths (the same start states as
    :func:`ope`), shape (γ, noise). Each (γ, noise, replicate) is one :func:`lib.sweep.sweep`
    point."""
    gammas, noises = [float(g) for g in gammas], [float(v) for v in noises]
    reps = [int(s) for s in reps]
    est = sweep(partial(_released_point, root=root, n_episodes=n_episodes, n=n, model=model),
                {"gamma": gammas, "noise": noises}, seeds=reps, desc="OPE released")
    truth = np.array([[cartpole.true_value(nz, stream(root, "ope-truth", nz), n_starts, gamma=g)
                       for nz in noises] for g in gammas])
    est = np.array([r["est"] for r in est], float).reshape(len(gammas), len(noises), len(reps))
    return {"truth": truth, "est": est, "rel_err": np.abs(est - truth[..., None]) / truth[..., None]}


def _released_curve_point(noise: float, seed: int, *, root: int, n_episodes: int, model,
                          gamma: float, trace_every: int) -> dict:
    """One long run of :func:`ope_released_curve` (the sweep's ``seed`` is the replicate)."""
    rng = stream(root, "ope-data", float(noise), int(seed))
    tr = cartpole.collect(n_episodes, float(noise), rng)
    p = cartpole.ope_problem(tr, len(tr.a), rng, gamma)
    fit = model.fit(p.z, p.W, p.Y / (1 - gamma), root, ("ope-released-long", noise, gamma, seed),
                    z_next=p.z_next, kappa=p.kappa, trace_z=p.z_start, trace_every=trace_every)
    return {"iterations": fit.trace[0], "estimate": fit.trace[1], "transitions": int(len(tr.a))}


def ope_released_curve(noise: float, rep: int, n_episodes: int, model, root: int,
                       gamma: float, trace_every: int, n_starts: int = cartpole.N_STARTS) -> dict:
    """The released variant (``model``, an :class:`~lib.npiv.baselines.AdamF2BMLD`) on *all*
    transitions of the logged data set of :func:`ope` at noise level ``noise``, replicate ``rep``
    (the same episodes; no subsample), with its estimate recorded every ``trace_every``
    iterations: ``iterations``, ``estimate``, the Monte-Carlo ``truth`` (the start states of
    :func:`ope`) and ``transitions``, the number of logged transitions fitted. One
    :func:`lib.sweep.sweep` point."""
    run, = sweep(partial(_released_curve_point, root=root, n_episodes=int(n_episodes), model=model,
                         gamma=float(gamma), trace_every=int(trace_every)),
                 {"noise": [float(noise)]}, seeds=[int(rep)], desc="OPE released, long run")
    truth = cartpole.true_value(float(noise), stream(root, "ope-truth", float(noise)), n_starts,
                                gamma=gamma)
    return {**run, "truth": float(truth)}
