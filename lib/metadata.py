"""Metadata conditioning on PCFG data (ch. 10): sequence format, training, per-position
evaluation, linear probes and sampled continuations.

A sequence is ``[BOS] m_0 … m_{D−1} x_0 … x_{n−1} [EOS]`` where the ``D`` metadata slots hold
one token per (level, value) — or ``[MASK]`` when the metadata is withheld. The loss counts
only the terminals and the end of sequence. Position ``t`` of the terminal part (the
prediction of ``x_t`` from ``x_{<t}``) sits at input index ``D + t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lib.llama import Decoder
from lib.pcfg import Grammar, Language, is_grammatical

IGNORE = -100


@dataclass(frozen=True)
class Vocab:
    n_terminals: int
    depth: int
    n_sets: int

    @property
    def eos(self) -> int:
        return self.n_terminals

    @property
    def bos(self) -> int:
        return self.n_terminals + 1

    @property
    def mask(self) -> int:
        return self.n_terminals + 2

    def meta(self, level: int, value: int) -> int:
        return self.n_terminals + 3 + level * self.n_sets + value

    @property
    def size(self) -> int:
        return self.n_terminals + 3 + self.depth * self.n_sets


def encode(vocab: Vocab, strings, js: np.ndarray, show: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets ``(B, 1 + D + n_max + 1)``; ``show[b]`` says whether sample ``b``
    carries its metadata. Targets are IGNORE except for terminals and EOS."""
    D = vocab.depth
    n_max = max(len(s) for s in strings)
    L = 1 + D + n_max + 1
    tokens = np.full((len(strings), L), vocab.eos)
    targets = np.full((len(strings), L), IGNORE)
    tokens[:, 0] = vocab.bos
    for b, (s, j) in enumerate(zip(strings, js)):
        tokens[b, 1 : 1 + D] = [vocab.meta(d, j[d]) if show[b] else vocab.mask for d in range(D)]
        tokens[b, 1 + D : 1 + D + len(s)] = s
        # input index D + t predicts token index D + t + 1 (x_t, then EOS at t = n)
        targets[b, D : D + len(s)] = s
        targets[b, D + len(s)] = vocab.eos
    return torch.as_tensor(tokens), torch.as_tensor(targets)


def train(lang: Language, *, with_metadata: bool, steps: int, batch: int, seed: int, d_model: int = 64,
          n_layers: int = 2, n_heads: int = 4, lr: float = 3e-3, show_prob: float = 0.5,
          device: str = "cpu") -> Decoder:
    """Train on fresh samples each step. With metadata, each sample shows its metadata with
    probability ``show_prob`` (else all slots are masked); without, every slot is masked."""
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 1])
    g = lang.grammar
    vocab = Vocab(g.n_terminals, g.depth, g.n_sets)
    model = Decoder(vocab.size, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for _ in range(steps):
        strings, js = lang.sample(batch, rng)
        show = rng.random(batch) < show_prob if with_metadata else np.zeros(batch, dtype=bool)
        tokens, targets = encode(vocab, strings, js, show)
        logits = model(tokens.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


@torch.no_grad()
def evaluate(model: Decoder, grammar: Grammar, strings, js: np.ndarray, show: bool, device: str = "cpu"):
    """Per-sample, per-position next-token loss ``(B, n_max + 1)`` (NaN past the end) and the
    hidden states at the terminal positions ``(B, n_max + 1, d_model)``."""
    vocab = Vocab(grammar.n_terminals, grammar.depth, grammar.n_sets)
    tokens, targets = encode(vocab, strings, js, np.full(len(strings), show))
    logits, hidden = model(tokens.to(device), return_hidden=True)
    D = grammar.depth
    nll = F.cross_entropy(logits.transpose(1, 2), targets.to(device), ignore_index=IGNORE, reduction="none")
    nll = nll[:, D:-1].cpu().numpy()
    valid = targets[:, D:-1].numpy() != IGNORE
    return np.where(valid, nll, np.nan), hidden[:, D:-1].cpu().numpy()


def probe_accuracy(hidden: np.ndarray, labels: np.ndarray, lengths: np.ndarray, positions, n_train: int,
                   seed: int) -> np.ndarray:
    """Held-out accuracy of a logistic-regression probe of ``labels`` from ``hidden[:, t]``, for
    each position ``t`` (trained on the first ``n_train`` samples that reach ``t``)."""
    from sklearn.linear_model import LogisticRegression

    acc = []
    for t in positions:
        idx = np.flatnonzero(lengths >= t)
        train_idx, test_idx = idx[:n_train], idx[n_train:]
        if len(np.unique(labels[train_idx])) < 2:
            acc.append(float(np.mean(labels[test_idx] == labels[train_idx][0])))
            continue
        clf = LogisticRegression(C=1.0, max_iter=500, random_state=seed)
        clf.fit(hidden[train_idx, t], labels[train_idx])
        acc.append(float(clf.score(hidden[test_idx, t], labels[test_idx])))
    return np.asarray(acc)


@torch.no_grad()
def continuations_grammatical(model: Decoder, grammar: Grammar, prompts, rng_seed: int,
                              max_new: int = 40, device: str = "cpu") -> np.ndarray:
    """Sample a continuation of each terminal prompt (metadata masked, temperature 1) until EOS;
    whether the completed string is in the language (under some metadata)."""
    vocab = Vocab(grammar.n_terminals, grammar.depth, grammar.n_sets)
    gen = torch.Generator().manual_seed(rng_seed)
    seqs = [[vocab.bos] + [vocab.mask] * grammar.depth + list(p) for p in prompts]
    done = [False] * len(seqs)
    for _ in range(max_new):
        L = max(len(s) for s in seqs)
        tokens = torch.full((len(seqs), L), vocab.eos)
        for b, s in enumerate(seqs):
            tokens[b, : len(s)] = torch.as_tensor(s)
        logits = model(tokens.to(device))[torch.arange(len(seqs)), torch.as_tensor([len(s) - 1 for s in seqs])]
        probs = torch.softmax(logits[:, : vocab.eos + 1].float().cpu(), -1)  # terminals and EOS only
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()
        for b, tok in enumerate(nxt):
            if not done[b]:
                seqs[b].append(tok)
                done[b] = tok == vocab.eos
        if all(done):
            break
    strings = [tuple(s[1 + grammar.depth : -1]) if d else (-1,) for s, d in zip(seqs, done)]
    ok = np.zeros(len(strings), dtype=bool)
    finished = [i for i, s in enumerate(strings) if s and s != (-1,)]
    if finished:
        ok[finished] = is_grammatical(grammar, [strings[i] for i in finished])
    return ok
