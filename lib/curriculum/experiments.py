"""The chapter's heavy loops as functions of plain arguments, so that :func:`lib.sweep.sweep` can
farm them out (local processes or a Dask cluster) and keep finished points for resume.

Every point draws from its own generator, :func:`stream` of the chapter seed and a key that names
the experiment and the point's values (not its position in a list, and not a generator shared
with other points), so a point's numbers do not depend on which other points run, in which
order, or where.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from lib.curriculum.one_step import (curriculum_fast, gradient_snr_sample, gradient_snr_theory, n_star,
                                     onestep_fast, onestep_literal, sampler_check)
from lib.curriculum.inference import best_of_n, ltar, test_time_theory
from lib.curriculum.training import solve_time, train
from lib.curriculum.tree import ReasoningTree, mod_chain, parity
from lib.seeding import stream
from lib.sweep import sweep

#: The oracles of the chapter's sweeps: name → reward-hacking rate q.
ORACLE_Q = {"blocked parity, q = 1/2": 0.5, "mod-5 chain, q = 1/5": 0.2,
            "mod-101 chain, q = 1/101": 1 / 101, "chain verifier, q = 0": 0.0}


def _tree_key(tree: ReasoningTree) -> tuple:
    return (tree.d, tree.k, tree.p, tree.a, tree.blocked, tree.target)


def oracle_tree(name: str, d: int, k: int) -> tuple[ReasoningTree, str]:
    """The tree and oracle (``"answer"`` or ``"chain"``) of a sweep oracle in :data:`ORACLE_Q`."""
    if name not in ORACLE_Q:
        raise ValueError(f"oracle must be one of {list(ORACLE_Q)}, got {name!r}")
    if name.startswith("mod-5"):
        return mod_chain(d, k, p=5, a=2), "answer"
    if name.startswith("mod-101"):
        return mod_chain(d, k, p=101, a=2), "answer"
    return parity(d, k, blocked=True), "chain" if name.startswith("chain") else "answer"


# -- n* ------------------------------------------------------------------------------------------
def n_star_point(k: int, d: int, stage: int, seed: int, *, q: float, route: str, repeats: int,
                 n_max: float, root: int = 0) -> dict:
    """One measured ``n*`` (see :func:`sweep_n_star`), from the stream of (route, q, k, d, stage,
    seed)."""
    rng = stream(root, "n*", route, q, k, d, stage, seed)
    if route == "curriculum":
        def rate(n):
            return curriculum_fast(d, k, q, n, repeats, rng)["right"].mean()

        return {"n_star": k * n_star(rate, n_max / k)}
    depths = k if route == "direct" else 1

    def rate(n):
        return onestep_fast(d, depths, q, n, repeats, rng).mean()

    return {"n_star": n_star(rate, n_max)}


def sweep_n_star(ds, ks, q: float, route: str, repeats: int, seeds, n_max: float,
                 seed: int = 0) -> dict:
    """Measured ``n*`` for every ``(k, d, stage, seed)`` with the sufficient-statistic samplers,
    one :func:`lib.sweep.sweep` point each (``seed`` is the chapter seed, ``seeds`` the
    independent measurements).

    ``route="direct"``: one entry per (k, d, seed).  ``route="curriculum"``: one entry per
    (k, d, seed), the *total* ``k·n`` of a whole curriculum run stage after stage from the
    policies the earlier stages produced (:func:`curriculum_fast`), ``n`` the smallest
    per-stage budget whose final chain is right in ≥ 99% of the repeats.  ``route="stages"``:
    ``k`` entries per (k, d, seed), each stage measured on its own from exactly learned earlier
    depths (the independent-stage computation).  Returns a dict with an array
    ``n_star[k_index, d_index, stage, seed]`` (stage axis of length max(ks) for ``stages``, 1
    otherwise; NaN where absent, inf where censored)."""
    if route not in ("direct", "curriculum", "stages"):
        raise ValueError(f"route must be direct, curriculum or stages, got {route!r}")
    ds, ks, seeds = list(ds), list(ks), list(seeds)
    grid = [{"k": k, "d": d, "stage": st} for k in ks for d in ds
            for st in (range(1, k + 1) if route == "stages" else [1])]
    records = sweep(partial(n_star_point, q=q, route=route, repeats=repeats, n_max=n_max, root=seed),
                    grid, seeds=seeds, desc=f"n* ({route}, q = {q:.3g})")
    out = np.full((len(ks), len(ds), max(ks) if route == "stages" else 1, len(seeds)), np.nan)
    for r in records:
        out[ks.index(r["k"]), ds.index(r["d"]), r["stage"] - 1, seeds.index(r["seed"])] = r["n_star"]
    return {"ds": ds, "ks": ks, "route": route, "n_star": out}


def snr_point(depths: int, d: int, seed: int, *, q: float, repeats: int, root: int = 0) -> dict:
    """One measured gradient signal-to-noise sample size (:func:`gradient_snr_sample`) with
    ``depths`` uniform depths at width ``d``, from the stream of (depths, d, q, seed); each batch
    has ``n`` = the theory's ``n_SNR`` rollouts (rounded up), where the estimate is most precise
    (its expectation does not depend on ``n``)."""
    rng = stream(root, "snr", depths, d, q, seed)
    n = max(2, math.ceil(gradient_snr_theory(d, depths, q)))
    return {"n_snr": gradient_snr_sample(d, depths, q, n, repeats, rng)["n_snr"], "n": n}


# -- Monte-Carlo checks of the protocol ----------------------------------------------------------
def onestep_count(tree: ReasoningTree, n: int, repeats: int, seed: int, *, route: str = "direct",
                  stage: int = 1, sampler: bool = False, root: int = 0) -> dict:
    """How many of ``repeats`` one-step runs leave the judged depths right: the literal
    protocol (:func:`onestep_literal`), or with ``sampler`` the sufficient-statistic sampler of
    the same step (``k`` uniform depths for ``direct``, one for a curriculum stage)."""
    rng = stream(root, "onestep", _tree_key(tree), route, stage, n, sampler, seed)
    if sampler:
        depths = tree.k if route == "direct" else 1
        right = onestep_fast(tree.d, depths, tree.q, n, repeats, rng)
    else:
        right = onestep_literal(tree, route, n, repeats, rng, stage=stage)
    return {"right": int(right.sum()), "repeats": repeats}


def sampler_cell(oracle: str, route: str, d: int, k: int, n: int, seed: int, *, repeats: int,
                 root: int = 0) -> dict:
    """:func:`sampler_check` at one cell of the fits (an oracle of :data:`ORACLE_Q`, a route,
    ``d``, ``k``, ``n`` samples per stage)."""
    tree, kind = oracle_tree(oracle, d, k)
    rng = stream(root, "cell", oracle, route, d, k, n, seed)
    return sampler_check(tree, route, n, repeats, rng, oracle=kind)


# -- iterative training --------------------------------------------------------------------------
def train_point(lr: float, route: str, seed: int, *, tree: ReasoningTree, budget: int, batch: int,
                n_test: int, ema: float, root: int = 0) -> dict:
    """One iterative training run (:func:`train` with one seed: its own test set and draws)."""
    rng = stream(root, "train", _tree_key(tree), lr, route, seed)
    run = train(tree, route, seeds=1, budget=budget, batch=batch, lr=lr, rng=rng, n_test=n_test,
                ema=ema)
    return {key: (v[:, 0] if isinstance(v, np.ndarray) and v.ndim == 2 else v)
            for key, v in run.items() if key != "route"}


def stack_runs(records: list[dict], keys=("accuracy", "stage", "hacked", "hacked_theory", "reward",
                                          "rewarded", "hacked_count", "hacked_mean", "hacked_var",
                                          "hacked_k3")) -> dict:
    """Training records of one (lr, route), seeds in order, as :func:`train` returns them for
    several seeds at once: ``samples (T,)`` and every other series ``(T, seeds)``."""
    records = sorted(records, key=lambda r: r["seed"])
    samples = records[0]["samples"]
    if any(not np.array_equal(r["samples"], samples) for r in records):
        raise ValueError("runs recorded at different sample counts")
    return {"samples": samples, "route": records[0]["route"],
            **{key: np.stack([r[key] for r in records], axis=1) for key in keys}}


# -- test time -----------------------------------------------------------------------------------
def best_of_n_vs_ltar(d: int, seed: int, *, k: int, delta: float, repeats: int, root: int = 0) -> dict:
    """Best-of-n and LTAR on blocked parity of width ``d`` and depth ``k``, each run ``repeats``
    times with the verification length that meets ``delta``, beside their exact theory."""
    tree = parity(d, k, blocked=True)
    th = test_time_theory(tree, delta)
    b = best_of_n(tree, th["best_of_n"]["m"], repeats, stream(root, "best-of-n", d, k, delta, seed))
    lt = ltar(tree, th["ltar"]["m"], repeats, stream(root, "ltar", d, k, delta, seed))
    return {"b": b, "lt": lt, "th": th}



def solve_point(k: int, d: int, route: str, seed: int, *, lr: float, budget: int, batch: int,
                n_test: int, ema: float = 0.5, root: int = 0) -> dict:
    """One iterative run on the paper's shared-input parity (target ``[0, …, k−1]``) until it
    solves or freezes (:func:`solve_time`), from the stream of (k, d, route, lr, budget, seed)."""
    rng = stream(root, "solve", k, d, route, lr, budget, batch, seed)
    return solve_time(parity(d, k), route, budget=budget, batch=batch, lr=lr, rng=rng,
                      n_test=n_test, ema=ema)


def batch_sweep(cells, batches, seeds, *, lr_direct: float, lr_curriculum: float, budget_direct: int,
                budget_curriculum: int, n_test: int, root: int = 0) -> list[dict]:
    """Solve counts of :func:`solve_point` at each cell ``(k, d)``, batch size and route, over
    ``seeds`` (each run on its own stream, so seeds disjoint from another sweep's give
    independent runs); every batch size spends the same rollout budgets.  Returns one row per
    (k, d, batch, route) with ``solved`` (runs that reach 99% test accuracy) and ``runs``."""
    from lib.curriculum.tree import ROUTES

    seeds = list(seeds)
    rows = []
    for k, d in cells:
        for batch in batches:
            for route in ROUTES:
                lr, budget = (lr_direct, budget_direct) if route == "direct" else (lr_curriculum, budget_curriculum)
                solved = sum(math.isfinite(solve_point(k, d, route, s, lr=lr, budget=budget, batch=batch,
                                                       n_test=n_test, root=root)["solved_at"]) for s in seeds)
                rows.append({"k": k, "d": d, "batch": batch, "route": route, "solved": solved, "runs": len(seeds)})
    return rows


#: The cells (k*, d) of the paper's own iterative runs at its step sizes: d = 8 with k* = 3 (target
#: [0, 1, 2]), and d = 16 and 32 with k* = 2.
PAPER_CELLS = ((3, 8), (2, 16), (2, 32))


def freeze_compare(k: int, d: int, seed: int, *, lr: float, batch: int, max_batches: int = 64,
                   root: int = 0) -> dict:
    """The restricted transformer (:class:`PositionalTransformer`) and the tabular policy trained
    side by side on the direct route of shared-input parity (target ``[0, …, k−1]``), on the same
    inputs and uniforms, at step size ``lr`` and baselined REINFORCE, until both are *frozen*
    (every depth's softmax exactly one-hot in floating point, as :func:`solve_time` stops) or
    ``max_batches`` have passed. Returns the rollouts at which each froze (None if not), the
    largest gap between the transformer's scores and the tabular logits relative to the logits'
    scale (at least 1), and whether their greedy chains agree at the end."""
    from lib.curriculum.policy import greedy, reinforce_gradient, sample_paths
    from lib.curriculum.transformer import PositionalTransformer
    from lib.stats import softmax

    tree = parity(d, k)
    rng = stream(root, "freeze", k, d, lr, batch, seed)
    model = PositionalTransformer(tree, rng)
    theta = np.zeros((k, d))
    frozen = {"transformer": None, "tabular": None}
    gap = 0.0
    for t in range(1, max_batches + 1):
        u = rng.random((batch, k))
        x = tree.sample_inputs(rng, (batch,))
        paths_model = sample_paths(model.scores().detach().numpy(), batch, rng, uniforms=u)
        paths_tab = sample_paths(theta, batch, rng, uniforms=u)
        model.reinforce_step(paths_model, tree.terminal_reward(x, paths_model), lr, baseline=True)
        theta = theta + lr * reinforce_gradient(theta, paths_tab, tree.terminal_reward(x, paths_tab), baseline=True)
        scores = model.scores().detach().numpy()
        gap = max(gap, float(np.abs(scores - theta).max() / max(1.0, float(np.abs(theta).max()))))
        for name, z in (("transformer", scores), ("tabular", theta)):
            if frozen[name] is None and np.all(softmax(z).max(axis=-1) == 1.0):
                frozen[name] = t * batch
        if None not in frozen.values():
            break
    return {"frozen_transformer": frozen["transformer"], "frozen_tabular": frozen["tabular"], "rel_gap": gap,
            "same_greedy": bool(np.array_equal(greedy(model.scores().detach().numpy())[0], greedy(theta)[0]))}
