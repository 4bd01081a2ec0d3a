"""A tiny autoregressive GRU policy over short token sequences (all sequences enumerable, so
distances to p₊ are exact), trained with the density-ratio loss or DPO."""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from lib.ddro.preferences import Preference, paired_target
from lib.seeding import stream, torch_generator
from lib.sweep import one_thread


# ----------------------------------------------------------------------------------------------
# A tiny autoregressive policy over short token sequences
# ----------------------------------------------------------------------------------------------


def all_sequences(vocab: int, length: int) -> np.ndarray:
    """Every sequence of ``length`` tokens from ``vocab``, (vocab**length, length), in
    lexicographic order."""
    return np.array(list(itertools.product(range(vocab), repeat=length)), dtype=np.int64)


def sequence_preference(seqs: np.ndarray, vocab: int, cycle: float = 2.0, *, root: int) -> Preference:
    """A non-Bradley–Terry preference on sequences: P(a ≻ b) = sigmoid(u(a) − u(b) + c(a, b)),
    with an additive utility u(y) = Σ_t w[y_t] (token weights ~ N(0, ½)) and a rock–paper–scissors
    term c(a, b) = ``cycle`` · rps(a_0, b_0) on the first tokens (token k beats token k+1 mod
    vocab), which makes the preference intransitive. The token weights are the stream
    ``"sequence-token-weights"`` of the chapter seed ``root``."""
    w = stream(root, "sequence-token-weights").normal(0.0, math.sqrt(0.5), vocab)
    u = w[seqs].sum(1)
    first = seqs[:, 0]
    beats = ((first[None, :] - first[:, None]) % vocab == 1).astype(float)
    c = cycle * (beats - beats.T)
    return Preference("sequence (intransitive)", expit(u[:, None] - u[None, :] + c))


def _torch():
    import torch

    return torch


class GRUPolicy:
    """π(y) = Π_t softmax(W h_t)[y_t], h_t = GRU(embed(y_{t−1}), h_{t−1}), y_{−1} = BOS.

    Built lazily on torch; ``log_probs()`` returns log π(y) for every sequence in ``seqs``. Every
    weight is drawn N(0, 1/fan-in) from ``generator`` (a ``torch.Generator``, e.g.
    :func:`lib.seeding.torch_generator`)."""

    def __init__(self, vocab: int, seqs: np.ndarray, hidden: int = 32, *, generator,
                 temperature: float = 1.0):
        torch = _torch()
        self.vocab, self.temperature = vocab, temperature
        self.embed = torch.nn.Embedding(vocab + 1, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(max(1, p.shape[-1])))
        bos = torch.full((len(seqs), 1), vocab, dtype=torch.long)
        y = torch.as_tensor(seqs)
        self._inputs = torch.cat([bos, y[:, :-1]], dim=1)
        self._targets = y

    def parameters(self):
        return [*self.embed.parameters(), *self.gru.parameters(), *self.head.parameters()]

    def load_from(self, other: GRUPolicy) -> GRUPolicy:
        torch = _torch()
        with torch.no_grad():
            for p, q in zip(self.parameters(), other.parameters()):
                p.copy_(q)
        return self

    def log_probs(self):
        torch = _torch()
        h, _ = self.gru(self.embed(self._inputs))
        logits = self.head(h) / self.temperature
        lp = torch.log_softmax(logits, dim=-1).gather(-1, self._targets[..., None])[..., 0]
        return lp.sum(1)


def neural_loss(kind: str, logp, logp_ref, C, alpha: float = 0.5, beta: float = 1.0,
                clip: float = 1e-3):
    """The chapter's losses for a policy given as log π_θ over all outputs (a torch vector) and
    pair counts C (torch, C[a, b] = #a beat b): ``"ddro"`` (the density-ratio loss with its clip)
    or ``"dpo"``."""
    torch = _torch()
    h = logp - logp_ref
    N = C.sum()
    if kind == "ddro":
        logg = torch.clamp(h, max=math.log((1 - clip) / alpha))
        pos, neg = C.sum(1), C.sum(0)
        return -(pos * logg).sum() / N - (neg * torch.log1p(-alpha * torch.exp(logg))).sum() / N
    if kind == "dpo":
        d = beta * (h[:, None] - h[None, :])
        return -(C * torch.nn.functional.logsigmoid(d)).sum() / N
    raise ValueError(f"kind must be 'ddro' or 'dpo', got {kind!r}")


def train_neural(kind: str, ref: GRUPolicy, C: np.ndarray, steps: int = 300, lr: float = 0.02,
                 beta: float = 1.0) -> np.ndarray:
    """Fine-tune a copy of the reference policy on pair counts C with full-batch Adam; returns
    the final π_θ over all sequences. Nothing is random: the copy starts at the reference's
    weights. (The losses depend on the data only through C, so the cost does not grow with the
    number of pairs.)"""
    torch = _torch()
    with one_thread():
        pol = copy.deepcopy(ref)
        with torch.no_grad():
            logp_ref = ref.log_probs()
        Ct = torch.as_tensor(np.asarray(C), dtype=logp_ref.dtype)
        opt = torch.optim.Adam(pol.parameters(), lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            loss = neural_loss(kind, pol.log_probs(), logp_ref, Ct, beta=beta)
            loss.backward()
            opt.step()
        with torch.no_grad():
            return torch.exp(pol.log_probs()).double().numpy()


# ----------------------------------------------------------------------------------------------
# The sequence study, one training run per sweep point
# ----------------------------------------------------------------------------------------------


@dataclass
class SequenceSetup:
    """The sequence study's fixed pieces: every sequence, the reference GRU, its distribution
    π_ref, the intransitive preference and its target p₊."""

    seqs: np.ndarray
    ref: GRUPolicy
    pi: np.ndarray
    pref: Preference
    target: np.ndarray


def sequence_setup(vocab: int, length: int, hidden: int, root: int) -> SequenceSetup:
    """Build the sequence study from its parameters and the chapter seed ``root`` alone (the
    reference GRU's weights are its stream ``"gru-reference-init"``), on one PyTorch thread, so
    that the chapter and every sweep worker (local process or cluster) compute the same bits."""
    torch = _torch()
    with one_thread():
        seqs = all_sequences(vocab, length)
        ref = GRUPolicy(vocab, seqs, hidden=hidden, generator=torch_generator(root, "gru-reference-init"))
        with torch.no_grad():
            pi = np.exp(ref.log_probs().double().numpy())
    pi /= pi.sum()
    pref = sequence_preference(seqs, vocab, root=root)
    return SequenceSetup(seqs, ref, pi, pref, paired_target(pi, pref))
