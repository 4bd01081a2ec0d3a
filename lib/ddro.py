"""Chapter 08 — Direct density ratio optimisation (DDRO): alignment without a preference model.

Higuchi & Suzuki, *Direct Density Ratio Optimization: A Statistically Consistent Approach to
Aligning Large Language Models*, ICML 2025, arXiv:2505.07558.

The paper's exact loss could not be read; this module implements the reconstruction derived in
the chapter. Responses y ~ π_ref are labelled preferred or not, so that

    π_ref = α p₊ + (1 − α) p₋        (α = share of preferred labels; α = ½ for pairs).

The policy models the ratio g = π_θ / π_ref of p₊ to π_ref. A logistic classifier between the
preferred sample D₊ and the unpreferred sample D₋ whose odds are parametrised through g,

    P(preferred | y) = α g(y),        i.e.  p₊/p₋ = (1 − α) g / (1 − α g),

has the (Bregman / logistic density-ratio) loss

    L(θ) = −(1/N) Σ_{y ∈ D₊} log g(y) − (1/N) Σ_{y ∈ D₋} log(1 − α g(y)) + const,

whose population minimiser is g = p₊/π_ref, i.e. π_θ = p₊, for any preference structure. The
ratio must stay below 1/α; we clip g ≤ (1 − ε)/α (the stabilising clip).

For a categorical policy over K outputs the empirical minimiser is found exactly (a convex
problem in g with one linear constraint Σ π_ref g = 1, solved through its Lagrange multiplier).
DPO and a KTO-style unpaired loss are fitted numerically; their population limits are the same
fits on expected counts. A tiny autoregressive GRU policy over short token sequences (all
sequences enumerable, so distances to p₊ are exact) is trained with the same losses.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy.special import expit, log_expit, logsumexp
from scipy.stats import norm
from lib.stats import loglog_slope  # noqa: F401  (re-exported for the chapter)
from lib.sweep import one_thread

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


# ----------------------------------------------------------------------------------------------
# The density-ratio (DDRO) loss and its exact categorical minimiser
# ----------------------------------------------------------------------------------------------


def ddro_loss(g: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray, alpha: float) -> float:
    """L(g) = −(1/N)[Σ_y N₊(y) log g(y) + Σ_y N₋(y) log(1 − α g(y))], N = ΣN₊ + ΣN₋."""
    N = n_pos.sum() + n_neg.sum()
    with np.errstate(divide="ignore"):
        a = np.where(n_pos > 0, n_pos * np.log(g), 0.0)
        b = np.where(n_neg > 0, n_neg * np.log1p(-alpha * g), 0.0)
    return float(-(a.sum() + b.sum()) / N)


def _g_of_multiplier(lam: float, pi, n_pos, n_neg, alpha):
    """Stationary point of N₊ log g + N₋ log(1 − αg) − λ π g over g ∈ [0, 1/α), per output:
    N₊/g − αN₋/(1 − αg) = λπ, i.e. the root in [0, 1/α) of
    λπα g² − (λπ + α(N₊ + N₋)) g + N₊ = 0, written in the cancellation-free form. An output with
    N₊ = 0 and b = λπ + αN₋ < 0 (possible only for λ < 0) has the root b/(λπα) > 0, where the
    cancellation-free form reads 0/0; otherwise its maximiser is g = 0."""
    a = lam * pi
    b = a + alpha * (n_pos + n_neg)
    disc = np.maximum(b * b - 4.0 * a * alpha * n_pos, 0.0)
    den = b + np.sqrt(disc)
    unseen_pos = (n_pos == 0) & (b < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(unseen_pos, b / (a * alpha), 2.0 * n_pos / np.where(den > 0, den, 1.0))


def fit_ddro_categorical(pi: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray, alpha: float,
                         clip: float = 1e-3) -> np.ndarray:
    """The exact minimiser π_θ = π_ref·g of :func:`ddro_loss` over all categorical policies
    (Σ π_ref g = 1), with g clipped to ≤ (1 − clip)/α. Outputs never observed keep g = 1 (the loss
    does not see them). Returns π_θ."""
    pi = np.asarray(pi, float)
    n_pos, n_neg = np.asarray(n_pos, float), np.asarray(n_neg, float)
    seen = (n_pos + n_neg) > 0
    budget = 1.0 - pi[~seen].sum()                       # Σ_{seen} π g must equal this
    cap = (1.0 - clip) / alpha

    def g_of(lam):
        g = np.minimum(_g_of_multiplier(lam, pi[seen], n_pos[seen], n_neg[seen], alpha), cap)
        return g

    def excess(lam):
        return float(pi[seen] @ g_of(lam)) - budget

    lo, hi = -1.0, 1.0
    N = float(n_pos.sum() + n_neg.sum())
    while excess(lo) < 0:                                 # Σπg decreases in λ
        lo *= 2.0
        if lo < -1e6 * N:
            break
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 1e6 * N:
            break
    lam = optimize.brentq(excess, lo, hi, xtol=1e-14 * max(1.0, N), rtol=1e-14) \
        if excess(lo) * excess(hi) < 0 else (lo if abs(excess(lo)) < abs(excess(hi)) else hi)
    g = np.ones_like(pi)
    g[seen] = g_of(lam)
    out = pi * g
    return out / out.sum()


# ----------------------------------------------------------------------------------------------
# DPO and a KTO-style unpaired baseline (categorical), fitted numerically
# ----------------------------------------------------------------------------------------------


def _policy(theta: np.ndarray) -> np.ndarray:
    return np.exp(theta - logsumexp(theta))


def fit_dpo_categorical(pi: np.ndarray, C: np.ndarray, beta: float = 1.0,
                        ridge: float = 1e-12) -> np.ndarray:
    """Minimise the DPO loss −(1/N) Σ_{a,b} C[a,b] log σ(β[h(a) − h(b)]), h = log(π_θ/π_ref), over
    categorical π_θ: a convex logistic problem in h, solved by damped Newton. A tiny ridge on h
    fixes the additive gauge and keeps the minimiser finite when some pair was only ever won one
    way. Returns π_θ."""
    Cn = np.asarray(C, float) / np.sum(C)
    K = len(pi)

    def parts(h):
        d = beta * (h[:, None] - h[None, :])
        val = -(Cn * log_expit(d)).sum() + ridge * (h @ h)
        r = Cn * expit(-d) * beta                       # −∂(term)/∂h_a for the pair (a, b)
        grad = -(r.sum(1) - r.sum(0)) + 2 * ridge * h
        w = Cn * expit(d) * expit(-d) * beta ** 2
        w = w + w.T
        H = np.diag(w.sum(1)) - w + 2 * ridge * np.eye(K)
        return val, grad, H

    h = np.zeros(K)
    val, grad, H = parts(h)
    for _ in range(200):
        step = np.linalg.solve(H, grad)
        t = 1.0
        while True:                                     # backtracking line search
            new = h - t * step
            nval, ngrad, nH = parts(new)
            if nval <= val - 0.25 * t * (grad @ step) or t < 1e-10:
                break
            t *= 0.5
        h, done = new, val - nval < 1e-15
        val, grad, H = nval, ngrad, nH
        if done or np.abs(grad).max() < 1e-13:
            break
    return _policy(np.log(pi) + h)


def fit_kto_categorical(pi: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray,
                        beta: float = 1.0, ref_point: float = 0.0) -> np.ndarray:
    """A KTO-style unpaired baseline in its binary-classifier form (as in BCO): each preferred
    response pushes σ(β(h(y) − z₀)) up and each unpreferred one pushes it down,

        L = (1/N) Σ_y N₊(y) softplus(−β(h(y) − z₀)) + N₋(y) softplus(β(h(y) − z₀)),

    h = log(π_θ/π_ref), over categorical π_θ (softmax logits, L-BFGS from π_θ = π_ref). (KTO's
    own saturating value 1 − σ(·) makes the categorical optimum degenerate; the log-sigmoid form
    is smooth with a unique finite optimum.) Returns π_θ."""
    N = n_pos.sum() + n_neg.sum()
    wp, wn = n_pos / N, n_neg / N
    logpi = np.log(pi)

    def parts(theta):
        lse = logsumexp(theta)
        p = np.exp(theta - lse)
        u = beta * (theta - lse - logpi - ref_point)
        val = (wp * np.logaddexp(0, -u) + wn * np.logaddexp(0, u)).sum()
        d1 = beta * (-wp * expit(-u) + wn * expit(u))             # ∂L/∂h
        d2 = beta ** 2 * (wp + wn) * expit(u) * expit(-u)         # ∂²L/∂h²
        J = np.eye(len(p)) - p[None, :]                           # ∂h/∂θ = I − 1pᵀ
        grad = J.T @ d1
        H = J.T @ (d2[:, None] * J) - d1.sum() * (np.diag(p) - np.outer(p, p))
        return val, grad, H

    return _policy(_newton(parts, logpi.copy()))


def _newton(parts, x: np.ndarray, iters: int = 200) -> np.ndarray:
    """Damped Newton with backtracking; the Hessian's eigenvalues are floored so every step
    descends (the softmax gauge direction gets a floor eigenvalue and hardly moves)."""
    val, grad, H = parts(x)
    for _ in range(iters):
        w, V = np.linalg.eigh(H)
        w = np.maximum(np.abs(w), 1e-8 * max(1.0, np.abs(w).max()))
        step = V @ ((V.T @ grad) / w)
        t = 1.0
        while True:
            new = x - t * step
            nval, ngrad, nH = parts(new)
            if nval <= val - 0.25 * t * (grad @ step) or t < 1e-12:
                break
            t *= 0.5
        converged = val - nval < 1e-16 or np.abs(ngrad).max() < 1e-13
        x, val, grad, H = new, nval, ngrad, nH
        if converged:
            break
    return x


# ----------------------------------------------------------------------------------------------
# Asymptotics of the categorical DDRO estimator (paired data): E TV ≈ C / √N
# ----------------------------------------------------------------------------------------------


def ddro_tv_constant(pi: np.ndarray, pref: Preference, eps: float = 1e-6) -> float:
    """C such that E TV(π̂_DDRO, p₊) ≈ C/√N for N pairs (delta method).

    The estimator is a smooth function of the normalised counts (N₊(y), N₋(y))/N; one pair adds
    e_winner to N₊ and e_loser to N₋. With J the Jacobian of the estimator at the population
    counts and Σ the covariance of one pair's count vector, √N(π̂ − p₊) → N(0, J Σ Jᵀ), and
    E|Gaussian| = σ√(2/π), so C = ½ √(2/π) Σ_y √((J Σ Jᵀ)_yy)."""
    K = len(pi)
    joint = expected_pairs(pi, pref)                      # P(winner = a, loser = b)
    p_w, p_l = joint.sum(1), joint.sum(0)
    mean = np.concatenate([p_w, p_l])
    second = np.block([[np.diag(p_w), joint], [joint.T, np.diag(p_l)]])
    Sigma = second - np.outer(mean, mean)
    est = lambda c: fit_ddro_categorical(pi, c[:K], c[K:], 0.5, clip=0.0)  # noqa: E731
    J = np.zeros((K, 2 * K))
    for j in range(2 * K):
        e = np.zeros(2 * K)
        e[j] = eps * max(mean[j], 1e-12)               # relative steps: counts span decades
        J[:, j] = (est(mean + e) - est(mean - e)) / (2 * e[j])
    var = np.einsum("ij,jk,ik->i", J, Sigma, J)
    return 0.5 * math.sqrt(2 / math.pi) * float(np.sqrt(np.maximum(var, 0)).sum())


def empirical_winners_tv_constant(target: np.ndarray) -> float:
    """C for the plain empirical law of N winners, E TV ≈ C/√N with
    C = ½ √(2/π) Σ_y √(p₊(y)(1 − p₊(y))): the natural rival of the DDRO estimator (which also
    uses the losers and the known π_ref)."""
    t = np.asarray(target, float)
    return 0.5 * math.sqrt(2 / math.pi) * float(np.sqrt(t * (1 - t)).sum())


def bt_misfit(pi: np.ndarray, pref: Preference, policy: np.ndarray, beta: float = 1.0) -> dict:
    """How well the Bradley–Terry model implied by a DPO policy, P̂(a ≻ b) = σ(β[h(a) − h(b)])
    with h = log(π_θ/π_ref), reproduces the true preferences: ``max_pair`` = max_{a,b} |P̂ − P|,
    and ``max_win_rate`` = max_y |ŵ(y) − w(y)| for the win rates against a fresh draw from π_ref,
    w(y) = Σ_{y'} π_ref(y') P(y ≻ y'). At DPO's population limit the win rates match exactly
    for every structure (the stationarity condition of the logistic fit); the pairwise table
    matches only when P is Bradley–Terry."""
    h = np.log(np.asarray(policy, float) / pi)
    P_hat = expit(beta * (h[:, None] - h[None, :]))
    return {"max_pair": float(np.abs(P_hat - pref.P).max()),
            "max_win_rate": float(np.abs(P_hat @ pi - pref.P @ pi).max())}


def categorical_point(structure: int, N: int, seed: int, *, pi: np.ndarray, prefs: list[Preference],
                      beta: float = 1.0, clip: float = 1e-3) -> dict:
    """One cell of :func:`categorical_study`: structure ``prefs[structure]``, ``N`` pairs, one
    seed. Its draws come from a generator of its own, ``default_rng([seed, 8, structure, N])``, so
    the result does not depend on which other cells ran before it, or where."""
    pref = prefs[structure]
    target = paired_target(pi, pref)
    q = pref.P @ pi                                   # P(y beats a fresh y' ~ π_ref)
    rng = np.random.default_rng([int(seed), 8, int(structure), int(N)])
    C = sample_pairs(pi, pref, int(N), rng)
    npos, nneg = sample_unpaired(pi, q, 2 * int(N), rng)
    return {"ddro": tv(fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip), target),
            "dpo": tv(fit_dpo_categorical(pi, C, beta), target),
            "ddro_unpaired": tv(fit_ddro_categorical(
                pi, npos, nneg, npos.sum() / (npos.sum() + nneg.sum()), clip), target),
            "kto": tv(fit_kto_categorical(pi, npos, nneg, beta), target)}


def categorical_study(pi: np.ndarray, prefs: list[Preference], Ns, seeds,
                      beta: float = 1.0, clip: float = 1e-3, **sweep_kw):
    """TV to p₊ of every categorical estimator, for every structure, N and seed: a pandas
    DataFrame with columns structure, N, seed, and one column per method —
    ``ddro`` (paired, α = ½), ``dpo`` (paired), ``ddro_unpaired`` and ``kto`` (2N unpaired
    responses, each labelled preferred when it beats a fresh draw from π_ref, so that p₊ is the
    same as for pairs; α estimated by N₊/N). The cells run through :func:`lib.sweep.sweep`
    (``sweep_kw`` goes to it), locally or on a cluster, with the same result."""
    import functools

    import pandas as pd

    from lib.sweep import sweep

    point = functools.partial(categorical_point, pi=np.asarray(pi, float), prefs=list(prefs), beta=beta,
                              clip=clip)
    records = sweep(point, {"structure": list(range(len(prefs))), "N": [int(N) for N in Ns]},
                    seeds=[int(s) for s in seeds], desc="categorical study", **sweep_kw)
    for r in records:
        r["structure"] = prefs[r["structure"]].name
    return pd.DataFrame(records, columns=["structure", "N", "seed", "ddro", "dpo", "ddro_unpaired", "kto"])


def population_limits(pi: np.ndarray, pref: Preference, beta: float = 1.0) -> dict:
    """Each method fitted on expected counts (N → ∞): the policies and their TV to p₊."""
    target = paired_target(pi, pref)
    C = expected_pairs(pi, pref)
    q = pref.P @ pi
    pols = {"ddro": fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip=0.0),
            "dpo": fit_dpo_categorical(pi, C, beta),
            "kto": fit_kto_categorical(pi, pi * q, pi * (1 - q), beta)}
    return {"target": target, "policies": pols, "tv": {k: tv(v, target) for k, v in pols.items()}}


# ----------------------------------------------------------------------------------------------
# A tiny autoregressive policy over short token sequences
# ----------------------------------------------------------------------------------------------


def all_sequences(vocab: int, length: int) -> np.ndarray:
    """Every sequence of ``length`` tokens from ``vocab``, (vocab**length, length), in
    lexicographic order."""
    return np.array(list(itertools.product(range(vocab), repeat=length)), dtype=np.int64)


def sequence_preference(seqs: np.ndarray, vocab: int, cycle: float = 2.0,
                        seed: int = 0) -> Preference:
    """A non-Bradley–Terry preference on sequences: P(a ≻ b) = sigmoid(u(a) − u(b) + c(a, b)),
    with an additive utility u(y) = Σ_t w[y_t] (token weights ~ N(0, ½)) and a rock–paper–scissors
    term c(a, b) = ``cycle`` · rps(a_0, b_0) on the first tokens (token k beats token k+1 mod
    vocab), which makes the preference intransitive."""
    rng = np.random.default_rng([seed, 8, 3])
    w = rng.normal(0.0, math.sqrt(0.5), vocab)
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

    Built lazily on torch; ``log_probs()`` returns log π(y) for every sequence in ``seqs``."""

    def __init__(self, vocab: int, seqs: np.ndarray, hidden: int = 32, seed: int = 0,
                 temperature: float = 1.0):
        torch = _torch()
        g = torch.Generator().manual_seed(int(seed))
        self.vocab, self.temperature = vocab, temperature
        self.embed = torch.nn.Embedding(vocab + 1, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(max(1, p.shape[-1])))
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
                 seed: int = 0, beta: float = 1.0) -> np.ndarray:
    """Fine-tune a copy of the reference policy on pair counts C with full-batch Adam; returns
    the final π_θ over all sequences. (The losses depend on the data only through C, so the cost
    does not grow with the number of pairs.)"""
    torch = _torch()
    with one_thread():
        torch.manual_seed(seed)
        pol = GRUPolicy(ref.vocab, ref._targets.numpy(), hidden=ref.gru.hidden_size,
                        temperature=ref.temperature).load_from(ref)
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


def sequence_setup(vocab: int, length: int, hidden: int, seed: int) -> SequenceSetup:
    """Build the sequence study from its parameters alone, on one PyTorch thread, so that the
    chapter and every sweep worker (local process or cluster) compute the same bits."""
    torch = _torch()
    with one_thread():
        seqs = all_sequences(vocab, length)
        ref = GRUPolicy(vocab, seqs, hidden=hidden, seed=seed)
        with torch.no_grad():
            pi = np.exp(ref.log_probs().double().numpy())
    pi /= pi.sum()
    pref = sequence_preference(seqs, vocab, seed=seed)
    return SequenceSetup(seqs, ref, pi, pref, paired_target(pi, pref))


def neural_point(N: int, kind: str, seed: int, *, vocab: int, length: int, hidden: int, base_seed: int,
                 steps: int = 300, lr: float = 0.02, beta: float = 1.0) -> dict:
    """One sequence-study run: ``N`` pairs drawn from ``default_rng([base_seed, 8, 7, seed, N])``
    (the same pairs for both kinds at a given seed and N), the GRU fine-tuned with ``kind``
    ("ddro" or "dpo"); its TV to p₊."""
    setup = sequence_setup(vocab, length, hidden, base_seed)
    counts = sample_pairs(setup.pi, setup.pref, int(N), np.random.default_rng([base_seed, 8, 7, int(seed), int(N)]))
    pol = train_neural(kind, setup.ref, counts, steps=steps, lr=lr, seed=int(seed), beta=beta)
    return {"tv": tv(pol, setup.target)}
