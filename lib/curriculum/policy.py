"""The positional policy (an independent softmax over the ``d`` children at each depth) and its
REINFORCE gradient."""

from __future__ import annotations

import numpy as np

from lib.stats import softmax


def sample_paths(logits: np.ndarray, n: int, rng: np.random.Generator,
                 uniforms: np.ndarray | None = None) -> np.ndarray:
    """``n`` paths per batch entry from the positional policy: ``logits (..., k, d)`` →
    ``(..., n, k)``.  Inverse-CDF sampling, so two models fed the same ``uniforms`` and the same
    logits draw the same paths."""
    cdf = np.cumsum(softmax(logits), axis=-1)  # (..., k, d)
    u = rng.random((*logits.shape[:-2], n, logits.shape[-2])) if uniforms is None else uniforms
    idx = (u[..., None] >= cdf[..., None, :, :-1]).sum(axis=-1)  # (..., n, k)
    return idx.astype(np.int64)


def reward_counts(paths: np.ndarray, rewards: np.ndarray, d: int) -> np.ndarray:
    """``Σ_s r_s e_{i_sℓ}`` for every batch entry and depth, ``(..., k, d)``, as one weighted
    bincount: ``paths (..., n, k)``, ``rewards (..., n)``.  Exact for 0/1 rewards."""
    batch, (n, k) = paths.shape[:-2], paths.shape[-2:]
    r = np.broadcast_to(rewards, (*batch, n))
    b = int(np.prod(batch, dtype=np.int64))
    slot = (np.arange(b)[:, None, None] * k + np.arange(k)) * d + paths.reshape(b, n, k)
    weights = np.broadcast_to(r.reshape(b, n, 1), (b, n, k))
    counts = np.bincount(slot.ravel(), weights.ravel(), minlength=b * k * d)
    return counts.reshape(*batch, k, d)


def reinforce_gradient(logits: np.ndarray, paths: np.ndarray, rewards: np.ndarray,
                       trained: np.ndarray | None = None, baseline: bool = False) -> np.ndarray:
    """Monte-Carlo REINFORCE gradient of the expected reward, ``(1/n) Σ_s (r_s − b) ∇ log π``.

    ``paths (..., n, k)``, ``rewards (..., n)``; ``∇_{θ_ℓ} log π(path) = e_{i_ℓ} − π_ℓ``.
    ``trained (..., k)`` masks the depths that were sampled and learn (others get 0).
    ``baseline``: subtract the batch's mean reward.
    """
    n = paths.shape[-2]
    r = rewards - rewards.mean(axis=-1, keepdims=True) if baseline else rewards
    r = np.broadcast_to(r, (*paths.shape[:-2], n))
    onehot_sum = reward_counts(paths, r, logits.shape[-1]) / n
    grad = onehot_sum - r.mean(axis=-1)[..., None, None] * softmax(logits)
    if trained is not None:
        grad = grad * trained[..., None]
    return grad


def greedy(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The greedy path and whether every depth's maximum is unique (ties are not a choice)."""
    path = logits.argmax(axis=-1)
    top = np.take_along_axis(logits, path[..., None], axis=-1)
    unique = (logits >= top).sum(axis=-1) == 1
    return path, unique
