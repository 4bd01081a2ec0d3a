"""The one-large-step protocol that measures sample complexity ``n*``: literally, through an exact
sufficient-statistic sampler, and in theory (Poissonised success probability, signal-to-noise
asymptotics)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from lib.curriculum.policy import greedy, reward_counts, sample_paths
from lib.curriculum.tree import ROUTES, ReasoningTree
from lib.stats import softmax

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


def _reward(tree: ReasoningTree, x: np.ndarray, paths: np.ndarray, oracle: str) -> np.ndarray:
    """``"answer"``: the outcome oracle (terminal, or family on a prefix: the same rule);
    ``"chain"``: an idealised verifier that rewards a right chain only (``q = 0``)."""
    if oracle == "answer":
        return tree.terminal_reward(x, paths)
    if oracle == "chain":
        return tree.is_correct(paths).astype(np.float64)
    raise ValueError(f"oracle must be 'answer' or 'chain', got {oracle!r}")


def _literal_gradient(tree: ReasoningTree, theta0: np.ndarray, trained: np.ndarray,
                      hinted: np.ndarray, length: int, n: int, rng: np.random.Generator,
                      chunk: int, oracle: str) -> np.ndarray:
    """The REINFORCE gradient at ``theta0 (repeats, k, d)`` from ``n`` literal rollouts per
    repeat (paths from the policy, fresh inputs, the oracle), accumulated over chunks."""
    repeats = theta0.shape[0]
    counts = np.zeros_like(theta0)  # Σ_s r_s e_{i_sℓ}: integers, exact in float64
    total = np.zeros(repeats)  # Σ_s r_s
    per = max(1, chunk // max(1, repeats * tree.k * tree.d))
    done = 0
    while done < n:
        m = min(per, n - done)
        paths = sample_paths(theta0, m, rng)
        paths[..., hinted] = np.asarray(tree.target)[hinted]
        x = tree.sample_inputs(rng, (repeats, m))
        r = _reward(tree, x, paths[..., :length], oracle)
        # depths beyond ``length`` are not generated; ``trained`` masks them out below
        counts += reward_counts(paths, r, tree.d)
        total += r.sum(axis=-1)
        done += m
    # the gradient (1/n) Σ_s r_s (e_{i_s} − π) from exact sums, so that equal reward counts
    # give exactly equal logits (ties stay ties, as the greedy rule requires)
    grad = (counts - total[:, None, None] * softmax(theta0)) / n
    return grad * trained[..., None]


def onestep_literal(tree: ReasoningTree, route: str, n: int, repeats: int,
                    rng: np.random.Generator, stage: int = 1, lr: float = 1e8,
                    chunk: int = 1 << 21, oracle: str = "answer", detail: bool = False):
    """The protocol run literally: per repeat, draw ``n`` rollouts (paths and inputs), query
    the oracle, take one REINFORCE step of size ``lr`` and check the greedy policy.

    Returns a boolean array ``(repeats,)``: greedy policy right after the step (unique maxima
    and, for the trained depths, a path that is correct on every input).  With ``detail``, a
    dict with that array (``"right"``) and ``"first"``: the first trained depth's greedy choice
    is the target's, uniquely."""
    theta0, trained, hinted, length = stage_setup(tree, route, stage)
    theta0 = np.broadcast_to(theta0, (repeats, *theta0.shape))
    grad = _literal_gradient(tree, theta0, trained, hinted, length, n, rng, chunk, oracle)
    theta = theta0 + lr * grad
    path, unique = greedy(theta)
    ok = unique[..., trained > 0].all(axis=-1)
    depth = int(np.flatnonzero(trained)[0])
    if route == "direct":
        right = ok & tree.is_correct(path)
    else:
        right = ok & (path[..., depth] == tree.target[depth])
    if not detail:
        return right
    return {"right": right, "first": unique[..., depth] & (path[..., depth] == tree.target[depth])}


def curriculum_literal(tree: ReasoningTree, route: str, n: int, repeats: int,
                       rng: np.random.Generator, lr: float = 1e8, chunk: int = 1 << 21,
                       oracle: str = "answer") -> dict:
    """A whole curriculum run literally, each stage from the policy the previous stage produced.

    Stage ``ℓ = 1..k`` of the ``depth`` (or ``hint``) curriculum draws ``n`` rollouts from the
    current logits (the depths learned so far as they came out of their own finite-sample
    step, the new depth uniform), queries the family (or terminal) oracle, and takes one
    REINFORCE step of size ``lr`` on the new depth only.  A stage that chose wrong leaves the
    later stages without a right prefix (or suffix) to find: errors carry over.

    Returns ``"right"`` (repeats,): the final greedy chain is right with unique maxima, and
    ``"stage_right"`` (repeats, k): each stage's new depth came out right."""
    if route not in ("depth", "hint"):
        raise ValueError(f"route must be 'depth' or 'hint', got {route!r}")
    k = tree.k
    theta = np.zeros((repeats, k, tree.d))
    stage_right = np.zeros((repeats, k), dtype=bool)
    for stage in range(1, k + 1):
        _, trained, hinted, length = stage_setup(tree, route, stage)
        theta = theta + lr * _literal_gradient(tree, theta, trained, hinted, length, n, rng,
                                               chunk, oracle)
        depth = int(np.flatnonzero(trained)[0])
        path, unique = greedy(theta[:, depth])
        stage_right[:, stage - 1] = unique & (path == tree.target[depth])
    path, unique = greedy(theta)
    return {"right": unique.all(axis=-1) & tree.is_correct(path), "stage_right": stage_right}


def _arm_counts(d: int, depths: int, q: float, n: int, repeats: int, rng: np.random.Generator,
                hit=None) -> np.ndarray:
    """Reward per arm ``R (repeats, depths, d)`` after ``n`` rollouts from uniform depths, arm 0
    the target: ``M ~ Bin(n, q)`` coin-rewarded rollouts spread as a multinomial per depth,
    plus ``H ~ Bin(n − M, hit)`` right rollouts on the target arm of every depth."""
    hit = float(d) ** -depths if hit is None else hit
    M = rng.binomial(n, q, size=repeats)
    H = rng.binomial(n - M, hit)
    C = rng.multinomial(np.repeat(M, depths).reshape(repeats, depths), np.full(d, 1.0 / d))
    C[..., 0] += H[:, None]
    return C


def onestep_fast(d: int, depths: int, q: float, n: int, repeats: int,
                 rng: np.random.Generator, detail: bool = False):
    """The same protocol through its sufficient statistic (exact in law, cost independent of n).

    Holds for a tree with a single correct path whose wrong paths are rewarded with
    probability ``q`` independently per rollout (blocked parity, the mod-p chain, and every
    curriculum stage).  With ``depths`` uniformly sampled depths, the greedy choice at depth ℓ
    after a large step from uniform logits is the arm with the most reward,
    ``R_{ℓj} = Σ_s r_s 1[i_{sℓ} = j]``.  Write ``r_s = 1[path_s is right] ∨ c_s`` with coins
    ``c_s ~ Bernoulli(q)`` independent of the path: the ``M ~ Bin(n, q)`` coin-rewarded
    rollouts fall on arms as independent multinomials per depth, and the ``H ~ Bin(n − M,
    d^{-depths})`` right rollouts among the others add to the target arm at every depth.
    ``detail`` as in :func:`onestep_literal`.
    """
    R = _arm_counts(d, depths, q, n, repeats, rng)
    wins = R[..., 0] > R[..., 1:].max(axis=-1)  # arm 0 is the target (arms are exchangeable)
    right = np.all(wins, axis=-1)
    return {"right": right, "first": wins[:, 0]} if detail else right


def curriculum_fast(d: int, k: int, q: float, n: int, repeats: int, rng: np.random.Generator,
                    lr: float = 1e8) -> dict:
    """:func:`curriculum_literal` through the sufficient statistic, exact in law for a tree with
    a single right chain whose wrong chains are rewarded with probability ``q`` per rollout.

    At a stage, the judged rollout is right iff the new depth's choice is right (probability
    ``1/d``) and the depths learned earlier (drawn from the logits their own stages produced)
    are right, with probability ``ρ = Π π_j(target)``.  So the stage is the one-depth bandit of
    :func:`onestep_fast` with hit probability ``ρ/d``; its step sets the new depth's logits to
    ``(lr/n)·R`` up to a constant, and ``ρ`` is multiplied by their softmax at the target."""
    rho = np.ones(repeats)
    stage_right = np.zeros((repeats, k), dtype=bool)
    for s in range(k):
        R = _arm_counts(d, 1, q, n, repeats, rng, hit=rho / d)[:, 0]  # (repeats, d)
        stage_right[:, s] = R[:, 0] > R[:, 1:].max(axis=-1)
        logits = (lr / n) * (R - R.max(axis=-1, keepdims=True))
        rho = rho * softmax(logits)[:, 0]
    return {"right": stage_right.all(axis=-1), "stage_right": stage_right}


def curriculum_theory(d: int, k: int, q: float, n: float) -> float:
    """Success probability of a whole curriculum with ``n`` samples per stage: every stage is
    the one-depth bandit (learned depths are right with probability ≈ 1 after a large step)
    and must come out right, ``P(n) = P_stage(n)^k`` with ``P_stage`` of :func:`onestep_theory`."""
    return onestep_theory(d, 1, q, n) ** k


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
                  n_max: float = 1e14, rel: float = 1e-3, stages: int = 1) -> float:
    """``n*`` of :func:`onestep_theory` on a continuous scale: bracket around the asymptotic
    estimate, then bisect in log n to relative precision ``rel``.  ``stages > 1`` (with
    ``depths = 1``): the per-stage ``n*`` of a whole curriculum, :func:`curriculum_theory`."""
    if stages > 1 and depths != 1:
        raise ValueError("a curriculum's stages each sample one depth")

    def ok(log_n: float) -> bool:
        return onestep_theory(d, depths, q, math.exp(log_n)) ** stages >= target

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


def two_proportion_z(k1: float, n1: int, k2: float, n2: int) -> float:
    """|z| of two binomial proportions ``k1/n1`` and ``k2/n2`` with the pooled variance (0 when
    both are 0 or both are 1)."""
    p = (k1 + k2) / (n1 + n2)
    var = p * (1 - p) * (1 / n1 + 1 / n2)
    return float(abs(k1 / n1 - k2 / n2) / math.sqrt(var)) if var > 0 else 0.0


def two_proportion_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test that ``k1/n1`` and ``k2/n2`` estimate the same
    proportion (exact given the margins, so its level holds near 0 and 1 where a normal z
    would raise false alarms)."""
    from scipy import stats

    k1, k2 = int(k1), int(k2)
    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]])[1])


def sampler_check(tree: ReasoningTree, route: str, n: int, repeats: int,
                  rng: np.random.Generator, oracle: str = "answer", fast_factor: int = 20) -> dict:
    """The literal protocol against its sufficient-statistic sampler at one cell: the direct
    one-step protocol (``route="direct"``) or a whole sequential curriculum (``"depth"``,
    ``"hint"``), with ``repeats`` literal and ``fast_factor·repeats`` sampler repeats.  Two
    proportions are compared: the final greedy chain is right (``"right"``), and the first
    learned depth is right (``"first"``: depth 1 for the direct step, the first stage for a
    curriculum), which stays informative at sample sizes too small for a whole chain.
    Returns the four rates, the largest two-proportion |z| and the smallest of the two Fisher
    exact p-values (``"p"``)."""
    q = tree.q if oracle == "answer" else 0.0
    big = fast_factor * repeats
    if route == "direct":
        lit = onestep_literal(tree, "direct", n, repeats, rng, oracle=oracle, detail=True)
        fast = onestep_fast(tree.d, tree.k, q, n, big, rng, detail=True)
    else:
        lit = curriculum_literal(tree, route, n, repeats, rng, oracle=oracle)
        fast = curriculum_fast(tree.d, tree.k, q, n, big, rng)
        lit = {"right": lit["right"], "first": lit["stage_right"][:, 0]}
        fast = {"right": fast["right"], "first": fast["stage_right"][:, 0]}
    out = {f"{side}_{what}": float(v[what].mean()) for side, v in (("literal", lit), ("fast", fast))
           for what in ("right", "first")}
    out["z"] = max(two_proportion_z(lit[w].sum(), repeats, fast[w].sum(), big)
                   for w in ("right", "first"))
    out["p"] = min(two_proportion_p(lit[w].sum(), repeats, fast[w].sum(), big)
                   for w in ("right", "first"))
    return out


def slope_fit(x, samples) -> dict:
    """Least-squares slope of the seeds' mean ``log n*`` against ``log x`` (the log–log slope of
    the geometric means) with its standard error from the seeds' scatter at each ``x``:
    ``slope = Σ w_i ȳ_i`` with ``w_i = (u_i − ū)/Σ(u − ū)²``, ``u = log x``, so
    ``Var = Σ w_i² s_i²/m_i`` (``s_i²`` the sample variance of ``log n*`` over the ``m_i`` seeds
    at ``x_i``), with Welch–Satterthwaite degrees of freedom.  Points with a censored
    (non-finite) measurement are left out.  Returns slope, se, df and the points used."""
    u = np.log(np.asarray(x, float))
    y = np.log(np.asarray(samples, float))
    keep = np.all(np.isfinite(y), axis=1)
    u, y = u[keep], y[keep]
    if len(u) < 3 or y.shape[1] < 2:
        raise ValueError("a slope's standard error needs at least 3 points and 2 seeds each")
    m = y.shape[1]
    w = (u - u.mean()) / ((u - u.mean()) ** 2).sum()
    ybar, s2 = y.mean(axis=1), y.var(axis=1, ddof=1)
    a = w**2 * s2 / m
    var = a.sum()
    df = var**2 / (a**2 / (m - 1)).sum() if var > 0 else math.inf
    return {"slope": float(w @ ybar), "se": float(math.sqrt(var)), "df": float(df),
            "points": int(keep.sum())}


def slope_half_width(fit: dict, false_alarm: float) -> float:
    """Half-width of the two-sided test of a predicted slope at level ``false_alarm``:
    Student's t quantile (the fit's Satterthwaite degrees of freedom) times the standard error."""
    from scipy import stats

    return float(stats.t.ppf(1 - false_alarm / 2, fit["df"]) * fit["se"])


# -- the gradient's signal-to-noise criterion ----------------------------------------------------
def gradient_snr_theory(d: int, depths: int, q: float) -> float:
    """The sample size at which one REINFORCE gradient from uniform logits has signal-to-noise
    ratio one, ``n_SNR = tr Cov(g) / ‖E g‖²`` (per-rollout gradient ``g``), for a tree with a
    single right chain whose wrong chains are rewarded with probability ``q``, ``depths``
    depths sampled uniformly (the rest fixed right).

    Per rollout ``g_{ℓj} = r (1[i_ℓ = j] − 1/d)``; with ``μ = E r = q + (1−q) d^{-D}``:
    ``E g_{ℓj} = (1−q) d^{-D} (1[j = i*_ℓ] − 1/d)``, so ``‖E g‖² = D (1−q)² d^{-2D} (1 − 1/d)``,
    and ``‖g‖² = r D (1 − 1/d)`` exactly, so ``E‖g‖² = μ D (1 − 1/d)``.  Hence
    ``n_SNR = μ d^{2D} / (1−q)² − 1``: the whole update resolves the target after
    ``Θ(d^{2D})`` samples (``d^{2k*}`` direct, ``d²`` per curriculum stage)."""
    if not 0 <= q < 1:
        raise ValueError(f"q must be in [0, 1), got {q}")
    mu = q + (1 - q) * float(d) ** -depths
    return mu * float(d) ** (2 * depths) / (1 - q) ** 2 - 1


def gradient_snr_sample(d: int, depths: int, q: float, n: int, repeats: int,
                        rng: np.random.Generator) -> dict:
    """Measure ``n_SNR`` from ``repeats`` one-step gradients of ``n`` rollouts each, drawn through
    the sufficient statistic (:func:`_arm_counts`: ``ĝ_{ℓj} = (R_{ℓj} − R/d)/n`` with ``R`` the
    rewarded rollouts).  Unbiased moment estimates: ``T = Σ_r ‖ĝ_r − ḡ‖²/(repeats − 1)`` of
    ``tr Cov(ĝ) = tr Cov(g)/n`` and ``S = ‖ḡ‖² − T/repeats`` of ``‖E g‖²``; the estimate is
    ``n·T/S`` (most precise for ``n`` near ``n_SNR``).  Returns it with ``S`` and ``T``."""
    if repeats < 2:
        raise ValueError("the noise estimate needs at least 2 repeats")
    C = _arm_counts(d, depths, q, n, repeats, rng).astype(float)  # (repeats, depths, d)
    G = (C - C.sum(axis=-1, keepdims=True) / d).reshape(repeats, -1) / n
    g_bar = G.mean(axis=0)
    T = float(((G - g_bar) ** 2).sum() / (repeats - 1))
    S = float(g_bar @ g_bar - T / repeats)
    return {"n_snr": n * T / S if S > 0 else math.inf, "signal": S, "noise": T}
