"""Curriculum post-training on autoregressive reasoning trees (Bu et al., arXiv:2511.07372).

The chapter's model, in four parts:

* **The reasoning tree.**  An input of ``d`` tokens; a chain of ``k`` steps; step ``ℓ`` picks
  an input position ``i_ℓ`` (one of ``d`` children) and updates the state
  ``z_ℓ = a·z_{ℓ-1} + x_{i_ℓ} (mod p)``.  Parity is ``p = 2, a = 1``; ``p > 2`` with ``a ≠ 1``
  is a Countdown-like arithmetic chain.  With ``blocked=True`` step ``ℓ`` reads its own block of
  ``d`` tokens (input shape ``(k, d)``), which makes the target path the only correct path.
  Oracles: terminal (is the final answer right?) and family (is the depth-ℓ prefix answer right?).
* **The policy.**  The paper's transformer attends by position only, so its law over paths is
  a softmax over the ``d`` candidates at each depth, independent across depths: logits
  ``θ ∈ R^{k×d}``, zero (uniform) at the start.  :class:`PositionalTransformer` is the paper's
  restricted transformer; with orthonormal position embeddings its gradient steps move the
  attention scores exactly as the tabular logits move (tested).
* **RL.**  REINFORCE with outcome rewards; the one-large-step protocol that measures sample
  complexity (``n*``), both literally and through an exact sufficient-statistic sampler; the
  iterative trainer for the direct route and the two curricula.
* **Theory.**  Base success probability, reward-hacking rate, the success probability of the
  one-step estimator (Poissonised), its ``n*`` and the signal-to-noise exponents, and the exact
  expected costs of rejection sampling at test time (best-of-n and layer-wise accept/reject).

Routes: ``"direct"`` (terminal oracle on the whole chain), ``"depth"`` (depth-increasing
curriculum, family oracle on the prefix of the current depth) and ``"hint"`` (hint-decreasing
curriculum: the first ``k-ℓ`` steps are given, the terminal oracle judges the rest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product

import numpy as np
from scipy import special
from lib.stats import loglog_slope  # noqa: F401  (re-exported for the chapter)
from lib.stats import softmax

ROUTES = ("direct", "depth", "hint")


# ---------------------------------------------------------------------------------------------
# The reasoning tree
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# The positional policy and REINFORCE
# ---------------------------------------------------------------------------------------------


def sample_paths(logits: np.ndarray, n: int, rng: np.random.Generator,
                 uniforms: np.ndarray | None = None) -> np.ndarray:
    """``n`` paths per batch entry from the positional policy: ``logits (..., k, d)`` →
    ``(..., n, k)``.  Inverse-CDF sampling, so two models fed the same ``uniforms`` and the same
    logits draw the same paths."""
    cdf = np.cumsum(softmax(logits), axis=-1)  # (..., k, d)
    u = rng.random((*logits.shape[:-2], n, logits.shape[-2])) if uniforms is None else uniforms
    idx = (u[..., None] >= cdf[..., None, :, :-1]).sum(axis=-1)  # (..., n, k)
    return idx.astype(np.int64)


def reinforce_gradient(logits: np.ndarray, paths: np.ndarray, rewards: np.ndarray,
                       trained: np.ndarray | None = None, baseline: bool = False) -> np.ndarray:
    """Monte-Carlo REINFORCE gradient of the expected reward, ``(1/n) Σ_s (r_s − b) ∇ log π``.

    ``paths (..., n, k)``, ``rewards (..., n)``; ``∇_{θ_ℓ} log π(path) = e_{i_ℓ} − π_ℓ``.
    ``trained (..., k)`` masks the depths that were sampled and learn (others get 0).
    ``baseline``: subtract the batch's mean reward.
    """
    batch, (n, k), d = paths.shape[:-2], paths.shape[-2:], logits.shape[-1]
    r = rewards - rewards.mean(axis=-1, keepdims=True) if baseline else rewards
    r = np.broadcast_to(r, (*batch, n))
    # Σ_s r_s e_{i_sℓ} for every batch entry and depth, as one weighted bincount
    b = int(np.prod(batch, dtype=np.int64))
    slot = (np.arange(b)[:, None, None] * k + np.arange(k)) * d + paths.reshape(b, n, k)
    weights = np.broadcast_to(r.reshape(b, n, 1), (b, n, k))
    counts = np.bincount(slot.ravel(), weights.ravel(), minlength=b * k * d)
    onehot_sum = counts.reshape(*batch, k, d) / n
    grad = onehot_sum - r.mean(axis=-1)[..., None, None] * softmax(logits)
    if trained is not None:
        grad = grad * trained[..., None]
    return grad


def greedy(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The greedy path and whether every depth's maximum is unique (ties are not a choice)."""
    path = logits.argmax(axis=-1)
    top = np.take_along_axis(logits, path[..., None], axis=-1)
    unique = (logits >= top).sum(axis=-1) == 1
    return path, unique


# ---------------------------------------------------------------------------------------------
# The one-large-step protocol (sample complexity n*)
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# Iterative REINFORCE training (intuition only: counts depend on batch size and step size)
# ---------------------------------------------------------------------------------------------
def test_accuracy(tree: ReasoningTree, logits: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Accuracy of each greedy chain on a fixed test set of inputs: ``logits (..., k, d)``."""
    path, _ = greedy(logits)
    batch = path.shape[:-1]
    z = tree.prefix_answers(x_test[None], path.reshape(-1, 1, tree.k))[..., -1]  # (B, n_test)
    z_star = tree.prefix_answers(x_test[None], tree.target_paths((1, 1)))[..., -1]
    return (z == z_star).mean(axis=-1).reshape(batch)


def train(tree: ReasoningTree, route: str, *, seeds: int, budget: int, batch: int, lr: float,
          rng: np.random.Generator, n_test: int = 8192, evals: int = 60, baseline: bool = True,
          advance_at: float = 0.95, ema: float = 0.9) -> dict:
    """REINFORCE from uniform logits for ``seeds`` independent runs (vectorised), ``budget``
    rollouts each, batches of ``batch``.  Curricula advance a run to its next stage when an
    exponential moving average of its batch reward reaches ``advance_at``; the last stage is
    the full task.  Records, at ``evals`` log-spaced points: greedy test accuracy on ``n_test``
    inputs, the stage, and the fraction of rewarded rollouts whose judged path is wrong
    ("right answer, wrong path") with its exact expectation under the policies of the same
    window (``hacked_theory``)."""
    k, d = tree.k, tree.d
    theta = np.zeros((seeds, k, d))
    stage = np.ones(seeds, dtype=np.int64) if route != "direct" else np.full(seeds, k)
    avg = np.zeros(seeds)
    x_test = tree.sample_inputs(rng, (n_test,))
    steps = budget // batch
    marks = np.unique(np.geomspace(1, steps, evals).astype(int))
    rec = {"samples": [], "accuracy": [], "stage": [], "hacked": [], "hacked_theory": [],
           "reward": []}
    target = np.asarray(tree.target)
    hacked_acc, rewarded_acc = np.zeros(seeds), np.zeros(seeds)
    hacked_exp, rewarded_exp = np.zeros(seeds), np.zeros(seeds)  # exact expectations
    for t in range(1, steps + 1):
        c = np.array([judged_correct_probability(tree, theta[s], route, stage[s])
                      for s in range(seeds)])
        hacked_exp += (1 - c) * tree.q
        rewarded_exp += c + (1 - c) * tree.q
        paths = sample_paths(theta, batch, rng)  # (S, B, k)
        depth_idx = np.arange(k)
        if route == "hint":
            hinted = depth_idx[None, :] < (k - stage)[:, None]  # (S, k)
            paths = np.where(hinted[:, None, :], target, paths)
            trained = (~hinted).astype(float)
            length = np.full(seeds, k)
        elif route == "depth":
            trained = (depth_idx[None, :] < stage[:, None]).astype(float)
            length = stage
        else:
            trained = np.ones((seeds, k))
            length = np.full(seeds, k)
        x = tree.sample_inputs(rng, (seeds, batch))
        r = np.empty((seeds, batch))
        right = np.empty((seeds, batch), dtype=bool)
        for L in np.unique(length):
            sel = length == L
            r[sel] = tree.terminal_reward(x[sel], paths[sel][..., :L])
            right[sel] = tree.is_correct(paths[sel][..., :L])
        theta += lr * reinforce_gradient(theta, paths, r, trained, baseline)
        avg = ema * avg + (1 - ema) * r.mean(axis=-1)
        if route != "direct":
            up = (avg >= advance_at) & (stage < k)
            stage[up] += 1
            avg[up] = 0.0
        hacked_acc += ((r > 0) & ~right).sum(axis=-1)
        rewarded_acc += (r > 0).sum(axis=-1)
        if t in marks:
            rec["samples"].append(t * batch)
            rec["accuracy"].append(test_accuracy(tree, theta, x_test))
            rec["stage"].append(stage.copy())
            rec["hacked"].append(hacked_acc / np.maximum(rewarded_acc, 1))
            rec["hacked_theory"].append(hacked_exp / rewarded_exp)
            rec["reward"].append(avg.copy())
            for acc in (hacked_acc, rewarded_acc, hacked_exp, rewarded_exp):
                acc[:] = 0
    return {k_: np.asarray(v) for k_, v in rec.items()} | {"route": route}


def samples_to_solve(run: dict, level: float = 0.99) -> np.ndarray:
    """Per seed, the first recorded sample count at which test accuracy reaches ``level``
    (inf if never)."""
    acc = run["accuracy"]  # (T, S)
    hit = acc >= level
    first = np.where(hit.any(axis=0), hit.argmax(axis=0), -1)
    return np.where(first >= 0, run["samples"][np.maximum(first, 0)], np.inf)


@lru_cache(maxsize=64)
def correct_paths(tree: ReasoningTree, length: int) -> np.ndarray:
    """All correct prefixes of a given length (brute force over ``d^length`` prefixes)."""
    paths = np.array(list(product(range(tree.d), repeat=length)), dtype=np.int64)
    return paths[tree.is_correct(paths)]


def judged_correct_probability(tree: ReasoningTree, logits: np.ndarray, route: str,
                               stage: int) -> float:
    """The policy's probability that the rollout the oracle judges is correct, exactly: the
    prefix of length ``stage`` (depth curriculum), the chain with the first ``k − stage`` steps
    hinted (hint curriculum) or the whole chain (direct)."""
    probs = softmax(logits)
    k = tree.k
    if route == "depth":
        good = correct_paths(tree, stage)
        free = np.arange(stage)
    else:
        good = correct_paths(tree, k)
        given = k - stage if route == "hint" else 0
        good = good[np.all(good[:, :given] == np.asarray(tree.target[:given]), axis=1)]
        free = np.arange(given, k)
    return float(np.prod(probs[free[None, :], good[:, free]], axis=1).sum())


def hacking_fraction(c: float, q: float) -> float:
    """Share of rewarded rollouts whose judged path is wrong ("right answer, wrong path") when
    a rollout is correct with probability ``c``: ``(1−c)q / (c + (1−c)q)``."""
    return (1 - c) * q / (c + (1 - c) * q)


# ---------------------------------------------------------------------------------------------
# Test-time scaling: best-of-n with the terminal oracle vs layer-wise accept/reject (LTAR)
# ---------------------------------------------------------------------------------------------
def rejection_cost(c: float, q: float, m: int) -> dict:
    """Exact expectations for a rejection sampler whose candidates are right with probability
    ``c``, verified by up to ``m`` oracle calls on fresh inputs (a wrong candidate passes each
    with probability ``q``), stopping at the first candidate that passes all ``m``:

        P(accept) per candidate = c + (1−c)q^m,  E[candidates] = 1 / P(accept),
        E[calls] = (c·m + (1−c)(1−q^m)/(1−q)) · E[candidates]           (Wald),
        P(the accepted candidate is right) = c / P(accept)."""
    p_acc = c + (1 - c) * q**m
    per_wrong = (1 - q**m) / (1 - q) if q < 1 else m
    cands = 1 / p_acc
    return {"candidates": cands, "calls": (c * m + (1 - c) * per_wrong) * cands,
            "success": c / p_acc}


def verification_length(c: float, q: float, delta: float, stages: int = 1) -> int:
    """The fewest verification calls ``m`` per candidate for which all ``stages`` rejection
    samplers (each with right-candidate probability ``c``) succeed with probability ≥ 1 − δ."""
    for m in range(1, 10_000):
        if rejection_cost(c, q, m)["success"] ** stages >= 1 - delta:
            return m
    raise ValueError("no verification length reaches the requested confidence")


def test_time_theory(tree: ReasoningTree, delta: float = 0.01) -> dict:
    """Expected oracle calls and generated steps to return a chain, for best-of-n with the
    terminal oracle (candidates: whole chains from the base, right w.p. 1/d^k) and for LTAR
    (depth by depth; candidates: one child, right w.p. 1/d, family oracle).  Needs a tree whose
    correct prefixes are unique (blocked parity, the mod-p chain): then a falsely committed
    prefix has no right child, and LTAR keeps drawing until a false acceptance (right w.p. 0),
    a rare but costly event that the expectation includes:

        E[LTAR] = Σ_{ℓ=1..k} [s^{ℓ−1}·cost(1/d) + (1 − s^{ℓ−1})·cost(0)],
        s = P(a depth commits the right child)."""
    if tree.n_correct_paths() != 1:
        raise ValueError("test_time_theory needs a tree with a unique correct path")
    c_full = 1 / tree.d**tree.k
    m_b = verification_length(c_full, tree.q, delta)
    best = rejection_cost(c_full, tree.q, m_b)
    m_l = verification_length(1 / tree.d, tree.q, delta, stages=tree.k)
    right, stuck = rejection_cost(1 / tree.d, tree.q, m_l), rejection_cost(0.0, tree.q, m_l)
    s = right["success"]
    reach = s ** np.arange(tree.k)  # P(prefix right when depth ℓ starts)
    calls = float(np.sum(reach * right["calls"] + (1 - reach) * stuck["calls"]))
    steps = float(np.sum(reach * right["candidates"] + (1 - reach) * stuck["candidates"]))
    return {"best_of_n": {"m": m_b, "calls": best["calls"], "steps": tree.k * best["candidates"],
                          "success": best["success"]},
            "ltar": {"m": m_l, "calls": calls, "steps": steps, "success": s**tree.k}}


def _verify(tree, rng, cand, L, m):
    """Run up to ``m`` oracle calls, each on a fresh input, for candidates ``(R, B, L)``, one
    call at a time for the candidates still passing: returns the calls each candidate used and
    whether it passed them all."""
    flat = cand.reshape(-1, L)
    calls = np.zeros(len(flat), dtype=np.int64)
    alive = np.arange(len(flat))
    for _ in range(m):
        x = tree.sample_inputs(rng, (alive.size,))
        r = tree.terminal_reward(x, flat[alive])
        calls[alive] += 1
        alive = alive[r > 0]
    passed = np.zeros(len(flat), dtype=bool)
    passed[alive] = True
    return calls.reshape(cand.shape[:2]), passed.reshape(cand.shape[:2])


def _rejection_run(tree, rng, repeats, propose, L, m, block):
    """Propose candidates in blocks until each repeat accepts one; returns (accepted, calls,
    candidates) per repeat.  ``propose(n_active, block)`` gives ``(n_active, block, L)``."""
    accepted = np.zeros((repeats, L), dtype=np.int64)
    calls = np.zeros(repeats)
    cands = np.zeros(repeats)
    active = np.arange(repeats)
    while active.size:
        cand = propose(active, block)
        used, passed = _verify(tree, rng, cand, L, m)
        first = np.where(passed.any(axis=1), passed.argmax(axis=1), block)  # index of accept
        upto = np.arange(block)[None, :] <= first[:, None]
        calls[active] += (used * upto).sum(axis=1)
        cands[active] += np.minimum(first + 1, block)
        done = first < block
        accepted[active[done]] = cand[done, first[done]]
        active = active[~done]
    return accepted, calls, cands


def best_of_n(tree: ReasoningTree, m: int, repeats: int, rng: np.random.Generator,
              block: int = 256) -> dict:
    """Best-of-n with the terminal oracle, run literally: draw whole chains from the uniform
    base; verify each with up to ``m`` oracle calls on fresh inputs; return the first that
    passes all.  Per repeat: oracle calls, generated steps, and whether the chain is right."""
    def propose(active, b):
        return rng.integers(0, tree.d, size=(active.size, b, tree.k))

    path, calls, cands = _rejection_run(tree, rng, repeats, propose, tree.k, m, block)
    return {"calls": calls, "steps": tree.k * cands, "right": tree.is_correct(path)}


def ltar(tree: ReasoningTree, m: int, repeats: int, rng: np.random.Generator,
         block: int = 64) -> dict:
    """Layer-wise accept/reject with the family oracle, run literally: at depth ℓ keep the
    committed prefix, draw children from the uniform base, verify the depth-ℓ prefix with up
    to ``m`` family-oracle calls each, commit the first that passes, go one level deeper."""
    prefix = np.zeros((repeats, 0), dtype=np.int64)
    calls = np.zeros(repeats)
    steps = np.zeros(repeats)
    for ell in range(1, tree.k + 1):
        def propose(active, b, prefix=prefix, ell=ell):
            child = rng.integers(0, tree.d, size=(active.size, b, 1))
            return np.concatenate([np.broadcast_to(prefix[active][:, None, :],
                                                   (active.size, b, ell - 1)), child], axis=-1)

        path, c, n = _rejection_run(tree, rng, repeats, propose, ell, m, block)
        prefix = path
        calls += c
        steps += n
    return {"calls": calls, "steps": steps, "right": tree.is_correct(prefix)}


# ---------------------------------------------------------------------------------------------
# The paper's restricted transformer (positional attention, fixed FFN)
# ---------------------------------------------------------------------------------------------
class PositionalTransformer:
    """A one-block transformer whose embeddings put tokens and positions in orthogonal
    subspaces.  Generating chain step ℓ, the query is the position of the ℓ-th chain slot, the
    keys the positions of the ``d`` input tokens; only the positional score matrix ``W`` is
    trained (zero at the start: uniform attention).  The attention law picks the child
    ``i_ℓ``; its value is the token ``x_{i_ℓ}`` (one-hot), and a fixed two-layer ReLU FFN maps
    ``(z_{ℓ−1}, x_{i_ℓ})`` to ``z_ℓ = a·z_{ℓ−1} + x_{i_ℓ} (mod p)``.

    With orthonormal position embeddings ``P`` the scores are ``S = P_q W P_kᵀ`` and a gradient
    step ``W ← W − η P_qᵀ G P_k`` moves them by exactly ``−η G``: the same update as the tabular
    logits.  (Blocked trees are not supported: their keys depend on the depth.)
    """

    def __init__(self, tree: ReasoningTree, width: int | None = None, seed: int = 0):
        import torch

        if tree.blocked:
            raise ValueError("the positional transformer reads one shared input")
        self.tree = tree
        n_pos = tree.d + tree.k
        width = width or 2 * n_pos
        g = torch.Generator().manual_seed(seed)
        basis, _ = torch.linalg.qr(torch.randn(width, width, generator=g, dtype=torch.float64))
        self.pos = basis[:n_pos]  # orthonormal rows: positions 0..d-1 inputs, d..d+k-1 chain
        self.W = torch.zeros(width, width, dtype=torch.float64, requires_grad=True)
        # fixed FFN on one-hot (z, x): hidden unit (u, v) = ReLU(z_u + x_v − 1), output
        # w = Σ_{a·u+v ≡ w} hidden(u, v)
        p = tree.p
        self.ffn_out = torch.zeros(p * p, p, dtype=torch.float64)
        for u in range(p):
            for v in range(p):
                self.ffn_out[u * p + v, (tree.a * u + v) % p] = 1.0

    def scores(self):
        """Attention scores ``(k, d)`` of the chain slots over the input positions."""
        q = self.pos[self.tree.d:]
        return q @ self.W @ self.pos[: self.tree.d].T

    def ffn(self, z_onehot, x_onehot):
        """The fixed step ``z ← a·z + x (mod p)`` on one-hot codes (``(..., p)`` each)."""
        import torch

        hidden = torch.relu(z_onehot[..., :, None] + x_onehot[..., None, :] - 1)
        return hidden.flatten(-2) @ self.ffn_out

    def chain(self, x: np.ndarray, paths: np.ndarray) -> np.ndarray:
        """Run the fixed FFN along sampled children: the prefix answers ``(..., k)``."""
        import torch

        p = self.tree.p
        tok = torch.nn.functional.one_hot(torch.as_tensor(self.tree.read(x, paths)), p).double()
        z = torch.nn.functional.one_hot(torch.zeros(tok.shape[:-2], dtype=torch.long), p).double()
        out = []
        for ell in range(paths.shape[-1]):
            z = self.ffn(z, tok[..., ell, :])
            out.append(z.argmax(-1))
        return torch.stack(out, -1).numpy()

    def reinforce_step(self, paths: np.ndarray, rewards: np.ndarray, lr: float,
                       baseline: bool = False) -> None:
        """One SGD ascent step on ``(1/n) Σ (r − b) log π(path)`` through autograd."""
        import torch

        logp = torch.log_softmax(self.scores(), dim=-1)  # (k, d)
        pt = torch.as_tensor(paths)
        r = torch.as_tensor(rewards - rewards.mean() if baseline else rewards)
        chosen = logp[torch.arange(self.tree.k), pt].sum(-1)  # (n,)
        obj = (r * chosen).mean()
        (g,) = torch.autograd.grad(obj, self.W)
        with torch.no_grad():
            self.W += lr * g


def compare_transformer(tree: ReasoningTree, *, steps: int, batch: int, lr: float,
                        rng: np.random.Generator, seed: int = 0) -> dict:
    """Train the restricted transformer and the tabular policy side by side on the same inputs
    and the same uniforms (direct route, terminal oracle).  Returns the largest gap between
    their logits over training, their final greedy paths, and whether the transformer's FFN
    chain agreed with the tree's answers on every rollout."""
    model = PositionalTransformer(tree, seed=seed)
    theta = np.zeros((tree.k, tree.d))
    gap, ffn_ok = 0.0, True
    for _ in range(steps):
        u = rng.random((batch, tree.k))
        x = tree.sample_inputs(rng, (batch,))
        s_model = model.scores().detach().numpy()
        paths_model = sample_paths(s_model, batch, rng, uniforms=u)
        paths_tab = sample_paths(theta, batch, rng, uniforms=u)
        ffn_ok &= bool(np.array_equal(model.chain(x, paths_model), tree.prefix_answers(x, paths_model)))
        model.reinforce_step(paths_model, tree.terminal_reward(x, paths_model), lr, baseline=True)
        r_tab = tree.terminal_reward(x, paths_tab)
        theta += lr * reinforce_gradient(theta, paths_tab, r_tab, baseline=True)
        gap = max(gap, float(np.abs(model.scores().detach().numpy() - theta).max()))
    return {"max_logit_gap": gap, "greedy_model": greedy(model.scores().detach().numpy())[0],
            "greedy_tabular": greedy(theta)[0], "ffn_matches_tree": ffn_ok,
            "logits": theta}
