"""Reading the runs: exact tests on counts of test errors, stage detection, and small-loss
sample selection."""

from __future__ import annotations

import math

import numpy as np

from lib.label_noise.model import LOG2
from lib.label_noise.training import History


def p_rate_at_least(errors: int, trials: int, rate: float) -> float:
    """p-value of "every network's error rate is ≥ ``rate``" given ``errors`` of ``trials``
    pooled test predictions: P(Binomial(trials, rate) ≤ errors). A sum of independent
    binomials with rates ≥ ``rate`` is stochastically larger than Binomial(trials, rate), so
    rejecting when this is below α has false-alarm rate at most α."""
    from scipy.stats import binom

    return float(binom.cdf(errors, trials, rate))


def p_rates_at_least(errors: int, trials, rates) -> float:
    """p-value of "network i's error rate is ≥ ``rates[i]``, for every i" given ``errors`` pooled
    errors of ``trials[i]`` test predictions per network: P(Σ_i Binomial(trials[i], rates[i]) ≤
    errors), computed exactly (the binomials' pmfs convolved). A sum of independent binomials
    with larger rates is stochastically larger, so rejecting below α has false-alarm rate ≤ α."""
    from scipy.stats import binom

    pmf = np.ones(1)
    for n_i, r_i in zip(trials, rates, strict=True):
        pmf = np.convolve(pmf, binom.pmf(np.arange(int(n_i) + 1), int(n_i), float(r_i)))
    return float(min(1.0, pmf[:int(errors) + 1].sum()))


def rise_power(better: int, right_at_start: int, trials: int, alpha: float) -> tuple[float, float]:
    """What the paired rise test (:func:`p_rise`) can show: the smallest rise of the error rate it
    declares at level ``alpha`` given ``better`` improved points (:func:`smallest_detectable_rise`),
    and the largest rise the design could show at all, every point right at the start turning
    wrong and none improving beyond ``better``: (right_at_start − better)/trials."""
    return smallest_detectable_rise(better, trials, alpha), max(right_at_start - better, 0) / trials


def log10_p_rate_at_least(errors: int, trials: int, rate: float) -> float:
    """log₁₀ of :func:`p_rate_at_least`, for p-values below the smallest float."""
    from scipy.special import logsumexp
    from scipy.stats import binom

    return float(logsumexp(binom.logpmf(np.arange(errors + 1), trials, rate)) / math.log(10.0))


def p_rate_at_most(errors: int, trials: int, rate: float) -> float:
    """p-value of "the error rate is ≤ ``rate``": P(Binomial(trials, rate) ≥ errors)."""
    from scipy.stats import binom

    return float(binom.sf(errors - 1, trials, rate)) if errors > 0 else 1.0


def p_rise(worse: int, better: int) -> float:
    """Exact one-sided McNemar test on paired predictions of the same test points at two times:
    ``worse`` turned from right to wrong, ``better`` from wrong to right. Under "no rise" a
    changed point is at least as likely to have improved, so P(Binomial(worse + better, ½) ≥
    worse) bounds the false-alarm rate."""
    from scipy.stats import binom

    k = worse + better
    return float(binom.sf(worse - 1, k, 0.5)) if worse > 0 else 1.0


def smallest_detectable_rise(better: int, trials: int, alpha: float) -> float:
    """The smallest rise of the error rate, (worse − better)/trials, that :func:`p_rise` declares
    at level ``alpha`` when ``better`` points improved: the least ``worse`` with p < α."""
    worse = 1
    while p_rise(worse, better) >= alpha:
        worse += 1
    return (worse - better) / trials


def detect_stages(h: History, fit: float = 0.98, memorised: float = 0.5) -> tuple[int | None, int | None]:
    """(start of Stage I, start of Stage II) as recording steps: the first step at which at
    least ``fit`` of the clean samples are fitted, and the first step after it at which at
    least ``memorised`` of the noisy samples are fitted to their wrong labels (None if never)."""
    clean, noisy = h.accuracy("clean"), h.accuracy("noisy")
    start = np.flatnonzero(clean >= fit)
    if not len(start):
        return None, None
    later = np.flatnonzero((np.arange(len(h.steps)) >= start[0]) & (noisy >= memorised))
    return int(h.steps[start[0]]), (int(h.steps[later[0]]) if len(later) else None)


def overtake_step(h: History) -> int | None:
    """The first recording step at which the noisy samples' mean max ρ exceeds max γ (memorising
    the noise outgrows the signal), or None if it never does."""
    above = np.flatnonzero(h.mean_rho_max("noisy") > h.gamma_max)
    return int(h.steps[above[0]]) if len(above) else None


def stack_runs(histories, fn) -> np.ndarray:
    """``fn(history)`` of every run side by side: an array shaped (recording steps, runs)."""
    return np.stack([fn(h) for h in histories], axis=1)


def select_small_loss(losses: np.ndarray, threshold: float = LOG2) -> np.ndarray:
    """Sample selection: keep the samples whose loss is at most ``threshold`` (log 2 ⇔ ỹf ≥ 0)."""
    return losses <= threshold


def precision_recall(selected: np.ndarray, clean: np.ndarray) -> tuple[float, float]:
    """Precision (selected that are clean) and recall (clean that are selected)."""
    tp = float(np.sum(selected & clean))
    return tp / max(int(selected.sum()), 1), tp / max(int(clean.sum()), 1)


def stage_one_appears(h: History, fit: float = 0.98, ignored: float = 0.15) -> bool:
    """A clean Stage I: some recorded step with ≥ ``fit`` of the clean samples fitted while at
    most ``ignored`` of the noisy samples are fitted to their wrong labels."""
    return bool(np.any((h.accuracy("clean") >= fit) & (h.accuracy("noisy") <= ignored)))


def reuse_summary(runs, bound: float) -> dict:
    """Pool the runs of :func:`~lib.label_noise.training.run_to_loss` that carry the paper's test
    set (``n_reuse`` > 0): errors and points on it (``errors``, ``trials``, ``error``), on the
    points whose noise vector is a noisy training sample's (``noisy_errors``, ``noisy_n``) and on
    the fresh test set (``fresh_errors``, ``fresh_trials``, ``fresh_error``), per run
    (``per_run``), and p-values: ``p_reading`` of "every network's error on the paper's test set
    is ≥ ``bound``" (:func:`p_rate_at_least`) and ``p_benign`` of "it is at most the fresh-noise
    error" (the pooled fresh error, or one error in the pooled points if none,
    :func:`p_rate_at_most`)."""
    runs = list(runs)
    errors = sum(r["reuse_errors"] for r in runs)
    trials = sum(r["n_reuse"] for r in runs)
    fresh_errors = sum(r["errors"] for r in runs)
    fresh_trials = sum(r["n_test"] for r in runs)
    benign_rate = max(fresh_errors / fresh_trials, 1.0 / fresh_trials)
    return {"errors": errors, "trials": trials, "error": errors / trials,
            "noisy_errors": sum(r["reuse_noisy_errors"] for r in runs),
            "noisy_n": sum(r["reuse_noisy_n"] for r in runs),
            "fresh_errors": fresh_errors, "fresh_trials": fresh_trials, "fresh_error": fresh_errors / fresh_trials,
            "per_run": [r["reuse_errors"] / r["n_reuse"] for r in runs],
            "fresh_per_run": [r["errors"] / r["n_test"] for r in runs],
            "p_reading": p_rate_at_least(errors, trials, bound), "benign_rate": benign_rate,
            "p_benign": p_rate_at_most(errors, trials, benign_rate)}


def pooled_selection(histories, index: int) -> dict:
    """Small-loss selection at recording index ``index`` of each run, pooled over the runs:
    ``precision`` (selected that are clean), ``recall`` (clean that are selected), the share of
    clean samples (``clean_share``, the precision of a selection blind to the loss) and of
    selected samples (``selected_share``)."""
    histories = list(histories)
    selected = [select_small_loss(h.losses(index)) for h in histories]
    tp = sum(int(np.sum(s & h.clean)) for s, h in zip(selected, histories))
    n_sel = sum(int(s.sum()) for s in selected)
    n_clean = sum(int(h.clean.sum()) for h in histories)
    total = sum(len(h.clean) for h in histories)
    return {"precision": tp / max(n_sel, 1), "recall": tp / max(n_clean, 1), "clean_share": n_clean / total,
            "selected_share": n_sel / total}


def stage_one_best(histories, stages) -> np.ndarray:
    """Per run, the best test accuracy inside its detected Stage I (:func:`detect_stages`: from the
    step at which the clean samples are fitted up to, not including, the start of Stage II; from
    step 0 where no Stage I was detected, to the end where no Stage II was)."""
    best = []
    for h, (start, end) in zip(histories, stages, strict=True):
        window = (h.steps >= (start if start is not None else 0)) & ((h.steps < end) if end is not None else True)
        best.append(h.test_accuracy[window].max())
    return np.array(best)


def per_run_reading(runs, alpha: float, bounds=None) -> dict:
    """Theorem 4.2 read per network with the noise rates its training set realised: run i's error
    on the paper's test set is ≥ ``bounds[i]``, by default ½·min(τ̂₊, τ̂₋) from its ``flip_rates``.
    Each run gets the one-sided exact binomial p-value :func:`p_rate_at_least` of its own errors;
    the reading holds unless some run's p is below ``alpha``/k (k runs, Bonferroni), so its
    false-alarm rate is at most ``alpha``. Returns ``bounds``, ``errors`` (per-run error rates),
    ``p`` (per run), ``p_min``, ``level`` (= ``alpha``/k) and ``holds``."""
    runs = list(runs)
    if not runs:
        raise ValueError("per_run_reading needs at least one run")
    if bounds is None:
        bounds = [0.5 * min(r["flip_rates"]) for r in runs]
    bounds = [float(b) for b in bounds]
    if len(bounds) != len(runs):
        raise ValueError(f"{len(bounds)} bounds for {len(runs)} runs")
    p = [p_rate_at_least(r["reuse_errors"], r["n_reuse"], b) for r, b in zip(runs, bounds)]
    level = alpha / len(runs)
    return {"bounds": bounds, "errors": [r["reuse_errors"] / r["n_reuse"] for r in runs], "p": p,
            "p_min": float(min(p)), "level": level, "holds": bool(min(p) >= level)}


def paired_changes(right, index: int) -> dict:
    """Paired test points between recording index ``index`` and the end, pooled over runs
    (``right[j]``: run j's (recording steps, test points) boolean array, True where a point is
    classified right): ``worse`` (right at ``index``, wrong at the end), ``better`` (the other way
    round), ``right_at`` (right at ``index``) and ``pairs`` (test points in all)."""
    right = list(right)
    return {"worse": sum(int(np.sum(r[index] & ~r[-1])) for r in right),
            "better": sum(int(np.sum(~r[index] & r[-1])) for r in right),
            "right_at": sum(int(r[index].sum()) for r in right),
            "pairs": sum(r.shape[1] for r in right)}
