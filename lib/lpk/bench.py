"""Chapter 06's gradient flow both ways in one process: the earlier right-hand side and RK4 update
(:func:`previous_rk4`, kept here as the benchmark's baseline) beside :func:`lib.lpk.flow.gradient_flow`,
on the chapter's default sweep point and on its main run (kernels and the torch.func trace)::

    python -m lib.lpk.bench

prints, per case, the CPU seconds of each path, their ratio and the largest relative difference
of w_T, Tr K_T, 1ᵀK_T1 and K_T. The earlier right-hand side evaluated the features σ(Wx) five
times per stage with kernels, recomputed the inputs' Gram matrices, and built the torch.func
trace by concatenating the N × #params matrix of per-sample gradients; both paths compute the
same quantities (differences are rounding).
"""

from __future__ import annotations

import math
import time

import torch

from lib.lpk.data import Split, digits_1v7
from lib.lpk.flow import gradient_flow
from lib.lpk.network import _features, init_params, logistic_slope, loss_grad_gram, per_sample_grads
from lib.sweep import one_thread


def _previous_rates(p, split: Split, beta: float, kernels: bool, brute_trace: bool):
    m, n = p["a"].shape[0], split.n
    h, d = _features(p, split.X, beta)
    a = p["a"]
    s = logistic_slope(h @ a / math.sqrt(m), split.y)
    sn = s / n
    g = {"W": ((d * a) * sn[:, None]).T @ split.X / math.sqrt(m), "a": h.T @ sn / math.sqrt(m)}
    tangent = ((h ** 2).sum(1) + (d ** 2 * a ** 2).sum(1) * (split.X ** 2).sum(1)) / m
    tr = float((s ** 2 * tangent).sum())
    one = float(n ** 2 * ((g["W"] ** 2).sum() + (g["a"] ** 2).sum()))
    K = Kt = None
    if kernels:
        K = loss_grad_gram(p, split.X, split.y, split.X, split.y, beta)
        Kt = loss_grad_gram(p, split.X_test, split.y_test, split.X, split.y, beta)
    tr_ref = float((per_sample_grads(p, split.X, split.y, beta) ** 2).sum()) if brute_trace else 0.0
    return {"W": -g["W"], "a": -g["a"]}, tr, one, K, Kt, tr_ref


def previous_rk4(split: Split, width: int, T: float, step: float, *, beta: float = 10.0, root: int,
                 key: tuple = (), kernels: bool = False, brute_trace: bool = False) -> dict:
    """The earlier RK4 loop of :func:`lib.lpk.flow.gradient_flow` (without its recordings): w_T,
    Tr K_T, 1ᵀK_T1, the torch.func Tr K_T, and K_T with ``kernels``."""
    n_steps = max(1, round(T / step))
    h = T / n_steps
    p = init_params(split.X.shape[1], width, root=root, key=key)
    K = torch.zeros(split.n, split.n, dtype=torch.float64) if kernels else None
    tr = one = tr_ref = 0.0
    weights = (1 / 6, 1 / 3, 1 / 3, 1 / 6)
    with one_thread():
        for _ in range(n_steps):
            stages, q = [], p
            for i, c in enumerate((0.0, 0.5, 0.5, 1.0)):
                if i:
                    q = {k: p[k] + c * h * stages[-1][0][k] for k in p}
                stages.append(_previous_rates(q, split, beta, kernels, brute_trace))
            p = {k: p[k] + h * sum(wt * st[0][k] for wt, st in zip(weights, stages)) for k in p}
            tr += h * sum(wt * st[1] for wt, st in zip(weights, stages))
            one += h * sum(wt * st[2] for wt, st in zip(weights, stages))
            tr_ref += h * sum(wt * st[5] for wt, st in zip(weights, stages))
            if kernels:
                K += h * sum(wt * st[3] for wt, st in zip(weights, stages))
    return {"params": p, "trace_K": tr, "sum_K": one, "trace_K_torch_func": tr_ref, "K": K}


def _rel(a, b) -> float:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max())


def bench(cases=(("sweep point (digits, n = 200, m = 128, T = 5000)", 5000.0, {}),
                 ("main run (kernels and torch.func trace, T = 1000)", 1000.0,
                  {"kernels": True, "brute_trace": True})),
          repeats: int = 2) -> list[dict]:
    """Time both paths on each case (CPU seconds, best of ``repeats``, alternating) and compare."""
    split = digits_1v7(200, noise=0.2, root=0, key=(0,)).with_noisy_test()
    rows = []
    for name, T, kw in cases:
        best = {"previous": math.inf, "current": math.inf}
        for _ in range(repeats):
            t = time.process_time()
            old = previous_rk4(split, 128, T, 10.0, root=0, key=(0,), **kw)
            best["previous"] = min(best["previous"], time.process_time() - t)
            t = time.process_time()
            new = gradient_flow(split, 128, T, 10.0, method="rk4", root=0, key=(0,), **kw)
            best["current"] = min(best["current"], time.process_time() - t)
        diff = max(_rel(new.params[k], old["params"][k]) for k in ("W", "a"))
        diff = max(diff, _rel(new.trace_K[-1], old["trace_K"]), _rel(new.sum_K[-1], old["sum_K"]))
        if kw.get("kernels"):
            diff = max(diff, _rel(new.K, old["K"]), _rel(new.extras["trace_K_torch_func"],
                                                         old["trace_K_torch_func"]))
        rows.append({"case": name, **best, "ratio": best["previous"] / best["current"], "max_rel_diff": diff})
        print(f"{name}: previous {best['previous']:.3f} s, current {best['current']:.3f} s CPU, "
              f"ratio {rows[-1]['ratio']:.2f}, max relative difference {diff:.1e}", flush=True)
    return rows


if __name__ == "__main__":
    bench()
