"""The chapter's experiments, one grid cell at a time. Each cell draws from its own stream of
the chapter seed ``root`` (:mod:`lib.seeding`), named by what it draws, the cell and the
replicate index ``seed``, so a sweep gives the same numbers in any order, locally or on a
cluster.

    ood_cell(n_trg=4, l_min=3, l_max=10, seed=0, root=ch.seed, n_vocab=32, n_pos=24)
    # → R, accuracy, pseudo, leftmost
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.stats import norm
from scipy.stats import t as student_t

from lib.induction.data import LengthDist, sample_ood
from lib.induction.one_layer import Embedding, evaluate, predict, train_two_step
from lib.induction.theory import (lemma7_ratio, lemma7_ratio_next, lemma7_w_kq, max_sum_ratio,
                                  measured_ratio)
from lib.induction.threshold import ood_accuracy
from lib.seeding import stream
from lib.stats import jackknife_se, loglog_slope, one_sided_wilson  # noqa: F401  (loglog_slope re-exported for the chapter)


def fig3_grid(l_lo: int = 3, l_hi: int = 15, step: int = 1) -> list[dict]:
    """The ``(ℓ_min, ℓ_max)`` cells of the paper's Fig. 3: ``ℓ_min ∈ l_lo..l_hi−1``,
    ``ℓ_max ∈ ℓ_min+1..l_hi`` (every ``step``-th value of each)."""
    return [{"l_min": a, "l_max": b} for a in range(l_lo, l_hi, step)
            for b in range(a + 1, l_hi + 1, step)]


def n_pos_for(l_max: int) -> int:
    """Positional embedding size ``L = 2ℓ_max + 4`` (the sequence plus its target)."""
    return 2 * l_max + 4


def ood_cell(n_trg: int, l_min: int, l_max: int, seed: int, *, root: int, n_vocab: int,
             n_pos: int, eta_v: float = 1e3, eta_kq: float = 1e4, m_train: int = 8192,
             m_test: int = 1024, shortcut_free: bool = False) -> dict:
    """Train the one-layer model with Algorithm 1 on ``Unif{l_min..l_max}`` and test it on the
    OOD distribution: accuracy, pseudo rate and leftmost rate, plus ``R``. ``seed`` is the
    replicate index and ``root`` the chapter seed: the cell draws from stream
    ``("ood-cell", n_trg, l_min, l_max, n_vocab, seed)`` of ``root`` (``"ood-cell-shortcut-free"``
    with ``shortcut_free``: pretraining on independent ``ℓ1, ℓ2``, see
    :func:`lib.induction.data.sample_train`)."""
    rng = stream(root, "ood-cell-shortcut-free" if shortcut_free else "ood-cell", n_trg, l_min, l_max,
                 n_vocab, seed)
    dist = LengthDist.uniform(l_min, l_max)
    emb = Embedding(n_pos, n_vocab)
    w_kq, w_v = train_two_step(rng, emb, n_trg, dist, eta_v=eta_v, eta_kq=eta_kq,
                               m_v=m_train, m_kq=m_train, shortcut_free=shortcut_free)
    test = sample_ood(rng, n_vocab, n_trg, l_min, l_max, m_test)
    return {"R": max_sum_ratio(dist), **evaluate(emb, test, w_kq, w_v)}


def mechanism_cell(n_trg: int, l_min: int, l_max: int, seed: int, *, root: int, n_vocab: int,
                   n_pos: int, m_test: int = 1024, scale: float = 1e6) -> dict:
    """The leading-order theory's accuracy on an OOD test: the model with Lemma 7's ``W_KQ``
    (scaled up: hard attention, the regime of large ``η_V η_KQ``) and the value matrix that
    copies a key's token and previous token to the output (``W_V``'s leading order). The test
    is drawn from stream ``("mechanism-test", n_trg, l_min, l_max, n_vocab, seed)`` of the
    chapter seed ``root`` (``seed``: the replicate index)."""
    rng = stream(root, "mechanism-test", n_trg, l_min, l_max, n_vocab, seed)
    dist = LengthDist.uniform(l_min, l_max)
    emb = Embedding(n_pos, n_vocab)
    w_kq = scale * lemma7_w_kq(dist, n_trg, n_vocab, n_pos)
    w_v = np.zeros((n_vocab, emb.dim))
    blocks = emb.blocks()
    w_v[:, blocks["token"]] = np.eye(n_vocab)
    w_v[:, blocks["previous"]] = np.eye(n_vocab)
    w_v[:n_trg] = 0.0  # the output is never a trigger: W_V's step gives triggers no logit
    test = sample_ood(rng, n_vocab, n_trg, l_min, l_max, m_test)
    pred = predict(emb, test, w_kq, w_v)
    return {"R": max_sum_ratio(dist), "accuracy": float(np.mean(pred == test.target))}


def scaling_cell(n_trg: int, l_min: int, l_max: int, seed: int, *, root: int, n_vocab: int,
                 n_pos: int, eta_v: float = 1e3, eta_kq: float = 1e4, m_train: int = 8192,
                 m_test: int = 1024) -> dict:
    """One cell of an extended grid: the trained model's OOD accuracy (``ood_cell``) beside
    the leading-order mechanism's (``mechanism_cell``, key ``"mechanism"``), same replicate
    index ``seed`` and chapter seed ``root``."""
    trained = ood_cell(n_trg, l_min, l_max, seed, root=root, n_vocab=n_vocab, n_pos=n_pos,
                       eta_v=eta_v, eta_kq=eta_kq, m_train=m_train, m_test=m_test)
    mech = mechanism_cell(n_trg, l_min, l_max, seed, root=root, n_vocab=n_vocab, n_pos=n_pos,
                          m_test=m_test)
    return {**trained, "mechanism": mech["accuracy"]}


def transition_ratio(rows, key: str = "accuracy", pair: tuple[int, int] = (4, 8)) -> dict:
    """Fit ``R*`` per trigger count over the cells ``rows`` (records with ``n_trg``, ``R`` and
    ``key``) and return ``R*`` of both counts of ``pair`` and their ratio ``R*(a)/R*(b)``
    (2 under an exact ``1/N_trg`` law)."""
    a, b = pair
    r_star = {}
    for n in pair:
        sel = [r for r in rows if r["n_trg"] == n]
        r_star[n] = fit_transition([r["R"] for r in sel], [r[key] for r in sel])["r_star"]
    return {f"R*({a})": r_star[a], f"R*({b})": r_star[b],
            f"R*({a})/R*({b})": r_star[a] / r_star[b]}


def _logistic(log_r, log_r_star, width):
    return 1.0 / (1.0 + np.exp((log_r - log_r_star) / width))


def fit_transition(r, accuracy) -> dict:
    """Fit ``accuracy ≈ 1/(1 + exp((log R − log R*)/w))`` (least squares); ``R*`` is where the
    fitted accuracy crosses 50%."""
    log_r = np.log(np.asarray(r, dtype=float))
    acc = np.asarray(accuracy, dtype=float)
    p0 = [float(np.median(log_r)), 0.2]
    try:
        with warnings.catch_warnings():  # the parameter covariance is not used
            warnings.simplefilter("ignore", OptimizeWarning)
            (log_r_star, width), _ = curve_fit(_logistic, log_r, acc, p0=p0, maxfev=20000)
    except (RuntimeError, TypeError):  # no convergence, or fewer cells than parameters
        return {"r_star": float("nan"), "width": float("nan")}
    return {"r_star": float(np.exp(log_r_star)), "width": float(abs(width))}


def ratio_grid(n_trg: int, l_lo: int, l_hi: int) -> np.ndarray:
    """``N_trg · R(Unif{ℓ_min..ℓ_max})`` indexed ``[ℓ_min − l_lo, ℓ_max − l_lo]`` (NaN below
    the diagonal), for contours over the Fig. 3 heatmaps."""
    size = l_hi - l_lo + 1
    out = np.full((size, size), np.nan)
    for i in range(size):
        for j in range(i, size):
            out[i, j] = n_trg * max_sum_ratio(LengthDist.uniform(l_lo + i, l_lo + j))
    return out


def lemma7_point(n_trg: int, dist: LengthDist, *, root: int, n_vocab: int, n_pos: int,
                 m: int, eta_v: float = 1e3, eta_kq: float = 1e4, n_chunks: int = 32,
                 shortcut_free: bool = False) -> dict:
    """Algorithm 1 with a large sample ``m`` (the "population" version): the measured
    (largest positional entry)/(induction entry) of ``W_KQ`` beside ``N_trg·R`` and Lemma 7's
    exact leading-order ratio, its next-order ratio (:func:`lib.induction.theory.lemma7_ratio_next`)
    and ``se``, the jackknife standard error of the measured ratio over ``n_chunks`` batch means
    of the ``W_KQ`` step (the ``W_V`` step is shared by all of them). The samples come from
    stream ``("lemma7", n_trg, n_vocab, lengths, probabilities)`` of the chapter seed
    ``root``. ``shortcut_free``: train on independent ``ℓ1, ℓ2`` instead (Lemma 7's hypothesis
    ``ℓ1 = ℓ2`` violated: the chapter's negative control), from the stream keyed
    ``"lemma7-shortcut-free"``."""
    rng = stream(root, "lemma7-shortcut-free" if shortcut_free else "lemma7", n_trg, n_vocab,
                 dist.lengths, dist.probs)
    parts: list = []
    w_kq, _ = train_two_step(rng, Embedding(n_pos, n_vocab), n_trg, dist, eta_v=eta_v,
                             eta_kq=eta_kq, m_v=m, m_kq=m, chunk=max(1, m // n_chunks),
                             chunks_out=parts, shortcut_free=shortcut_free)
    measured = measured_ratio(w_kq.numpy(), n_pos, n_vocab, n_trg)
    se = jackknife_se([p.numpy() for p in parts],
                      lambda w: measured_ratio(w, n_pos, n_vocab, n_trg)["ratio"])
    return {"n_trg_R": n_trg * max_sum_ratio(dist), "lemma7": lemma7_ratio(dist, n_trg),
            "next_order": lemma7_ratio_next(dist, n_trg), "measured": measured["ratio"],
            "se": se}


def lemma7_tolerance(next_order, se, *, n_vocab: int, n_trg: int, l_min: int, n_chunks: int,
                     n_tests: int, false_alarm: float = 1e-3):
    """Allowed ``|measured − next order|`` for the next-order Lemma 7 ratio: the dropped
    filler term plus sampling error.

    Fillers equal to ``o`` (each of the ``2ℓ`` with probability ``1/(N−N_trg)``) raise ``v̄`` by
    ``(4ℓ/T)·v_o/(N−N_trg) = (2/(N−N_trg))(1 − 3/T) v_o``; the constant part scales every
    length alike and cancels in the ratio, the rest changes it by at most a relative
    ``6/((N−N_trg) T(ℓ_min))``. Sampling: a Student-t quantile with ``n_chunks − 1`` degrees
    of freedom at two-sided ``false_alarm/n_tests`` (Bonferroni over the tested pairs) times
    the jackknife standard error."""
    quantile = float(student_t.ppf(1 - false_alarm / (2 * n_tests), n_chunks - 1))
    bias = 6.0 / ((n_vocab - n_trg) * (2 * np.asarray(l_min) + 3))
    return bias * np.abs(np.asarray(next_order)) + quantile * np.asarray(se), quantile


def lemma7_rule(measured, prediction, se, *, n_vocab: int, n_trg, l_min, n_chunks: int,
                n_tests: int, false_alarm: float = 1e-3) -> dict:
    """The Lemma 7 claim's rule applied to one prediction (the next order, or a rival such as the
    leading order): every ``|measured − prediction|`` within :func:`lemma7_tolerance` computed at
    that prediction. Returns ``{"holds", "ratios", "misses", "worst"}``: ``ratios`` the
    per-pair ``|measured − prediction| / tolerance``, ``misses`` how many exceed 1, ``worst``
    the largest."""
    measured, prediction = np.asarray(measured, float), np.asarray(prediction, float)
    tol, _ = lemma7_tolerance(prediction, se, n_vocab=n_vocab, n_trg=n_trg, l_min=l_min,
                              n_chunks=n_chunks, n_tests=n_tests, false_alarm=false_alarm)
    ratios = np.abs(measured - prediction) / tol
    return {"holds": bool(np.all(ratios <= 1.0)), "ratios": ratios.tolist(),
            "misses": int(np.sum(ratios > 1.0)), "worst": float(np.max(ratios))}


def contrast_rule(acc_diverse, acc_narrow, m_test: int, *, level: float = 0.5,
                  false_alarm: float = 1e-3) -> dict:
    """The decision rule of the realistic-model claim (the paper's Fig. 4 finding that the most
    diverse pretraining range generalises OOD and the least diverse does not), applied to
    per-seed OOD accuracies on ``m_test`` test sequences each.

    A seed passes when the one-sided lower Wilson bound of its accuracy on the most diverse range
    is at least ``level`` and the one-sided upper bound on the least diverse range is at most
    ``level``, each bound at ``false_alarm``; the rule passes when every seed does. Under the null
    (some trained model's true OOD accuracy is below ``level`` on the diverse range, or above it
    on the narrow one) the rule passes with probability at most ``false_alarm``: it is an
    intersection of one-sided tests, so no multiplicity correction enters.

    Returns ``{"holds", "seeds_passing", "lower_diverse", "upper_narrow", "detectable"}``:
    ``detectable`` is the smallest accuracy whose lower bound reaches ``level`` at ``m_test``
    (by symmetry ``1 − detectable`` the largest whose upper bound stays at most ``level``)."""
    lower = one_sided_wilson(acc_diverse, m_test, false_alarm)[0]
    upper = one_sided_wilson(acc_narrow, m_test, false_alarm)[1]
    passing = (lower >= level) & (upper <= level)
    k = np.arange(m_test + 1)
    reach = k[one_sided_wilson(k / m_test, m_test, false_alarm)[0] >= level]
    return {"holds": bool(passing.size > 0 and passing.all()),
            "seeds_passing": int(passing.sum()), "lower_diverse": lower.tolist(),
            "upper_narrow": upper.tolist(),
            "detectable": float(reach[0] / m_test) if reach.size else float("nan")}


def regime_windows(n_trg: int, c_lo: float, c_hi: float, l_cap: int = 400) -> dict:
    """The two windows ``Unif{N_trg..b}`` (Example 3's start ``ℓ0 = N_trg``) on either side of a
    transition at ``N_trg·R`` between ``c_lo`` and ``c_hi``: ``"narrow"`` the widest with
    ``N_trg·R ≥ c_hi``, ``"diverse"`` the narrowest with ``N_trg·R ≤ c_lo`` (``N_trg·R`` falls as
    ``b`` grows). Returns ``{"narrow": b, "diverse": b}``."""
    if not 0 < c_lo < c_hi:
        raise ValueError(f"need 0 < c_lo < c_hi, got {c_lo}, {c_hi}")
    prods = {b: n_trg * max_sum_ratio(LengthDist.uniform(n_trg, b))
             for b in range(n_trg + 1, l_cap + 1)}
    narrow = [b for b, p in prods.items() if p >= c_hi]
    diverse = [b for b, p in prods.items() if p <= c_lo]
    if not narrow or not diverse:
        raise ValueError(f"no window Unif{{{n_trg}..b}}, b ≤ {l_cap}, on both sides of "
                         f"[{c_lo}, {c_hi}]")
    return {"narrow": max(narrow), "diverse": min(diverse)}


def separation_rule(acc_diverse, acc_narrow, r_diverse, r_narrow, m_test: int, *,
                    level: float = 0.5, false_alarm: float = 1e-3) -> dict:
    """The decision of the trained Theorems 5–6 claim over pairs of windows (one pair per trigger
    count): every diverse window's one-sided lower Wilson bound is at least ``level`` and above
    the upper bound of its own count's narrow window. Each of the ``2·pairs`` bounds is taken at
    ``false_alarm/(2·pairs)`` (Bonferroni), so a pair whose true accuracies are not so ordered
    passes with probability at most ``false_alarm``.

    ``r_diverse``/``r_narrow`` (the windows' R) judge the rival "accuracy is a non-increasing
    function of R alone, whatever N_trg": rejected when some diverse window of larger R than some
    narrow window (of another count) has its lower bound above that window's upper bound.
    Returns ``{"holds", "lower_diverse", "upper_narrow", "gap", "rival_rejected", "quantile"}``
    (``gap``: the smallest lower-minus-upper margin over the pairs)."""
    div = np.asarray(acc_diverse, float)
    rd, rn = np.asarray(r_diverse, float), np.asarray(r_narrow, float)
    alpha = false_alarm / (2 * div.size)
    lower = one_sided_wilson(div, m_test, alpha)[0]
    upper = one_sided_wilson(acc_narrow, m_test, alpha)[1]
    holds = bool(div.size > 0 and np.all(lower >= level) and np.all(lower > upper))
    crossed = (rd[:, None] > rn[None, :]) & (lower[:, None] > upper[None, :])
    return {"holds": holds, "lower_diverse": lower.tolist(), "upper_narrow": upper.tolist(),
            "gap": float(np.min(lower - upper)), "rival_rejected": bool(crossed.any()),
            "quantile": float(norm.ppf(1 - alpha))}


def regime_cell(n_trg: int, l_min: int, l_max: int, seed: int, *, root: int, n_vocab: int,
                eta_v: float, eta_kq: float, m_train: int, m_test: int = 1024,
                shortcut_free: bool = False) -> dict:
    """One window of the trained threshold test: :func:`ood_cell` with the embedding sized to
    the window (``L = 2ℓ_max + 4``), plus ``N_trg·R`` and ``exact``, the OOD accuracy of Lemma 7's
    hard-attention model (:func:`lib.induction.threshold.ood_accuracy`, no sampling)."""
    res = ood_cell(n_trg, l_min, l_max, seed, root=root, n_vocab=n_vocab,
                   n_pos=n_pos_for(l_max), eta_v=eta_v, eta_kq=eta_kq, m_train=m_train,
                   m_test=m_test, shortcut_free=shortcut_free)
    dist = LengthDist.uniform(l_min, l_max)
    return {**res, "n_trg_R": n_trg * res["R"], "exact": ood_accuracy(dist, n_trg)}


def bench(repeats: int = 3) -> list[dict]:
    """Algorithm 1 with the dense torch products against the compiled sums
    (:mod:`lib.induction.compiled`), both in this process on one thread: a cell of the OOD grid
    (``N = 32``) and a window of the trained threshold test (``N = 512``) at the chapter's
    default sizes, each trained both ways from the same stream and tested on the same sequences.
    Prints and returns the best time of each way over ``repeats``, their ratio, the largest
    relative difference of ``W_KQ`` and ``W_V`` and the OOD accuracy of each."""
    import time

    import torch

    torch.set_num_threads(1)
    cases = {"ood_cell N=32 (4, 5..12)": (32, 4, 5, 12, n_pos_for(15), 1e3, 1e4, 8192),
             "regime_cell N=512 (8, 8..30)": (512, 8, 8, 30, n_pos_for(30), 16000.0, 1e5, 65536)}
    rows = []
    for name, (n_vocab, n_trg, l_min, l_max, n_pos, eta_v, eta_kq, m) in cases.items():
        dist, emb = LengthDist.uniform(l_min, l_max), Embedding(n_pos, n_vocab)
        out = {}
        for dense in (True, False):
            best = float("inf")
            for _ in range(repeats):
                rng = stream(0, "bench", name)
                start = time.perf_counter()
                w = train_two_step(rng, emb, n_trg, dist, eta_v=eta_v, eta_kq=eta_kq, m_v=m,
                                   m_kq=m, dense=dense)
                best = min(best, time.perf_counter() - start)
            test = sample_ood(rng, n_vocab, n_trg, l_min, l_max, 1024)
            out[dense] = (best, w, evaluate(emb, test, *w)["accuracy"])
        rel = [float((a - b).abs().max() / b.abs().max()) for a, b in zip(out[False][1], out[True][1])]
        rows.append({"case": name, "dense_s": out[True][0], "compiled_s": out[False][0],
                     "ratio": out[True][0] / out[False][0], "rel_diff_w_kq": rel[0],
                     "rel_diff_w_v": rel[1], "accuracy_dense": out[True][2],
                     "accuracy_compiled": out[False][2]})
        r = rows[-1]
        print(f"{name}: dense {r['dense_s']:.3f} s, compiled {r['compiled_s']:.3f} s, "
              f"ratio {r['ratio']:.2f}; largest relative difference W_KQ {rel[0]:.1e}, "
              f"W_V {rel[1]:.1e}; OOD accuracy {r['accuracy_dense']} / {r['accuracy_compiled']}")
    return rows


if __name__ == "__main__":
    bench()


def majority_rule(rates, m_test: int, *, level: float = 0.5, false_alarm: float = 1e-3) -> dict:
    """Whether a behaviour (a rate over ``m_test`` OOD sequences per seed, such as the pseudo rate)
    is the model's majority answer on every seed: each seed's one-sided lower Wilson bound at
    ``false_alarm`` is at least ``level``. Under the null (the true rate of some seed is below
    ``level``) the rule passes with probability at most ``false_alarm`` (an intersection of
    one-sided tests). Returns ``{"holds", "seeds_passing", "lower", "detectable"}``
    (``detectable``: the smallest rate whose lower bound reaches ``level`` at ``m_test``)."""
    lower = one_sided_wilson(np.asarray(rates, float), m_test, false_alarm)[0]
    k = np.arange(m_test + 1)
    reach = k[one_sided_wilson(k / m_test, m_test, false_alarm)[0] >= level]
    passing = lower >= level
    return {"holds": bool(passing.size > 0 and passing.all()), "seeds_passing": int(passing.sum()),
            "lower": lower.tolist(), "detectable": float(reach[0] / m_test) if reach.size else float("nan")}


def control_window(n_trg: int, c_lo: float, c_hi: float) -> int | None:
    """The negative control's window for one trigger count of the trained threshold test:
    ``Unif{N_trg..b−1}`` with ``b`` the narrow window of :func:`regime_windows` — narrower still,
    so ``N_trg·R`` lies above ``c_hi`` as well. Judged in the narrow window's place against the
    narrow window in the diverse one's, the pair sits wholly on the side of the threshold where
    Theorems 5–6 say no window generalises. ``None`` where no such window exists (``b − 1`` is
    ``N_trg``: the OOD test needs ``ℓ_min < ℓ_max``)."""
    b = regime_windows(n_trg, c_lo, c_hi)["narrow"] - 1
    return b if b > n_trg else None
