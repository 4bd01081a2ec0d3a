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
from lib.seeding import seed32, seed_torch, stream, torch_generator
from lib.sweep import one_thread

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


def encode(vocab: Vocab, strings, js: np.ndarray, dm) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets ``(B, 1 + D + n_max + 1)``. ``dm`` (an int, or one per sample) is
    the metadata depth: levels ``0 … dm−1`` carry their tokens, the other ``D − dm`` slots hold
    [MASK] (``dm = 0``: fully masked). Targets are IGNORE except for terminals and EOS."""
    D = vocab.depth
    dm = np.broadcast_to(np.asarray(dm, dtype=int), (len(strings),))
    lengths = np.asarray([len(s) for s in strings])
    n_max = lengths.max()
    L = 1 + D + n_max + 1
    tokens = np.full((len(strings), L), vocab.eos)
    targets = np.full((len(strings), L), IGNORE)
    tokens[:, 0] = vocab.bos
    js = np.asarray(js).reshape(len(strings), D)
    levels = np.arange(D)
    meta = vocab.n_terminals + 3 + levels[None, :] * vocab.n_sets + js
    tokens[:, 1 : 1 + D] = np.where(levels[None, :] < dm[:, None], meta, vocab.mask)
    for b, s in enumerate(strings):
        tokens[b, 1 + D : 1 + D + len(s)] = s
        # input index D + t predicts token index D + t + 1 (x_t, then EOS at t = n)
        targets[b, D : D + len(s)] = s
        targets[b, D + len(s)] = vocab.eos
    return torch.as_tensor(tokens), torch.as_tensor(targets)


def _chunked_loss(model: Decoder, vocab: Vocab, strings, js, dm: int, chunks: int, device: str):
    """Mean next-token loss of a batch, computed on ``chunks`` length-sorted pieces (each padded
    only to its own longest string; the result equals the unchunked mean)."""
    order = np.argsort([len(s) for s in strings], kind="stable")
    total, count = 0.0, 0
    for part in np.array_split(order, chunks):
        if len(part) == 0:
            continue
        tokens, targets = encode(vocab, [strings[i] for i in part], js[part], dm)
        logits = model(tokens.to(device))
        t = targets.to(device).flatten()
        total = total + F.cross_entropy(logits.flatten(0, 1), t, ignore_index=IGNORE, reduction="sum")
        count += int((t != IGNORE).sum())
    return total / count


@dataclass
class History:
    """Held-out loss during training: ``steps`` and, per metadata depth shown at evaluation,
    the per-sample, per-position losses ``(len(steps), B, n_max + 1)``."""

    steps: list
    losses: dict


def train(lang: Language, *, dm: int, steps: int, batch: int, root: int, rep: int = 0,
          d_model: int = 64, n_layers: int = 2, n_heads: int = 4, lr: float = 3e-3,
          warmup: float = 0.1, chunks: int = 2, log_every: int = 0, log_set=None, log_dms=(0,),
          device: str = "cpu"):
    """Train on fresh samples each step; return the model and its :class:`History`.

    ``root`` is the chapter seed and ``rep`` the replicate index. The initialisation and every
    step's ``batch`` fully masked sequences come from streams ``("model-init", rep)`` and
    ``("masked-batches", rep)`` of ``root``, which do not depend on ``dm``: the baseline
    (``dm = 0``) and every metadata model of the same replicate start from the same weights and
    see the *same* masked sequences. A metadata model (``dm ≥ 1``) additionally draws ``batch``
    sequences from stream ``("shown-batches", rep)`` that show their first ``dm`` levels; its
    loss is the mean over the masked sequences plus the mean over the shown ones (each part
    weighted as the baseline's whole loss). AdamW with a one-cycle schedule (linear warm-up over
    ``warmup`` of the steps, cosine decay). ``log_set = (strings, js)`` is evaluated every
    ``log_every`` steps at each depth in ``log_dms``."""
    seed_torch(root, "model-init", rep)
    masked_rng = stream(root, "masked-batches", rep)
    shown_rng = stream(root, "shown-batches", rep)
    g = lang.grammar
    vocab = Vocab(g.n_terminals, g.depth, g.n_sets)
    model = Decoder(vocab.size, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=warmup)
    history = History([], {k: [] for k in log_dms})

    def log(step):
        if log_every and log_set is not None:
            history.steps.append(step)
            for k in log_dms:
                history.losses[k].append(evaluate(model, g, *log_set, dm=k, device=device)[0])
            model.train()

    for step in range(steps):
        if log_every and step % log_every == 0:
            log(step)
        strings, js = lang.sample(batch, masked_rng)
        loss = _chunked_loss(model, vocab, strings, js, 0, chunks, device)
        if dm > 0:
            strings, js = lang.sample(batch, shown_rng)
            loss = loss + _chunked_loss(model, vocab, strings, js, dm, chunks, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    log(steps)
    history.losses = {k: np.stack(v) for k, v in history.losses.items()} if history.steps else {}
    return model.eval(), history


@torch.no_grad()
def evaluate(model: Decoder, grammar: Grammar, strings, js: np.ndarray, dm: int, device: str = "cpu"):
    """Per-sample, per-position next-token loss ``(B, n_max + 1)`` (NaN past the end) and the
    hidden states at the terminal positions ``(B, n_max + 1, d_model)``, with the first ``dm``
    metadata levels shown."""
    model.eval()
    vocab = Vocab(grammar.n_terminals, grammar.depth, grammar.n_sets)
    tokens, targets = encode(vocab, strings, js, dm)
    logits, hidden = model(tokens.to(device), return_hidden=True)
    D = grammar.depth
    nll = F.cross_entropy(logits.transpose(1, 2), targets.to(device), ignore_index=IGNORE, reduction="none")
    nll = nll[:, D:-1].cpu().numpy()
    valid = targets[:, D:-1].numpy() != IGNORE
    return np.where(valid, nll, np.nan), hidden[:, D:-1].cpu().numpy()


def prefix_split(strings, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the strings that reach position ``t`` (length ≥ t), split into two halves by
    their prefix ``x_{<t}``: every distinct prefix goes wholly to the train or the test side (a
    random half of the distinct prefixes each), so a probe cannot pass by memorising prefixes."""
    idx = np.asarray([i for i, s in enumerate(strings) if len(s) >= t])
    prefixes = [tuple(strings[i][:t]) for i in idx]
    distinct = sorted(set(prefixes))
    train_set = {distinct[k] for k in rng.permutation(len(distinct))[: len(distinct) // 2]}
    side = np.asarray([p in train_set for p in prefixes], dtype=bool)
    return idx[side], idx[~side]


def probe(hidden: np.ndarray, labels: np.ndarray, t: int, train_idx, test_idx, random_state: int):
    """A logistic-regression probe of ``labels`` from ``hidden[:, t]`` (features standardised with
    the training side's mean and scale), trained on ``train_idx``; its predictions on ``test_idx``.
    ``random_state`` is scikit-learn's seed (a 32-bit int, see :func:`lib.seeding.seed32`; lbfgs draws
    nothing, it matters only to solvers that do)."""
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(labels[train_idx])) < 2:
        return np.full(len(test_idx), labels[train_idx][0])
    X = hidden[train_idx, t]
    mean, scale = X.mean(0), X.std(0) + 1e-6
    clf = LogisticRegression(C=1.0, max_iter=500, random_state=random_state)
    clf.fit((X - mean) / scale, labels[train_idx])
    return clf.predict((hidden[test_idx, t] - mean) / scale)


@torch.no_grad()
def continuations(model: Decoder, grammar: Grammar, prompts, gen: torch.Generator, max_new: int = 40,
                  device: str = "cpu") -> list:
    """Sample a continuation of each terminal prompt with the metadata masked (temperature 1,
    terminals and EOS only, drawn from the CPU generator ``gen``, e.g.
    :func:`lib.seeding.torch_generator`) until EOS; the completed strings (``None`` if no EOS
    within ``max_new`` tokens)."""
    vocab = Vocab(grammar.n_terminals, grammar.depth, grammar.n_sets)
    seqs = [[vocab.bos] + [vocab.mask] * grammar.depth + list(p) for p in prompts]
    done = [False] * len(seqs)
    for _ in range(max_new):
        live = [b for b in range(len(seqs)) if not done[b]]
        if not live:
            break
        L = max(len(seqs[b]) for b in live)
        tokens = torch.full((len(live), L), vocab.eos)
        for i, b in enumerate(live):
            tokens[i, : len(seqs[b])] = torch.as_tensor(seqs[b])
        last = torch.as_tensor([len(seqs[b]) - 1 for b in live])
        logits = model(tokens.to(device))[torch.arange(len(live)), last]
        probs = torch.softmax(logits[:, : vocab.eos + 1].float().cpu(), -1)  # terminals and EOS only
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()
        for b, tok in zip(live, nxt):
            seqs[b].append(tok)
            done[b] = tok == vocab.eos
    return [tuple(s[1 + grammar.depth : -1]) if d else None for s, d in zip(seqs, done)]


def grammatical(grammar: Grammar, strings, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CYK membership of each string (``None``, an unfinished sample, counts as ungrammatical)
    under the sample's own metadata ``js[b]`` and under some metadata."""
    under_true = np.zeros(len(strings), dtype=bool)
    under_any = np.zeros(len(strings), dtype=bool)
    ok = [i for i, s in enumerate(strings) if s]
    if not ok:
        return under_true, under_any
    finished = [strings[i] for i in ok]
    under_any[ok] = is_grammatical(grammar, finished)
    for j in {tuple(int(v) for v in js[i]) for i in ok}:
        sel = [k for k, i in enumerate(ok) if tuple(int(v) for v in js[i]) == j]
        under_true[[ok[k] for k in sel]] = is_grammatical(grammar, [finished[k] for k in sel], j)
    return under_true, under_any


def train_point(dm: int, seed: int, *, root: int, grammar: Grammar, eval_set, log_set, log_every: int,
                probe_splits: dict, prompts, prompt_js: np.ndarray, train_kw: dict, device: str = "cpu") -> dict:
    """One training run of the chapter and everything measured on its model, as one sweep point
    (the model itself never leaves it): :func:`train` with metadata depth ``dm``, chapter seed
    ``root`` and replicate index ``seed``; the per-position losses on ``eval_set = (strings, js)``
    with the metadata masked and with the first ``dm`` levels given; probe predictions of every
    level ``d`` at every probed position ``t`` (``probe_splits[t] = (train_idx, test_idx)``), as
    ``probes[d][k]`` in the order of ``probe_splits`` (scikit-learn seed from :func:`lib.seeding.seed32`
    with key ``("probe", dm, seed, d, t)``); and the grammaticality of sampled continuations of
    ``prompts`` (stream ``("continuations", dm, seed)``) under the prompts' true metadata
    ``prompt_js`` and under some metadata.

    Runs on one PyTorch and one BLAS thread wherever it runs (in the chapter, a local process
    or a cluster worker), so its numbers do not depend on where or in what order it ran."""
    from threadpoolctl import threadpool_limits

    from lib.pcfg import Language

    with one_thread(), threadpool_limits(1):
        strings, js = eval_set
        model, hist = train(Language(grammar), dm=dm, root=root, rep=seed, log_every=log_every,
                            log_set=log_set, log_dms=sorted({0, dm}), device=device, **train_kw)
        masked, hidden = evaluate(model, grammar, strings, js, dm=0, device=device)
        given = evaluate(model, grammar, strings, js, dm=dm, device=device)[0] if dm else masked
        probes = [[probe(hidden, js[:, d], t, tr, te, random_state=seed32(root, "probe", dm, seed, d, t))
                   for t, (tr, te) in probe_splits.items()]
                  for d in range(grammar.depth)]
        out = continuations(model, grammar, prompts, torch_generator(root, "continuations", dm, seed),
                            device=device)
        ok_true, ok_any = grammatical(grammar, out, prompt_js)
    return {"hist": hist, "masked": masked, "given": given, "probes": probes,
            "grammatical_true": ok_true, "grammatical_any": ok_any}
