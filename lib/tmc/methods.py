"""Post-training one task of chapter 05 from the base policy: the stochastic trainers (REINFORCE,
RL-rej, RAFT, PPO-style, KL-regularised GRPO), each one update per random question instance."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lib.tmc.policy import sample_chains, score_sum, softmax, step
from lib.tmc.tree import Matrices, Setting, path_probs, sample_instances


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
               record_every: int = 10, compiled: bool = True, **hyper) -> list[Matrices]:
    """Run one post-training method for ``steps`` instances from the reference policy.
    Returns the logits at steps 0, record_every, 2·record_every, …, steps. With ``compiled``
    the loop runs in :func:`lib.tmc.compiled.post_train_compiled` (the same draws, the same
    numbers to round-off); without, it runs here step by step in numpy (the reference)."""
    if method not in TRAINERS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(TRAINERS)}")
    if compiled:
        from lib.tmc.compiled import post_train_compiled

        return post_train_compiled(setting, method, steps, lr, rng, record_every, **hyper)
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
