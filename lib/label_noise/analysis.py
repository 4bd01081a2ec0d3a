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
