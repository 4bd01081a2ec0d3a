"""Iterative REINFORCE training of the direct route and the two curricula (intuition only: counts
depend on batch size and step size), with the exact reward-hacking share."""

from __future__ import annotations

import math

import numpy as np

from lib.curriculum.policy import greedy, reinforce_gradient, sample_paths
from lib.curriculum.tree import ReasoningTree, correct_paths
from lib.stats import softmax


def test_accuracy(tree: ReasoningTree, logits: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Accuracy of each greedy chain on a fixed test set of inputs: ``logits (..., k, d)``.
    A depth whose largest logit is tied (e.g. one never trained) has no greedy choice, so the
    policy scores 0 there, as in the one-step protocol (ties are not a choice): otherwise the
    first index would win every tie and score whatever that index happens to do."""
    path, unique = greedy(logits)
    batch = path.shape[:-1]
    z = tree.prefix_answers(x_test[None], path.reshape(-1, 1, tree.k))[..., -1]  # (B, n_test)
    z_star = tree.prefix_answers(x_test[None], tree.target_paths((1, 1)))[..., -1]
    return np.where(unique.all(axis=-1), (z == z_star).mean(axis=-1).reshape(batch), 0.0)


def train(tree: ReasoningTree, route: str, *, seeds: int, budget: int, batch: int, lr: float,
          rng: np.random.Generator, n_test: int = 8192, evals: int = 60, baseline: bool = True,
          advance_at: float = 0.95, ema: float = 0.9) -> dict:
    """REINFORCE from uniform logits for ``seeds`` independent runs (vectorised), ``budget``
    rollouts each, batches of ``batch``.  Curricula advance a run to its next stage when an
    exponential moving average of its batch reward reaches ``advance_at``; the last stage is
    the full task.  Records, at ``evals`` log-spaced points: greedy test accuracy on ``n_test``
    inputs, the stage, and the fraction of rewarded rollouts whose judged path is wrong
    ("right answer, wrong path") with its exact expectation under the policies of the same
    window (``hacked_theory``), and the window's counts behind it (``rewarded``,
    ``hacked_count``) with the mean, variance and third cumulant of the hacked count given the
    rewarded counts and the policies (``hacked_mean``, ``hacked_var``, ``hacked_k3``: sums over
    the window's steps of the binomial cumulants with the exact per-step hacking probability)."""
    k, d = tree.k, tree.d
    theta = np.zeros((seeds, k, d))
    stage = np.ones(seeds, dtype=np.int64) if route != "direct" else np.full(seeds, k)
    avg = np.zeros(seeds)
    x_test = tree.sample_inputs(rng, (n_test,))
    steps = budget // batch
    marks = np.unique(np.geomspace(1, steps, evals).astype(int))
    rec = {"samples": [], "accuracy": [], "stage": [], "hacked": [], "hacked_theory": [],
           "reward": [], "rewarded": [], "hacked_count": [], "hacked_mean": [], "hacked_var": [],
           "hacked_k3": []}
    target = np.asarray(tree.target)
    hacked_acc, rewarded_acc = np.zeros(seeds), np.zeros(seeds)
    hacked_exp, rewarded_exp = np.zeros(seeds), np.zeros(seeds)  # exact expectations
    # cumulants of the hacked count given the rewarded counts: a rewarded rollout at step t is
    # hacked with probability p_t = (1−c_t)q / (c_t + (1−c_t)q), independently given the policy
    cum = np.zeros((3, seeds))
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
        p_h = (1 - c) * tree.q / (c + (1 - c) * tree.q)
        cum += (r > 0).sum(axis=-1) * np.array([p_h, p_h * (1 - p_h), p_h * (1 - p_h) * (1 - 2 * p_h)])
        if t in marks:
            rec["samples"].append(t * batch)
            rec["accuracy"].append(test_accuracy(tree, theta, x_test))
            rec["stage"].append(stage.copy())
            rec["hacked"].append(hacked_acc / np.maximum(rewarded_acc, 1))
            rec["hacked_theory"].append(hacked_exp / rewarded_exp)
            rec["reward"].append(avg.copy())
            rec["rewarded"].append(rewarded_acc.copy())
            rec["hacked_count"].append(hacked_acc.copy())
            for key, v in zip(("hacked_mean", "hacked_var", "hacked_k3"), cum):
                rec[key].append(v.copy())
            cum[:] = 0
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


def martingale_p(observed: float, mean: float, var: float) -> float:
    """Two-sided p-value bound for a sum of increments in [0, 1] (Bernoulli draws whose
    probabilities may depend on the past, as in training) against its summed conditional means
    ``mean`` and variances ``var``, by Freedman's inequality:
    ``P(|S − mean| ≥ a) ≤ 2·exp(−a² / (2(var + a/3)))``.  Conservative (the true rate is below
    the bound) and valid where the count is small and discrete, or its law skewed, and the
    probabilities adapt to earlier draws, where a normal or three-moment approximation is not."""
    a = abs(observed - mean)
    if a == 0:
        return 1.0
    return float(min(1.0, 2 * math.exp(-a * a / (2 * (max(var, 0.0) + a / 3)))))


def hacking_fraction(c: float, q: float) -> float:
    """Share of rewarded rollouts whose judged path is wrong ("right answer, wrong path") when
    a rollout is correct with probability ``c``: ``(1−c)q / (c + (1−c)q)``."""
    return (1 - c) * q / (c + (1 - c) * q)


def solve_time(tree: ReasoningTree, route: str, *, budget: int, batch: int, lr: float,
               rng: np.random.Generator, n_test: int = 8192, baseline: bool = True,
               advance_at: float = 0.95, ema: float = 0.5, level: float = 0.99) -> dict:
    """One run of :func:`train`'s REINFORCE (same updates, same stage rule), stopped as soon as
    the greedy chain reaches test accuracy ``level`` or the run is *frozen*.

    Frozen: every depth's softmax is exactly one-hot (in floating point) and the run is at its
    last stage.  Then every rollout is the same chain, the REINFORCE gradient is zero (with the
    mean baseline, up to rounding of the batch mean, which cannot move a logit gap that already
    underflows the softmax) and the greedy chain never changes again, so the rest of the budget
    is known without simulating it.  Large step sizes (the paper's 10⁸ and 10⁵) freeze a run
    after its first batch.  The greedy chain's accuracy is evaluated after every step (cached
    per chain).  Returns ``solved_at`` (rollouts used when accuracy first reached ``level``; inf
    if never within ``budget``), ``frozen_at`` (rollouts used when frozen, or None), the final
    ``accuracy`` and the final ``stage``."""
    k, d = tree.k, tree.d
    theta = np.zeros((1, k, d))
    stage = k if route == "direct" else 1
    avg = 0.0
    x_test = tree.sample_inputs(rng, (n_test,))
    target = np.asarray(tree.target)
    seen: dict[tuple, float] = {}

    def accuracy() -> float:
        path, unique = greedy(theta[0])
        chain = (*path.tolist(), bool(unique.all()))
        if chain not in seen:
            seen[chain] = float(test_accuracy(tree, theta, x_test)[0])
        return seen[chain]

    solved, frozen = math.inf, None
    for t in range(1, budget // batch + 1):
        paths = sample_paths(theta, batch, rng)  # (1, B, k)
        depth_idx = np.arange(k)
        if route == "hint":
            hinted = depth_idx < k - stage
            paths = np.where(hinted[None, None, :], target, paths)
            trained, length = (~hinted).astype(float)[None], k
        elif route == "depth":
            trained, length = (depth_idx < stage).astype(float)[None], stage
        else:
            trained, length = np.ones((1, k)), k
        x = tree.sample_inputs(rng, (1, batch))
        r = tree.terminal_reward(x, paths[..., :length])
        theta += lr * reinforce_gradient(theta, paths, r, trained, baseline)
        avg = ema * avg + (1 - ema) * float(r.mean())
        if route != "direct" and avg >= advance_at and stage < k:
            stage, avg = stage + 1, 0.0
        if accuracy() >= level:
            solved = t * batch
            break
        if stage == k and np.all(softmax(theta[0]).max(axis=-1) == 1.0):
            frozen = t * batch
            break
    return {"solved_at": solved, "frozen_at": frozen, "accuracy": accuracy(), "stage": stage}


def fisher_greater_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided p-value of Fisher's exact test that the first proportion exceeds the second."""
    from scipy import stats

    return float(stats.fisher_exact([[int(k1), n1 - int(k1)], [int(k2), n2 - int(k2)]],
                                    alternative="greater")[1])


def fisher_power(n: int, p1: float, p2: float, level: float) -> float:
    """Exact power of :func:`fisher_greater_p` at ``level`` with ``n`` runs per arm, when the
    first arm succeeds with probability ``p1`` and the second with ``p2``."""
    from scipy import stats

    w1, w2 = stats.binom.pmf(np.arange(n + 1), n, p1), stats.binom.pmf(np.arange(n + 1), n, p2)
    return float(sum(w1[a] * w2[b] for a in range(n + 1) for b in range(n + 1)
                     if w1[a] * w2[b] > 0 and fisher_greater_p(a, n, b, n) < level))


def fisher_detectable(n: int, level: float, p2: float = 0.0, power: float = 0.8, tol: float = 1e-4) -> float:
    """The smallest success probability ``p1`` of the first arm that :func:`fisher_greater_p` at
    ``level``, with ``n`` runs per arm, detects against a second arm at ``p2`` with probability at
    least ``power`` (bisection on :func:`fisher_power`, which grows with ``p1``); ``inf`` if even
    ``p1 = 1`` is not detected that often."""
    if fisher_power(n, 1.0, p2, level) < power:
        return math.inf
    lo, hi = p2, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fisher_power(n, mid, p2, level) >= power else (mid, hi)
    return hi


def solve_rate_ceiling(solved: int, runs: int, confidence: float = 0.95) -> float:
    """One-sided upper Clopper–Pearson bound, at ``confidence``, on the solve rate of an arm that
    solved ``solved`` of ``runs`` independent runs: the largest rate that arm's design is
    consistent with (1 when every run solved)."""
    from scipy import stats

    solved, runs = int(solved), int(runs)
    if not 0 <= solved <= runs or runs < 1:
        raise ValueError(f"need 0 ≤ solved ≤ runs and runs ≥ 1, got {solved} of {runs}")
    if solved == runs:
        return 1.0
    return float(stats.beta.ppf(confidence, solved + 1, runs - solved))
