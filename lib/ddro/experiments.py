"""The chapter's studies, one sweep point at a time: the categorical estimators' TV to p₊ over
structures, pair counts and seeds, and the GRU fine-tuning runs."""

from __future__ import annotations

import numpy as np

from lib.ddro.categorical import (_policy, bt_plugin_target, bt_scores, fit_ddro_categorical,
                                  fit_kto_categorical)
from lib.ddro.neural import adam_population, sequence_setup, train_population
from lib.ddro.preferences import Preference, paired_target, sample_pairs, sample_unpaired, tv
from lib.seeding import stream


#: The negative control of DDRO's rate claims: the same fit with the density-ratio identity violated,
#: the winners' share α taken as 0.6 where the pairs make it ½, so the ratio modelled is not p₊/π_ref.
MISSPECIFIED_ALPHA = 0.6


def categorical_point(structure: int, N: int, seed: int, *, root: int, pi: np.ndarray,
                      prefs: list[Preference], beta: float = 1.0, clip: float = 1e-3) -> dict:
    """One cell of :func:`categorical_study`: structure ``prefs[structure]``, ``N`` pairs,
    replicate ``seed``. Its pairs and its unpaired responses come from streams of their own of the
    chapter seed ``root``, keyed by the structure's name, N and the replicate, so the result does
    not depend on which other cells ran before it, or where."""
    pref = prefs[structure]
    target = paired_target(pi, pref)
    q = pref.P @ pi                                   # P(y beats a fresh y' ~ π_ref)
    C = sample_pairs(pi, pref, int(N), stream(root, "categorical-pairs", pref.name, N, seed))
    npos, nneg = sample_unpaired(pi, q, 2 * int(N), stream(root, "categorical-unpaired", pref.name, N, seed))
    h = bt_scores(C, beta)                            # DPO's h = log(π_θ/π_ref); BT scores s = βh
    return {"ddro": tv(fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip), target),
            "dpo": tv(_policy(np.log(pi) + h), target),
            "bt": tv(bt_plugin_target(pi, beta * h), target),
            "ddro_misspecified": tv(fit_ddro_categorical(pi, C.sum(1), C.sum(0), MISSPECIFIED_ALPHA, clip), target),
            "ddro_unpaired": tv(fit_ddro_categorical(
                pi, npos, nneg, npos.sum() / (npos.sum() + nneg.sum()), clip), target),
            "kto": tv(fit_kto_categorical(pi, npos, nneg, beta), target)}


def categorical_study(pi: np.ndarray, prefs: list[Preference], Ns, seeds,
                      beta: float = 1.0, clip: float = 1e-3, *, root: int, **sweep_kw):
    """TV to p₊ of every categorical estimator, for every structure, N and replicate in ``seeds``
    (replicate indices, ``range(n)``; the draws are streams of the chapter seed ``root``): a pandas
    DataFrame with columns structure, N, seed (the replicate), and one column per method —
    ``ddro`` (paired, α = ½), ``dpo`` (paired), ``bt`` (the Bradley–Terry plug-in of p₊ on the
    same pairs: DPO's scores times β, so the two share one fit), ``ddro_unpaired`` and ``kto`` (2N unpaired
    responses, each labelled preferred when it beats a fresh draw from π_ref, so that p₊ is the
    same as for pairs; α estimated by N₊/N) and ``ddro_misspecified`` (DDRO on the same pairs with
    α = :data:`MISSPECIFIED_ALPHA`, the negative control). The cells run through :func:`lib.sweep.sweep`
    (``sweep_kw`` goes to it), locally or on a cluster, with the same result."""
    import functools

    import pandas as pd

    from lib.sweep import sweep

    point = functools.partial(categorical_point, root=root, pi=np.asarray(pi, float), prefs=list(prefs),
                              beta=beta, clip=clip)
    records = sweep(point, {"structure": list(range(len(prefs))), "N": [int(N) for N in Ns]},
                    seeds=[int(s) for s in seeds], desc="categorical study", **sweep_kw)
    for r in records:
        r["structure"] = prefs[r["structure"]].name
    return pd.DataFrame(records, columns=["structure", "N", "seed", "ddro", "dpo", "bt", "ddro_unpaired", "kto",
                                          "ddro_misspecified"])


def neural_batch(N: int, kind: str, seed: int, *, replicates: int, vocab: int, length: int, hidden: int,
                 root: int, rho: float = 1e-3, max_steps: int = 20000, beta: float = 1.0,
                 clip: float = 1e-3) -> dict:
    """One batch of the sequence study: ``replicates`` copies of the reference GRU of the chapter
    seed ``root``, copy r fine-tuned with ``kind`` ("ddro" or "dpo") on ``N`` pairs from the stream
    ``("gru-pairs", N, seed, r)`` of ``root`` (the same pairs for both kinds), all trained at once to
    convergence (:func:`lib.ddro.neural.train_population`). ``seed`` indexes the batch (the sweep's
    replicate index; one batch holds every replicate, so it is 0). Per replicate, lists: ``tv``
    (TV to p₊), ``tv_optimum`` (TV from the categorical optimum of the same loss on the same
    pairs), ``optimum_tv`` (that optimum's TV to p₊), ``steps``, ``converged``, ``excess`` and
    ``tolerance`` (the stopping rule's two sides)."""
    setup = sequence_setup(vocab, length, hidden, root)
    counts = [sample_pairs(setup.pi, setup.pref, int(N), stream(root, "gru-pairs", N, seed, r))
              for r in range(replicates)]
    fits = train_population(kind, setup.ref, setup.pi, counts, vocab, length, rho=rho,
                            max_steps=max_steps, beta=beta, clip=clip)
    return {"tv": [tv(p, setup.target) for p in fits.policies],
            "tv_optimum": [tv(p, q) for p, q in zip(fits.policies, fits.optimum)],
            "optimum_tv": [tv(q, setup.target) for q in fits.optimum],
            "steps": fits.steps.tolist(), "converged": fits.converged.tolist(),
            "excess": fits.excess.tolist(), "tolerance": fits.tolerance.tolist()}


def neural_adam_batch(N: int, seed: int, *, replicates: int, vocab: int, length: int, hidden: int, root: int,
                      steps: int = 2000, lr: float = 1e-2, rho: float = 1e-3, beta: float = 1.0,
                      clip: float = 1e-3) -> dict:
    """The Adam arm of the sequence study: the DDRO fits of :func:`neural_batch` on the same pairs
    (the stream ``("gru-pairs", N, seed, r)`` of ``root``) and from the same reference GRU, trained
    instead by full-batch Adam for ``steps`` steps (:func:`lib.ddro.neural.adam_population`). Per
    replicate, lists: ``tv`` (final TV to p₊), ``met`` (first step meeting the stopping rule, −1 if
    none), ``excess`` and ``min_excess`` (final and smallest excess training loss over the
    categorical optimum) and ``tolerance`` (the stopping rule's)."""
    setup = sequence_setup(vocab, length, hidden, root)
    counts = [sample_pairs(setup.pi, setup.pref, int(N), stream(root, "gru-pairs", N, seed, r))
              for r in range(replicates)]
    fits = adam_population("ddro", setup.ref, setup.pi, counts, vocab, length, steps=steps, lr=lr, rho=rho,
                           beta=beta, clip=clip)
    return {"tv": [tv(p, setup.target) for p in fits.policies], "met": fits.met.tolist(),
            "excess": fits.excess.tolist(), "min_excess": fits.min_excess.tolist(),
            "tolerance": fits.tolerance.tolist()}
