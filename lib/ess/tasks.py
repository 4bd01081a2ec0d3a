"""Synthetic recall tasks: MQAR and its delimited variant.

MQAR (multi-query associative recall) with ``κ`` key–value pairs in a sequence of length ℓ::

    k_1 v_1 k_2 v_2 … k_κ v_κ | _ q_1 _ _ q_2 … q_κ _

The ``κ`` keys are distinct, drawn from ``n_keys`` key tokens; values are drawn from
``n_values`` value tokens; the queries are the κ keys in a random order, placed at random
positions of the remaining ℓ − 2κ slots (the others hold a filler token ``_``), and the target
at a query position is the value bound to its key. Only query positions carry a target. The
filler makes the model hold the pairs over a gap, as in the Zoology benchmark's MQAR.

The delimited task chains ``n_segments`` MQAR segments separated by a delimiter token. Keys are
redrawn for every segment from the same (small) pool, so a key seen in an earlier segment is
usually bound to a different value there, and a fraction ``p_absent`` of the queries ask for a
key that is *not* bound in the current segment, whose answer is a ``null`` token: recall must
use the current segment only. Decaying old bindings is not enough to answer "absent" (the
model normalises its read-out), so the memory that solves the task *forgets* at each delimiter.

Token ids: keys ``0 … n_keys−1``, values ``n_keys … n_keys+n_values−1``, then the delimiter,
the filler and the null answer; ``vocab_size = n_keys + n_values + 3``. Targets use ``IGNORE``
(−100) where there is nothing to predict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100

__all__ = ["IGNORE", "Vocab", "mqar", "delimited_mqar"]


@dataclass(frozen=True)
class Vocab:
    n_keys: int = 32
    n_values: int = 32

    @property
    def delimiter(self) -> int:
        return self.n_keys + self.n_values

    @property
    def filler(self) -> int:
        return self.n_keys + self.n_values + 1

    @property
    def null(self) -> int:
        return self.n_keys + self.n_values + 2

    @property
    def size(self) -> int:
        return self.n_keys + self.n_values + 3


def _segment(rng: np.random.Generator, batch: int, n_pairs: int, length: int | None,
             vocab: Vocab, p_absent: float = 0.0):
    if not 1 <= n_pairs <= vocab.n_keys:
        raise ValueError(f"n_pairs must be in [1, n_keys={vocab.n_keys}], got {n_pairs}")
    length = 3 * n_pairs if length is None else length
    if length < 3 * n_pairs:
        raise ValueError(f"length must be ≥ 3·n_pairs = {3 * n_pairs}, got {length}")
    if p_absent > 0 and n_pairs >= vocab.n_keys:
        raise ValueError("absent-key queries need n_keys > n_pairs")
    perm = np.argsort(rng.random((batch, vocab.n_keys)), axis=1)
    keys = perm[:, :n_pairs]                                                   # distinct keys
    values = vocab.n_keys + rng.integers(0, vocab.n_values, size=(batch, n_pairs))
    order = np.argsort(rng.random((batch, n_pairs)), axis=1)                     # query order
    queries = np.take_along_axis(keys, order, axis=1)
    answers = np.take_along_axis(values, order, axis=1)
    if p_absent > 0:     # some queries ask for a key of the pool that this segment did not bind
        absent = rng.random((batch, n_pairs)) < p_absent
        unbound = perm[np.arange(batch)[:, None],
                       n_pairs + rng.integers(0, vocab.n_keys - n_pairs, size=(batch, n_pairs))]
        queries = np.where(absent, unbound, queries)
        answers = np.where(absent, vocab.null, answers)
    context = np.stack([keys, values], axis=2).reshape(batch, 2 * n_pairs)
    gap = length - 2 * n_pairs
    slots = np.sort(np.argsort(rng.random((batch, gap)), axis=1)[:, :n_pairs], axis=1)
    rest = np.full((batch, gap), vocab.filler)
    rest_targets = np.full((batch, gap), IGNORE)
    np.put_along_axis(rest, slots, queries, axis=1)
    np.put_along_axis(rest_targets, slots, answers, axis=1)
    tokens = np.concatenate([context, rest], axis=1)
    targets = np.concatenate([np.full_like(context, IGNORE), rest_targets], axis=1)
    return tokens, targets


def mqar(rng: np.random.Generator, batch: int, n_pairs: int, length: int | None = None,
         vocab: Vocab = Vocab()):
    """``(tokens, targets)``, each ``(batch, length)`` int64 arrays (``length`` defaults to
    ``3·n_pairs``: queries right after the context, no filler)."""
    return _segment(rng, batch, n_pairs, length, vocab)


def delimited_mqar(rng: np.random.Generator, batch: int, n_pairs: int, n_segments: int,
                   segment_length: int | None = None, vocab: Vocab = Vocab(),
                   p_absent: float = 0.25):
    """``n_segments`` MQAR segments of ``segment_length`` tokens, each followed by the delimiter
    except the last: ``(tokens, targets, delimiter_positions)``. Each query asks for an unbound
    key (answer ``vocab.null``) with probability ``p_absent``."""
    if n_segments < 1:
        raise ValueError(f"n_segments must be ≥ 1, got {n_segments}")
    toks, tgts, delims = [], [], []
    pos = 0
    for s in range(n_segments):
        t, y = _segment(rng, batch, n_pairs, segment_length, vocab, p_absent)
        toks.append(t)
        tgts.append(y)
        pos += t.shape[1]
        if s < n_segments - 1:
            toks.append(np.full((batch, 1), vocab.delimiter))
            tgts.append(np.full((batch, 1), IGNORE))
            delims.append(pos)
            pos += 1
    return np.concatenate(toks, axis=1), np.concatenate(tgts, axis=1), np.array(delims)
