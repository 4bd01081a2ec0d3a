"""The one-large-step protocol that measures sample complexity ``n*``: literally, through an exact
sufficient-statistic sampler, and in theory (Poissonised success probability, signal-to-noise
asymptotics)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from lib.curriculum.policy import greedy, reinforce_gradient, sample_paths
from lib.curriculum.tree import ROUTES, ReasoningTree

LEARNED = 50.0  # logit margin of an already-learned depth (probability 1 − d·e^{-50})


def stage_setup(tree: ReasoningTree, route: str, stage: int):
    """For a route and stage: the starting logits, which depths are sampled/trained, how many
    steps are generated, which depths are forced by a hint, and the oracle.

    ``direct`` has one stage (all depths from uniform); curriculum stage ``ℓ = 1..k`` starts
    with the previously learned depths at their target.
    """
    k, d = tree.k, tree.d
    theta = np.zeros((k, d))
    trained = np.zeros(k)
    hinted = np.zeros(k, dtype=bool)
    if route == "direct":
        trained[:] = 1
        return theta, trained, hinted, k
    if not 1 <= stage <= k:
        raise ValueError(f"stage must be in 1..{k}, got {stage}")
    learned = np.zeros(k, dtype=bool)
    if route == "depth":  # depths 1..ℓ-1 learned, depth ℓ new, chain cut at ℓ (family oracle)
        learned[: stage - 1] = True
        trained[stage - 1] = 1
        length = stage
    elif route == "hint":  # first k-ℓ steps given, depths after k-ℓ+1 learned, terminal oracle
        hinted[: k - stage] = True
        learned[k - stage + 1:] = True
        trained[k - stage] = 1
        length = k
    else:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    theta[learned, np.asarray(tree.target)[learned]] = LEARNED
    return theta, trained, hinted, length


def onestep_literal(tree: ReasoningTree, route: str, n: int, repeats: int,
                    rng: np.random.Generator, stage: int = 1, lr: float = 1e8,
                    chunk: int = 1 << 21) -> np.ndarray:
    """The protocol run literally: per repeat, draw ``n`` rollouts (paths and inputs), query
    the oracle, take one REINFORCE step of size ``lr`` and check the greedy policy.

    Returns a boolean array ``(repeats,)``: greedy policy right after the step (unique maxima
    and, for the trained depths, a path that is correct on every input)."""
    theta0, trained, hinted, length = stage_setup(tree, route, stage)
    grad = np.zeros((repeats, *theta0.shape))
    per = max(1, chunk // max(1, repeats * tree.k * tree.d))
    done = 0
    while done < n:
        m = min(per, n - done)
        paths = sample_paths(np.broadcast_to(theta0, (repeats, *theta0.shape)), m, rng)
        paths[..., hinted] = np.asarray(tree.target)[hinted]
        paths = paths[..., :length]
        x = tree.sample_inputs(rng, (repeats, m))
        r = tree.terminal_reward(x, paths)  # terminal and family oracles: same rule on the prefix
        full = np.zeros((repeats, m, tree.k), dtype=np.int64)
        full[..., :length] = paths
        # the gradient is linear in the rollouts: accumulate Σ_s r_s ∇ log π over chunks
        grad += reinforce_gradient(theta0, full, r, trained) * m
        done += m
    theta = theta0 + lr * grad / n
    path, unique = greedy(theta)
    ok = unique[..., trained > 0].all(axis=-1)
    if route == "direct":
        return ok & tree.is_correct(path)
    depth = int(np.flatnonzero(trained)[0])
    return ok & (path[..., depth] == tree.target[depth])


def onestep_fast(d: int, depths: int, q: float, n: int, repeats: int,
                 rng: np.random.Generator) -> np.ndarray:
    """The same protocol through its sufficient statistic (exact in law, cost independent of n).

    Holds for a tree with a single correct path whose wrong paths are rewarded with
    probability ``q`` independently per rollout (blocked parity, the mod-p chain, and every
    curriculum stage).  With ``depths`` uniformly sampled depths, the greedy choice at depth ℓ
    after a large step from uniform logits is the arm with the most reward,
    ``R_{ℓj} = Σ_s r_s 1[i_{sℓ} = j]``.  Write ``r_s = 1[path_s is right] ∨ c_s`` with coins
    ``c_s ~ Bernoulli(q)`` independent of the path: the ``M ~ Bin(n, q)`` coin-rewarded
    rollouts fall on arms as independent multinomials per depth, and the ``H ~ Bin(n − M,
    d^{-depths})`` right rollouts among the others add to the target arm at every depth.
    """
    M = rng.binomial(n, q, size=repeats)
    H = rng.binomial(n - M, float(d) ** -depths)
    C = rng.multinomial(np.repeat(M, depths).reshape(repeats, depths), np.full(d, 1.0 / d))
    target = C[..., 0] + H[:, None]  # arm 0 is the target (arms are exchangeable)
    rivals = C[..., 1:].max(axis=-1)
    return np.all(target > rivals, axis=-1)


def onestep_theory(d: int, depths: int, q: float, n: float, points: int = 121) -> float:
    """Success probability of the one-step protocol, Poissonised: the reward counts of the
    ``d`` arms are independent Poisson (mean ``nq/d``), the target's gets ``H ~ Poisson(n(1−q)
    d^{-depths})`` more, shared by the depths, which are otherwise treated as independent:

        P(n) = Σ_h P(H = h) · [Σ_c P(C = c) F(c + h − 1)^{d−1}]^{depths},

    with ``F`` the Poisson(nq/d) distribution function (strict maximum)."""
    lam = n * q / d
    mu = n * (1 - q) * float(d) ** -depths
    c, wc = _poisson_grid(lam, points)
    h, wh = _poisson_grid(mu, points)
    top = c[None, :] + h[:, None] - 1
    F = np.where(top >= 0, special.gammaincc(np.maximum(top, 0) + 1.0, lam), 0.0) if lam > 0 else \
        (top >= 0).astype(float)
    per_depth = (F ** (d - 1)) @ wc  # (len h,)
    return float(np.clip(wh @ per_depth ** depths, 0.0, 1.0))


def _poisson_grid(mean: float, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Support points and weights of a Poisson law: every integer when the bulk is narrow,
    otherwise ``points`` evenly spaced integers over ±9 standard deviations."""
    if mean <= 0:
        return np.zeros(1), np.ones(1)
    lo = max(0, int(mean - 9 * math.sqrt(mean) - 5))
    hi = int(mean + 9 * math.sqrt(mean) + 10)
    x = np.arange(lo, hi + 1) if hi - lo + 1 <= points else np.unique(
        np.linspace(lo, hi, points).round())
    logw = special.xlogy(x, mean) - mean - special.gammaln(x + 1.0)
    w = np.exp(logw - logw.max()) * (1.0 if len(x) == hi - lo + 1 else np.gradient(x))
    return x, w / w.sum()


def n_grid(n_max: float, per_octave: int = 8) -> np.ndarray:
    """The geometric grid of sample sizes ``2^{j/per_octave}`` (rounded, distinct) up to n_max."""
    js = np.arange(0, int(per_octave * math.log2(n_max)) + 1)
    return np.unique(np.round(2.0 ** (js / per_octave)).astype(np.int64))


def n_star(success_rate, n_max: float, target: float = 0.99, per_octave: int = 8) -> float:
    """The smallest grid ``n`` whose success rate reaches ``target``, found by bracketing and
    bisection on the geometric grid (success assumed non-decreasing in n); ``inf`` (censored)
    when even ``n_max`` fails.  ``success_rate(n)`` returns a rate in [0, 1]."""
    grid = n_grid(n_max, per_octave)
    cache: dict[int, bool] = {}

    def ok(j: int) -> bool:
        if j not in cache:
            cache[j] = success_rate(int(grid[j])) >= target
        return cache[j]

    hi = len(grid) - 1
    if not ok(hi):
        return math.inf
    lo, step = -1, per_octave  # ok(lo) is False by convention at lo = -1
    j = 0
    while j < hi and not ok(j):  # gallop: double the step until a pass
        lo, j = j, min(hi, j + step)
        step *= 2
    hi = j
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return float(grid[hi])


def n_star_theory(d: int, depths: int, q: float, target: float = 0.99,
                  n_max: float = 1e14, rel: float = 1e-3) -> float:
    """``n*`` of :func:`onestep_theory` on a continuous scale: bracket around the asymptotic
    estimate, then bisect in log n to relative precision ``rel``."""
    def ok(log_n: float) -> bool:
        return onestep_theory(d, depths, q, math.exp(log_n)) >= target

    guess = math.log(n_star_asymptotic(d, depths, q))
    lo, hi = guess - 2.0, guess + 1.0
    while lo > 0 and ok(lo):
        lo -= 2.0
    while not ok(hi):
        if hi > math.log(n_max):
            return math.inf
        hi += 2.0
    lo = max(lo, 0.0)
    while hi - lo > rel:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return math.exp(hi)


def n_star_asymptotic(d: float, depths: int, q: float, delta: float = 0.01) -> float:
    """The signal-to-noise prediction (derived in the chapter): the target arm's mean lead
    ``n(1−q)d^{-depths}`` must beat the noise ``sqrt(2nq/d)`` by the Gaussian maximum of the
    ``d−1`` rivals plus a ``δ/depths`` quantile,

        n* ≈ 2q/(1−q)² · d^{2·depths−1} · (sqrt(2 ln d) + sqrt(2 ln(depths/δ)))²,

    valid when wrong paths are rewarded (q > 0) and the right path is hit often
    (q·d^{depths−1} ≫ 1); with q = 0 it is the rejection-sampling count d^{depths} ln(1/δ)."""
    if q == 0:
        return float(d) ** depths * math.log(1 / delta)
    z = math.sqrt(2 * math.log(d)) + math.sqrt(2 * math.log(depths / delta))
    return 2 * q / (1 - q) ** 2 * float(d) ** (2 * depths - 1) * z * z


def sweep_n_star(ds, ks, q: float, route: str, repeats: int, seeds, n_max: float,
                 seed: int = 0) -> dict:
    """Measured ``n*`` for every ``(k, d, stage, seed)`` with the sufficient-statistic sampler.

    ``route="direct"``: one entry per (k, d, seed).  ``route="curriculum"``: ``k`` stages per
    (k, d, seed), each a one-step run from its own uniform depth.  Returns a dict with an array
    ``n_star[k_index, d_index, stage, seed]`` (stage axis of length max(ks); NaN where absent,
    inf where censored)."""
    ds, ks, seeds = list(ds), list(ks), list(seeds)
    n_stage = max(ks) if route != "direct" else 1
    out = np.full((len(ks), len(ds), n_stage, len(seeds)), np.nan)
    for a, k in enumerate(ks):
        for b, d in enumerate(ds):
            for stage in range(1 if route == "direct" else k):
                for c, s in enumerate(seeds):
                    rng = np.random.default_rng([seed, a, b, stage, s, 0 if route == "direct" else 1])
                    depths = k if route == "direct" else 1
                    def rate(n, d=d, depths=depths, rng=rng):
                        return onestep_fast(d, depths, q, n, repeats, rng).mean()

                    out[a, b, stage, c] = n_star(rate, n_max)
    return {"ds": ds, "ks": ks, "route": route, "n_star": out}
