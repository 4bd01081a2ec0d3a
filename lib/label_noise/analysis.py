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


def bound_excess(runs, bounds, within: float = 2.0) -> dict:
    """How far each run's error on the paper's test set lies above its lower bound. Theorem 4.2
    bounds the error from below only, so a run far above its bound is consistent with it; this
    says how far. ``runs`` are :func:`~lib.label_noise.training.run_to_loss` results with the
    paper's test set, ``bounds`` their bounds (one each, > 0). Returns per run the ``ratios``
    (error / bound) and the error on the test points whose noise vector is a *clean* training
    sample's (``clean_source``, NaN where there is none); ``n``, ``n_within`` (ratio ≤ ``within``),
    the smallest and largest ratio over all runs, over those within and over the others
    (``lo``/``hi``, ``within_lo``/``within_hi``, ``above_lo``/``above_hi``, NaN where empty), the
    range of the clean-source errors (``clean_lo``, ``clean_hi``) and that of the run furthest
    above its bound (``clean_at_max``), and ``sentence``, the finding in words."""
    runs, bounds = list(runs), [float(b) for b in bounds]
    if not runs or len(bounds) != len(runs):
        raise ValueError(f"bound_excess needs one bound per run ({len(bounds)} for {len(runs)})")
    if min(bounds) <= 0:
        raise ValueError("bound_excess needs positive bounds")
    ratios = [r["reuse_errors"] / r["n_reuse"] / b for r, b in zip(runs, bounds)]
    clean = [(r["reuse_errors"] - r["reuse_noisy_errors"]) / (r["n_reuse"] - r["reuse_noisy_n"])
             if r["n_reuse"] > r["reuse_noisy_n"] else math.nan for r in runs]
    inside = [q <= within for q in ratios]

    def ends(keep, pick):
        chosen = [v for v, k in zip(ratios, keep) if k]
        return pick(chosen) if chosen else math.nan

    out = {"ratios": ratios, "clean_source": clean, "n": len(runs), "n_within": int(sum(inside)),
           "within": within, "lo": min(ratios), "hi": max(ratios),
           "within_lo": ends(inside, min), "within_hi": ends(inside, max),
           "above_lo": ends([not k for k in inside], min), "above_hi": ends([not k for k in inside], max),
           "clean_lo": float(np.nanmin(clean)) if not np.all(np.isnan(clean)) else math.nan,
           "clean_hi": float(np.nanmax(clean)) if not np.all(np.isnan(clean)) else math.nan,
           "clean_at_max": clean[int(np.argmax(ratios))]}
    n, k = out["n"], out["n_within"]
    if k == n:
        head = f"every one of the {n} runs errs within {within:g} times its bound (error / bound " \
               f"{out['lo']:.2f} to {out['hi']:.2f})"
    elif k == 0:
        head = f"none of the {n} runs errs within {within:g} times its bound (error / bound " \
               f"{out['lo']:.1f} to {out['hi']:.1f})"
    else:
        head = (f"{k} of the {n} runs err within {within:g} times their bound (error / bound "
                f"{out['within_lo']:.2f} to {out['within_hi']:.2f}), the other {n - k} at {out['above_lo']:.1f} "
                f"to {out['above_hi']:.1f} times it")
    out["sentence"] = (head + f"; on the test points that reuse a clean sample's noise vector the runs err on "
                       f"{out['clean_lo']:.3f} to {out['clean_hi']:.3f} ({out['clean_at_max']:.3f} in the run "
                       "furthest above its bound)")
    return out


def sweep_convergence(runs, target_loss: float) -> dict:
    """Whether the runs of a sweep trained to the loss target, the runs inside the initialisation
    event (:func:`~lib.label_noise.training.init_event`) apart from the others: per run ``ratio``
    (d/n), ``seed``, ``final_loss``, ``steps_run``, ``reached`` and ``init_event``; the largest
    final loss over the runs inside the event (``worst_inside``, NaN if none) and over the others
    (``worst_outside``), how many runs are outside (``n_outside``), how many inside did not reach
    the target (``missed_inside``), and ``holds``: every run inside the event reached it."""
    runs = list(runs)
    rows = [{"ratio": float(r["ratio"]), "seed": int(r["seed"]), "final_loss": float(r["final_loss"]),
             "steps_run": int(r["steps_run"]), "reached": bool(r["final_loss"] <= target_loss),
             "init_event": bool(r["init_event"])} for r in runs]
    inside = [q for q in rows if q["init_event"]]
    outside = [q for q in rows if not q["init_event"]]
    return {"runs": rows, "n": len(rows), "n_outside": len(outside),
            "worst_inside": max((q["final_loss"] for q in inside), default=math.nan),
            "worst_outside": max((q["final_loss"] for q in outside), default=math.nan),
            "missed_inside": sum(not q["reached"] for q in inside),
            "holds": bool(inside) and all(q["reached"] for q in inside),
            "sentence": _convergence_sentence(inside, outside, target_loss)}


def _convergence_sentence(inside, outside, target_loss: float) -> str:
    """:func:`sweep_convergence`'s finding in words."""
    if not inside:
        text = "no run starts inside the initialisation event"
    else:
        missed = [q for q in inside if not q["reached"]]
        steps = [q["steps_run"] for q in inside]
        text = (f"every one of the {len(inside)} runs inside the initialisation event reached it"
                if not missed else f"{len(missed)} of the {len(inside)} runs inside the initialisation event did "
                f"not reach it (" + "; ".join(f"d/n = {q['ratio']:g} seed {q['seed']}, final loss "
                                              f"{q['final_loss']:.4f}" for q in missed) + ")")
        text += (f" (largest final loss {max(q['final_loss'] for q in inside):.4f}, after {min(steps)} to "
                 f"{max(steps)} steps)")
    if outside:
        text += (f"; {len(outside)} start outside it (" + "; ".join(
            f"d/n = {q['ratio']:g} seed {q['seed']}, final loss {q['final_loss']:.4f}"
            + ("" if q["final_loss"] <= target_loss else ", target not reached") for q in outside) + ")")
    return text


def no_rise(right, index: int, alpha: float) -> dict:
    """The exact one-sided McNemar test of "the error does not rise from recording index ``index``
    to the end" on paired test points pooled over runs (``right`` as in :func:`paired_changes`):
    the counts of :func:`paired_changes`, the ``rise`` (worse − better)/pairs, the least number of
    points turned wrong that the test declares a rise at level ``alpha`` given the improvements
    (``declare_at``), the smallest detectable rise (:func:`smallest_detectable_rise`), ``bound``
    (the largest rise not declared: detectable − 1/pairs), the p-value ``p`` (:func:`p_rise`) and
    ``declared`` (p < ``alpha``, equivalently rise > ``bound``)."""
    c = paired_changes(right, index)
    detectable = smallest_detectable_rise(c["better"], c["pairs"], alpha)
    p = p_rise(c["worse"], c["better"])
    return c | {"rise": (c["worse"] - c["better"]) / c["pairs"], "detectable": detectable,
                "declare_at": int(round(detectable * c["pairs"])) + c["better"],
                "bound": detectable - 1.0 / c["pairs"], "p": p, "declared": bool(p < alpha)}
