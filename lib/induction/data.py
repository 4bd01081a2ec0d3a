"""The trigger–output task of Definition 1 and its length distributions.

Vocabulary ``{0, …, N−1}``: tokens ``0 … N_trg−1`` are triggers, the rest are ordinary.
A sequence is ``ℓ1`` fillers, a trigger ``w``, an output ``o``, ``ℓ2`` fillers and ``w``
again; the target is ``o``. Fillers and ``o`` are uniform over ordinary tokens (i.i.d., so
``o`` may reappear among the fillers), ``w`` is uniform over triggers.

Positions are 1-based in the text and 0-based here: the first trigger sits at index ``ℓ1``,
the output at ``ℓ1+1``, the query (second trigger, position ``T = ℓ1+ℓ2+3``) at ``T−1``.

Pretraining draws ``ℓ1 = ℓ2 = ℓ ~ D_ℓ``; the OOD test keeps the total length of a training
length ``ℓ`` but moves the first trigger: ``ℓ ~ Unif{ℓ_min+1..ℓ_max}``,
``ℓ1 ~ Unif({1..2ℓ−1} \\ {ℓ})``, ``ℓ2 = 2ℓ − ℓ1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD = -1


@dataclass(frozen=True)
class LengthDist:
    """A distribution ``D_ℓ`` over the filler length ``ℓ ≥ 1``: support and probabilities."""

    lengths: np.ndarray
    probs: np.ndarray

    def __post_init__(self):
        lengths = np.asarray(self.lengths, dtype=np.int64)
        probs = np.asarray(self.probs, dtype=float)
        if lengths.ndim != 1 or lengths.shape != probs.shape or lengths.size == 0:
            raise ValueError("lengths and probs must be 1-d arrays of the same, non-zero size")
        if np.any(lengths < 1) or len(np.unique(lengths)) != lengths.size:
            raise ValueError(f"lengths must be distinct integers ≥ 1, got {lengths.tolist()}")
        if np.any(probs < 0) or not np.isclose(probs.sum(), 1.0):
            raise ValueError("probs must be non-negative and sum to 1")
        keep = probs > 0
        object.__setattr__(self, "lengths", lengths[keep])
        object.__setattr__(self, "probs", probs[keep] / probs[keep].sum())

    @classmethod
    def uniform(cls, l_min: int, l_max: int) -> LengthDist:
        """Uniform on ``{l_min, …, l_max}`` (the paper's experiments)."""
        if not 1 <= l_min <= l_max:
            raise ValueError(f"need 1 ≤ l_min ≤ l_max, got l_min={l_min}, l_max={l_max}")
        lengths = np.arange(l_min, l_max + 1)
        return cls(lengths, np.full(lengths.size, 1.0 / lengths.size))

    @classmethod
    def point(cls, length: int) -> LengthDist:
        return cls(np.array([length]), np.array([1.0]))

    @property
    def l_min(self) -> int:
        return int(self.lengths.min())

    @property
    def l_max(self) -> int:
        return int(self.lengths.max())

    def sample(self, rng: np.random.Generator, m: int) -> np.ndarray:
        return rng.choice(self.lengths, size=m, p=self.probs)


@dataclass
class Batch:
    """A batch of padded sequences (inputs ``z_1..z_T``) with their targets.

    ``tokens`` is ``(B, T_max)`` with :data:`PAD` beyond each ``length`` (= ``T``);
    ``target`` is the output ``o``; ``pseudo`` the token at 1-based position ``ℓ̄+2``
    (``ℓ̄ = (ℓ1+ℓ2)/2``: where a positional shortcut looks); ``leftmost`` the token at
    1-based position ``ℓ_ref+2`` (``ℓ_ref`` = the training distribution's ``ℓ_min``).
    """

    tokens: np.ndarray
    length: np.ndarray
    l1: np.ndarray
    l2: np.ndarray
    trigger: np.ndarray
    target: np.ndarray
    pseudo: np.ndarray
    leftmost: np.ndarray

    def __len__(self) -> int:
        return len(self.target)


def sample_sequences(rng: np.random.Generator, n_vocab: int, n_trg: int, l1, l2,
                     l_ref: int | None = None) -> Batch:
    """Sequences of Definition 1 with the given filler lengths (arrays of equal size)."""
    if not 1 <= n_trg < n_vocab:
        raise ValueError(f"need 1 ≤ n_trg < n_vocab, got n_trg={n_trg}, n_vocab={n_vocab}")
    l1 = np.asarray(l1, dtype=np.int64)
    l2 = np.asarray(l2, dtype=np.int64)
    if l1.shape != l2.shape or l1.ndim != 1:
        raise ValueError("l1 and l2 must be 1-d arrays of the same size")
    if np.any(l1 < 0) or np.any(l2 < 0):
        raise ValueError("filler lengths must be non-negative")
    m = l1.size
    length = l1 + l2 + 3
    t_max = int(length.max())
    rows = np.arange(m)
    tokens = rng.integers(n_trg, n_vocab, size=(m, t_max))
    trigger = rng.integers(0, n_trg, size=m)
    target = rng.integers(n_trg, n_vocab, size=m)
    tokens[rows, l1] = trigger
    tokens[rows, l1 + 1] = target
    tokens[rows, length - 1] = trigger
    tokens[np.arange(t_max)[None, :] >= length[:, None]] = PAD
    mid = (l1 + l2) // 2  # ℓ̄; (ℓ1+ℓ2) is even in both the training and the OOD distribution
    pseudo = tokens[rows, mid + 1]
    leftmost = tokens[rows, (l_ref if l_ref is not None else mid) + 1]
    return Batch(tokens, length, l1, l2, trigger, target, pseudo, leftmost)


def sample_train(rng: np.random.Generator, n_vocab: int, n_trg: int, dist: LengthDist,
                 m: int, shortcut_free: bool = False) -> Batch:
    """``m`` pretraining sequences: ``ℓ1 = ℓ2 = ℓ ~ D_ℓ`` (Definition 1). With
    ``shortcut_free``, ``ℓ1`` and ``ℓ2`` are independent draws from ``D_ℓ``: the output's position
    is no longer fixed by the sequence's length, so no positional rule (such as "the token after
    the midpoint") answers the task and only the induction solution does."""
    ell = dist.sample(rng, m)
    if not shortcut_free:
        return sample_sequences(rng, n_vocab, n_trg, ell, ell, l_ref=dist.l_min)
    return sample_sequences(rng, n_vocab, n_trg, ell, dist.sample(rng, m), l_ref=dist.l_min)


def ood_lengths(rng: np.random.Generator, l_min: int, l_max: int, m: int):
    """``(ℓ1, ℓ2)`` of the OOD test: ``ℓ ~ Unif{l_min+1..l_max}``, ``ℓ1 ≠ ℓ``, ``ℓ1+ℓ2 = 2ℓ``."""
    if not 1 <= l_min < l_max:
        raise ValueError(f"the OOD test needs 1 ≤ l_min < l_max, got {l_min}, {l_max}")
    ell = rng.integers(l_min + 1, l_max + 1, size=m)
    # uniform on {1..2ℓ−1} \ {ℓ}: draw from 2ℓ−2 values and skip ℓ
    l1 = 1 + np.floor(rng.random(m) * (2 * ell - 2)).astype(np.int64)
    l1 = np.where(l1 >= ell, l1 + 1, l1)
    return l1, 2 * ell - l1


def sample_ood(rng: np.random.Generator, n_vocab: int, n_trg: int, l_min: int, l_max: int,
               m: int) -> Batch:
    """``m`` OOD test sequences for a model pretrained on lengths ``l_min..l_max``."""
    l1, l2 = ood_lengths(rng, l_min, l_max, m)
    return sample_sequences(rng, n_vocab, n_trg, l1, l2, l_ref=l_min)
