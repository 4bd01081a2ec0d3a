"""Chapter 06 — the loss path kernel (LPK) of gradient flow and the generalisation bound built on it.

Chen, Wang, Huang, Han, Suzuki, Mazumdar, *Generalization Bound of Gradient Flow through Training
Trajectory and Data-dependent Kernel*, NeurIPS 2025, arXiv:2506.11357.

The model is a two-layer network with NTK scaling, no bias and a Softplus(β) activation,

    f(w, x) = m^{-1/2} Σ_j a_j σ(w_jᵀx),      σ(u) = softplus(βu)/β,

trained on the logistic loss ℓ(w, z) = log(1 + exp(−y f(w, x))) by gradient flow
dw/dt = −∇L_S(w), L_S = (1/n) Σ_i ℓ(w, z_i). Along the trajectory we accumulate the loss path kernel

    K_T(z, z') = ∫_0^T ⟨∇_w ℓ(w_t, z), ∇_w ℓ(w_t, z')⟩ dt,

for which d/dt ℓ(w_t, z) = −(1/n) Σ_i ⟨∇ℓ(w_t, z), ∇ℓ(w_t, z_i)⟩ gives the exact kernel-machine
identity ℓ(w_T, z) = ℓ(w_0, z) − (1/n) Σ_i K_T(z, z_i).

Two ways to get per-sample gradients, side by side (the reference next to the fast path):
:func:`per_sample_grads` uses ``torch.func`` (vmap + grad) and is the reference;
:func:`loss_grad_gram` evaluates the same inner products in closed form for this architecture
(O(N·N'·m) work instead of materialising N × #params gradients). The tests compare them.

The ODE (parameters plus the kernel accumulators) is integrated by explicit Euler — which *is*
full-batch gradient descent with step η, the kernel accumulated by the rectangle rule — or by
classical RK4 on the same augmented system (the "ODE check": a 4th-order accurate gradient flow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats

from lib.sweep import one_thread

DTYPE = torch.float64

# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


@dataclass
class Split:
    """A binary task: inputs on the unit sphere, labels in {−1, +1}; training labels may be noisy."""

    X: torch.Tensor          # (n, d) training inputs
    y: torch.Tensor          # (n,) training labels as trained on (after label noise)
    X_test: torch.Tensor     # (n_test, d)
    y_test: torch.Tensor     # (n_test,) clean labels
    flipped: int = 0         # how many training labels the noise flipped

    @property
    def n(self) -> int:
        return self.X.shape[0]


def _unit_rows(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _flip(y: np.ndarray, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Label noise as the 2023 LPK code applies it (``functions/dataset.py``): a fraction ``noise``
    of the training labels (⌊n·noise⌋ of them, chosen at random) is replaced by labels drawn
    uniformly from {−1, +1}, so about half of those change and the expected flip rate is
    noise/2 (noise = 1: every label random). Returns the labels and how many changed."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"label noise must lie in [0, 1], got {noise}")
    k = int(y.shape[0] * noise)
    where = rng.choice(y.shape[0], size=k, replace=False)
    out = y.copy()
    out[where] = rng.choice([-1.0, 1.0], size=k)
    return out, int(np.sum(out != y))


def digits_1v7(n: int, noise: float = 0.0, seed: int = 0) -> Split:
    """scikit-learn's bundled 8×8 digits, class 1 (y = +1) against class 7 (y = −1).

    Inputs are centred by the mean of the 1/7 images and scaled to unit norm. ``n`` images drawn at
    random (from ``seed``) form the training set; the other 1/7 images are the test set."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, (1, 7))
    X = digits.data[keep].astype(float)
    y = np.where(digits.target[keep] == 1, 1.0, -1.0)
    if not 2 <= n < len(y) - 10:
        raise ValueError(f"n must lie in [2, {len(y) - 11}] for digits 1 vs 7, got {n}")
    X = _unit_rows(X - X.mean(axis=0))
    rng = np.random.default_rng([seed, 6, 1])
    order = rng.permutation(len(y))
    tr, te = order[:n], order[n:]
    y_tr, flipped = _flip(y[tr], noise, rng)
    t = lambda a: torch.as_tensor(a, dtype=DTYPE)  # noqa: E731
    return Split(t(X[tr]), t(y_tr), t(X[te]), t(y[te]), flipped)


def gaussian_mixture(n: int, d: int = 20, noise: float = 0.0, n_test: int = 2000,
                     separation: float = 1.5, seed: int = 0) -> Split:
    """Synthetic task: x = y·μ + ξ projected to the unit sphere, y = ±1 with equal probability,
    μ = separation · e_1 / √d and ξ ~ N(0, I_d / d) (so ‖ξ‖ ≈ 1 and, before the projection, the
    Bayes error is Φ(−separation)). The test set is a fresh sample of ``n_test`` points."""
    rng = np.random.default_rng([seed, 6, 2])
    mu = np.zeros(d)
    mu[0] = separation / math.sqrt(d)

    def draw(k):
        yy = rng.choice([-1.0, 1.0], size=k)
        return _unit_rows(yy[:, None] * mu + rng.standard_normal((k, d)) / math.sqrt(d)), yy

    X, y = draw(n)
    X_te, y_te = draw(n_test)
    y, flipped = _flip(y, noise, rng)
    t = lambda a: torch.as_tensor(a, dtype=DTYPE)  # noqa: E731
    return Split(t(X), t(y), t(X_te), t(y_te), flipped)


# ----------------------------------------------------------------------------------------------
# The network, its loss and its gradients
# ----------------------------------------------------------------------------------------------

Params = dict[str, torch.Tensor]   # {"W": (m, d), "a": (m,)}


def init_params(d: int, width: int, seed: int) -> Params:
    """N(0, 1) initialisation of both layers (NTK scaling puts the 1/√m in the forward pass)."""
    g = torch.Generator().manual_seed(int(seed))
    return {"W": torch.randn(width, d, generator=g, dtype=DTYPE),
            "a": torch.randn(width, generator=g, dtype=DTYPE)}


def forward(params: Params, X: torch.Tensor, beta: float = 10.0) -> torch.Tensor:
    """f(w, x) = m^{-1/2} Σ_j a_j softplus(β w_jᵀx)/β for every row of X."""
    m = params["a"].shape[0]
    h = torch.nn.functional.softplus(X @ params["W"].T, beta=beta)
    return h @ params["a"] / math.sqrt(m)


def logistic(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ℓ = log(1 + exp(−y f)), computed stably."""
    return torch.nn.functional.softplus(-y * f)


def logistic_slope(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∂ℓ/∂f = −y · sigmoid(−y f)."""
    return -y * torch.sigmoid(-y * f)


def losses(params: Params, X: torch.Tensor, y: torch.Tensor, beta: float = 10.0) -> torch.Tensor:
    """Per-sample losses ℓ(w, z_i)."""
    return logistic(forward(params, X, beta), y)


def per_sample_grads(params: Params, X: torch.Tensor, y: torch.Tensor,
                     beta: float = 10.0) -> torch.Tensor:
    """Reference per-sample loss gradients with torch.func (vmap over samples of grad):
    an (N, #params) matrix, W flattened then a."""
    from torch.func import grad, vmap

    def one(p, x, t):
        return logistic(forward(p, x[None], beta), t[None])[0]

    g = vmap(grad(one), in_dims=(None, 0, 0))(params, X, y)
    return torch.cat([g["W"].reshape(X.shape[0], -1), g["a"]], dim=1)


def _features(params: Params, X: torch.Tensor, beta: float):
    """Hidden pre-activations' softplus and its derivative: σ(Wx) and σ'(Wx) = sigmoid(βWx)."""
    u = X @ params["W"].T
    return torch.nn.functional.softplus(u, beta=beta), torch.sigmoid(beta * u)


def tangent_gram(params: Params, Xa: torch.Tensor, Xb: torch.Tensor,
                 beta: float = 10.0) -> torch.Tensor:
    """Θ(x, x') = ⟨∇_w f(w, x), ∇_w f(w, x')⟩ in closed form:
    (1/m) [σ(Wx)·σ(Wx') + (a² ⊙ σ'(Wx))·σ'(Wx') · xᵀx']."""
    m = params["a"].shape[0]
    ha, da = _features(params, Xa, beta)
    hb, db = _features(params, Xb, beta)
    a2 = params["a"] ** 2
    return (ha @ hb.T + ((da * a2) @ db.T) * (Xa @ Xb.T)) / m


def tangent_sq_norms(params: Params, X: torch.Tensor, beta: float = 10.0) -> torch.Tensor:
    """‖∇_w f(w, x_i)‖² for every row (the diagonal of :func:`tangent_gram`), O(N·m)."""
    m = params["a"].shape[0]
    h, d = _features(params, X, beta)
    return ((h ** 2).sum(1) + (d ** 2 * params["a"] ** 2).sum(1) * (X ** 2).sum(1)) / m


def loss_grad_gram(params: Params, Xa, ya, Xb, yb, beta: float = 10.0) -> torch.Tensor:
    """⟨∇ℓ(w, z_a), ∇ℓ(w, z_b)⟩ = ℓ'_a ℓ'_b Θ(x_a, x_b): the integrand of the loss path kernel."""
    sa = logistic_slope(forward(params, Xa, beta), ya)
    sb = logistic_slope(forward(params, Xb, beta), yb)
    return sa[:, None] * tangent_gram(params, Xa, Xb, beta) * sb[None, :]


def full_gradient(params: Params, X: torch.Tensor, y: torch.Tensor, beta: float = 10.0):
    """∇L_S(w) in closed form, and the per-sample slopes ℓ'_i (reused by the accumulators)."""
    m = params["a"].shape[0]
    h, d = _features(params, X, beta)
    s = logistic_slope(h @ params["a"] / math.sqrt(m), y) / X.shape[0]
    ga = h.T @ s / math.sqrt(m)
    gW = ((d * params["a"]) * s[:, None]).T @ X / math.sqrt(m)
    return {"W": gW, "a": ga}, s * X.shape[0]


# ----------------------------------------------------------------------------------------------
# Gradient flow with the kernel accumulated along the path
# ----------------------------------------------------------------------------------------------


@dataclass
class Trajectory:
    """What one gradient-flow run recorded."""

    T: float
    step: float
    method: str
    params0: Params
    params: Params                                    # w_T
    times: np.ndarray                                 # recording times
    train_loss: np.ndarray                            # L_S(w_t) at those times
    test_loss: np.ndarray                             # L_test(w_t) at those times
    trace_K: np.ndarray                               # Tr K_t at those times
    sum_K: np.ndarray                                 # 1ᵀK_t1 at those times
    K: torch.Tensor | None = None                     # (n, n) train × train LPK at T
    K_test: torch.Tensor | None = None                # (n_test, n) test × train LPK at T
    extras: dict = field(default_factory=dict)


def _rates(p: Params, split: Split, beta: float, kernels: bool, brute_trace: bool = False):
    """Right-hand side of the augmented ODE at w: −∇L_S, and the integrands of Tr K, 1ᵀK1,
    (when ``kernels``) of K and K_test, and (when ``brute_trace``) of Tr K again, from
    torch.func per-sample gradients instead of the closed form."""
    g, s = full_gradient(p, split.X, split.y, beta)
    n = split.n
    rate = {"W": -g["W"], "a": -g["a"]}
    tr = float((s ** 2 * tangent_sq_norms(p, split.X, beta)).sum())
    one = float(n ** 2 * ((g["W"] ** 2).sum() + (g["a"] ** 2).sum()))
    K = Kt = None
    if kernels:
        K = loss_grad_gram(p, split.X, split.y, split.X, split.y, beta)
        Kt = loss_grad_gram(p, split.X_test, split.y_test, split.X, split.y, beta)
    tr_ref = float((per_sample_grads(p, split.X, split.y, beta) ** 2).sum()) if brute_trace else 0.0
    return rate, tr, one, K, Kt, tr_ref


def directional_derivatives_torch_func(p: Params, direction: Params, X: torch.Tensor,
                                      y: torch.Tensor, order: int = 2,
                                      beta: float = 10.0) -> torch.Tensor:
    """d^j/ds^j ℓ(w + s·v, z) at s = 0 for j = 1..order and every row of X, by nesting
    ``torch.func.jvp`` ``order`` times (forward over forward): an (order, N) tensor. The reference
    for :func:`directional_derivatives`; its cost grows like 2^order."""
    from torch.func import jvp

    one = torch.ones((), dtype=DTYPE)

    def level0(s):
        return (losses({k: p[k] + s * direction[k] for k in p}, X, y, beta),)

    f = level0
    for _ in range(order):
        # level j returns (ℓ, ℓ', …, ℓ^(j)) as functions of s; its jvp adds ℓ^(j+1)
        def nxt(s, f=f):
            out, tan = jvp(f, (s,), (one,))
            return out + (tan[-1],)
        f = nxt
    return torch.stack(f(torch.zeros((), dtype=DTYPE))[1:])


def _sigmoid_derivatives(S: torch.Tensor, order: int) -> list[torch.Tensor]:
    """[S, S', …, S^(order)] of the logistic sigmoid S = 1/(1 + e^{-t}), written in S
    (S' = S(1−S), S'' = S'(1−2S), S''' = S'(1 − 6S + 6S²) = S' − 6S'²)."""
    if order > 3:
        raise ValueError("sigmoid derivatives are written out up to order 3")
    d1 = S * (1 - S)
    if order == 0:
        return [S]
    return [S, d1, d1 - 2 * S * d1, d1 - 6 * d1 ** 2][: order + 1]


def directional_derivatives(p: Params, direction: Params, X: torch.Tensor, y: torch.Tensor,
                            order: int = 4, beta: float = 10.0,
                            at: torch.Tensor | None = None) -> torch.Tensor:
    """d^j/ds^j ℓ(w + s·v, z) for j = 1..order (order ≤ 4) and every row of X, in closed form:
    an (order, N) tensor at s = 0, or a (len(at), order, N) tensor at the offsets s in ``at``.

    Along the line, the hidden pre-activations u_j + s·δ_j (δ = X V_Wᵀ) and the output weights
    a_j + s·v_{a,j} are linear in s, so by Leibniz
    f^(k) = m^{-1/2} Σ_j [a_j δ_j^k σ^(k)(u_j) + k v_{a,j} δ_j^{k−1} σ^(k−1)(u_j)], with
    σ^(k)(u) = β^{k−1} S^(k−1)(βu) for the sigmoid S. The loss L(f) = softplus(−y f) has
    L^(k) = (−y)^k S^(k−1)(−y f), and Faà di Bruno composes the two:
    ℓ' = L₁f₁, ℓ'' = L₂f₁² + L₁f₂, ℓ''' = L₃f₁³ + 3L₂f₁f₂ + L₁f₃,
    ℓ'''' = L₄f₁⁴ + 6L₃f₁²f₂ + L₂(3f₂² + 4f₁f₃) + L₁f₄.
    :func:`directional_derivatives_torch_func` is the reference."""
    if not 1 <= order <= 4:
        raise ValueError(f"order must lie in 1..4, got {order}")
    u0, du = X @ p["W"].T, X @ direction["W"].T                     # (N, m) each
    if at is None:
        return _line_derivatives(u0, du, p["a"], direction["a"], y, order, beta)
    # one offset at a time: (N, m) work arrays stay in cache, a batch over offsets does not
    return torch.stack([_line_derivatives(u0 + float(s) * du, du, p["a"] + float(s) * direction["a"],
                                          direction["a"], y, order, beta) for s in at])


def _line_derivatives(u, du, a, va, y, order, beta):
    """The body of :func:`directional_derivatives` at one point: pre-activations u (N, m),
    their direction δ (N, m), output weights a and their direction v_a (m,)."""
    m = a.shape[0]
    # P_i = S^(i)(βu) δ^{i+1}: f^(k) = β^{k−1} P_{k−1}·a + k β^{k−2} P_{k−2}·v_a (k ≥ 2)
    P = [q * du ** (i + 1) for i, q in enumerate(_sigmoid_derivatives(torch.sigmoid(beta * u),
                                                                       order - 1))]
    h = torch.nn.functional.softplus(u, beta=beta)
    f = [h @ a, P[0] @ a + h @ va]
    f += [beta ** (k - 1) * (P[k - 1] @ a) + k * beta ** (k - 2) * (P[k - 2] @ va)
          for k in range(2, order + 1)]
    f = [fk / math.sqrt(m) for fk in f]
    Sl = _sigmoid_derivatives(torch.sigmoid(-y * f[0]), order - 1)
    L = [None] + [(-y) ** k * Sl[k - 1] for k in range(1, order + 1)]
    out = [L[1] * f[1]]
    if order >= 2:
        out.append(L[2] * f[1] ** 2 + L[1] * f[2])
    if order >= 3:
        out.append(L[3] * f[1] ** 3 + 3 * L[2] * f[1] * f[2] + L[1] * f[3])
    if order >= 4:
        out.append(L[4] * f[1] ** 4 + 6 * L[3] * f[1] ** 2 * f[2]
                   + L[2] * (3 * f[2] ** 2 + 4 * f[1] * f[3]) + L[1] * f[4])
    return torch.stack(out)


def _axpy(p: Params, h: float, r: Params) -> Params:
    return {k: p[k] + h * r[k] for k in p}


def gradient_flow(split: Split, width: int, T: float, step: float, *, method: str = "rk4",
                  beta: float = 10.0, seed: int = 0, kernels: bool = False,
                  n_records: int = 50, brute_trace: bool = False,
                  taylor_order: int = 0, remainder_nodes: int = 9) -> Trajectory:
    """See :func:`_gradient_flow`. Runs on one torch thread: the operations are tiny (hundreds of
    rows), and several threads only add synchronisation cost (20× slower on a busy 2-core
    machine in our measurements). The caller's thread count is restored afterwards."""
    with one_thread():
        return _gradient_flow(split, width, T, step, method=method, beta=beta, seed=seed,
                              kernels=kernels, n_records=n_records, brute_trace=brute_trace,
                              taylor_order=taylor_order, remainder_nodes=remainder_nodes)


def _gradient_flow(split: Split, width: int, T: float, step: float, *, method: str,
                   beta: float, seed: int, kernels: bool, n_records: int, brute_trace: bool = False,
                   taylor_order: int = 0, remainder_nodes: int = 9) -> Trajectory:
    """Integrate gradient flow on L_S from N(0,1) initialisation up to time T.

    ``method="euler"`` is full-batch gradient descent with learning rate ``step`` and the kernels
    accumulated by the rectangle rule η Σ_k ⟨∇ℓ(w_k, z), ∇ℓ(w_k, z')⟩; ``method="rk4"`` integrates
    the same augmented ODE with classical Runge–Kutta. ``kernels=True`` also accumulates the
    (n × n) and (n_test × n) kernels (O(n²m) per evaluation instead of O(nm)).

    ``brute_trace=True`` also accumulates Tr K from torch.func per-sample gradients
    (``extras["trace_K_torch_func"]``), with the same quadrature weights.
    ``taylor_order=q`` (gradient descent only, q = 2 or 3) expands, for every test point z, each
    step's loss change in its Taylor series: with φ_k(s) = ℓ(w_k − s∇L_S(w_k), z),

        ℓ(w_{k+1}, z) − ℓ(w_k, z) = φ_k(η) − φ_k(0) = Σ_{j ≤ t} (η^j/j!) φ_k^(j)(0) + R_{k,t},
        R_{k,t} = (η^{t+1}/(t+1)!) φ_k^(t+1)(ξ) for some ξ in [0, η]   (Lagrange),

    and the j = 1 term is the kernel machine's increment −η⟨∇ℓ(w_k, z), ∇L_S(w_k)⟩. Recorded:
    ``extras["taylor_first"]`` = Σ_k η φ_k'(0) (must equal machine − ℓ(w_0, z));
    ``extras["taylor"][j − 2]`` = Σ_k (η^j/j!) φ_k^(j)(0) for j = 2..q (the expansion of the gap
    network − rectangle-rule kernel machine); and, for each truncation t = 1..q, the interval
    [``remainder_lo[t − 1]``, ``remainder_hi[t − 1]``] = Σ_k (η^{t+1}/(t+1)!) [min, max] of
    φ_k^(t+1) over ``remainder_nodes`` equally spaced points of [0, η], which by Lagrange's form
    contains gap − Σ_{2 ≤ j ≤ t} taylor_j (a finite grid can only narrow the range, so the
    recorded interval is, if anything, too tight). ``remainder_lo_coarse``/``_hi_coarse`` use
    every other node, to show how far the grid has converged. ``remainder_nodes=0`` records the
    Taylor terms only (one derivative evaluation per step instead of ``remainder_nodes``)."""
    if taylor_order and method != "euler":
        raise ValueError("taylor_order applies to gradient descent (method='euler')")
    if taylor_order not in (0, 2, 3):
        raise ValueError(f"taylor_order must be 0, 2 or 3, got {taylor_order}")
    if taylor_order and 0 < remainder_nodes < 3:
        raise ValueError(f"remainder_nodes must be 0 (no interval) or at least 3, got "
                         f"{remainder_nodes}")
    if method not in ("euler", "rk4"):
        raise ValueError(f"method must be 'euler' or 'rk4', got {method!r}")
    if not (T > 0 and step > 0):
        raise ValueError("T and step must be positive")
    n_steps = max(1, round(T / step))
    h = T / n_steps
    p0 = init_params(split.X.shape[1], width, seed)
    p = dict(p0)
    n, nt = split.n, split.X_test.shape[0]
    K = torch.zeros(n, n, dtype=DTYPE) if kernels else None
    Kt = torch.zeros(nt, n, dtype=DTYPE) if kernels else None
    tr = one = tr_ref = 0.0
    tq = taylor_order
    taylor = torch.zeros(tq, nt, dtype=DTYPE)           # rows j = 1..tq
    enclosure = torch.zeros(4, tq, nt, dtype=DTYPE)     # lo, hi, lo (coarse), hi (coarse); rows t
    fact = torch.tensor([h ** j / math.factorial(j) for j in range(1, tq + 2)], dtype=DTYPE)
    nodes = torch.linspace(0.0, h, remainder_nodes, dtype=DTYPE)
    # log-spaced recording times (training curves are read on a log time axis)
    record_at = set(np.unique(np.concatenate(
        [[0], np.geomspace(1, n_steps, min(n_records, n_steps))]).round().astype(int)).tolist())
    rec: dict[str, list] = {k: [] for k in ("t", "train", "test", "tr", "one")}

    def record(k):
        rec["t"].append(k * h)
        rec["train"].append(float(losses(p, split.X, split.y, beta).mean()))
        rec["test"].append(float(losses(p, split.X_test, split.y_test, beta).mean()))
        rec["tr"].append(tr)
        rec["one"].append(one)

    weights = (1 / 6, 1 / 3, 1 / 3, 1 / 6)
    for k in range(n_steps):
        if k in record_at:
            record(k)
        if method == "euler":
            r, dtr, done, dK, dKt, dref = _rates(p, split, beta, kernels, brute_trace)
            if tq and not remainder_nodes:
                taylor += fact[:tq, None] * directional_derivatives(
                    p, r, split.X_test, split.y_test, tq, beta)
            elif tq:
                D = fact[None, :, None] * directional_derivatives(
                    p, r, split.X_test, split.y_test, tq + 1, beta, at=nodes)  # (G, tq + 1, nt)
                taylor += D[0, :tq]
                coarse = D[::2, 1:]
                enclosure += torch.stack([D[:, 1:].amin(0), D[:, 1:].amax(0),
                                          coarse.amin(0), coarse.amax(0)])
            p = _axpy(p, h, r)
            tr, one, tr_ref = tr + h * dtr, one + h * done, tr_ref + h * dref
            if kernels:
                K += h * dK
                Kt += h * dKt
            continue
        stages, q = [], p
        for i, c in enumerate((0.0, 0.5, 0.5, 1.0)):
            if i:
                q = _axpy(p, c * h, stages[-1][0])
            stages.append(_rates(q, split, beta, kernels, brute_trace))
        p = {key: p[key] + h * sum(wt * st[0][key] for wt, st in zip(weights, stages)) for key in p}
        tr += h * sum(wt * st[1] for wt, st in zip(weights, stages))
        one += h * sum(wt * st[2] for wt, st in zip(weights, stages))
        tr_ref += h * sum(wt * st[5] for wt, st in zip(weights, stages))
        if kernels:
            K += h * sum(wt * st[3] for wt, st in zip(weights, stages))
            Kt += h * sum(wt * st[4] for wt, st in zip(weights, stages))
    record(n_steps)
    arr = lambda key: np.asarray(rec[key])  # noqa: E731
    extras = {}
    if brute_trace:
        extras["trace_K_torch_func"] = tr_ref
    if tq:
        extras["taylor_first"] = taylor[0].numpy()
        extras["taylor"] = taylor[1:].numpy()
        if remainder_nodes:
            for key, e in zip(("lo", "hi", "lo_coarse", "hi_coarse"), enclosure):
                extras[f"remainder_{key}"] = e.numpy()
    return Trajectory(T=T, step=h, method=method, params0=p0, params=p, times=arr("t"),
                      train_loss=arr("train"), test_loss=arr("test"), trace_K=arr("tr"),
                      sum_K=arr("one"), K=K, K_test=Kt, extras=extras)


def brute_force_lpk(split: Split, width: int, T: float, step: float, beta: float = 10.0,
                    seed: int = 0) -> torch.Tensor:
    """The train × train LPK of gradient descent from torch.func per-sample gradients (the slow
    reference for :func:`gradient_flow` with ``method="euler"``; small problems only)."""
    p = init_params(split.X.shape[1], width, seed)
    K = torch.zeros(split.n, split.n, dtype=DTYPE)
    for _ in range(max(1, round(T / step))):
        G = per_sample_grads(p, split.X, split.y, beta)
        K += step * G @ G.T
        gbar = G.mean(0)
        m, d = p["W"].shape
        p = {"W": p["W"] - step * gbar[: m * d].reshape(m, d), "a": p["a"] - step * gbar[m * d:]}
    return K


# ----------------------------------------------------------------------------------------------
# The kernel-machine identity, the two computable identities, and the bounds
# ----------------------------------------------------------------------------------------------


def kernel_machine(traj: Trajectory, split: Split, beta: float = 10.0) -> dict[str, np.ndarray]:
    """Both sides of ℓ(w_T, z) = ℓ(w_0, z) − (1/n) Σ_i K_T(z, z_i) on the test points."""
    if traj.K_test is None:
        raise ValueError("run gradient_flow(..., kernels=True) to get the test × train kernel")
    l0 = losses(traj.params0, split.X_test, split.y_test, beta)
    lT = losses(traj.params, split.X_test, split.y_test, beta)
    machine = l0 - traj.K_test.mean(dim=1)
    return {"network": lT.numpy(), "machine": machine.numpy(), "initial": l0.numpy()}


def identity_error(km: dict[str, np.ndarray]) -> float:
    """max_z |network − machine| divided by max_z |ℓ(w_0, z) − ℓ(w_T, z)| (the size of the change
    the kernel machine has to account for)."""
    err = np.abs(km["network"] - km["machine"]).max()
    return float(err / np.abs(km["initial"] - km["network"]).max())


def taylor_report(traj: Trajectory, km: dict[str, np.ndarray]) -> dict:
    """Gradient descent's gap between network and kernel machine against its Taylor expansion
    (a run of :func:`gradient_flow` with ``taylor_order`` and ``remainder_nodes``), per truncation
    t = 1..q (t = 1: the gap itself; t = 2: less the second-order term; t = 3: less the second-
    and third-order terms):

    - ``residual[t]``: max_z |gap − Σ_{2 ≤ j ≤ t} S_j| / max_z |gap|;
    - ``position[t]``: max_z |residual − c| / w, with c and w the centre and half-width of the
      Lagrange interval for the order-(t+1) remainder at z (≤ 1: inside at every test point);
      ``position_coarse[t]`` the same from every other grid node;
    - ``position_without[t]`` (t ≥ 2): the position had the order-t term been left out."""
    gap = km["network"] - km["machine"]
    e = traj.extras
    if "remainder_lo" not in e:
        raise ValueError("run gradient_flow(..., taylor_order=q, remainder_nodes=G) first")
    S = {j: e["taylor"][j - 2] for j in range(2, e["taylor"].shape[0] + 2)}
    out = {key: {} for key in ("residual", "position", "position_coarse", "position_without")}

    def position(r, lo, hi):
        return float(np.max(np.abs(r - (lo + hi) / 2) / ((hi - lo) / 2)))

    res = gap.copy()
    for t in range(1, len(S) + 2):
        if t >= 2:
            res = res - S[t]
            out["position_without"][t] = position(res + S[t], e["remainder_lo"][t - 1],
                                                  e["remainder_hi"][t - 1])
        out["residual"][t] = float(np.abs(res).max() / np.abs(gap).max())
        out["position"][t] = position(res, e["remainder_lo"][t - 1], e["remainder_hi"][t - 1])
        out["position_coarse"][t] = position(res, e["remainder_lo_coarse"][t - 1],
                                             e["remainder_hi_coarse"][t - 1])
    return out


def confidence_term(n: int, delta: float = 0.01, loss_range: float = 1.0) -> float:
    """3 M √(log(2/δ) / (2n)): the concentration term of a Rademacher bound for a loss in [0, M]."""
    return 3.0 * loss_range * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def lpk_complexity(sum_K: float, trace_K: float, n: int) -> float:
    """2 R̂: twice the Rademacher complexity of {ℓ(w_0,·) − h : ‖h‖_{H_K} ≤ √(1ᵀK1)/n},
    i.e. (2/n²) √(1ᵀK1 · Tr K)."""
    return 2.0 * math.sqrt(max(sum_K, 0.0) * trace_K) / n ** 2


def static_complexity(traj: Trajectory, split: Split, beta: float = 10.0) -> float:
    """The same RKHS-norm × trace shape with the tangent kernel frozen at initialisation (NTK):
    2 ‖w_T − w_0‖ √(Tr Θ_0) / n (the logistic loss is 1-Lipschitz in f)."""
    dw2 = sum(float(((traj.params[k] - traj.params0[k]) ** 2).sum()) for k in traj.params)
    tr0 = float(tangent_sq_norms(traj.params0, split.X, beta).sum())
    return 2.0 * math.sqrt(dw2 * tr0) / split.n


@dataclass
class BoundReport:
    """One run's gap and bounds (every entry a float)."""

    train_loss: float           # L_S(w_T), logistic loss capped at M
    test_loss: float            # L_test(w_T), capped at M
    gap: float                  # test − train, capped loss (what the bound covers)
    gap_raw: float              # the same with the uncapped logistic loss
    loss_drop: float            # L_S(w_0) − L_S(w_T) (uncapped: the loss gradient flow descends)
    sum_K_over_n2: float        # 1ᵀK1 / n²
    trace_K: float
    lpk_term: float
    static_term: float
    confidence: float
    loss_cap: float             # M

    @property
    def lpk_bound(self) -> float:
        return self.lpk_term + self.confidence

    @property
    def static_bound(self) -> float:
        return self.static_term + self.confidence

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "lpk_bound": self.lpk_bound, "static_bound": self.static_bound}


def bound_report(traj: Trajectory, split: Split, loss_cap: float = 3.0, delta: float = 0.01,
                 beta: float = 10.0) -> BoundReport:
    """The gap L_test(w_T) − L_S(w_T) beside the reconstructed LPK bound and the static bound.

    The theorem needs a loss in [0, M]; the logistic loss is unbounded, so the gap is measured in
    the capped loss min(ℓ, M). Capping is 1-Lipschitz, so by the contraction lemma the same
    complexity terms bound the capped class; the confidence term is 3M√(log(2/δ)/(2n))."""
    if loss_cap <= 0:
        raise ValueError(f"loss_cap must be positive, got {loss_cap}")
    lS = losses(traj.params, split.X, split.y, beta)
    lT = losses(traj.params, split.X_test, split.y_test, beta)
    cS, cT = lS.clamp(max=loss_cap), lT.clamp(max=loss_cap)
    n = split.n
    return BoundReport(
        train_loss=float(cS.mean()), test_loss=float(cT.mean()), gap=float(cT.mean() - cS.mean()),
        gap_raw=float(lT.mean() - lS.mean()),
        loss_drop=float(traj.train_loss[0] - traj.train_loss[-1]),
        sum_K_over_n2=float(traj.sum_K[-1]) / n ** 2, trace_K=float(traj.trace_K[-1]),
        lpk_term=lpk_complexity(float(traj.sum_K[-1]), float(traj.trace_K[-1]), n),
        static_term=static_complexity(traj, split, beta),
        confidence=confidence_term(n, delta, loss_cap), loss_cap=loss_cap)


def lpk_bound_over_time(traj: Trajectory, split: Split) -> np.ndarray:
    """The LPK complexity term (2/n²)√(1ᵀK_t1 · Tr K_t) at every recorded time t (the confidence
    term, constant in t, is added separately)."""
    return np.array([lpk_complexity(s, t, split.n) for s, t in zip(traj.sum_K, traj.trace_K)])


def kendall_tau(a, b) -> float:
    """Kendall's τ_b between two sequences."""
    return float(stats.kendalltau(a, b).statistic)


def spearman_rho(a, b) -> float:
    return float(stats.spearmanr(a, b).statistic)


def partial_kendall(x, y, z) -> float:
    """Kendall's partial τ of x and y given z: (τ_xy − τ_xz·τ_yz)/√((1 − τ_xz²)(1 − τ_yz²));
    NaN where z orders x or y completely (nothing is left to correlate)."""
    txy, txz, tyz = kendall_tau(x, y), kendall_tau(x, z), kendall_tau(y, z)
    denominator = (1 - txz**2) * (1 - tyz**2)
    return (txy - txz * tyz) / math.sqrt(denominator) if denominator > 1e-12 else float("nan")


def kendall_s(x, y) -> int:
    """Kendall's S: concordant minus discordant pairs (tied pairs count 0)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    i, j = np.triu_indices(len(x), k=1)
    return int(np.sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])))


def kendall_s_null(k: int) -> dict[int, float]:
    """Exact distribution of Kendall's S for k items under independence (every permutation
    equally likely, no ties): S = C(k, 2) − 2·(inversions), and the number of permutations with
    q inversions is the Mahonian number, built up one item at a time."""
    counts = np.array([1.0])
    for j in range(1, k):                     # inserting item j+1 adds 0..j inversions
        counts = np.convolve(counts, np.ones(j + 1))
    pairs = k * (k - 1) // 2
    return {pairs - 2 * q: c / counts.sum() for q, c in enumerate(counts)}


def stratified_kendall(x, y, strata, alpha: float = 1e-3) -> dict:
    """Kendall's τ of x and y *within* strata (pairs in the same stratum only): S summed over
    strata over the number of such pairs. Under "x and y independent given the stratum" each
    stratum's S has the distribution of :func:`kendall_s_null`, independently, so the exact
    one-sided p-value P(S ≥ S_obs) is their convolution. Also returns ``critical``: the smallest
    τ that the test declares at level ``alpha`` (NaN where no τ can reach it)."""
    x, y, strata = np.asarray(x, float), np.asarray(y, float), np.asarray(strata)
    dist, pairs, s_obs = {0: 1.0}, 0, 0
    for level in np.unique(strata):
        sel = strata == level
        k = int(sel.sum())
        if k < 2:
            continue
        s_obs += kendall_s(x[sel], y[sel])
        pairs += k * (k - 1) // 2
        null = kendall_s_null(k)
        new: dict[int, float] = {}
        for a, pa in dist.items():
            for b, pb in null.items():
                new[a + b] = new.get(a + b, 0.0) + pa * pb
        dist = new
    values = np.array(sorted(dist))
    tail = np.cumsum([dist[v] for v in values[::-1]])[::-1]           # P(S ≥ v)
    p = float(tail[values >= s_obs][0]) if pairs else 1.0
    declared = values[tail <= alpha]
    critical = float(declared[0]) / pairs if len(declared) and pairs else float("nan")
    return {"tau": s_obs / pairs if pairs else float("nan"), "S": s_obs, "pairs": pairs, "p": p,
            "critical": critical}


def run(dataset: str, n: int, width: int, noise: float, seed: int, T: float, step: float,
        method: str = "rk4", loss_cap: float = 3.0, delta: float = 0.01) -> dict:
    """One sweep point: data, gradient flow, and its :class:`BoundReport` as a dict (for
    :func:`lib.sweep.sweep`)."""
    if dataset == "digits":
        split = digits_1v7(n, noise=noise, seed=seed)
    elif dataset == "gaussian":
        split = gaussian_mixture(n, noise=noise, seed=seed)
    else:
        raise ValueError(f"dataset must be 'digits' or 'gaussian', got {dataset!r}")
    traj = gradient_flow(split, width, T, step, method=method, seed=seed)
    return bound_report(traj, split, loss_cap=loss_cap, delta=delta).as_dict()


def run_sweeps(grids: dict[str, dict], seeds, **sweep_kw):
    """Several named grids of :func:`run`, each configuration run once even when grids share it
    (e.g. the width sweep's default width is also a point of the noise sweep). Returns a pandas
    DataFrame with one row per (sweep, configuration, seed) and a ``sweep`` column."""
    import pandas as pd

    from lib.sweep import grid_points, sweep

    named = [(name, point) for name, g in grids.items() for point in grid_points(g)]
    unique = list({tuple(sorted(p.items())): p for _, p in named}.values())
    records = sweep(run, unique, seeds=seeds, desc="gradient-flow runs", **sweep_kw)
    by_key = {}
    for r in records:
        key = tuple(sorted((k, r[k]) for k in unique[0]))
        by_key.setdefault(key, []).append(r)
    rows = [{**r, "sweep": name} for name, p in named for r in by_key[tuple(sorted(p.items()))]]
    return pd.DataFrame(rows)
