"""Test-time scaling: best-of-n with the terminal oracle against layer-wise accept/reject (LTAR)
with the family oracle, run literally and in exact expectation."""

from __future__ import annotations

import math

import numpy as np

from lib.curriculum.tree import ReasoningTree


def rejection_cost(c: float, q: float, m: int) -> dict:
    """Exact expectations for a rejection sampler whose candidates are right with probability
    ``c``, verified by up to ``m`` oracle calls on fresh inputs (a wrong candidate passes each
    with probability ``q``), stopping at the first candidate that passes all ``m``:

        P(accept) per candidate = c + (1−c)q^m,  E[candidates] = 1 / P(accept),
        E[calls] = (c·m + (1−c)(1−q^m)/(1−q)) · E[candidates]           (Wald),
        P(the accepted candidate is right) = c / P(accept).

    Variances (``calls_var``, ``candidates_var``): the accepted candidate uses ``m`` calls; the
    ``K = N − 1 ~ Geometric`` rejected ones before it use ``Y`` calls each, i.i.d. with
    ``P(Y = j) ∝ q^{j−1}(1−q)``, ``j = 1..m``, independent of ``N`` and of which candidate is
    accepted; so ``Var = E[K]·Var Y + Var(K)·(E Y)²``.  The third cumulant (``calls_k3``, for
    skew-aware tests of a mean) follows from the same compound sum,
    ``κ₃ = E[K]·κ₃(Y) + 3·Var(K)·E[Y]·Var(Y) + κ₃(K)·E[Y]³`` with
    ``κ₃(K) = (1−P)(2−P)/P³`` for ``P = P(accept)``."""
    p_acc = c + (1 - c) * q**m
    per_wrong = (1 - q**m) / (1 - q) if q < 1 else m
    cands = 1 / p_acc
    j = np.arange(1, m + 1)
    w = q ** (j - 1) * (1 - q)
    w = w / w.sum() if w.sum() > 0 else np.eye(m)[-1]
    ey, ey2 = float(w @ j), float(w @ j**2)
    vy, k3y = ey2 - ey**2, float(w @ (j - ey) ** 3)
    n_rej, var_rej = (1 - p_acc) / p_acc, (1 - p_acc) / p_acc**2
    k3_rej = (1 - p_acc) * (2 - p_acc) / p_acc**3
    return {"candidates": cands, "calls": (c * m + (1 - c) * per_wrong) * cands,
            "success": c / p_acc, "candidates_var": var_rej,
            "calls_var": n_rej * vy + var_rej * ey**2,
            "calls_k3": n_rej * k3y + 3 * var_rej * ey * vy + k3_rej * ey**3}


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
    k = tree.k
    # depths run with a right prefix: τ = j with probability s^{j−1}(1−s) (j < k), s^{k−1} (j = k)
    p_tau = np.append(s ** np.arange(k - 1) * (1 - s), s ** (k - 1))
    tau = np.arange(1, k + 1)
    mean_tau = tau * right["calls"] + (k - tau) * stuck["calls"]
    var_tau = tau * right["calls_var"] + (k - tau) * stuck["calls_var"]
    calls_var = float(p_tau @ var_tau + p_tau @ (mean_tau - calls) ** 2)
    return {"best_of_n": {"m": m_b, "calls": best["calls"], "calls_var": best["calls_var"],
                          "calls_k3": best["calls_k3"], "steps": k * best["candidates"],
                          "success": best["success"]},
            "ltar": {"m": m_l, "calls": calls, "calls_var": calls_var, "steps": steps,
                     "success": s**k, "clean": float(p_tau[-1]),
                     "clean_calls": k * right["calls"], "clean_calls_var": k * right["calls_var"],
                     "clean_calls_k3": k * right["calls_k3"]}}


def mean_test_z(sample_mean: float, n: int, mean: float, var: float, k3: float,
                lattice: float = 0.0) -> float:
    """A two-sided test of ``n`` i.i.d. draws' mean against a law with the given mean,
    variance and third cumulant, as the equivalent normal |z|.  The mean's law is approximated
    by a Pearson type III (shifted gamma) distribution with the same three cumulants, so the
    level holds for skewed costs (a rejection sampler's calls are nearly exponential, skewness
    ≈ 2) where the plain normal |z| would raise false alarms in the long upper tail: with the
    returned value compared to ``Φ⁻¹(1 − α/2)`` the test has level ≈ α.  When the draws are
    integers on a ``lattice`` (1 for counts and calls), each tail is taken half a lattice step
    beyond the observed sum (continuity correction): without it an observed 0 against a mean
    near 0 (the most likely count) would look extreme to the continuous law."""
    from scipy import stats

    sd = math.sqrt(max(var, 0.0) / n)
    if sd < 1e-9 * max(1.0, abs(mean)):  # a degenerate law: only its mean can occur
        return 0.0 if abs(sample_mean - mean) <= 1e-6 * max(1.0, abs(mean)) else math.inf
    skew = k3 / var**1.5 / math.sqrt(n)
    law = stats.pearson3(skew, loc=mean, scale=sd)
    half = lattice / (2 * n)
    p = 2 * min(law.cdf(sample_mean + half), law.sf(sample_mean - half))
    return float(stats.norm.isf(min(p, 1.0) / 2)) if p > 0 else math.inf


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
    to ``m`` family-oracle calls each, commit the first that passes, go one level deeper.
    Per repeat: calls, generated steps, whether the chain is right, and ``clean``: every depth
    started from a right prefix (no false commit before the last depth)."""
    prefix = np.zeros((repeats, 0), dtype=np.int64)
    calls = np.zeros(repeats)
    steps = np.zeros(repeats)
    clean = np.ones(repeats, dtype=bool)  # every depth so far started from a right prefix
    for ell in range(1, tree.k + 1):
        def propose(active, b, prefix=prefix, ell=ell):
            child = rng.integers(0, tree.d, size=(active.size, b, 1))
            return np.concatenate([np.broadcast_to(prefix[active][:, None, :],
                                                   (active.size, b, ell - 1)), child], axis=-1)

        if ell > 1:
            clean &= tree.is_correct(prefix)
        path, c, n = _rejection_run(tree, rng, repeats, propose, ell, m, block)
        prefix = path
        calls += c
        steps += n
    return {"calls": calls, "steps": steps, "right": tree.is_correct(prefix), "clean": clean}
