"""Metadata conditioning on PCFG data (ch. 10): sequence format, training, per-position
evaluation, linear probes and sampled continuations.

A sequence is ``[BOS] m_0 … m_{D−1} x_0 … x_{n−1} [EOS]`` where the ``D`` metadata slots hold
one token per (level, value) — or ``[MASK]`` when the metadata is withheld. The loss counts
only the terminals and the end of sequence. Position ``t`` of the terminal part (the
prediction of ``x_t`` from ``x_{<t}``) sits at input index ``D + t``.

The arms a chapter compares are matched in data: every model of a replicate sees the same strings
each step, a metadata model showing its metadata on half of them (:func:`shown_depths`). The models
train as one population (:func:`train`, ``torch.func.vmap``), which :func:`bench` times against the
plain loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lib.llama import Block, Decoder, rope
from lib.pcfg import Grammar, Language, is_grammatical, per_position_mean
from lib import population
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


class _MatmulBlock(Block):
    """:class:`lib.llama.Block` with attention written as matmuls (``torch.func.vmap`` has no batching rule
    for ``scaled_dot_product_attention``); the same parameters and the same function."""

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = rope(q), rope(k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
        att = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.norm2(x))


def make_model(vocab: Vocab, d_model: int, n_layers: int, n_heads: int, *, root: int, rep: int,
               batched: bool = False) -> Decoder:
    """A :class:`lib.llama.Decoder` initialised from stream ``("model-init", rep)`` of the chapter seed
    ``root`` (so every metadata depth of a replicate starts from the same weights); ``batched``: its
    blocks compute attention as matmuls (:class:`_MatmulBlock`, same parameters and outputs) so that it
    can run under ``vmap``."""
    seed_torch(root, "model-init", rep)
    model = Decoder(vocab.size, d_model, n_layers, n_heads)
    if batched:
        for block in model.blocks:
            block.__class__ = _MatmulBlock
    return model


def shown_depths(dm: int, batch: int) -> np.ndarray:
    """The metadata depth of each sequence of a training batch of a model with metadata depth ``dm``:
    the first ``batch − batch // 2`` sequences masked, the other ``batch // 2`` with their first
    ``dm`` levels shown (``dm = 0``: every sequence masked). Every model sees ``batch`` sequences a
    step, the same strings for every ``dm`` of a replicate."""
    out = np.zeros(batch, dtype=int)
    out[batch - batch // 2:] = dm
    return out


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the targets that are not IGNORE (vmap-able)."""
    valid = targets != IGNORE
    logp = torch.log_softmax(logits, -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(logp * valid).sum() / valid.sum()


@dataclass
class History:
    """Held-out loss during training: ``steps`` and, per metadata depth shown at evaluation,
    the per-sample, per-position losses ``(len(steps), B, n_max + 1)``."""

    steps: list
    losses: dict


def _batches(lang: Language, members, *, steps: int, batch: int, root: int):
    """Every step's token and target tensors ``(len(members), batch, L)`` for members ``(rep, dm)``:
    ``batch`` strings per replicate from stream ``("batches", rep)`` of ``root``, encoded for each
    member's metadata depth with :func:`shown_depths` and padded to the step's longest sequence."""
    g = lang.grammar
    vocab = Vocab(g.n_terminals, g.depth, g.n_sets)
    reps = sorted({rep for rep, _ in members})
    rngs = {rep: stream(root, "batches", rep) for rep in reps}
    for _ in range(steps):
        drawn = {rep: lang.sample(batch, rngs[rep]) for rep in reps}
        pairs = [encode(vocab, *drawn[rep], shown_depths(dm, batch)) for rep, dm in members]
        L = max(p[0].shape[1] for p in pairs)
        tokens = torch.full((len(members), batch, L), vocab.eos)
        targets = torch.full((len(members), batch, L), IGNORE)
        for i, (tok, tgt) in enumerate(pairs):
            tokens[i, :, : tok.shape[1]] = tok
            targets[i, :, : tgt.shape[1]] = tgt
        yield tokens, targets


def train(lang: Language, *, dms=(0,), reps=(0,), steps: int, batch: int, root: int, d_model: int = 64,
          n_layers: int = 2, n_heads: int = 4, lr: float = 3e-3, warmup: float = 0.1, weight_decay: float = 0.01,
          log_every: int = 0, log_set=None, batched: bool = True, device: str = "cpu"):
    """Train one model per replicate index in ``reps`` and metadata depth in ``dms`` (chapter seed
    ``root``) on fresh samples each step; return the models and one :class:`History` each, in the order
    of the members ``[(rep, dm) for rep in reps for dm in dms]``.

    The models of a replicate start from the same weights (:func:`make_model`) and see the same
    ``batch`` strings each step (stream ``("batches", rep)``), ``batch // 2`` of them with their first
    ``dm`` levels shown (:func:`shown_depths`): equal sequences, tokens and steps for every depth, the
    baseline ``dm = 0`` seeing them all masked. A member's numbers depend only on its own ``(rep, dm)``
    (up to float rounding: a step pads every member to the longest sequence of any replicate, which
    changes no output). Loss: the mean over the batch's terminal and EOS tokens. AdamW (weight decay
    ``weight_decay``) with a one-cycle schedule (:func:`lib.population.one_cycle`).

    ``batched=True`` trains the models as one population (:func:`lib.population.train_stacked`: parameters
    stacked, ``torch.func.vmap`` over ``functional_call``, the AdamW update written out on the stacked
    tensors, here with the one-cycle schedule's learning rate and β₁ each step); ``batched=False`` trains
    them one after another with ``torch.optim.AdamW`` and ``OneCycleLR``. Both compute the same models
    (tested to float tolerance). ``log_set = (strings, js)`` is evaluated every ``log_every`` steps with
    the metadata masked and with the model's own depth given."""
    g = lang.grammar
    vocab = Vocab(g.n_terminals, g.depth, g.n_sets)
    members = [(rep, dm) for rep in reps for dm in dms]
    models = [make_model(vocab, d_model, n_layers, n_heads, root=root, rep=rep, batched=batched).to(device)
              for rep, _ in members]
    histories = [History([], {k: [] for k in sorted({0, dm})}) for _, dm in members]

    def log(step, current):
        if log_every and log_set is not None:
            for model, h in zip(current(), histories):
                h.steps.append(step)
                for k in h.losses:
                    h.losses[k].append(evaluate(model, g, *log_set, dm=k, device=device)[0])

    data = _batches(lang, members, steps=steps, batch=batch, root=root)
    if not batched:
        opts = [torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=weight_decay) for m in models]
        scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=lr, total_steps=steps, pct_start=warmup)
                  for o in opts]
        for step, (tokens, targets) in enumerate(data):
            if log_every and step % log_every == 0:
                log(step, lambda: models)
            for i, (model, opt, sched) in enumerate(zip(models, opts, scheds)):
                model.train()
                loss = _token_loss(model(tokens[i].to(device)), targets[i].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        log(steps, lambda: models)
    else:
        def on_step(step, current):
            if log_every and step % log_every == 0:
                log(step, current)

        params, buffers, _ = population.train_stacked(
            models, ((tokens.to(device), targets.to(device)) for tokens, targets in data),
            lambda forward, batch: _token_loss(forward(batch[0]), batch[1]), lr=lr, betas=(0.9, 0.999), eps=1e-8,
            weight_decay=weight_decay, schedule=population.one_cycle(steps, lr, warmup), on_step=on_step)
        for i, model in enumerate(models):
            model.load_state_dict({k: v[i].detach() for k, v in {**params, **buffers}.items()})
        log(steps, lambda: models)
    for model in models:
        for block in model.blocks:
            block.__class__ = Block  # scaled_dot_product_attention again, for evaluation
    for h in histories:
        h.losses = {k: np.stack(v) for k, v in h.losses.items()} if h.steps else {}
    return [m.eval() for m in models], histories


def bench(lang: Language, *, dms, reps, steps: int, **kw) -> dict:
    """:func:`train` of the same members for ``steps`` steps one after another and as one population,
    in this process: both wall times, the speed-up and the largest difference between the two ways'
    parameters after training (a check that they trained the same models)."""
    import time

    out = {}
    for batched in (False, True):
        start = time.perf_counter()
        models, _ = train(lang, dms=dms, reps=reps, steps=steps, batched=batched, **kw)
        out["population_s" if batched else "sequential_s"] = time.perf_counter() - start
        out["population" if batched else "sequential"] = models
    diff = max(float((a - b).detach().abs().max()) for ma, mb in zip(out.pop("sequential"), out.pop("population"))
               for a, b in zip(ma.parameters(), mb.parameters()))
    return {**out, "speedup": out["sequential_s"] / out["population_s"], "members": len(dms) * len(reps),
            "steps": steps, "max_parameter_difference": diff}


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


def train_point(reps, seed: int = 0, *, dms, root: int, grammar: Grammar, eval_set, log_set, log_every: int,
                probe_splits: dict, prompts, prompt_js: np.ndarray, train_kw: dict, device: str = "cpu") -> dict:
    """One replicate of the chapter and everything measured on its models, as one sweep point (the
    models never leave it): :func:`train` of one model per replicate index in ``reps`` and metadata
    depth in ``dms``, as one population (chapter seed ``root``; ``seed`` is the sweep's and unused);
    for each, under ``runs[i]`` in the order of :func:`train`: the per-position
    losses on ``eval_set = (strings, js)`` with the metadata masked and with its first ``dm`` levels
    given; probe predictions of every level ``d`` at every probed position ``t``
    (``probe_splits[t] = (train_idx, test_idx)``), as ``probes[d][k]`` in the order of
    ``probe_splits`` (scikit-learn seed from :func:`lib.seeding.seed32` with key
    ``("probe", dm, rep, d, t)``); and the grammaticality of sampled continuations of ``prompts``
    (stream ``("continuations", dm, rep)``) under the prompts' true metadata ``prompt_js`` and under
    some metadata.

    Runs on one PyTorch and one BLAS thread wherever it runs (in the chapter, a local process
    or a cluster worker), so its numbers do not depend on where or in what order it ran."""
    from threadpoolctl import threadpool_limits

    from lib.pcfg import Language

    runs = []
    with one_thread(), threadpool_limits(1):
        strings, js = eval_set
        models, hists = train(Language(grammar), dms=dms, reps=reps, root=root, log_every=log_every,
                              log_set=log_set, device=device, **train_kw)
        for (rep, dm), model, hist in zip([(r, d) for r in reps for d in dms], models, hists):
            masked, hidden = evaluate(model, grammar, strings, js, dm=0, device=device)
            given = evaluate(model, grammar, strings, js, dm=dm, device=device)[0] if dm else masked
            probes = [[probe(hidden, js[:, d], t, tr, te, random_state=seed32(root, "probe", dm, rep, d, t))
                       for t, (tr, te) in probe_splits.items()]
                      for d in range(grammar.depth)]
            out = continuations(model, grammar, prompts, torch_generator(root, "continuations", dm, rep),
                                device=device)
            ok_true, ok_any = grammatical(grammar, out, prompt_js)
            runs.append({"rep": rep, "dm": dm, "hist": hist, "masked": masked, "given": given, "probes": probes,
                         "grammatical_true": ok_true, "grammatical_any": ok_any})
    return {"runs": runs}


# -- the per-position losses summarised: per token, per position, per seed ------------------------------------

def token_mean(values) -> float:
    """The mean over every token of per-sample, per-position values such as :func:`evaluate`'s losses
    (NaN, past a string's end, skipped)."""
    return float(np.nanmean(values))


def position_curve(per_sample: np.ndarray, positions) -> np.ndarray:
    """The mean over the samples at each of ``positions`` (indices) of per-sample, per-position values
    ``(B, n)``, NaN past a string's end skipped (:func:`lib.pcfg.per_position_mean`)."""
    return per_position_mean(per_sample)[0][positions]


def seeds_curve(runs, key: str, positions) -> np.ndarray:
    """:func:`position_curve` of ``run[key]`` for each of ``runs`` (one per seed), stacked as
    ``(positions, seeds)``."""
    return np.stack([position_curve(r[key], positions) for r in runs], axis=-1)


def bonferroni_z(rate: float, n_tests: int) -> float:
    """The one-sided normal critical value for ``n_tests`` z-scores at once: each is tested at
    ``rate / n_tests``, so that the chance that any of them exceeds it by chance is at most ``rate``
    (Bonferroni)."""
    from scipy import stats

    if n_tests < 1 or not 0 < rate < 1:
        raise ValueError("need n_tests ≥ 1 and 0 < rate < 1")
    return float(stats.norm.isf(rate / n_tests))


# -- comparisons between arms: the chapter's decision rules and their power ---------------------------------

def claim_rate(n_claims: int, budget: float = 1e-3) -> float:
    """Each statistical claim's false-alarm rate when ``n_claims`` of them share a chapter's ``budget`` per
    run (Bonferroni: the chance that any of them errs by chance is at most the sum of their rates)."""
    if n_claims < 1:
        raise ValueError("at least one statistical claim shares the budget")
    return budget / n_claims


@dataclass(frozen=True)
class Comparison:
    """One claim's one-sided t-tests over seeds (:func:`lib.stats.seed_test` of paired differences), each
    in its own ``direction`` (+1: the claim needs the mean above 0; −1: below 0), combined by ``rule``:

    - ``"all"``: the claim holds when *every* test is significant in its direction. An intersection-union
      test: each test runs at the claim's whole ``rate`` and the claim errs (holds where some effect is
      absent) with probability at most ``rate``; each test's ``mde`` is at power ``1 − 0.2 / k`` so that
      the k tests all detect their effects together with probability at least 0.8.
    - ``"none"``: the claim holds when *no* test is significant. It errs (fails where no effect is
      present) with probability at most ``rate``, each test at ``rate / k`` (Bonferroni); ``mde`` at 0.8.
    """

    tests: dict
    directions: dict
    rule: str
    rate: float

    @property
    def holds(self) -> bool:
        hits = [self.significant(k) for k in self.tests]
        return all(hits) if self.rule == "all" else not any(hits)

    def significant(self, key: str) -> bool:
        t = self.tests[key]
        return t.above() if self.directions[key] > 0 else t.below()

    @property
    def per_test_rate(self) -> float:
        return self.rate if self.rule == "all" else self.rate / len(self.tests)

    def means(self) -> dict:
        return {k: t.mean for k, t in self.tests.items()}

    def tolerance(self) -> str:
        """The rule in words, with its degrees of freedom and per-test rate."""
        n = next(iter(self.tests.values())).n
        groups = {side: [k for k, d in self.directions.items() if d == sign]
                  for sign, side in ((1, "t > t_crit"), (-1, "t < −t_crit"))}
        groups = {side: keys for side, keys in groups.items() if keys}
        each = (next(iter(groups)) if len(groups) == 1
                else "in its direction (" + "; ".join(f"{s} for {', '.join(k)}" for s, k in groups.items()) + ")")
        if self.rule == "all":
            return f"every test {each} ({n - 1} degrees of freedom, {self.per_test_rate:.1e} each; all must hold)"
        return f"no test {each} ({n - 1} degrees of freedom, {self.per_test_rate:.1e} each, Bonferroni)"

    def power(self, effects: dict, ceilings: dict | None = None) -> dict:
        """The design's numbers for :class:`lib.claims.Power`: of the test that binds (the largest of
        mde/effect and effect/ceiling), its ``detectable`` (mde), ``effect`` and ``ceiling`` (None: no
        bound), and every test's numbers under ``per_test``. detectable ≤ effect ≤ ceiling for the binding
        test holds exactly when it holds for every test."""
        ceilings = ceilings or {}

        def strain(k):
            c = ceilings.get(k)
            over = self.tests[k].mde / effects[k] if effects[k] > 0 else math.inf
            return max(over, effects[k] / c if c else (math.inf if c == 0 else 0.0))

        key = max(self.tests, key=strain)
        per_test = {k: {"detectable": self.tests[k].mde, "effect": effects[k], "ceiling": ceilings.get(k)}
                    for k in self.tests}
        return {"key": key, "detectable": self.tests[key].mde, "effect": float(effects[key]),
                "ceiling": None if ceilings.get(key) is None else max(0.0, float(ceilings[key])),
                "per_test": per_test}


def compare(differences: dict, directions, rule: str, rate: float) -> Comparison:
    """:class:`Comparison` of per-seed paired differences ``{key: (n_seeds,)}``; ``directions`` one
    int for all keys or one per key."""
    from lib.stats import seed_test

    if rule not in ("all", "none"):
        raise ValueError(f"rule must be 'all' or 'none', got {rule!r}")
    if not differences:
        raise ValueError("a comparison needs at least one test")
    if isinstance(directions, int):
        directions = {k: directions for k in differences}
    if set(directions) != set(differences) or any(d not in (-1, 1) for d in directions.values()):
        raise ValueError("every test needs a direction, +1 or −1")
    k = len(differences)
    alpha = rate if rule == "all" else rate / k
    power = 1 - 0.2 / k if rule == "all" else 0.8
    tests = {key: seed_test(v, alpha, power=power) for key, v in differences.items()}
    return Comparison(tests, dict(directions), rule, rate)


def majority_baseline(labels: np.ndarray, train_idx, test_idx) -> float:
    """The accuracy on the test side of always predicting the training side's most frequent label: what a
    probe that reads nothing from the hidden state reaches (ties go to the smaller label)."""
    train_labels = np.asarray(labels)[np.asarray(train_idx)]
    values, counts = np.unique(train_labels, return_counts=True)
    return float(np.mean(np.asarray(labels)[np.asarray(test_idx)] == values[np.argmax(counts)]))


def readable(accuracy: np.ndarray, majority: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
    """Which (level, position) probes read the latent level at all: those whose accuracy, averaged over
    every arm and seed (``accuracy``: ``(arms, levels, positions, seeds)``), is above the majority
    baseline, where the Bayes ceiling is above it too. Selected on the arms' mean, so the selection
    favours no arm over another."""
    mean = np.asarray(accuracy, dtype=float).mean(axis=(0, -1))
    return (mean > majority) & (np.asarray(ceiling) > majority)


def claim_power(comparison: Comparison, effects: dict, ceilings: dict | None, *, unit: str, what: str,
                ceiling_is: str, excess: float):
    """The :class:`lib.claims.Power` of a :class:`Comparison`: its binding test's detectable effect at the
    claim's rate, the effect it must see and the design's ceiling (``ceiling_is`` says what bounds it),
    in one sentence that also gives the baseline's excess over the Bayes loss (``excess``, nats per
    token); ``value`` holds every test's numbers."""
    from lib.claims import Power

    p = comparison.power(effects, ceilings)
    n = next(iter(comparison.tests.values())).n
    bound = (f"a difference of any size ({ceiling_is})" if p["ceiling"] is None
             else f"at most {p['ceiling']:.4f} {unit} ({ceiling_is})")
    return Power(f"{what}; paired over {n} seeds, the binding test ({p['key']}) detects {p['detectable']:.4f} "
                 f"{unit} at its false-alarm rate against an effect of {p['effect']:.4f} {unit} to see, and the "
                 f"design can show {bound}; the baseline is {excess:.3f} nats per token above the "
                 "Bayes loss.", detectable=p["detectable"], effect=p["effect"], ceiling=p["ceiling"],
                 value=p["per_test"])


def probe_scores(predictions: np.ndarray, truth: np.ndarray, posterior: np.ndarray, ceiling: float):
    """A probe's accuracy on its test strings and the z-score of its excess over the Bayes ceiling:
    ``posterior[i]`` is the Bayes posterior over the level's values for test string ``i``, so each
    prediction is right with probability ``q_i = posterior[i, prediction]`` and the accuracy's standard
    error is ``sqrt(Σ q_i (1 − q_i)) / n`` (z = 0 where every prediction is certain and the accuracy does
    not exceed the ceiling, +inf where it does)."""
    predictions = np.asarray(predictions)
    accuracy = float(np.mean(predictions == np.asarray(truth)))
    q = np.asarray(posterior)[np.arange(len(predictions)), predictions]
    variance = float(np.sum(q * (1 - q)))  # a posterior of 1 + rounding makes a term −1e-16
    se = math.sqrt(variance) / len(predictions) if variance > 0 else 0.0
    over = accuracy - ceiling
    if se > 0:
        return accuracy, over / se
    return accuracy, (0.0 if over <= 1e-12 else math.inf)


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided t-tests per row (TOST) that a per-seed deviation stays within ``±tolerance``:
    ``mean`` and ``se`` per row over the seeds, ``crit`` the one-sided critical value at ``rate``. The
    claim holds when every row's ``|mean| + crit · se < tolerance`` (an intersection-union test: it errs,
    holding where some row's true deviation reaches the tolerance, with probability at most ``rate``).
    ``needed``: per row, the tolerance the test needs to confirm a true deviation of 0 with probability
    about 0.8 (``(crit + t_0.9) · se``, both sides at once)."""

    mean: np.ndarray
    se: np.ndarray
    crit: float
    needed: np.ndarray
    tolerance: float
    rate: float
    n: int

    @property
    def holds(self) -> bool:
        return bool(np.all(np.abs(self.mean) + self.crit * self.se < self.tolerance))

    @property
    def bound(self) -> float:
        """The largest ``|mean| + crit · se`` over the rows: the deviation the test rules out."""
        return float(np.max(np.abs(self.mean) + self.crit * self.se))

    def tolerance_text(self) -> str:
        return (f"every row |mean| + t_crit · se < {self.tolerance:g} ({self.n - 1} degrees of freedom, "
                f"{self.rate:.1e} each side; all must hold)")


def equivalence(deviations: np.ndarray, tolerance: float, rate: float) -> Equivalence:
    """:class:`Equivalence` of ``deviations`` ``(rows, seeds)`` (at least two seeds)."""
    from scipy import stats

    d = np.asarray(deviations, dtype=float)
    if d.ndim != 2 or d.shape[1] < 2:
        raise ValueError("deviations must be (rows, seeds) with at least two seeds")
    n = d.shape[1]
    mean, se = d.mean(1), d.std(1, ddof=1) / np.sqrt(n)
    crit = float(stats.t.isf(rate, n - 1))
    return Equivalence(mean, se, crit, (crit + float(stats.t.isf(0.1, n - 1))) * se, float(tolerance), rate, n)


def beyond_ceiling(effects: dict, ceilings: dict) -> list:
    """The tests whose effect (a margin to rule out) is at or above the design's ceiling, the largest
    difference the data can show there (``None``: unbounded): a rule that needs the difference to stay
    short of that margin cannot be violated on those tests, whatever the models do."""
    return [k for k in effects if ceilings.get(k) is not None and effects[k] >= ceilings[k]]


def margin_power(comparison: Comparison, margins: dict, ceilings: dict, *, unit: str, what: str,
                 ceiling_is: str, excess: float):
    """The :class:`lib.claims.Power` of a non-inferiority :class:`Comparison` (each test: difference +
    margin above 0): its binding test's numbers as :func:`claim_power`'s, each test's margin against its
    ceiling (``ceiling_is`` says what bounds it) in the statement, and ``matched=False`` where some margin
    is at or above its ceiling (:func:`beyond_ceiling`): that test cannot fail, so a pass of the claim
    cannot be credited to the data."""
    from lib.claims import Power

    p = comparison.power(margins, ceilings)
    n = next(iter(comparison.tests.values())).n
    blind = beyond_ceiling(margins, ceilings)
    each = "; ".join(f"{k}: margin {margins[k]:.4f} against a ceiling of {ceilings[k]:.4f} {unit}" for k in margins)
    reading = (f"for {', '.join(blind)} the margin is at or above the ceiling, so the rule cannot be violated there "
               "and a pass tests nothing" if blind else "every margin is below its ceiling, so the rule can fail")
    return Power(f"{what}; an improvement is at most {ceiling_is} ({each}): {reading}; paired over {n} seeds, the "
                 f"binding test ({p['key']}) confirms a margin of {p['detectable']:.4f} {unit} at its false-alarm "
                 f"rate against the {p['effect']:.4f} {unit} it must confirm; the baseline is {excess:.3f} nats per "
                 "token above the Bayes loss.", detectable=p["detectable"], effect=p["effect"], ceiling=p["ceiling"],
                 matched=not blind, value=p["per_test"])


def deviation_ceiling(excess_masked: np.ndarray, excess_given: np.ndarray) -> float:
    """The largest mean deviation ``excess_masked − excess_given`` (rows, seeds) the excesses allow: both
    are ≥ 0 in expectation (no model beats the Bayes loss), so a row's |mean deviation| is at most the
    larger of its two mean excesses; the largest over the rows (a negative mean, held-out sampling,
    counts as 0)."""
    m = np.clip(np.asarray(excess_masked, dtype=float).mean(-1), 0, None)
    g = np.clip(np.asarray(excess_given, dtype=float).mean(-1), 0, None)
    return float(np.max(np.maximum(m, g)))


def equivalence_power(test: Equivalence, ceiling: float, *, worst_excess: float):
    """The :class:`lib.claims.Power` of an :class:`Equivalence` whose deviation is a difference of excesses
    over Bayes: ``detectable`` the tolerance its tests need to confirm a deviation of 0, ``effect`` the
    tolerance, ``ceiling`` the largest deviation the excesses allow (:func:`deviation_ceiling`), and
    ``matched=False`` when the tolerance is at or above it: no deviation the rule rules out can occur,
    so a pass says only that the models are near the Bayes curve."""
    from lib.claims import Power

    needed = float(np.max(test.needed))
    blind = test.tolerance >= ceiling
    reading = ("the tolerance is at or above it, so the rule cannot be violated beyond chance and a pass says only "
               "that the models are near the Bayes curve" if blind else
               "the tolerance is below it, so the rule can fail")
    return Power("Within one model (masked against given), so not confounded by data; the deviation is the "
                 "difference of the model's excess losses over Bayes without and with its metadata, so it can be "
                 f"no larger than the larger of the two: at most {ceiling:.4f} nats at any position here (the "
                 f"ceiling; up to {worst_excess:.3f} nats per token on average), and {reading}; over {test.n} seeds "
                 f"the tests need a tolerance of {needed:.4f} nats to confirm a deviation of 0, against the rule's "
                 f"{test.tolerance:g} nats.", detectable=needed, effect=test.tolerance, ceiling=ceiling,
                 matched=not blind, value={"largest excess over Bayes": worst_excess, "ceiling": ceiling,
                                           "tolerance needed": needed, "tolerance": test.tolerance})


def weakest(comparison: Comparison) -> tuple:
    """The key and :class:`lib.stats.SeedTest` of the test that comes closest to failing: the smallest t
    in its own direction (the one that decides an ``"all"`` comparison)."""
    key = min(comparison.tests, key=lambda k: comparison.directions[k] * comparison.tests[k].t)
    return key, comparison.tests[key]


def critical_t(rate: float, n_seeds: int) -> float:
    """The one-sided Student-t critical value at false-alarm ``rate`` for ``n_seeds`` paired differences
    (``n_seeds − 1`` degrees of freedom), as :func:`lib.stats.seed_test` uses it."""
    from scipy import stats

    if n_seeds < 2 or not 0 < rate < 1:
        raise ValueError("need n_seeds ≥ 2 and 0 < rate < 1")
    return float(stats.t.isf(rate, n_seeds - 1))


def direction_sentence(means: dict, direction: int, *, what: str, positive: str, negative: str,
                       effects: dict | None = None) -> str:
    """One sentence on the signs of per-test ``means`` against the paper's ``direction`` (+1: it expects
    them above 0), each sign glossed (``positive``, ``negative``); with ``effects``, also the means'
    share of the effect each test is sized to see, and whether all fall below it."""
    keys = list(means)
    pos = [k for k in keys if means[k] > 0]
    neg = [k for k in keys if means[k] < 0]
    zero = [k for k in keys if means[k] == 0]
    parts = [f"{s} ({gloss}) for {', '.join(ks)}" for s, gloss, ks in
             (("positive", positive, pos), ("negative", negative, neg), ("zero", "no difference", zero)) if ks]
    k = len(pos if direction > 0 else neg)
    n = len(keys)
    way = ("in the paper's direction for all of them" if k == n else
           "against the paper's direction for all of them" if k == 0 else
           f"in the paper's direction for {k} of {n}")
    text = f"This run's {what} are {' and '.join(parts)}: {way}"
    if effects is not None:
        share = [direction * means[k] / effects[k] for k in keys]
        below = all(s < 1 for s in share)
        text += (f", at {min(share):.2f} to {max(share):.2f} times the effect the design is sized to see "
                 f"({'below it for every one' if below else 'not below it for every one'})")
    return text + "."
