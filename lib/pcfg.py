"""Layered probabilistic context-free grammars with a latent rule-set index per level (ch. 10).

A grammar has ``depth`` levels of nonterminals; level 0 holds the start symbol, level
``depth − 1`` rewrites to terminals. At each level ``d`` a latent ``j_d ∈ {0, …, K−1}`` picks
which of ``K`` rule sets *every* nonterminal of that level uses in this sample; each rule set
gives each nonterminal ``n_rules`` equally likely productions whose right-hand sides have 1 to 3
symbols of the next level (a length drawn from ``rhs_lengths``). The vector ``j = (j_0, …, j_{D−1})`` is the "metadata".

Exact probabilities come from matrix dynamic programs over span boundaries ``0 … n`` of a string
``x``: for every symbol ``A``,

* ``F_A[i, k]`` — the probability that ``A`` yields exactly ``x[i:k]`` (the inside table;
  ``F_A = Σ_rules p · F_{B1} F_{B2} (F_{B3})``, a product of matrices), and
* ``G_A[i, t]`` — the probability that ``A``'s yield *starts with* ``x[i:t]`` (``i < t``).
  Splitting at the child that contains the last prefix token ``x[t−1]`` makes the
  decomposition unique: ``G_A = Σ_rules p · (G_{B1} + F_{B1} G_{B2} + F_{B1} F_{B2} G_{B3})``.

So ``p(x_{<t} | j) = G_S[0, t]`` (the prefix probability) and ``p(x | j) = F_S[0, n]``. Both
are checked against brute-force enumeration of every derivation on a small grammar.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lib.seeding import stream

Rule = tuple[int, ...]  # right-hand side: symbol indices of the next level


@dataclass(frozen=True)
class Grammar:
    """``rules[d][k][a]`` lists the productions (right-hand sides) of nonterminal ``a`` of level
    ``d`` under rule set ``k``; symbols of level ``d + 1`` (terminals after the last level)."""

    rules: tuple
    n_symbols: tuple  # nonterminals per level, then the number of terminals

    @property
    def depth(self) -> int:
        return len(self.rules)

    @property
    def n_sets(self) -> int:
        return len(self.rules[0])

    @property
    def n_terminals(self) -> int:
        return self.n_symbols[-1]

    def configs(self) -> list[tuple[int, ...]]:
        """Every metadata vector j, in a fixed order (index = position in this list)."""
        return list(itertools.product(range(self.n_sets), repeat=self.depth))


def random_grammar(depth: int = 3, nonterminals: int = 3, terminals: int = 4, n_sets: int = 2,
                   n_rules: int = 2, *, root: int, index: int = 0,
                   rhs_lengths: tuple[int, ...] = (2, 3)) -> Grammar:
    """A random layered grammar: right-hand sides of a length drawn uniformly from
    ``rhs_lengths``, symbols uniform over the next level. Productions of one nonterminal are
    distinct within a rule set. The rules are drawn from stream ``("grammar", index)`` of the
    chapter seed ``root`` (:mod:`lib.seeding`)."""
    rng = stream(root, "grammar", index)
    n_symbols = (1,) + (nonterminals,) * (depth - 1) + (terminals,)
    rules = []
    for d in range(depth):
        level = []
        for _ in range(n_sets):
            per_symbol = []
            for _ in range(n_symbols[d]):
                prods: list[Rule] = []
                while len(prods) < n_rules:
                    size = rhs_lengths[rng.integers(len(rhs_lengths))]
                    rhs = tuple(int(s) for s in rng.integers(n_symbols[d + 1], size=size))
                    if rhs not in prods:
                        prods.append(rhs)
                per_symbol.append(tuple(prods))
            level.append(tuple(per_symbol))
        rules.append(tuple(level))
    return Grammar(tuple(rules), n_symbols)


# -- sampling and enumeration -----------------------------------------------------------------
def yields(grammar: Grammar, j: tuple[int, ...]) -> dict[tuple[int, ...], float]:
    """The exact distribution of terminal strings under metadata ``j``, by enumerating every
    derivation bottom-up (brute force: exponential in the size of the tree)."""
    below = [{(t,): 1.0} for t in range(grammar.n_terminals)]
    for d in reversed(range(grammar.depth)):
        level = []
        for prods in grammar.rules[d][j[d]]:
            dist: dict[tuple[int, ...], float] = defaultdict(float)
            for rhs in prods:
                for parts in itertools.product(*(below[s].items() for s in rhs)):
                    string = tuple(itertools.chain.from_iterable(p[0] for p in parts))
                    dist[string] += float(np.prod([p[1] for p in parts])) / len(prods)
            level.append(dict(dist))
        below = level
    return below[0]


@functools.lru_cache(maxsize=64)
def _yields_cached(grammar: Grammar, j: tuple[int, ...]) -> dict:
    return yields(grammar, j)


def brute_force_prefix(grammar: Grammar, j: tuple[int, ...], prefix: tuple[int, ...]) -> float:
    """p(x_{<t} = prefix | j) by summing the enumerated distribution."""
    t = len(prefix)
    return sum(p for s, p in yields(grammar, j).items() if s[:t] == prefix)


class Language:
    """The enumerated joint distribution of (j, x) for a grammar small enough to enumerate:
    exact sampling by index, used for training data and evaluation sets."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self.configs = grammar.configs()
        self.strings: list[tuple[int, ...]] = []
        self.config_of: list[int] = []
        probs = []
        for c, j in enumerate(self.configs):
            for s, p in yields(grammar, j).items():
                self.strings.append(s)
                self.config_of.append(c)
                probs.append(p / len(self.configs))  # j uniform
        self.probs = np.asarray(probs)
        self.probs /= self.probs.sum()
        self.config_of = np.asarray(self.config_of)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """``n`` strings and their metadata vectors (an ``(n, depth)`` array)."""
        idx = rng.choice(len(self.probs), size=n, p=self.probs)
        js = np.asarray([self.configs[self.config_of[i]] for i in idx])
        return [self.strings[i] for i in idx], js


# -- exact dynamic programs -------------------------------------------------------------------
def _tables(grammar: Grammar, j: tuple[int, ...], x: np.ndarray, lengths: np.ndarray):
    """Batched inside (F) and prefix (G) tables of the start symbol: shapes (B, n+1, n+1)."""
    B, n = x.shape
    pos = np.arange(n)
    F, G = [], []
    for a in range(grammar.n_terminals):
        f = np.zeros((B, n + 1, n + 1))
        hit = (x == a) & (pos[None, :] < lengths[:, None])
        f[:, pos, pos + 1] = hit
        F.append(f)
        G.append(f.copy())  # a terminal's yield starts with x[i:t] iff t = i + 1 and x_i = a
    for d in reversed(range(grammar.depth)):
        newF, newG = [], []
        for prods in grammar.rules[d][j[d]]:
            f = np.zeros((B, n + 1, n + 1))
            g = np.zeros((B, n + 1, n + 1))
            for rhs in prods:
                left = None  # product F_{B1} ⋯ F_{B(k−1)}
                for s in rhs:
                    g += (G[s] if left is None else left @ G[s]) / len(prods)
                    left = F[s] if left is None else left @ F[s]
                f += left / len(prods)
            newF.append(f)
            newG.append(g)
        F, G = newF, newG
    return F[0], G[0]


def pad(strings: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.asarray([len(s) for s in strings])
    x = np.full((len(strings), lengths.max()), -1)
    for i, s in enumerate(strings):
        x[i, : len(s)] = s
    return x, lengths


def prefix_log_probs(grammar: Grammar, strings: list[tuple[int, ...]]) -> np.ndarray:
    """``L[b, c, t] = log p(x_{<t} | j = configs[c])`` for t = 0 … n, and at index n + 1 the
    log probability of the complete string (the prefix followed by end-of-sequence).
    Entries past a string's length are −inf."""
    x, lengths = pad(strings)
    B, n = x.shape
    configs = grammar.configs()
    out = np.full((B, len(configs), n + 2), -np.inf)
    with np.errstate(divide="ignore"):
        for c, j in enumerate(configs):
            F, G = _tables(grammar, j, x, lengths)
            out[:, c, 0] = 0.0
            out[:, c, 1 : n + 1] = np.log(G[:, 0, 1:])
            out[np.arange(B), c, lengths + 1] = np.log(F[np.arange(B), 0, lengths])
    return out


def is_grammatical(grammar: Grammar, strings: list[tuple[int, ...]], j: tuple[int, ...] | None = None
                   ) -> np.ndarray:
    """CYK membership (a string is in the language iff its inside probability is positive),
    under the given metadata ``j`` or under any ``j``."""
    x, lengths = pad(strings)
    ok = np.zeros(len(strings), dtype=bool)
    for cj in [j] if j is not None else grammar.configs():
        F, _ = _tables(grammar, cj, x, lengths)
        ok |= F[np.arange(len(strings)), 0, lengths] > 0
    return ok


@dataclass
class Bayes:
    """Bayes-optimal quantities for a batch of strings, position by position.

    Position ``t`` (0 … n) is the prediction of token ``t`` (``x_t``, or end-of-sequence when
    ``t = n``) from ``x_{<t}``. Arrays are ``(B, n_max + 1)`` with NaN past each string's end.
    ``loss_given[dm]`` is the loss of the predictor that knows the first ``dm`` levels
    ``j_0 … j_{dm−1}`` (metadata depth ``dm``) and averages over the others with their posterior:
    ``−log Σ_{j'} π_t(j' | j_{<dm}) p(x_t | x_{<t}, j')``, the sum over the vectors that agree
    with the revealed levels. ``dm = 0`` is the fully masked predictor, ``dm = D`` knows ``j``.
    """

    loss_given: list  # dm = 0 … D → (B, n_max + 1)
    posterior: np.ndarray  # π_t(j): (B, n_max + 1, n_configs), given x_{<t} only
    lengths: np.ndarray

    @property
    def loss_with_j(self) -> np.ndarray:  # −log p(x_t | x_{<t}, j)
        return self.loss_given[-1]

    @property
    def loss_without_j(self) -> np.ndarray:  # −log Σ_j π_t(j) p(x_t | x_{<t}, j)
        return self.loss_given[0]

    def gap_at(self, dm: int) -> np.ndarray:
        """Per-sample log p(x_t|x_{<t},j_{<dm}) − log p(x_t|x_{<t}); its mean over samples is the
        conditional mutual information I(x_t; j_{<dm} | x_{<t})."""
        return self.loss_given[0] - self.loss_given[dm]

    @property
    def gap(self) -> np.ndarray:
        """:meth:`gap_at` for the whole vector ``j``: the mean is I(x_t; j | x_{<t})."""
        return self.gap_at(len(self.loss_given) - 1)

    def level_posterior(self, grammar: Grammar, level: int) -> np.ndarray:
        """π_t(j_level = v): (B, n_max + 1, K)."""
        configs = np.asarray(grammar.configs())
        return np.stack([self.posterior[..., configs[:, level] == v].sum(-1)
                         for v in range(grammar.n_sets)], axis=-1)


def bayes(grammar: Grammar, strings: list[tuple[int, ...]], js: np.ndarray) -> Bayes:
    """Exact Bayes-optimal next-token losses for every metadata depth, and the posterior."""
    L = prefix_log_probs(grammar, strings)  # (B, C, n + 2)
    B, C, _ = L.shape
    lengths = np.asarray([len(s) for s in strings])
    n = lengths.max()
    configs = np.asarray(grammar.configs())
    js = np.asarray(js).reshape(B, grammar.depth)
    valid = np.arange(n + 1)[None, :] <= lengths[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        step = L[:, :, 1:] - L[:, :, :-1]  # log p(x_t | x_{<t}, j), t = 0 … n
        log_joint = L[:, :, :-1] - np.log(C)  # log p(j) p(x_{<t} | j), uniform prior
        losses = []
        for dm in range(grammar.depth + 1):
            agree = np.all(configs[None, :, :dm] == js[:, None, :dm], axis=-1)  # (B, C)
            lp = np.where(agree[:, :, None], log_joint, -np.inf)
            lp = lp - np.logaddexp.reduce(lp, axis=1, keepdims=True)  # π_t(j | j_{<dm})
            mix = np.logaddexp.reduce(np.where(lp > -np.inf, lp + step, -np.inf), axis=1)
            losses.append(np.where(valid, -mix, np.nan))
        post = np.exp(log_joint - np.logaddexp.reduce(log_joint, axis=1, keepdims=True))
    return Bayes(losses, np.transpose(post, (0, 2, 1)), lengths)


def brute_force_loss(grammar: Grammar, x: tuple[int, ...], j: tuple[int, ...], dm: int) -> np.ndarray:
    """−log p(x_t | x_{<t}, j_{<dm}) for t = 0 … n (t = n: end of sequence), by summing the
    enumerated distributions of every metadata vector that agrees with ``j`` on its first
    ``dm`` levels (uniform prior). Exponential cost; for tests."""
    agree = [c for c in grammar.configs() if c[:dm] == tuple(j[:dm])]
    dists = [_yields_cached(grammar, c) for c in agree]

    def joint(prefix, complete=False):
        if complete:
            return sum(d.get(tuple(prefix), 0.0) for d in dists)
        return sum(p for d in dists for s, p in d.items() if s[: len(prefix)] == tuple(prefix))

    n = len(x)
    out = [-np.log(joint(x[: t + 1]) / joint(x[:t])) for t in range(n)]
    out.append(-np.log(joint(x, complete=True) / joint(x)))
    return np.asarray(out)


def bayes_grammatical(lang: Language, prompts: list[tuple[int, ...]], js: np.ndarray) -> np.ndarray:
    """For each prompt: the probability that the Bayes-optimal predictor *without* metadata,
    p(· | prompt) = Σ_j π(j | prompt) p(· | prompt, j), completes it to a string that the
    grammar under the sample's own metadata ``js[b]`` generates (exact, by enumeration; under
    *some* metadata the probability is 1)."""
    S, _ = pad(lang.strings)
    unique, inverse = np.unique(S, axis=0, return_inverse=True)
    member = np.zeros((len(unique), len(lang.configs)), dtype=bool)  # string × metadata vector
    member[inverse.ravel(), lang.config_of] = True
    out = np.zeros(len(prompts))
    for b, prompt in enumerate(prompts):
        k = len(prompt)
        hit = np.all(S[:, :k] == np.asarray(prompt, dtype=int), axis=1)
        true_c = lang.configs.index(tuple(int(v) for v in js[b]))
        w = lang.probs[hit]
        out[b] = float(np.dot(w, member[inverse.ravel()[hit], true_c]) / w.sum())
    return out


def per_position_mean(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over samples at each position (ignoring NaN) and the number of samples there."""
    count = np.sum(~np.isnan(values), axis=0)
    with np.errstate(invalid="ignore"):
        return np.nanmean(np.where(count[None, :] > 0, values, 0.0), axis=0), count
