"""The multi-task TMC of chapter 05: the tree and its tasks, the path table of a start state,
Rex, random question instances, exact pass@K, and what a trainer needs about one task
(:class:`Setting`).

Everything here works on the *path table* of a start state: the ``M^(L-1)`` chains leaving it,
enumerated in lexicographic order, so that path distributions, entropies and pass@K are exact
finite sums.

Conventions: ``probs`` / ``trans`` are lists of row-stochastic matrices, ``trans[l][s, s']`` the
probability of moving from state ``s`` of layer ``l`` to state ``s'`` of layer ``l+1``;
``logits`` has the same shapes. A path distribution ``pi`` is a vector over a start's path table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
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


def path_entropy(pi: np.ndarray) -> float:
    """Shannon entropy (nats) of a path distribution."""
    p = pi[pi > 0]
    return float(-(p * np.log(p)).sum())


def coverage(pi: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Probability mass on easy, hard and invalid chains."""
    return np.array([pi[classes == k].sum() for k in (EASY, HARD, INVALID)])


# ---------------------------------------------------------------------------------------------
# What a trainer needs about one task
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
