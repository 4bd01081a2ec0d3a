"""Chapter 05's experiments as functions of plain arguments (so :func:`lib.sweep.sweep` can farm
them out): seeded post-training runs summarised exactly, squeezing on random trees, and the tree
drawing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lib.seeding import stream
from lib.tmc.methods import post_train
from lib.tmc.policy import softmax
from lib.tmc.tree import (HARD, INVALID, TMC, Matrices, Setting, coverage, pass_at_k, path_entropy,
                          path_probs, random_tmc)


TRAIN_STREAM, TREE_STREAM = 1, 2  # sub-streams of the chapter seed for the two experiment kinds


def trajectory(setting: Setting, history: list[Matrices], other: Setting | None = None,
               ks=(30,)) -> dict:
    """Exact summaries along a run: path entropy and easy/hard/invalid mass on the trained
    task; pass@K (all and hard instances) at the end; and, for ``other`` (a second task that
    shares the states), its coverage and pass@K at the end."""
    pis = [path_probs(softmax(z), setting.paths) for z in history]
    final = pis[-1]
    out = {"entropy": np.array([path_entropy(p) for p in pis]),
           "coverage": np.array([coverage(p, setting.classes) for p in pis]),
           "pass": pass_at_k(final, setting.rex, ks),
           "pass_hard": pass_at_k(final, setting.rex, ks, setting.classes, only_hard=True)}
    if other is not None:
        pi2 = path_probs(softmax(history[-1]), other.paths)
        out["other_coverage"] = coverage(pi2, other.classes)
        out["other_pass"] = pass_at_k(pi2, other.rex, ks)
    return out


def train_run(method: str, seed: int, setting: Setting, steps: int, lr: float,
              record_every: int, root: int = 0, other: Setting | None = None, ks=(30,),
              stream_id: int = TRAIN_STREAM, **hyper) -> dict:
    """One seeded post-training run summarised by :func:`trajectory`, plus its final logits
    (a function of plain arguments, so :func:`lib.sweep.sweep` can farm it out); ``stream_id``
    names the sub-stream, so that the runs of different experiments are independent."""
    history = post_train(setting, method, steps, lr, stream(root, stream_id, seed),
                         record_every, **hyper)
    return {**trajectory(setting, history, other, ks), "logits": history[-1]}


def tree_squeeze(shape: Sequence[int], seed: int, steps: int, lr: float, root: int = 0,
                 methods: Sequence[str] = ("REINFORCE", "RL-rej", "KL-GRPO"), **hyper) -> dict:
    """Squeezing on a random tree of ``shape = (L, M, C)`` (``M0 = M``), with the true chain as
    the base model: for each method, the final/base ratios of TASK1's path entropy and
    hard-chain mass, and of TASK2's valid mass (its chance of reaching its target at all).
    Needs no enumeration of correct sets, so it runs on trees of any size."""
    n_layers, m, c = shape
    rng = stream(root, TREE_STREAM, seed)
    tree = random_tmc(n_layers, m, m, c, rng)
    base = [np.log(p) for p in tree.probs]
    s1, s2 = (Setting.of(tree, t, base) for t in tree.tasks)

    def summary(logits):
        trans = softmax(logits)
        pi1, pi2 = path_probs(trans, s1.paths), path_probs(trans, s2.paths)
        return (path_entropy(pi1), coverage(pi1, s1.classes)[HARD],
                1 - coverage(pi2, s2.classes)[INVALID])

    start = summary(base)
    if start[1] == 0:
        raise ValueError(f"shape {tuple(shape)} has no hard chains (every child is high): use C < M")
    out = {"paths": len(s1.paths)}
    for method in methods:
        end = summary(post_train(s1, method, steps, lr, rng, steps, **hyper)[-1])
        for name, a, b in zip(("entropy", "hard mass", "TASK2 valid mass"), end, start):
            out[f"{method}: {name}"] = a / b
    return out


# ---------------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------------
def draw_tree(ax, tmc: TMC, trans: Matrices, title: str | None = None) -> None:
    """The layered chain as a graph: node (layer, state), edge width ∝ its probability, high
    edges solid and low edges dashed, each labelled with its probability; the shared node is
    ringed."""
    import networkx as nx

    g = nx.DiGraph()
    for l, t in enumerate(trans):
        for s, s2 in np.ndindex(t.shape):
            g.add_edge((l, s), (l + 1, s2), p=float(t[s, s2]), high=bool(tmc.high[l][s, s2]))
    pos = {n: (n[0], -n[1]) for n in g.nodes}
    node_color = ["#F0E442" if n == tmc.shared else "#DDDDDD" for n in g.nodes]
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=node_color, node_size=520, edgecolors="black")
    nx.draw_networkx_labels(g, pos, ax=ax, labels={n: f"{n[1]}" for n in g.nodes}, font_size=9)
    for high, style in ((True, "solid"), (False, "dashed")):
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["high"] == high]
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=edges, style=style, arrows=True,
                               width=[0.4 + 5 * g.edges[e]["p"] for e in edges], node_size=520,
                               edge_color="#0072B2" if high else "#D55E00")
    nx.draw_networkx_edge_labels(g, pos, ax=ax, font_size=7, label_pos=0.3,
                                 edge_labels={(u, v): f"{d['p']:.2f}" for u, v, d in g.edges(data=True)})
    ax.set_xticks(range(tmc.n_layers), [f"layer {l}" for l in range(tmc.n_layers)])
    ax.tick_params(left=False, labelleft=False, bottom=False, labelbottom=True)
    ax.grid(False)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title)


def kl_beta_run(beta: float, seed: int, setting: Setting, steps: int, lr: float, root: int = 0,
                ks=(30,), **hyper) -> dict:
    """One KL-GRPO run at penalty ``beta`` summarised at its end (hard-chain mass, pass@K on all
    and on hard instances at the largest K of ``ks``), from the stream of (β, seed)."""
    history = post_train(setting, "KL-GRPO", steps, lr, stream(root, "kl-beta", beta, seed), steps,
                         beta=beta, **hyper)
    return {"hard": float(coverage(path_probs(softmax(history[-1]), setting.paths), setting.classes)[HARD]),
            **{key: float(value[-1]) for key, value in trajectory(setting, history, ks=ks).items()
               if key in ("pass", "pass_hard")}}


def hard_summary(pi: np.ndarray, setting: Setting, k: int = 30) -> tuple[float, float]:
    """A path distribution's hard-chain mass and its pass@k on hard instances (exact)."""
    return (float(coverage(pi, setting.classes)[HARD]),
            float(pass_at_k(pi, setting.rex, [k], setting.classes, only_hard=True)[0]))


def sign_test_p(diff) -> float:
    """One-sided exact sign test that positive differences are more likely than negative ones:
    P(Binomial(n, ½) ≥ #positive), ties counted as not positive (conservative)."""
    from scipy import stats

    d = np.asarray(diff, float)
    return float(stats.binom.sf(int((d > 0).sum()) - 1, d.size, 0.5))


def mean_above_p(x, value: float) -> float:
    """One-sided p-value of a one-sample t-test that the mean of ``x`` exceeds ``value``."""
    from scipy import stats

    x = np.asarray(x, float)
    return float(stats.t.sf((x.mean() - value) / (x.std(ddof=1) / np.sqrt(x.size)), x.size - 1))


def detectable_shift(x, level: float) -> float:
    """The smallest mean shift a one-sided one-sample t-test at ``level`` detects with
    probability ½ (the critical value times the standard error of ``x``'s mean)."""
    from scipy import stats

    x = np.asarray(x, float)
    return float(stats.t.isf(level, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))


# ---------------------------------------------------------------------------------------------
# The distributional PRM against ORM on random trees; the squeezing rivals
# ---------------------------------------------------------------------------------------------
def reward_weighted(pi: np.ndarray, reward: np.ndarray) -> np.ndarray:
    """The reward-weighted policy ``π·Rex / Σ π·Rex``: the base re-weighted once by the population
    reward (one multiplicative step of a reward-weighted fit); it keeps every valid chain, so its
    path entropy is not zero. Invalid chains (Rex 0) get no mass."""
    w = np.asarray(pi, float) * np.asarray(reward, float)
    if not w.sum() > 0:
        raise ValueError("the base gives no mass to a rewarded chain")
    return w / w.sum()


def hard_mass_crossover(pi: np.ndarray, setting: Setting, reference: float,
                        lams: np.ndarray) -> float:
    """The smallest λ on the grid ``lams`` (increasing) at which the distributional PRM's exact
    hard-chain mass falls to ``reference`` (ORM's), interpolated in log λ between grid points;
    ``nan`` if it stays above on the whole grid, ``0.0`` if it is at or below already at
    ``lams[0]`` (no λ of the grid keeps more than ORM: the base itself does not)."""
    from lib.tmc.selection import dprm_h_transform

    lams = np.asarray(lams, float)
    mass = np.array([coverage(dprm_h_transform(pi, setting.rex, l), setting.classes)[HARD] for l in lams])
    below = np.flatnonzero(mass <= reference)
    if below.size == 0:
        return float("nan")
    j = int(below[0])
    if j == 0:
        return 0.0
    a, b = mass[j - 1], mass[j]  # a > reference ≥ b
    t = (a - reference) / (a - b)
    return float(np.exp(np.log(lams[j - 1]) + t * (np.log(lams[j]) - np.log(lams[j - 1]))))


def dprm_vs_orm_tree(shape: Sequence[int], seed: int, lam: float, best_of: int, root: int = 0,
                     lams: Sequence[float] = tuple(np.geomspace(1e-2, 1e3, 201))) -> dict:
    """The distributional PRM against ORM best-of-N, exactly, on the random tree of ``shape =
    (L, M, C)`` that :func:`tree_squeeze` draws for the same ``root`` and ``seed`` (the true chain
    as the base model): TASK1's hard-chain mass under the base, ORM best-of-``best_of``, the
    distributional PRM at ``lam`` and near λ = 0 (the base itself, a positive control), and the
    crossover λ at which the dPRM's hard-chain mass falls to ORM's (:func:`hard_mass_crossover`)."""
    from lib.tmc.selection import dprm_h_transform, orm_best_of_n

    n_layers, m, c = shape
    tree = random_tmc(n_layers, m, m, c, stream(root, TREE_STREAM, seed))
    s1 = Setting.of(tree, tree.tasks[0], [np.log(p) for p in tree.probs])
    pi = path_probs(tree.probs, s1.paths)

    def hard(dist):
        return float(coverage(dist, s1.classes)[HARD])

    orm = hard(orm_best_of_n(pi, s1.rex, best_of))
    return {"base": hard(pi), "orm": orm, "dprm": hard(dprm_h_transform(pi, s1.rex, lam)),
            "dprm_small": hard(dprm_h_transform(pi, s1.rex, float(lams[0]))),
            "crossover": hard_mass_crossover(pi, s1, orm, np.asarray(lams))}
