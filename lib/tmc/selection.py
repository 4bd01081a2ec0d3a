"""Inference-time selection with a population reward in chapter 05: exact output distributions
of ORM best-of-N, soft best-of-N, stepwise PRM decoding and the distributional PRM, and samplers
that run each procedure literally."""

from __future__ import annotations

import itertools
import math

import numpy as np

from lib.tmc.odes import kl_tilt


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


def binomial_pvalues(counts: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Two-sided exact binomial p-values, one per chain, of observing ``counts`` among
    ``counts.sum()`` independent selections when chain ``o`` is selected with probability
    ``probs[o]``: ``min(1, 2·min(P(X ≤ c), P(X ≥ c)))``. Exact for rare chains, where the normal
    approximation (a z-score) is far too optimistic about the upper tail: with n·p = 5 a count of
    13 is a 3.6σ event for the z-score (two-sided 3·10⁻⁴) but has two-sided p-value 4·10⁻³."""
    from scipy import stats

    counts = np.asarray(counts)
    n = int(counts.sum())
    p = np.clip(np.asarray(probs, dtype=float), 0.0, 1.0)
    lower = stats.binom.cdf(counts, n, p)
    upper = stats.binom.sf(counts - 1, n, p)
    return np.minimum(1.0, 2 * np.minimum(lower, upper))
