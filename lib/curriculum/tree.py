"""The reasoning tree: inputs, the chain ``z_ℓ = a·z_{ℓ-1} + x_{i_ℓ} (mod p)``, its oracles, and
which paths are right on every input (Bu et al., arXiv:2511.07372)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product

import numpy as np

ROUTES = ("direct", "depth", "hint")


@dataclass(frozen=True)
class ReasoningTree:
    """A depth-``k`` chain over an input of ``d`` tokens in Z_p: ``z_ℓ = a·z_{ℓ-1} + x_{i_ℓ}``.

    ``paths`` arguments are integer arrays ``(..., L)`` with ``L ≤ k`` (a prefix of a chain).
    """

    d: int
    k: int
    target: tuple[int, ...]
    p: int = 2
    a: int = 1
    blocked: bool = False
    name: str = field(default="chain", compare=False)

    def __post_init__(self):
        if self.d < 2 or self.k < 1:
            raise ValueError(f"need d ≥ 2 and k ≥ 1, got d={self.d}, k={self.k}")
        if len(self.target) != self.k or not all(0 <= i < self.d for i in self.target):
            raise ValueError(f"target must be {self.k} indices in [0, {self.d}), got {self.target}")
        if len(set(self.target)) != self.k and not self.blocked:
            raise ValueError("a shared-input target must use distinct positions")
        if self.p < 2 or self.a % self.p == 0:
            raise ValueError("need a modulus p ≥ 2 and a multiplier a ≢ 0 (mod p)")

    # -- inputs and the chain ------------------------------------------------------------------
    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.k, self.d) if self.blocked else (self.d,)

    @property
    def q(self) -> float:
        """Reward-hacking rate: the chance that a path which is not equivalent to the target
        still gets the right answer on a uniform input (exactly ``1/p``: a non-zero linear form
        over Z_p of uniform inputs is uniform)."""
        return 1.0 / self.p

    def sample_inputs(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.integers(0, self.p, size=(*shape, *self.input_shape), dtype=np.int64)

    def read(self, x: np.ndarray, paths: np.ndarray) -> np.ndarray:
        """The tokens the chain reads: ``x[..., i_ℓ]`` (or ``x[..., ℓ, i_ℓ]`` when blocked)."""
        paths = np.asarray(paths)
        if self.blocked:
            L = paths.shape[-1]
            return np.take_along_axis(x[..., :L, :], paths[..., None], axis=-1)[..., 0]
        return np.take_along_axis(x, paths, axis=-1)

    def prefix_answers(self, x: np.ndarray, paths: np.ndarray) -> np.ndarray:
        """``z_1..z_L`` of each chain: shape of ``paths``."""
        v = self.read(x, paths)
        z = np.zeros(v.shape[:-1], dtype=np.int64)
        out = np.empty_like(v)
        for ell in range(v.shape[-1]):
            z = (self.a * z + v[..., ell]) % self.p
            out[..., ell] = z
        return out

    def target_paths(self, shape: tuple[int, ...] = ()) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.target), (*shape, self.k))

    def terminal_reward(self, x: np.ndarray, paths: np.ndarray) -> np.ndarray:
        """1 when the chain's last answer equals the target chain's answer at the same depth."""
        L = paths.shape[-1]
        z = self.prefix_answers(x, paths)[..., -1]
        z_star = self.prefix_answers(x, self.target_paths(paths.shape[:-1])[..., :L])[..., -1]
        return (z == z_star).astype(np.float64)

    family_reward = terminal_reward  # the family oracle judges a prefix with the same rule

    # -- which paths are right on every input ------------------------------------------------
    def coefficients(self, paths: np.ndarray) -> np.ndarray:
        """The answer as a linear form over the input tokens: ``(..., n_tokens)`` in Z_p."""
        paths = np.asarray(paths)
        L = paths.shape[-1]
        weights = np.array([pow(self.a, L - 1 - ell, self.p) for ell in range(L)])
        n_tok = self.k * self.d if self.blocked else self.d
        cols = paths + (np.arange(L) * self.d if self.blocked else 0)
        onehot = np.zeros((*paths.shape, n_tok), dtype=np.int64)
        np.put_along_axis(onehot, cols[..., None], 1, axis=-1)
        return (onehot * weights[:, None]).sum(axis=-2) % self.p

    def is_correct(self, paths: np.ndarray) -> np.ndarray:
        """True where a (prefix) path gives the target's (prefix) answer on *every* input."""
        paths = np.asarray(paths)
        L = paths.shape[-1]
        star = self.coefficients(np.asarray(self.target[:L]))
        return np.all(self.coefficients(paths) == star, axis=-1)

    def n_correct_paths(self) -> int:
        """How many of the ``d^k`` paths are correct (brute force up to 10^6 paths)."""
        if self.blocked or self.multiplier_order() >= self.k and self.a % self.p != 1:
            return 1  # distinct weights a^{k-ℓ}: only the target itself (see the chapter)
        if self.a % self.p == 1 and (self.p == 2 or self.k < self.p):
            return math.factorial(self.k)  # the answer is a sum: every reordering of the target
        if self.d ** self.k > 10**6:
            raise ValueError("too many paths to count by brute force")
        paths = np.array(list(product(range(self.d), repeat=self.k)))
        return int(self.is_correct(paths).sum())

    def multiplier_order(self) -> int:
        """The multiplicative order of ``a`` modulo ``p``."""
        x, order = self.a % self.p, 1
        while x != 1:
            x, order = (x * self.a) % self.p, order + 1
            if order > self.p:
                return self.p
        return order


def base_success(tree: ReasoningTree) -> dict:
    """The uniform base model's chance of a right chain, ``(#right chains)/d^k``, and of a
    right answer, which adds the reward-hacking share ``(1 − c)·q``."""
    c = tree.n_correct_paths() / tree.d**tree.k
    return {"chain": c, "answer": c + (1 - c) * tree.q}


def parity(d: int, k: int, target=None, blocked: bool = False) -> ReasoningTree:
    """Parity of ``k`` chosen bits: the paper's instance (target ``0..k-1`` by default)."""
    target = tuple(range(k)) if target is None else tuple(target)
    return ReasoningTree(d, k, target, p=2, a=1, blocked=blocked, name="parity")


def mod_chain(d: int, k: int, target=None, p: int = 5, a: int = 2,
              blocked: bool = False) -> ReasoningTree:
    """A Countdown-like arithmetic chain ``z ← a·z + x (mod p)``; unique correct path when the
    order of ``a`` modulo ``p`` is at least ``k``."""
    target = tuple(range(k)) if target is None else tuple(target)
    return ReasoningTree(d, k, target, p=p, a=a, blocked=blocked, name=f"mod-{p} chain")


@lru_cache(maxsize=64)
def correct_paths(tree: ReasoningTree, length: int) -> np.ndarray:
    """All correct prefixes of a given length (brute force over ``d^length`` prefixes)."""
    paths = np.array(list(product(range(tree.d), repeat=length)), dtype=np.int64)
    return paths[tree.is_correct(paths)]
