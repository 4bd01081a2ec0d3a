"""The density-ratio (DDRO) loss, its exact categorical minimiser, DPO and a KTO-style baseline.

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
fits on expected counts.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize
from scipy.special import expit, log_expit, logsumexp

from lib.ddro.preferences import Preference, expected_pairs, paired_target, tv


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


def bt_scores(C: np.ndarray, beta: float = 1.0, ridge: float = 1e-12) -> np.ndarray:
    """Maximum-likelihood Bradley–Terry scores of pair counts C (C[a, b] = weight of "a beat b";
    counts, or the expected counts of a population): the minimiser h of
    −Σ_{a,b} C[a,b] log σ(β[h(a) − h(b)]) / ΣC + ridge·|h|², a convex logistic problem solved by
    damped Newton. The tiny ridge fixes the additive gauge and keeps the minimiser finite when some
    output never lost (or never won). On expected counts this is the KL projection of the
    preferences onto the Bradley–Terry family, weighted by how often each pair is compared."""
    Cn = np.asarray(C, float) / np.sum(C)
    K = Cn.shape[0]

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
    return h


def fit_dpo_categorical(pi: np.ndarray, C: np.ndarray, beta: float = 1.0,
                        ridge: float = 1e-12) -> np.ndarray:
    """Minimise the DPO loss −(1/N) Σ_{a,b} C[a,b] log σ(β[h(a) − h(b)]), h = log(π_θ/π_ref), over
    categorical π_θ: h are the Bradley–Terry scores of C at temperature β (:func:`bt_scores`), so
    π_θ ∝ π_ref e^{h}. Returns π_θ."""
    return _policy(np.log(pi) + bt_scores(C, beta, ridge))


# ----------------------------------------------------------------------------------------------
# The Bradley–Terry plug-in estimator of p₊ (the fixed-estimand control)
# ----------------------------------------------------------------------------------------------


def bt_plugin_target(pi: np.ndarray, s: np.ndarray) -> np.ndarray:
    """p₊ computed as if the preferences were Bradley–Terry with scores s:
    p₊(y) = 2 π(y) Σ_{y'} π(y') σ(s(y) − s(y')). It sums to 1 for any s."""
    pi = np.asarray(pi, float)
    s = np.asarray(s, float)
    return 2.0 * pi * (expit(s[:, None] - s[None, :]) @ pi)


def fit_bt_plugin(pi: np.ndarray, C: np.ndarray, ridge: float = 1e-12) -> np.ndarray:
    """The Bradley–Terry plug-in estimator of p₊: maximum-likelihood BT scores of the pair counts
    C, plugged into the target formula with the known π_ref (:func:`bt_plugin_target`)."""
    return bt_plugin_target(pi, bt_scores(C, 1.0, ridge))


def bt_projection(pi: np.ndarray, pref: Preference) -> np.ndarray:
    """The population limit of the BT scores: the maximum-likelihood BT fit of the expected pair
    counts 2 π_a π_b P(a ≻ b), i.e. the KL projection of P onto the Bradley–Terry family weighted
    by π_ref ⊗ π_ref (gauge: the tiny ridge centres the scores)."""
    W = expected_pairs(pi, pref)
    s = bt_scores(W, 1.0, ridge=1e-14)
    # polish without the ridge: Newton steps on the centred scores (the gauge direction, the
    # Hessian's null space, is dropped by the pseudo-inverse)
    for _ in range(3):
        d = s[:, None] - s[None, :]
        grad = -((W * expit(-d)).sum(1) - (W * expit(-d)).sum(0))
        w = W * expit(d) * expit(-d)
        w = w + w.T
        s = s - np.linalg.pinv(np.diag(w.sum(1)) - w, rcond=1e-14) @ grad
        s = s - s.mean()
    return s


def bt_plugin_limit(pi: np.ndarray, pref: Preference) -> np.ndarray:
    """The BT plug-in's population limit, :func:`bt_plugin_target` at :func:`bt_projection`.

    It is p₊ for every preference structure. The projection's stationarity condition reads, for
    each output a, Σ_b 2π_aπ_b [P(a ≻ b) − σ(ŝ_a − ŝ_b)] = 0 (logistic regression on a full set
    of output indicators matches each output's expected wins), i.e. the BT win rate
    Σ_b π_b σ(ŝ_a − ŝ_b) equals the true one w(a); and p₊ = 2π_ref·w depends on P only through
    w. So misspecifying the preference model does not bias this estimand."""
    return bt_plugin_target(pi, bt_projection(pi, pref))


def bt_plugin_tv_constant(pi: np.ndarray, pref: Preference, eps: float = 1e-6) -> float:
    """C such that E TV(p̂₊^BT, p₊) ≈ C/√N for N pairs (delta method, as :func:`ddro_tv_constant`).

    The plug-in is a smooth function of the normalised pair counts C/N; one pair adds one count
    to cell (winner, loser), so Σ = diag(p) − ppᵀ with p the expected cell shares, and with J the
    Jacobian at p, √N(p̂ − p₊) → N(0, J Σ Jᵀ) (centred on p₊, the plug-in's limit)."""
    K = len(pi)
    p = expected_pairs(pi, pref).ravel()
    Sigma = np.diag(p) - np.outer(p, p)
    est = lambda c: bt_plugin_target(pi, bt_scores(c.reshape(K, K), 1.0, ridge=1e-14))  # noqa: E731
    J = np.zeros((K, K * K))
    for j in range(K * K):
        e = np.zeros(K * K)
        e[j] = eps * max(p[j], 1e-12)
        # bt_scores normalises C by its sum; keep the total fixed at 1 is not needed: the fit
        # depends on C/ΣC, and the plug-in's Jacobian along the total direction is zero.
        J[:, j] = (est(p + e) - est(p - e)) / (2 * e[j])
    var = np.einsum("ij,jk,ik->i", J, Sigma, J)
    return 0.5 * math.sqrt(2 / math.pi) * float(np.sqrt(np.maximum(var, 0)).sum())


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


def population_limits(pi: np.ndarray, pref: Preference, beta: float = 1.0) -> dict:
    """Each method fitted on expected counts (N → ∞): the policies and their TV to p₊."""
    target = paired_target(pi, pref)
    C = expected_pairs(pi, pref)
    q = pref.P @ pi
    pols = {"ddro": fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip=0.0),
            "dpo": fit_dpo_categorical(pi, C, beta),
            "kto": fit_kto_categorical(pi, pi * q, pi * (1 - q), beta)}
    return {"target": target, "policies": pols, "tv": {k: tv(v, target) for k, v in pols.items()}}
