"""Gradient flow on L_S = (1/n) Σ_i ℓ(w, z_i) with the loss path kernel accumulated along the path,

    K_T(z, z') = ∫_0^T ⟨∇_w ℓ(w_t, z), ∇_w ℓ(w_t, z')⟩ dt.

The ODE (parameters plus the kernel accumulators) is integrated by explicit Euler — which *is*
full-batch gradient descent with step η, the kernel accumulated by the rectangle rule — or by
classical RK4 on the same augmented system (the "ODE check": a 4th-order accurate gradient flow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from lib.lpk.data import Split
from lib.lpk.network import (DTYPE, Params, directional_derivatives, features_gram, gradient_and_tangent,
                             init_params, losses, per_sample_grads, per_sample_sq_norms, slopes_and_features)
from lib.sweep import one_thread


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


def _rates(p: Params, split: Split, beta: float, kernels: bool, brute_trace: bool, const: dict):
    """Right-hand side of the augmented ODE at w: −∇L_S, and the integrands of Tr K, 1ᵀK1,
    (when ``kernels``) of K and K_test, and (when ``brute_trace``) of Tr K again, from
    torch.func per-sample gradients instead of the closed form. ``const`` holds what does not
    change along the run (:func:`_constants`)."""
    g, s, tangent, train = gradient_and_tangent(p, split.X, split.y, beta, x_sq=const["x_sq"], features=True)
    n = split.n
    rate = {"W": -g["W"], "a": -g["a"]}
    tr = float((s ** 2 * tangent).sum())
    one = float(n ** 2 * ((g["W"] ** 2).sum() + (g["a"] ** 2).sum()))
    K = Kt = None
    if kernels:
        test = slopes_and_features(p, split.X_test, split.y_test, beta)
        K = features_gram(p["a"], train, train, const["XX"])
        Kt = features_gram(p["a"], test, train, const["XtX"])
    tr_ref = float(per_sample_sq_norms(p, split.X, split.y, beta).sum()) if brute_trace else 0.0
    return rate, tr, one, K, Kt, tr_ref


def _constants(split: Split, kernels: bool) -> dict:
    """The inputs' squared norms and (for the kernels) Gram matrices, computed once per run."""
    const = {"x_sq": (split.X ** 2).sum(1)}
    if kernels:
        const.update(XX=split.X @ split.X.T, XtX=split.X_test @ split.X.T)
    return const


def _axpy(p: Params, h: float, r: Params) -> Params:
    return {k: torch.add(p[k], r[k], alpha=h) for k in p}


def _rk4_sum(x, h: float, k1, k2, k3, k4):
    """x + (h/6)(k1 + 2k2 + 2k3 + k4): RK4's update (in four operations on tensors)."""
    if isinstance(x, float):
        return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return torch.add(x, torch.add(k1, k2, alpha=2.0).add_(k3, alpha=2.0).add_(k4), alpha=h / 6)


def gradient_flow(split: Split, width: int, T: float, step: float, *, method: str = "rk4",
                  beta: float = 10.0, root: int, key: tuple = (), kernels: bool = False,
                  n_records: int = 50, brute_trace: bool = False,
                  taylor_order: int = 0, remainder_nodes: int = 9) -> Trajectory:
    """See :func:`_gradient_flow`. Runs on one torch thread: the operations are tiny (hundreds of
    rows), and several threads only add synchronisation cost (20× slower on a busy 2-core
    machine in our measurements). The caller's thread count is restored afterwards."""
    with one_thread():
        return _gradient_flow(split, width, T, step, method=method, beta=beta, root=root, key=key,
                              kernels=kernels, n_records=n_records, brute_trace=brute_trace,
                              taylor_order=taylor_order, remainder_nodes=remainder_nodes)


def _gradient_flow(split: Split, width: int, T: float, step: float, *, method: str,
                   beta: float, root: int, key: tuple, kernels: bool, n_records: int,
                   brute_trace: bool = False, taylor_order: int = 0,
                   remainder_nodes: int = 9) -> Trajectory:
    """Integrate gradient flow on L_S from N(0,1) initialisation up to time T (the initialisation
    :func:`~lib.lpk.network.init_params` draws from ``root`` and ``key``: runs that share them
    start from the same w_0).

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
    p0 = init_params(split.X.shape[1], width, root=root, key=key)
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

    const = _constants(split, kernels)
    for k in range(n_steps):
        if k in record_at:
            record(k)
        if method == "euler":
            r, dtr, done, dK, dKt, dref = _rates(p, split, beta, kernels, brute_trace, const)
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
                K.add_(dK, alpha=h)
                Kt.add_(dKt, alpha=h)
            continue
        stages, q = [], p
        for c in (0.0, 0.5, 0.5, 1.0):
            if c:
                q = _axpy(p, c * h, stages[-1][0])
            stages.append(_rates(q, split, beta, kernels, brute_trace, const))
        p = {key: _rk4_sum(p[key], h, *(st[0][key] for st in stages)) for key in p}
        tr = _rk4_sum(tr, h, *(st[1] for st in stages))
        one = _rk4_sum(one, h, *(st[2] for st in stages))
        tr_ref = _rk4_sum(tr_ref, h, *(st[5] for st in stages))
        if kernels:
            K = _rk4_sum(K, h, *(st[3] for st in stages))
            Kt = _rk4_sum(Kt, h, *(st[4] for st in stages))
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


def brute_force_lpk(split: Split, width: int, T: float, step: float, beta: float = 10.0, *,
                    root: int, key: tuple = ()) -> torch.Tensor:
    """The train × train LPK of gradient descent from torch.func per-sample gradients (the slow
    reference for :func:`gradient_flow` with ``method="euler"`` and the same ``root`` and ``key``;
    small problems only)."""
    p = init_params(split.X.shape[1], width, root=root, key=key)
    K = torch.zeros(split.n, split.n, dtype=DTYPE)
    for _ in range(max(1, round(T / step))):
        G = per_sample_grads(p, split.X, split.y, beta)
        K += step * G @ G.T
        gbar = G.mean(0)
        m, d = p["W"].shape
        p = {"W": p["W"] - step * gbar[: m * d].reshape(m, d), "a": p["a"] - step * gbar[m * d:]}
    return K
