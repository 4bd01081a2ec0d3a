"""The tabular softmax policy of chapter 05 (one logit matrix per layer transition, shared by all
tasks): its score function, chain sampling, pretraining ("tree expansion") and Monte-Carlo pass@K."""

from __future__ import annotations

import numpy as np

from lib import stats
from lib.tmc.tree import TMC, Matrices, Task, pass_at_k_estimate, path_index, paths_from, rex, sample_instances


def softmax(logits: Matrices) -> Matrices:
    """The transition matrices of a policy: a row-wise softmax of each logit matrix."""
    return [stats.softmax(z, axis=1) for z in logits]


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
# Monte-Carlo pass@K: the literal protocol
# ---------------------------------------------------------------------------------------------
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
