"""Chapter 05's post-training loop compiled (numba): the same trainers as :mod:`lib.tmc.methods`,
step for step, with the same random draws in the same order from the same
:class:`numpy.random.Generator` (numba draws from its bit generator, so the caller's generator
advances exactly as under :func:`lib.tmc.methods.post_train`).

One step of a trainer touches a few chains of a few layers: in numpy it is some forty small array
operations (about 80 µs of interpreter and dispatch overhead for a few hundred flops). Compiled,
the step is a few loops over the same numbers. The arithmetic follows numpy's order (sequential
row sums and cumulative sums, ``np.add.at`` and ``np.bincount`` in chain order, no fused
multiply-adds); only ``exp`` and ``log`` come from the C library instead of numpy's own vector
routines, which can differ in the last bit, so the two paths agree to round-off, not bitwise.

The logits are packed into one array ``(L−1, R, C)`` (``R``, ``C`` the largest layer sizes) with
each layer's true sizes beside it; padding is never read. :func:`post_train_compiled` is what
:func:`lib.tmc.methods.post_train` calls; ``python -m lib.tmc.bench`` runs the benchmark
(both paths in one process: time ratio and largest difference).
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Method codes of the compiled kernel (the names of :data:`lib.tmc.methods.TRAINERS`).
CODES = {"REINFORCE": 0, "RL-rej": 1, "RAFT": 2, "PPO": 3, "KL-GRPO": 4}


@numba.njit(cache=True)
def _softmax(z, rows, cols, out):
    """Row-wise softmax of every layer (numpy's order: max, exp of the shift, sequential sum)."""
    for l in range(z.shape[0]):
        for s in range(rows[l]):
            top = z[l, s, 0]
            for c in range(1, cols[l]):
                if z[l, s, c] > top:
                    top = z[l, s, c]
            total = 0.0
            for c in range(cols[l]):
                out[l, s, c] = math.exp(z[l, s, c] - top)
                total += out[l, s, c]
            for c in range(cols[l]):
                out[l, s, c] = out[l, s, c] / total


@numba.njit(cache=True)
def _sample(trans, cols, start, n, rng, chains):
    """``n`` chains layer by layer by inverse-CDF draws, ``rng.random(n)`` per layer (as
    :func:`lib.tmc.policy.sample_chains`), into ``chains[:n]``."""
    for i in range(n):
        chains[i, 0] = start
    for l in range(trans.shape[0]):
        for i in range(n):
            u = rng.random()
            row = chains[i, l]
            cdf = 0.0
            above = 0
            for c in range(cols[l]):
                cdf += trans[l, row, c]
                if u > cdf:
                    above += 1
            chains[i, l + 1] = min(above, cols[l] - 1)


@numba.njit(cache=True)
def _rewards(chains, n, strides, uniforms, rex, r):
    """1 if a chain is in the instance's correct set (``uniforms < rex`` at its path index)."""
    for i in range(n):
        k = 0
        for l in range(strides.size):
            k += chains[i, l + 1] * strides[l]
        r[i] = 1.0 if uniforms[k] < rex[k] else 0.0


@numba.njit(cache=True)
def _path_prob(trans, chains, i):
    p = 1.0
    for l in range(trans.shape[0]):
        p = p * trans[l, chains[i, l], chains[i, l + 1]]
    return p


@numba.njit(cache=True)
def _ascend(z, trans, rows, cols, chains, n, w, lr, grad, counts):
    """z ← z + lr·Σ_i w_i ∇log π(chain_i) (:func:`lib.tmc.policy.score_sum` then ``step``)."""
    for l in range(z.shape[0]):
        grad[:] = 0.0
        counts[:] = 0.0
        for i in range(n):
            grad[chains[i, l], chains[i, l + 1]] += w[i]
        for i in range(n):
            counts[chains[i, l]] += w[i]
        for s in range(rows[l]):
            for c in range(cols[l]):
                z[l, s, c] = z[l, s, c] + lr * (grad[s, c] - counts[s] * trans[l, s, c])


@numba.njit(cache=True)
def _post_train(code, z0, rows, cols, start, strides, rex, ref_trans, steps, lr, record_every, rng,
                probes, group, beta, epochs, clip):
    z = z0.copy()
    trans = np.empty_like(z)
    now = np.empty_like(z)
    theta = np.empty_like(z)
    history = np.empty((steps // record_every + 1,) + z.shape)
    history[0] = z
    uniforms = np.empty(rex.size)
    n_max = max(probes, group, 1)
    chains = np.empty((n_max, z.shape[0] + 1), np.int64)
    r = np.empty(n_max)
    w = np.empty(n_max)
    old = np.empty(n_max)
    adv = np.empty(n_max)
    grad = np.empty(z.shape[1:])
    counts = np.empty(z.shape[1])
    for t in range(1, steps + 1):
        _softmax(z, rows, cols, trans)
        for k in range(rex.size):  # the instance: rng.random(n_paths) < Rex
            uniforms[k] = rng.random()
        if code == 0 or code == 1:  # REINFORCE; RL-rej after its probes
            take = True
            if code == 1:
                _sample(trans, cols, start, probes, rng, chains)
                _rewards(chains, probes, strides, uniforms, rex, r)
                for i in range(probes):
                    if r[i] > 0.0:
                        take = False
            if take:
                _sample(trans, cols, start, 1, rng, chains)
                _rewards(chains, 1, strides, uniforms, rex, w)
                _ascend(z, trans, rows, cols, chains, 1, w, lr, grad, counts)
        else:
            _sample(trans, cols, start, group, rng, chains)
            _rewards(chains, group, strides, uniforms, rex, r)
            total = 0.0
            for i in range(group):
                total += r[i]
            if code == 2:  # RAFT
                if total > 0.0:
                    for i in range(group):
                        w[i] = r[i] / total
                    _ascend(z, trans, rows, cols, chains, group, w, lr, grad, counts)
            elif code == 4:  # KL-GRPO
                for i in range(group):
                    log_ratio = math.log(_path_prob(trans, chains, i)) - math.log(_path_prob(ref_trans, chains, i))
                    w[i] = (r[i] - (total - r[i]) / (group - 1) - beta * log_ratio) / group
                _ascend(z, trans, rows, cols, chains, group, w, lr, grad, counts)
            else:  # PPO
                mean = total / group
                moves = False
                for i in range(group):
                    adv[i] = r[i] - mean
                    if adv[i] != 0.0:
                        moves = True
                if moves:
                    for i in range(group):
                        old[i] = _path_prob(trans, chains, i)
                    theta[:] = z
                    for _ in range(epochs):
                        _softmax(theta, rows, cols, now)
                        for i in range(group):
                            ratio = _path_prob(now, chains, i) / old[i]
                            clipped = (adv[i] > 0 and ratio > 1 + clip) or (adv[i] < 0 and ratio < 1 - clip)
                            w[i] = adv[i] * ratio * (0.0 if clipped else 1.0) / group
                        _ascend(theta, now, rows, cols, chains, group, w, lr, grad, counts)
                    for l in range(z.shape[0]):  # the step of the net change: z + lr·((θ − z)/lr)
                        for s in range(rows[l]):
                            for c in range(cols[l]):
                                z[l, s, c] = z[l, s, c] + lr * ((theta[l, s, c] - z[l, s, c]) / lr)
        if t % record_every == 0:
            history[t // record_every] = z
    return history


def pack(matrices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer matrices as one zero-padded array ``(L−1, R, C)`` and their row and column counts."""
    rows = np.array([a.shape[0] for a in matrices], np.int64)
    cols = np.array([a.shape[1] for a in matrices], np.int64)
    out = np.zeros((len(matrices), rows.max(), cols.max()))
    for l, a in enumerate(matrices):
        out[l, :rows[l], :cols[l]] = a
    return out, rows, cols


def post_train_compiled(setting, method: str, steps: int, lr: float, rng: np.random.Generator,
                        record_every: int = 10, probes: int = 4, group: int = 4, beta: float = 0.1,
                        epochs: int = 2, clip: float = 0.2, **_) -> list:
    """:func:`lib.tmc.methods.post_train` compiled: the same history of logits (to round-off)
    from the same draws of ``rng``."""
    from lib.tmc.policy import softmax

    z0, rows, cols = pack(setting.ref_logits)
    ref_trans = pack(softmax(setting.ref_logits))[0]
    sizes = setting.tmc.sizes[1:]
    strides = np.array([math.prod(sizes[l + 1:]) for l in range(len(sizes))], np.int64)
    history = _post_train(CODES[method], z0, rows, cols, int(setting.task.start), strides,
                          np.ascontiguousarray(setting.rex, float), ref_trans, int(steps), float(lr),
                          int(record_every), rng, int(probes), int(group), float(beta), int(epochs),
                          float(clip))
    return [[h[l, :rows[l], :cols[l]].copy() for l in range(len(rows))] for h in history]


# ---------------------------------------------------------------------------------------------
# Benchmark: the chapter's loop both ways in one process
# ---------------------------------------------------------------------------------------------
