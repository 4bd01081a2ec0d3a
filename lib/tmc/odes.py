"""Expected updates of chapter 05's trainers (the mean-field ODE, iterated by Euler steps) and
the KL tilt that KL-regularised training and the distributional PRM target."""

from __future__ import annotations

import numpy as np

from lib.tmc.policy import score_sum, softmax, step
from lib.tmc.tree import Matrices, Setting, path_probs


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


def kl_tilt(pi_ref: np.ndarray, reward: np.ndarray, beta: float) -> np.ndarray:
    """The maximiser over all path distributions of E_π[reward] − β·KL(π ‖ π_ref):
    π* ∝ π_ref·exp(reward/β)."""
    w = pi_ref * np.exp((reward - reward.max()) / beta)
    return w / w.sum()
