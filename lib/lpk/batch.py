"""Gradient flow (RK4) for a batch of same-shaped runs at once: B training sets of the same size,
B initialisations of the same width, one batched tensor operation per step instead of B. Each
member follows exactly the recursion of :func:`lib.lpk.flow.gradient_flow` with
``method="rk4"`` (same step, same recording times), so a member's trajectory equals the run it
stands for up to floating-point rounding (tested); a member's numbers never depend on who else is
in the batch.

Optionally the loss path kernel is accumulated on *probe* points P of each member (labelled
points that need take no part in training): the (p × p) block K_T(P, P), from the closed-form
loss-gradient inner products of :mod:`lib.lpk.network`. That is what the 2023 computable bound
(:func:`lib.lpk.bounds.chen2023_bound`) needs: the LPK of one fixed sample S under the flows
trained on other samples S′.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lib.lpk.data import Split
from lib.lpk.flow import Trajectory
from lib.lpk.network import DTYPE, LINEAR_ABOVE, init_params
from lib.sweep import one_thread


def _softplus(x, beta):
    return torch.nn.functional.softplus(x, beta=beta, threshold=LINEAR_ABOVE)


def _slopes(W, a, X, y, beta):
    """Per-sample ∂ℓ/∂f, the features σ(u) and σ'(u) of every member: X (B, N, d)."""
    m = a.shape[-1]
    u = X @ W.transpose(1, 2)                                   # (B, N, m)
    h, dh = _softplus(u, beta), torch.sigmoid(u.mul_(beta))
    f = (h @ a[..., None])[..., 0] / math.sqrt(m)
    return -y * torch.sigmoid(-y * f), h, dh


def _gram(a, Xa, sa, ha, da, Xb, sb, hb, db, XaXb):
    """⟨∇ℓ(w, z_a), ∇ℓ(w, z_b)⟩ for every member (batched :func:`~lib.lpk.network.features_gram`),
    with ``XaXb`` = Xa Xbᵀ."""
    m = a.shape[-1]
    a2 = (a ** 2)[:, None, :]
    theta = (ha @ hb.transpose(1, 2) + ((da * a2) @ db.transpose(1, 2)) * XaXb) / m
    return sa[:, :, None] * theta * sb[:, None, :]


def _rates(W, a, X, y, beta, probes, x_sq):
    """−∇L_S of every member, the integrands of Tr K and 1ᵀK1, and (with probes) of K(P, P);
    ``x_sq`` (B, N) holds the rows' ‖x‖². The same arrangement as
    :func:`~lib.lpk.network.gradient_and_tangent`."""
    m, n = a.shape[-1], X.shape[1]
    s, h, dh = _slopes(W, a, X, y, beta)
    sn, r = s / n, math.sqrt(m)
    ga = (sn[:, None, :] @ h)[:, 0] / r                                               # (B, m)
    gW = (dh.transpose(1, 2) @ (sn[..., None] * X)) * (a / r)[..., None]              # (B, m, d)
    tangent = ((h * h).sum(-1) + ((dh * dh) @ (a * a)[..., None])[..., 0] * x_sq) / m
    tr = (s ** 2 * tangent).sum(-1)
    one = n ** 2 * ((gW ** 2).sum((1, 2)) + (ga ** 2).sum(-1))
    KP = None
    if probes is not None:
        P, yP, PP = probes
        sP, hP, dP = _slopes(W, a, P, yP, beta)
        KP = _gram(a, P, sP, hP, dP, P, sP, hP, dP, PP)
    return -gW, -ga, tr, one, KP


def _rk4_sum(x, h, k1, k2, k3, k4):
    """x + (h/6)(k1 + 2k2 + 2k3 + k4)."""
    return torch.add(x, torch.add(k1, k2, alpha=2.0).add_(k3, alpha=2.0).add_(k4), alpha=h / 6)


def _losses(W, a, X, y, beta):
    m = a.shape[-1]
    f = (_softplus(X @ W.transpose(1, 2), beta) @ a[..., None])[..., 0] / math.sqrt(m)
    return _softplus(-y * f, 1.0)


def gradient_flow_batch(splits: list[Split], width: int, T: float, step: float, *, beta: float = 10.0,
                        root: int, keys: list[tuple], n_records: int = 50,
                        probes: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
    """RK4 gradient flow of every member ``splits[b]`` from the initialisation
    :func:`~lib.lpk.network.init_params` draws for ``(root, keys[b])``: the members' training sets
    must share their size and input dimension, their test sets too. Returns one
    :class:`~lib.lpk.flow.Trajectory` per member (``K`` and ``K_test`` are None) and, with
    ``probes`` (one ``(X_P, y_P)`` per member, of one size), the probe kernels K_T(P, P) as a
    (B, p, p) tensor (else None)."""
    if not (T > 0 and step > 0):
        raise ValueError("T and step must be positive")
    if len(keys) != len(splits) or not splits:
        raise ValueError("one key per split, and at least one split")
    stack = lambda xs: torch.stack(list(xs))  # noqa: E731
    X, y = stack(s.X for s in splits), stack(s.y for s in splits)
    Xt, yt = stack(s.X_test for s in splits), stack(s.y_test for s in splits)
    p0 = [init_params(X.shape[2], width, root=root, key=k) for k in keys]
    W, a = stack(p["W"] for p in p0), stack(p["a"] for p in p0)
    pr = None
    if probes is not None:
        P = stack(p[0] for p in probes)
        pr = (P, stack(p[1] for p in probes), P @ P.transpose(1, 2))
    x_sq = (X ** 2).sum(-1)
    B = X.shape[0]
    n_steps = max(1, round(T / step))
    h = T / n_steps
    tr = torch.zeros(B, dtype=DTYPE)
    one = torch.zeros(B, dtype=DTYPE)
    KP = None
    if pr is not None:
        KP = torch.zeros(B, pr[0].shape[1], pr[0].shape[1], dtype=DTYPE)
    record_at = set(np.unique(np.concatenate(
        [[0], np.geomspace(1, n_steps, min(n_records, n_steps))]).round().astype(int)).tolist())
    rec = {k: [] for k in ("t", "train", "test", "tr", "one")}

    def record(k):
        rec["t"].append(k * h)
        rec["train"].append(_losses(W, a, X, y, beta).mean(-1))
        rec["test"].append(_losses(W, a, Xt, yt, beta).mean(-1))
        rec["tr"].append(tr.clone())
        rec["one"].append(one.clone())

    with one_thread():
        for k in range(n_steps):
            if k in record_at:
                record(k)
            stages, qW, qa = [], W, a
            for c in (0.0, 0.5, 0.5, 1.0):
                if c:
                    qW, qa = torch.add(W, stages[-1][0], alpha=c * h), torch.add(a, stages[-1][1], alpha=c * h)
                stages.append(_rates(qW, qa, X, y, beta, pr, x_sq))
            W, a, tr, one = (_rk4_sum(x, h, *(st[i] for st in stages)) for i, x in enumerate((W, a, tr, one)))
            if pr is not None:
                KP = _rk4_sum(KP, h, *(st[4] for st in stages))
        record(n_steps)
    col = lambda key, b: np.array([float(v[b]) for v in rec[key]])  # noqa: E731
    trajs = [Trajectory(T=T, step=h, method="rk4", params0=p0[b], params={"W": W[b], "a": a[b]},
                        times=np.asarray(rec["t"]), train_loss=col("train", b), test_loss=col("test", b),
                        trace_K=col("tr", b), sum_K=col("one", b)) for b in range(B)]
    return trajs, KP
