"""The two-layer network with NTK scaling, no bias and a Softplus(β) activation,

    f(w, x) = m^{-1/2} Σ_j a_j σ(w_jᵀx),      σ(u) = softplus(βu)/β,

its logistic loss ℓ(w, z) = log(1 + exp(−y f(w, x))) and the loss's gradients.

Two ways to get per-sample gradients, side by side (the reference next to the fast path):
:func:`per_sample_grads` uses ``torch.func`` (vmap + grad) and is the reference;
:func:`loss_grad_gram` evaluates the same inner products in closed form for this architecture
(O(N·N'·m) work instead of materialising N × #params gradients). The tests compare them. The
same holds for the loss's derivatives along a line in parameter space:
:func:`directional_derivatives_torch_func` (nested ``torch.func.jvp``) is the reference for the
closed form :func:`directional_derivatives`.
"""

from __future__ import annotations

import math

import torch

from lib.seeding import torch_generator

DTYPE = torch.float64
#: Where softplus switches to its linear branch (βx above it): softplus(x) = x + log1p(e^{−x}) is x
#: to float64 precision there, so σ's closed-form derivatives (sigmoid) are the derivatives of what
#: :func:`forward` computes. torch's default of 20 leaves an e^{−20} ≈ 2e-9 mismatch against autograd.
LINEAR_ABOVE = 40.0


def _softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    return torch.nn.functional.softplus(x, beta=beta, threshold=LINEAR_ABOVE)

Params = dict[str, torch.Tensor]   # {"W": (m, d), "a": (m,)}


def init_params(d: int, width: int, *, root: int, key: tuple = ()) -> Params:
    """N(0, 1) initialisation of both layers (NTK scaling puts the 1/√m in the forward pass), drawn
    from sub-stream ``("init", *key)`` of chapter seed ``root``."""
    g = torch_generator(root, "init", *key)
    return {"W": torch.randn(width, d, generator=g, dtype=DTYPE),
            "a": torch.randn(width, generator=g, dtype=DTYPE)}


def forward(params: Params, X: torch.Tensor, beta: float = 10.0) -> torch.Tensor:
    """f(w, x) = m^{-1/2} Σ_j a_j softplus(β w_jᵀx)/β for every row of X."""
    m = params["a"].shape[0]
    h = _softplus(X @ params["W"].T, beta=beta)
    return h @ params["a"] / math.sqrt(m)


def logistic(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ℓ = log(1 + exp(−y f)), computed stably."""
    return _softplus(-y * f)


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


def per_sample_sq_norms(params: Params, X: torch.Tensor, y: torch.Tensor,
                        beta: float = 10.0) -> torch.Tensor:
    """Reference ‖∇_w ℓ(w, z_i)‖² for every row, with torch.func (vmap over samples of the squared
    norm of grad): the diagonal of G Gᵀ for :func:`per_sample_grads`' G, without concatenating
    the N × #params matrix."""
    from torch.func import grad, vmap

    def one(p, x, t):
        g = grad(lambda q: logistic(forward(q, x[None], beta), t[None])[0])(p)
        return torch.linalg.vector_norm(g["W"]) ** 2 + torch.linalg.vector_norm(g["a"]) ** 2

    return vmap(one, in_dims=(None, 0, 0))(params, X, y)


def _features(params: Params, X: torch.Tensor, beta: float):
    """Hidden pre-activations' softplus and its derivative: σ(Wx) and σ'(Wx) = sigmoid(βWx)."""
    u = X @ params["W"].T
    return _softplus(u, beta=beta), torch.sigmoid(u.mul_(beta))


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


def features_gram(a: torch.Tensor, A: tuple, B: tuple, XaXb: torch.Tensor) -> torch.Tensor:
    """:func:`loss_grad_gram` from features already at hand: ``A = (ℓ'_a, σ(Wx_a), σ'(Wx_a))``
    for the rows of Xa (as :func:`gradient_and_tangent` with ``features=True`` returns them), ``B``
    the same for Xb, and the inputs' Gram matrix ``XaXb`` = Xa Xbᵀ (constant along a run)."""
    (sa, ha, da), (sb, hb, db) = A, B
    theta = (ha @ hb.T + ((da * a ** 2) @ db.T) * XaXb) / a.shape[0]
    return sa[:, None] * theta * sb[None, :]


def slopes_and_features(params: Params, X: torch.Tensor, y: torch.Tensor, beta: float = 10.0):
    """(ℓ'_i, σ(Wx_i), σ'(Wx_i)) for every row: what :func:`features_gram` takes."""
    h, d = _features(params, X, beta)
    return logistic_slope(h @ params["a"] / math.sqrt(params["a"].shape[0]), y), h, d


def full_gradient(params: Params, X: torch.Tensor, y: torch.Tensor, beta: float = 10.0):
    """∇L_S(w) in closed form, and the per-sample slopes ℓ'_i (reused by the accumulators)."""
    m = params["a"].shape[0]
    h, d = _features(params, X, beta)
    s = logistic_slope(h @ params["a"] / math.sqrt(m), y) / X.shape[0]
    ga = h.T @ s / math.sqrt(m)
    gW = ((d * params["a"]) * s[:, None]).T @ X / math.sqrt(m)
    return {"W": gW, "a": ga}, s * X.shape[0]


def gradient_and_tangent(params: Params, X: torch.Tensor, y: torch.Tensor, beta: float = 10.0,
                         x_sq: torch.Tensor | None = None, features: bool = False):
    """:func:`full_gradient` and :func:`tangent_sq_norms` from one evaluation of the features:
    ∇L_S(w), the per-sample slopes ℓ'_i and ‖∇_w f(w, x_i)‖² (what one step of gradient flow needs).
    ``x_sq`` (the rows' ‖x_i‖², constant along a run) saves recomputing them; ``features=True``
    also returns (ℓ'_i, σ(Wx_i), σ'(Wx_i)) for :func:`features_gram`.

    Arranged for few passes over the (N, m) arrays: ∇_W L_S = diag(a/√m) σ'ᵀ (ℓ'/N ⊙ X) and
    Σ_j σ'_ij² a_j² = (σ' ⊙ σ') a², so the only (N, m) work besides the features and the products
    is σ ⊙ σ and σ' ⊙ σ'."""
    m = params["a"].shape[0]
    h, d = _features(params, X, beta)
    a, r = params["a"], math.sqrt(m)
    s = logistic_slope(h @ a / r, y)
    sn = s / X.shape[0]
    g = {"W": (d.T @ (sn[:, None] * X)) * (a / r)[:, None], "a": h.T @ sn / r}
    x_sq = (X ** 2).sum(1) if x_sq is None else x_sq
    tangent = ((h * h).sum(1) + ((d * d) @ (a * a)) * x_sq) / m
    return (g, s, tangent, (s, h, d)) if features else (g, s, tangent)


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
    h = _softplus(u, beta=beta)
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
