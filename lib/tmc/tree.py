"""Multi-task tree-structured Markov chains (TMC): chapter 05.

Bu, Huang, Han, Nitanda, Xue, Zhang, Wong, Suzuki (2025), "Consistency Is Not Always Correct:
Towards Understanding the Role of Exploration in Post-Training Reasoning", arXiv:2511.07368.

A reasoning chain is a walk ``x_0 → x_1 → … → x_{L-1}`` through ``L`` layers of states. Every
state has a few *high* (easy) children and the rest are *low* (hard) children. A task is a
(start, target) pair; a chain solves it only if it starts at the start and ends at the target.
The model of the chapter is a tabular softmax policy with one logit matrix per layer transition,
shared by all tasks, so post-training one task moves the other through the states they share.

Everything here works on the *path table* of a start state: the ``M^(L-1)`` chains leaving it,
enumerated in lexicographic order, so that path distributions, entropies, pass@K and expected
policy-gradient updates are exact finite sums. The stochastic trainers and samplers work chain
by chain, layer by layer, exactly as a language model would generate.

Conventions: ``probs`` / ``trans`` are lists of row-stochastic matrices, ``trans[l][s, s']`` the
probability of moving from state ``s`` of layer ``l`` to state ``s'`` of layer ``l+1``;
``logits`` has the same shapes. A path distribution ``pi`` is a vector over a start's path table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

EASY, HARD, INVALID = 0, 1, 2
CLASS_NAMES = ("easy", "hard", "invalid")
LOW_WEIGHT = 0.1  # raw weight of a low (hard) edge; high edges share raw weight 1

Matrices = list[np.ndarray]


# ---------------------------------------------------------------------------------------------
# The tree and its tasks
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """A reasoning task: chains must start at ``start`` (layer 0) and end at ``target``."""

    name: str
    start: int
    target: int


@dataclass
class TMC:
    """A multi-task TMC: transition matrices, which edges are high (easy), and the tasks."""

    probs: Matrices
    high: list[np.ndarray]
    tasks: tuple[Task, ...]
    shared: tuple[int, int] = (2, 0)  # (layer, state) of the node both tasks' easy chains use
    sizes: tuple[int, ...] = field(init=False)

    def __post_init__(self):
        self.sizes = (self.probs[0].shape[0],) + tuple(p.shape[1] for p in self.probs)
        for p, h in zip(self.probs, self.high):
            if p.shape != h.shape or not np.allclose(p.sum(1), 1.0):
                raise ValueError("each transition matrix must be row-stochastic and match `high`")

    @property
    def n_layers(self) -> int:
        return len(self.sizes)

    def task(self, name: str) -> Task:
        return next(t for t in self.tasks if t.name == name)


def edge_probabilities(high: Sequence[np.ndarray], low: float = LOW_WEIGHT) -> Matrices:
    """Row-normalise raw weights: ``1/C_row`` on each of a row's ``C_row`` high children,
    ``low`` on every other child."""
    out = []
    for h in high:
        h = np.asarray(h, dtype=bool)
        raw = np.where(h, 1.0 / np.maximum(h.sum(1, keepdims=True), 1), low)
        out.append(raw / raw.sum(1, keepdims=True))
    return out


def paper_tmc() -> TMC:
    """The default tree of the authors' simulations: L = 4 layers of M0 = M = 2 states, C = 1
    high child per state, and the shared node (layer 2, state 0) whose two children are both
    high (probabilities 1/2, 1/2). TASK1 = 0 → 0, TASK2 = 1 → 1."""
    high = [np.array([[1, 0], [1, 0]], bool),   # layer 0 → 1: both starts go to state 0 easily
            np.array([[1, 0], [0, 1]], bool),   # layer 1 → 2
            np.array([[1, 1], [1, 0]], bool)]   # layer 2 → 3: (2, 0) is the shared [½, ½] node
    return TMC(edge_probabilities(high), high, (Task("TASK1", 0, 0), Task("TASK2", 1, 1)), (2, 0))


def random_tmc(n_layers: int, m0: int, m: int, c: int, rng: np.random.Generator,
               low: float = LOW_WEIGHT) -> TMC:
    """A random TMC of the same design: ``c`` random high children per state; both tasks
    (0 → 0 and 1 → 1) get an easy route through state 0 of every middle layer to the shared
    node (layer L−2, state 0), whose high children are exactly the two targets."""
    if n_layers < 3 or m0 < 2 or m < 2 or not 1 <= c <= m:
        raise ValueError("need n_layers ≥ 3, m0 ≥ 2, m ≥ 2 and 1 ≤ c ≤ m")
    sizes = [m0] + [m] * (n_layers - 1)
    high = []
    for l in range(n_layers - 1):
        h = np.zeros((sizes[l], sizes[l + 1]), bool)
        for s in range(sizes[l]):
            h[s, rng.choice(sizes[l + 1], size=c, replace=False)] = True
        high.append(h)
    tasks = (Task("TASK1", 0, 0), Task("TASK2", 1, 1))
    for t in tasks:  # force the easy route start → 0 → … → 0 (shared node)
        for l, s in enumerate([t.start] + [0] * (n_layers - 3)):
            if not high[l][s, 0]:
                high[l][s, rng.choice(np.flatnonzero(high[l][s]))] = False
                high[l][s, 0] = True
    high[-1][0] = False
    high[-1][0, [t.target for t in tasks]] = True
    return TMC(edge_probabilities(high, low), high, tasks, (n_layers - 2, 0))


# ---------------------------------------------------------------------------------------------
# Paths, classes, Rex
# ---------------------------------------------------------------------------------------------
def paths_from(tmc: TMC, start: int) -> np.ndarray:
    """All chains leaving ``start``, shape ``(M^(L-1), L)``, in lexicographic order."""
    rest = itertools.product(*(range(m) for m in tmc.sizes[1:]))
    return np.array([(start, *r) for r in rest], dtype=np.int64)


def path_index(tmc: TMC, chains: np.ndarray) -> np.ndarray:
    """Row index of each chain in its start's path table."""
    return np.ravel_multi_index(tuple(np.asarray(chains)[:, 1:].T), tmc.sizes[1:])


def path_probs(trans: Matrices, paths: np.ndarray) -> np.ndarray:
    """Probability of each chain given its start: the product of its transitions."""
    p = np.ones(len(paths))
    for l, t in enumerate(trans):
        p = p * t[paths[:, l], paths[:, l + 1]]
    return p


def classify(tmc: TMC, task: Task, paths: np.ndarray) -> np.ndarray:
    """EASY (valid, only high edges), HARD (valid, some low edge) or INVALID (wrong target)."""
    all_high = np.ones(len(paths), bool)
    for l, h in enumerate(tmc.high):
        all_high &= h[paths[:, l], paths[:, l + 1]]
    valid = (paths[:, 0] == task.start) & (paths[:, -1] == task.target)
    return np.where(~valid, INVALID, np.where(all_high, EASY, HARD))


def rex(tmc: TMC, task: Task, paths: np.ndarray) -> np.ndarray:
    """Rex(o): a valid chain's probability under the true TMC over the total probability of
    the task's valid chains (0 for invalid chains). It is the chance that ``o`` belongs to a
    random instance's correct set, hence the population (ORM) reward of ``o``."""
    p = path_probs(tmc.probs, paths) * (classify(tmc, task, paths) != INVALID)
    return p / p.sum()


# ---------------------------------------------------------------------------------------------
# Question instances and pass@K
# ---------------------------------------------------------------------------------------------
def correct_sets(rex_: np.ndarray, max_valid: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Every possible correct set of an instance and its probability: each valid chain ``o``
    is correct independently with probability Rex(o). Returns ``(masks, probs)`` with
    ``masks`` of shape ``(2^n_valid, n_paths)``."""
    valid = np.flatnonzero(rex_ > 0)
    if len(valid) > max_valid:
        raise ValueError(f"{len(valid)} valid chains: too many correct sets to enumerate; "
                         "use sampled instances instead")
    bits = np.array(list(itertools.product([False, True], repeat=len(valid))), bool)
    masks = np.zeros((len(bits), len(rex_)), bool)
    masks[:, valid] = bits
    r = rex_[valid]
    probs = np.prod(np.where(bits, r, 1 - r), axis=1)
    return masks, probs


def hard_instances(masks: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """An instance is hard when no easy chain is correct but some hard chain is."""
    return ~(masks & (classes == EASY)).any(1) & (masks & (classes == HARD)).any(1)


def sample_instances(rex_: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random correct sets, shape ``(n, n_paths)``."""
    return rng.random((n, len(rex_))) < rex_


def pass_at_k(pi: np.ndarray, rex_: np.ndarray, ks, classes: np.ndarray | None = None,
              only_hard: bool = False) -> np.ndarray:
    """Exact pass@K = Σ_C P(C)·[1 − (1 − π(C))^K] over the correct sets C; with
    ``only_hard`` the average is over hard instances only (needs ``classes``)."""
    masks, probs = correct_sets(rex_)
    if only_hard:
        probs = probs * hard_instances(masks, classes)
        probs = probs / probs.sum()
    solved = masks.astype(float) @ pi  # π(C)
    ks = np.atleast_1d(np.asarray(ks, dtype=float))
    return probs @ (1 - (1 - solved[:, None]) ** ks[None, :])


def pass_at_k_estimate(n_correct: np.ndarray, n: int, k: int) -> np.ndarray:
    """The unbiased per-instance estimator 1 − C(n−c, k)/C(n, k) from n samples, c correct."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 ≤ k ≤ n = {n} samples per instance")
    table = np.array([1.0 - math.comb(n - c, k) / math.comb(n, k) for c in range(n + 1)])
    return table[np.asarray(n_correct)]


def sampled_pass_at_k(trans: Matrices, tmc: TMC, task: Task, ks, n_instances: int,
                      n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """Monte-Carlo pass@K: random instances, ``n_samples`` chains generated layer by layer for
    each, the unbiased estimator per instance. Returns ``(n_instances, len(ks))``."""
    paths = paths_from(tmc, task.start)
    instances = sample_instances(rex(tmc, task, paths), n_instances, rng)
    chains = sample_chains(trans, task.start, n_instances * n_samples, rng)
    hits = instances[np.repeat(np.arange(n_instances), n_samples), path_index(tmc, chains)]
    correct = hits.reshape(n_instances, n_samples).sum(1)
    return np.stack([pass_at_k_estimate(correct, n_samples, k) for k in ks], axis=1)


def path_entropy(pi: np.ndarray) -> float:
    """Shannon entropy (nats) of a path distribution."""
    p = pi[pi > 0]
    return float(-(p * np.log(p)).sum())


def coverage(pi: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Probability mass on easy, hard and invalid chains."""
    return np.array([pi[classes == k].sum() for k in (EASY, HARD, INVALID)])


# ---------------------------------------------------------------------------------------------
# The tabular softmax policy and its gradients
# ---------------------------------------------------------------------------------------------
def softmax(logits: Matrices) -> Matrices:
    out = []
    for z in logits:
        e = np.exp(z - z.max(1, keepdims=True))
        out.append(e / e.sum(1, keepdims=True))
    return out


def score_sum(trans: Matrices, chains: np.ndarray, weights: np.ndarray) -> Matrices:
    """Σ_i w_i ∇_θ log π(chain_i). For a tabular softmax, ∇_{θ_l[s]} log π(o) is
    1[o_l = s]·(e_{o_{l+1}} − π_l(·|s))."""
    grads = []
    for l, t in enumerate(trans):
        g = np.zeros_like(t)
        np.add.at(g, (chains[:, l], chains[:, l + 1]), weights)
        g -= np.bincount(chains[:, l], weights=weights, minlength=t.shape[0])[:, None] * t
        grads.append(g)
    return grads


def step(logits: Matrices, direction: Matrices, lr: float) -> Matrices:
    return [z + lr * d for z, d in zip(logits, direction)]


def sample_chains(trans: Matrices, start, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` chains generated layer by layer (inverse-CDF draws), shape ``(n, L)``;
    ``start`` is one state or an array of ``n`` states."""
    x = np.broadcast_to(np.asarray(start, dtype=np.int64), (n,))
    chains = [x]
    for t in trans:
        cdf = np.cumsum(t[x], axis=1)
        x = np.minimum((rng.random(n)[:, None] > cdf).sum(1), t.shape[1] - 1)
        chains.append(x)
    return np.stack(chains, axis=1)


# ---------------------------------------------------------------------------------------------
# Pretraining: tree expansion by SGD on sampled chains
# ---------------------------------------------------------------------------------------------
def pretrain(tmc: TMC, steps: int, batch: int, lr: float, rng: np.random.Generator,
             init_scale: float = 0.01) -> Matrices:
    """Fit the softmax policy to chains of the true TMC (starts uniform over layer 0) by SGD
    on the next-state cross-entropy, whose negative gradient is the mean score
    (1/B)·Σ ∇log π(chain). The learning rate decays as lr/(1 + 10 t/steps)."""
    logits = [init_scale * rng.standard_normal(p.shape) for p in tmc.probs]
    for t in range(steps):
        chains = sample_chains(tmc.probs, rng.integers(tmc.sizes[0], size=batch), batch, rng)
        direction = score_sum(softmax(logits), chains, np.full(batch, 1.0 / batch))
        logits = step(logits, direction, lr / (1 + 10 * t / steps))
    return logits


# ---------------------------------------------------------------------------------------------
# Post-training on one task: stochastic trainers
# ---------------------------------------------------------------------------------------------
@dataclass
class Setting:
    """What a trainer needs about the task it post-trains on."""

    tmc: TMC
    task: Task
    paths: np.ndarray
    rex: np.ndarray
    ref_logits: Matrices  # the base (pretrained) policy: every run starts here; KL reference
    classes: np.ndarray
    masks: np.ndarray | None  # every correct set and its probability (None if too many)
    set_probs: np.ndarray | None

    @classmethod
    def of(cls, tmc: TMC, task: Task, ref_logits: Matrices) -> Setting:
        paths = paths_from(tmc, task.start)
        r = rex(tmc, task, paths)
        try:
            masks, probs = correct_sets(r)
        except ValueError:
            masks = probs = None
        return cls(tmc, task, paths, r, ref_logits, classify(tmc, task, paths), masks, probs)

    def reward(self, instance: np.ndarray, chains: np.ndarray) -> np.ndarray:
        """1 if a chain is in the instance's correct set."""
        return instance[path_index(self.tmc, chains)].astype(float)


def _reinforce(s: Setting, logits, trans, rng, **_):
    """θ ← θ + η·R·∇log π(o), one chain per instance."""
    instance = sample_instances(s.rex, 1, rng)[0]
    chain = sample_chains(trans, s.task.start, 1, rng)
    return score_sum(trans, chain, s.reward(instance, chain))


def _rl_rej(s: Setting, logits, trans, rng, probes: int = 4, **_):
    """Reject easy instances: skip the instance if any of ``probes`` chains solves it,
    otherwise a REINFORCE step on a fresh chain."""
    instance = sample_instances(s.rex, 1, rng)[0]
    if s.reward(instance, sample_chains(trans, s.task.start, probes, rng)).any():
        return None
    chain = sample_chains(trans, s.task.start, 1, rng)
    return score_sum(trans, chain, s.reward(instance, chain))


def _raft(s: Setting, logits, trans, rng, group: int = 4, **_):
    """Reward-ranked fine-tuning: sample a group, keep the correct chains, take a
    cross-entropy (SFT) step on them."""
    instance = sample_instances(s.rex, 1, rng)[0]
    chains = sample_chains(trans, s.task.start, group, rng)
    r = s.reward(instance, chains)
    return score_sum(trans, chains, r / r.sum()) if r.any() else None


def _kl_grpo(s: Setting, logits, trans, rng, group: int = 4, beta: float = 0.1, **_):
    """Group policy gradient with a leave-one-out baseline and the sequence-level KL penalty
    β·log(π/π_ref): in expectation the gradient of E_π[Rex] − β·KL(π ‖ π_ref)."""
    instance = sample_instances(s.rex, 1, rng)[0]
    chains = sample_chains(trans, s.task.start, group, rng)
    r = s.reward(instance, chains)
    advantage = r - (r.sum() - r) / (group - 1)
    log_ratio = np.log(path_probs(trans, chains)) - np.log(path_probs(softmax(s.ref_logits), chains))
    return score_sum(trans, chains, (advantage - beta * log_ratio) / group)


def _ppo(s: Setting, logits, trans, rng, group: int = 4, epochs: int = 2, clip: float = 0.2,
         lr: float = 1.0, **_):
    """PPO-style: a group from the current (old) policy, group-mean advantages, ``epochs``
    inner steps on the clipped surrogate; returns the net change of the logits divided by lr."""
    instance = sample_instances(s.rex, 1, rng)[0]
    chains = sample_chains(trans, s.task.start, group, rng)
    r = s.reward(instance, chains)
    advantage = r - r.mean()
    if not advantage.any():
        return None
    old = path_probs(trans, chains)
    theta = logits
    for _ in range(epochs):
        now = softmax(theta)
        ratio = path_probs(now, chains) / old
        clipped = ((advantage > 0) & (ratio > 1 + clip)) | ((advantage < 0) & (ratio < 1 - clip))
        theta = step(theta, score_sum(now, chains, advantage * ratio * ~clipped / group), lr)
    return [(a - b) / lr for a, b in zip(theta, logits)]


TRAINERS: dict[str, Callable] = {"REINFORCE": _reinforce, "RL-rej": _rl_rej, "RAFT": _raft,
                                 "PPO": _ppo, "KL-GRPO": _kl_grpo}


def post_train(setting: Setting, method: str, steps: int, lr: float, rng: np.random.Generator,
               record_every: int = 10, **hyper) -> list[Matrices]:
    """Run one post-training method for ``steps`` instances from the reference policy.
    Returns the logits at steps 0, record_every, 2·record_every, …, steps."""
    if method not in TRAINERS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(TRAINERS)}")
    update = TRAINERS[method]
    logits = [z.copy() for z in setting.ref_logits]
    history = [logits]
    for t in range(1, steps + 1):
        direction = update(setting, logits, softmax(logits), rng, lr=lr, **hyper)
        if direction is not None:
            logits = step(logits, direction, lr)
        if t % record_every == 0:
            history.append(logits)
    return history


# ---------------------------------------------------------------------------------------------
# Expected updates (the mean-field ODE) and the KL tilt
# ---------------------------------------------------------------------------------------------
def path_weights(setting: Setting, method: str, trans: Matrices, probes: int = 4,
                 beta: float = 0.1, **_) -> np.ndarray:
    """g(o) such that the method's expected update is Σ_o π(o)·g(o)·∇log π(o):
    REINFORCE g = Rex (the gradient of pass@1); RL-rej g(o) = Σ_{C∋o} P(C)(1 − π(C))^m, the
    gradient of pass@(m+1)/(m+1); KL-GRPO g = Rex − β·log(π/π_ref)."""
    pi = path_probs(trans, setting.paths)
    if method == "REINFORCE":
        return setting.rex
    if method == "RL-rej":
        masks = setting.masks.astype(float)
        return (setting.set_probs * (1 - masks @ pi) ** probes) @ masks
    if method == "KL-GRPO":
        ref = path_probs(softmax(setting.ref_logits), setting.paths)
        return setting.rex - beta * np.log(pi / ref)
    raise ValueError(f"no closed-form expected update for {method!r}")


def expected_update(setting: Setting, method: str, logits: Matrices, **hyper) -> Matrices:
    trans = softmax(logits)
    pi = path_probs(trans, setting.paths)
    return score_sum(trans, setting.paths, pi * path_weights(setting, method, trans, **hyper))


def mean_field(setting: Setting, method: str, steps: int, lr: float, record_every: int = 10,
               **hyper) -> list[Matrices]:
    """The deterministic recursion θ ← θ + η·E[Δθ] (Euler steps of the mean-field ODE),
    recorded like :func:`post_train`."""
    logits = [z.copy() for z in setting.ref_logits]
    history = [logits]
    for t in range(1, steps + 1):
        logits = step(logits, expected_update(setting, method, logits, **hyper), lr)
        if t % record_every == 0:
            history.append(logits)
    return history


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
              **hyper) -> dict:
    """One seeded post-training run summarised by :func:`trajectory`, plus its final logits
    (a function of plain arguments, so :func:`lib.sweep.sweep` can farm it out)."""
    history = post_train(setting, method, steps, lr, np.random.default_rng([root, seed]),
                         record_every, **hyper)
    return {**trajectory(setting, history, other, ks), "logits": history[-1]}


def tree_squeeze(shape: Sequence[int], seed: int, steps: int, lr: float, root: int = 0,
                 methods: Sequence[str] = ("REINFORCE", "RL-rej", "KL-GRPO"), **hyper) -> dict:
    """Squeezing on a random tree of ``shape = (L, M, C)`` (``M0 = M``), with the true chain as
    the base model: for each method, the final/base ratios of TASK1's path entropy and
    hard-chain mass, and of TASK2's valid mass (its chance of reaching its target at all).
    Needs no enumeration of correct sets, so it runs on trees of any size."""
    n_layers, m, c = shape
    rng = np.random.default_rng([root, seed])
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


def kl_tilt(pi_ref: np.ndarray, reward: np.ndarray, beta: float) -> np.ndarray:
    """The maximiser over all path distributions of E_π[reward] − β·KL(π ‖ π_ref):
    π* ∝ π_ref·exp(reward/β)."""
    w = pi_ref * np.exp((reward - reward.max()) / beta)
    return w / w.sum()


# ---------------------------------------------------------------------------------------------
# Inference-time selection with a population reward (exact output distributions + samplers)
# ---------------------------------------------------------------------------------------------
def _levels(score: np.ndarray) -> np.ndarray:
    """Scores rounded so that mathematically equal rewards (equal path probabilities computed
    in a different order) tie exactly."""
    return np.round(score, 12)


def orm_best_of_n(pi: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
    """Output distribution of best-of-n: draw n chains from π, return one with the highest
    score (ties broken uniformly). P(best score = s) = F(≤s)^n − F(<s)^n, shared within a tie
    in proportion to π."""
    level = _levels(score)
    out = np.zeros_like(pi)
    for s in np.unique(level):
        tie = level == s
        mass = pi[tie].sum()
        if mass > 0:
            below = pi[level < s].sum()
            out[tie] = pi[tie] / mass * ((below + mass) ** n - below ** n)
    return out


def soft_best_of_n(pi: np.ndarray, score: np.ndarray, n: int, kappa: float) -> np.ndarray:
    """Output distribution of soft best-of-n: draw n chains, return chain i with probability
    ∝ exp(κ·score_i). Exact: P(o) = n·π(o)·E[w_o / (w_o + S)], S the weight sum of n − 1
    other draws, enumerated over how many of them fall at each distinct score."""
    level = _levels(score)
    values, inverse = np.unique(level, return_inverse=True)
    mass = np.bincount(inverse, weights=pi, minlength=len(values))
    w = np.exp(kappa * (values - values.max()))
    out = np.zeros_like(pi)
    log_fact = [math.lgamma(i + 1) for i in range(n)]
    for combo in itertools.combinations_with_replacement(range(len(values)), n - 1):
        counts = np.bincount(np.asarray(combo, dtype=int), minlength=len(values))
        with np.errstate(divide="ignore"):
            logp = log_fact[n - 1] - sum(log_fact[c] for c in counts) + (counts * np.log(mass)).sum()
        if not np.isfinite(logp):
            continue
        s = counts @ w
        out += np.exp(logp) * n * pi * w[inverse] / (w[inverse] + s)
    return out


def _child_sums(alive: np.ndarray, paths: np.ndarray, depth: int, values: np.ndarray):
    """For each run (row of ``alive``: the paths consistent with its prefix) and each state
    of layer ``depth``: the sum of ``values`` over the consistent paths through that state."""
    states = np.arange(paths[:, depth].max() + 1)
    through = paths[:, depth][None, :] == states[:, None]            # (states, paths)
    return (alive * values) @ through.T                              # (runs, states)


def prm_greedy(pi: np.ndarray, paths: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Output distribution of stepwise PRM decoding: at every layer move to the child whose
    prefix has the highest value E_π[score | prefix] (ties split uniformly)."""
    out = np.zeros_like(pi)
    frontier = [(np.ones(len(pi), bool), 1.0)]  # (paths consistent with the prefix, its probability)
    for depth in range(1, paths.shape[1]):
        nxt = []
        for alive, prob in frontier:
            mass = _child_sums(alive[None], paths, depth, pi)[0]
            gain = _child_sums(alive[None], paths, depth, pi * score)[0]
            value = _levels(np.where(mass > 0, gain / np.where(mass > 0, mass, 1), -np.inf))
            best = np.flatnonzero(value == value.max())
            nxt += [(alive & (paths[:, depth] == b), prob / len(best)) for b in best]
        frontier = nxt
    for alive, prob in frontier:
        out[alive] += prob
    return out


def dprm_h_transform(pi: np.ndarray, score: np.ndarray, lam: float) -> np.ndarray:
    """Output distribution of distributional-PRM sampling: with the entropic value
    V_λ(prefix) = (1/λ)·log E_π[exp(λ·score) | prefix] and h = exp(λ·V_λ), the Doob
    h-transform π(s'|prefix)·h(prefix s')/h(prefix) samples whole chains from
    π(o)·exp(λ·score(o)) / Z, the KL tilt with β = 1/λ."""
    return kl_tilt(pi, score, 1.0 / lam)


def sample_orm_best_of_n(pi: np.ndarray, score: np.ndarray, n: int, size: int,
                         rng: np.random.Generator) -> np.ndarray:
    """``size`` runs of best-of-n; returns the selected path indices."""
    draws = rng.choice(len(pi), size=(size, n), p=pi)
    rank = np.unique(_levels(score), return_inverse=True)[1][draws]
    return draws[np.arange(size), (rank + rng.random((size, n))).argmax(1)]  # uniform tie-break


def sample_dprm(pi: np.ndarray, paths: np.ndarray, score: np.ndarray, lam: float, size: int,
                rng: np.random.Generator) -> np.ndarray:
    """``size`` chains generated layer by layer from the h-transformed policy: the next state
    is drawn ∝ Σ π(o)·h(o) over the paths through it, i.e. ∝ π(s'|prefix)·h(prefix s'),
    h = exp(λ·score). Returns path indices."""
    h = np.exp(lam * (score - score.max()))
    alive = np.ones((size, len(pi)), bool)  # paths consistent with each run's prefix so far
    for depth in range(1, paths.shape[1]):
        w = _child_sums(alive, paths, depth, pi * h)
        cdf = np.cumsum(w / w.sum(1, keepdims=True), axis=1)
        pick = np.minimum((rng.random(size)[:, None] > cdf).sum(1), w.shape[1] - 1)
        alive &= paths[:, depth][None, :] == pick[:, None]
    return alive.argmax(1)


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
