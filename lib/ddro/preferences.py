"""Preference structures over a finite output set, the targets p₊ they induce, and the paired
and unpaired data drawn from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from scipy.stats import norm


# ----------------------------------------------------------------------------------------------
# Preference structures over a finite output set
# ----------------------------------------------------------------------------------------------


@dataclass
class Preference:
    """A preference structure over K outputs: P[a, b] = P(a ≻ b), with P + Pᵀ = 1 and
    P[a, a] = ½."""

    name: str
    P: np.ndarray

    def __post_init__(self):
        P = np.asarray(self.P, dtype=float)
        if P.ndim != 2 or P.shape[0] != P.shape[1]:
            raise ValueError("P must be a square matrix")
        if not np.allclose(P + P.T, 1.0) or np.any(P < 0) or np.any(P > 1):
            raise ValueError("P must satisfy P[a, b] + P[b, a] = 1 with entries in [0, 1]")
        self.P = P

    @property
    def K(self) -> int:
        return self.P.shape[0]


def bradley_terry(s: np.ndarray) -> Preference:
    """P(a ≻ b) = sigmoid(s_a − s_b)."""
    s = np.asarray(s, float)
    return Preference("Bradley–Terry", expit(s[:, None] - s[None, :]))


def thurstone(s: np.ndarray) -> Preference:
    """P(a ≻ b) = Φ(s_a − s_b) (probit: transitive, but not Bradley–Terry)."""
    s = np.asarray(s, float)
    return Preference("Thurstone", norm.cdf(s[:, None] - s[None, :]))


def cyclic(s: np.ndarray, strength: float = 2.0) -> Preference:
    """Intransitive: P(a ≻ b) = sigmoid(s_a − s_b + C_ab) with C_{k,k+1} = +strength around the
    cycle 0 → 1 → … → K−1 → 0 (and C_ba = −C_ab): each output beats its successor."""
    s = np.asarray(s, float)
    K = len(s)
    C = np.zeros((K, K))
    for k in range(K):
        C[k, (k + 1) % K] += strength
        C[(k + 1) % K, k] -= strength
    return Preference("intransitive (cyclic)", expit(s[:, None] - s[None, :] + C))


def annotator_mixture(s1: np.ndarray, s2: np.ndarray, weight: float = 0.5) -> Preference:
    """Two annotator populations with conflicting utilities: P = w·BT(s1) + (1 − w)·BT(s2)."""
    P = weight * bradley_terry(s1).P + (1 - weight) * bradley_terry(s2).P
    return Preference("annotator mixture", P)


def structures(K: int, rng: np.random.Generator) -> list[Preference]:
    """The chapter's four structures on K outputs, with utilities drawn from ``rng``."""
    s = rng.normal(0.0, 1.0, K)
    return [bradley_terry(s), thurstone(s), cyclic(0.3 * s), annotator_mixture(2 * s, -2 * s[::-1],
                                                                               0.6)]


def paired_target(pi: np.ndarray, pref: Preference) -> np.ndarray:
    """p₊ for pairs (y, y') ~ π_ref ⊗ π_ref labelled by P: the law of the winner,
    p₊(y) = 2 π(y) Σ_{y'} π(y') P(y ≻ y')."""
    return 2.0 * pi * (pref.P @ pi)


def unpaired_target(pi: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    """p₊ and α for y ~ π_ref labelled preferred with probability q(y): p₊ = π q / α."""
    alpha = float(pi @ q)
    return pi * q / alpha, alpha


def tv(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance ½ Σ |p − q|."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def sample_pairs(pi: np.ndarray, pref: Preference, N: int, rng: np.random.Generator) -> np.ndarray:
    """N preference pairs: a (K, K) matrix C with C[a, b] = #pairs in which a beat b."""
    K = len(pi)
    y1 = rng.choice(K, size=N, p=pi)
    y2 = rng.choice(K, size=N, p=pi)
    first_wins = rng.random(N) < pref.P[y1, y2]
    w, loser = np.where(first_wins, y1, y2), np.where(first_wins, y2, y1)
    C = np.zeros((K, K))
    np.add.at(C, (w, loser), 1.0)
    return C


def expected_pairs(pi: np.ndarray, pref: Preference, N: float = 1.0) -> np.ndarray:
    """The population version of :func:`sample_pairs`: E C[a, b] = 2 N π_a π_b P(a ≻ b) (a wins
    as the first or the second draw; on the diagonal this is N π_a², a "pair" of equal outputs)."""
    return 2.0 * N * pi[:, None] * pi[None, :] * pref.P


def sample_unpaired(pi: np.ndarray, q: np.ndarray, N: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """N responses y ~ π_ref labelled preferred with probability q(y): counts (N₊(y), N₋(y))."""
    K = len(pi)
    y = rng.choice(K, size=N, p=pi)
    good = rng.random(N) < q[y]
    return (np.bincount(y[good], minlength=K).astype(float),
            np.bincount(y[~good], minlength=K).astype(float))
