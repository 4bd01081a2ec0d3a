"""Chapter 09's experiment points: one trained model per call, or several as one population
(:mod:`lib.ess.population`), measured for ESS, TSS and accuracy — the functions the chapter's
sweeps map over. The models and their training live in :mod:`lib.ess.models`."""

from __future__ import annotations

import sys

import numpy as np
import torch

from lib.ess.analysis import capped_tss
from lib.ess.models import GATED, MixerLM, ModelConfig, TrainConfig, accuracy, task_ess, train, with_hard_reset
from lib.ess.population import train_groups
from lib.ess.tasks import IGNORE, Vocab, delimited_mqar, mqar
from lib.seeding import stream

__all__ = ["delimiter_drops", "run_mqar", "run_mqar_replicates", "run_delimited", "run_delimited_replicates",
           "DELIMITER_ARMS", "run_delimited_arm"]


# -- experiments (one trained model per call, or several as one population, for lib.sweep) ------

def _positions_mean(a: np.ndarray, start: int = 1) -> float:
    return float(np.mean(a[..., start:]))


def _mqar_member(mixer: str, d_k: int, n_pairs: int, seed: int, *, study: str, length: int, steps: int,
                 batch: int, lr: float, d_model: int, reg: float, block: int, n_layers: int):
    """The model config, training config and stream keys (init, batches) of one MQAR model."""
    vocab = Vocab()
    cfg = ModelConfig(mixer, d_k, d_model=d_model, vocab_size=vocab.size, block=block,
                      n_layers=n_layers)
    tc = TrainConfig(n_pairs=n_pairs, steps=steps, batch=batch, lr=lr, reg=reg, length=length,
                     vocab=vocab)
    return cfg, tc, (study, "init", mixer, d_k, n_pairs, seed), (study, "batches", n_pairs, seed)


def _measure_mqar(model: MixerLM, losses: list[float], n_pairs: int, seed: int, *, root: int, study: str,
                  length: int, n_eval: int, n_ess: int) -> dict:
    """What :func:`run_mqar` measures of a trained model."""
    vocab = Vocab()
    tokens, targets = mqar(stream(root, study, "test", n_pairs, seed), n_eval, n_pairs, length, vocab)
    prof = task_ess(model, tokens[:n_ess])
    out = {"accuracy": accuracy(model, tokens, targets), "n_queries": int((targets != IGNORE).sum()),
           "final_loss": float(np.mean(losses[-20:])),
           "tss": _positions_mean(prof["tss"]), "tss_capped": capped_tss(prof["tss"]),
           "tss_query": _positions_mean(prof["tss"], 2 * n_pairs),
           "max_ess_minus_tss": float(prof["max_excess"])}
    if "factored_rel_err" in prof:
        out["factored_rel_err"] = float(prof["factored_rel_err"])
    for key, value in prof.items():
        if key not in ("tss", "factored_rel_err", "max_excess"):
            name = key.replace("tol=", "ess_tol_").replace("entropy", "ess_entropy")
            out[name] = _positions_mean(value)
            out[name + "_query"] = _positions_mean(value, 2 * n_pairs)
    if model.cfg.mixer in GATED:
        with torch.no_grad():
            _, log_a = model(torch.from_numpy(tokens[:n_ess]), return_gates=True)
        out["mean_gate"] = float(torch.exp(log_a).mean())
    return out


def run_mqar(mixer: str, d_k: int, n_pairs: int, seed: int, *, root: int, study: str = "mqar",
             length: int = 48, steps: int = 300, batch: int = 32, lr: float = 3e-3, d_model: int = 48,
             reg: float = 0.0, n_eval: int = 256, n_ess: int = 16, block: int = 8,
             n_layers: int = 1) -> dict:
    """Train one model on MQAR, replicate ``seed`` of ``study`` under the chapter seed ``root``,
    and measure it. The draws are keyed by what they are: the initial weights by the model
    (mixer, d_k, κ) and the replicate, the training batches and the test set by the task (κ)
    and the replicate; so every model of a replicate trains on the same batches and is measured
    on the same test sequences, and models that differ only in the regulariser ``reg`` also start
    from the same weights. Measured: test accuracy (and the number of query
    positions it was measured on, ``n_queries``), and ESS / TSS of its mixer on ``n_ess`` test
    sequences, averaged over sequences and positions ``1 … ℓ−1`` (``ess_*``, ``tss``) and over
    the query phase ``2κ … ℓ−1`` only (``*_query``); ``max_ess_minus_tss`` is the largest
    ``ESS_i − TSS_i`` (exact tolerance, dense SVD) over sequences and positions;
    ``factored_rel_err`` (diagonal recurrences) compares the factored and dense spectra.
    :func:`run_mqar_replicates` computes the same for several models at once."""
    cfg, tc, init, batches = _mqar_member(mixer, d_k, n_pairs, seed, study=study, length=length, steps=steps,
                                          batch=batch, lr=lr, d_model=d_model, reg=reg, block=block,
                                          n_layers=n_layers)
    model, losses = train(cfg, tc, root=root, init=init, batches=batches)
    return _measure_mqar(model, losses, n_pairs, seed, root=root, study=study, length=length,
                         n_eval=n_eval, n_ess=n_ess)


def _replicates(seed: int, replicates: int, n_seeds: int | None) -> range:
    return range(seed, sys.maxsize if n_seeds is None else n_seeds)[:replicates]


def run_mqar_replicates(mixer: str, d_k: int, seed: int, *, pairs, replicates: int, n_seeds: int | None = None,
                        root: int, study: str = "mqar", length: int = 48, steps: int = 300, batch: int = 32,
                        lr: float = 3e-3, d_model: int = 48, reg: float = 0.0, n_eval: int = 256,
                        n_ess: int = 16, block: int = 8, n_layers: int = 1) -> dict:
    """:func:`run_mqar` of every κ in ``pairs`` and the replicates ``seed, seed + 1, …`` (``replicates``
    of them, none from ``n_seeds`` on), the models trained as one population
    (:func:`lib.ess.population.train_groups`: the same numbers, bit for bit, as one by one):
    one sweep point. Returns ``{"models": [...]}``, one record per model, κ-major, each
    ``{"n_pairs": κ, "seed": replicate, **run_mqar(...)}``."""
    runs = [(n, s) for n in pairs for s in _replicates(seed, replicates, n_seeds)]
    members = [_mqar_member(mixer, d_k, n, s, study=study, length=length, steps=steps, batch=batch, lr=lr,
                            d_model=d_model, reg=reg, block=block, n_layers=n_layers) for n, s in runs]
    trained = train_groups(members[0][0], [m[1] for m in members], root=root,
                               inits=[m[2] for m in members], batches=[m[3] for m in members])
    return {"models": [{"n_pairs": n, "seed": s, **_measure_mqar(model, losses, n, s, root=root, study=study,
                                                                  length=length, n_eval=n_eval, n_ess=n_ess)}
                       for (n, s), (model, losses) in zip(runs, trained)]}


def delimiter_drops(profile: np.ndarray, delimiters: np.ndarray, cap: int) -> np.ndarray:
    """Per sequence, the mean of an ESS ``profile`` (B, L) "elsewhere" minus its mean right after
    the delimiters (positions ``d+1``: the state that has just read a delimiter); "elsewhere" is
    every other position where the block shape does not itself cap the rank
    (``min(i, L−i) > cap``). Positive: ESS drops after a delimiter. Returns shape (B,)."""
    profile = np.asarray(profile, dtype=float)
    L = profile.shape[-1]
    i = np.arange(L)
    after = np.asarray(delimiters) + 1
    if after.size == 0 or after.max() >= L:
        raise ValueError("need at least one delimiter before the last position")
    others = np.setdiff1d(i[np.minimum(i, L - i) > cap], after)
    if others.size == 0:
        raise ValueError(f"no position with min(i, L−i) > {cap} besides the delimiters")
    return profile[..., others].mean(axis=-1) - profile[..., after].mean(axis=-1)


def _delimited_member(d_k: int, n_pairs: int, seed: int, *, delimited: bool, n_segments: int,
                      segment_length: int, n_keys: int, p_absent: float, steps: int, batch: int, lr: float,
                      d_model: int, mixer: str = "gla"):
    """The model config, training config and stream keys (init, batches) of one delimited-task model.
    The keys do not name the mixer: a linear-attention model starts from the GLA model's weights (its
    gate aside, drawn last) and trains on the same batches."""
    vocab = Vocab(n_keys=n_keys)
    cfg = ModelConfig(mixer, d_k, d_model=d_model, vocab_size=vocab.size)
    full_length = n_segments * segment_length + n_segments - 1
    tc = TrainConfig(n_pairs=n_pairs, steps=steps, batch=batch, lr=lr,
                     length=segment_length if delimited else full_length,
                     n_segments=n_segments if delimited else 1, p_absent=p_absent, vocab=vocab)
    return cfg, tc, ("delimited", "init", d_k, n_pairs, seed), \
        ("delimited", "batches", tc.n_segments, tc.length, n_pairs, seed)


def _measure_delimited(model: MixerLM, tc: TrainConfig, d_k: int, n_pairs: int, seed: int, *, root: int,
                       delimited: bool, n_segments: int, segment_length: int, p_absent: float, n_eval: int,
                       n_ess: int, tau: float) -> dict:
    """What :func:`run_delimited` measures of a trained model."""
    vocab = tc.vocab
    tokens, targets, delims = delimited_mqar(stream(root, "delimited", "test", n_segments, n_pairs, seed),
                                             n_eval, n_pairs, n_segments, segment_length, vocab, p_absent)
    prof = task_ess(model, tokens[:n_ess], taus=(tau,))
    with torch.no_grad():
        _, log_a = model(torch.from_numpy(tokens[:n_ess]), return_gates=True)
    tol = prof[f"tol={tau:g}"]
    gates = torch.ones(tokens[:n_ess].shape) if log_a is None else torch.exp(log_a).mean(dim=2)
    out = {"accuracy": accuracy(model, tokens, targets), "train_length": tc.length * tc.n_segments
            + tc.n_segments - 1, "eval_length": int(tokens.shape[1]),
            "ess_profile": tol.mean(axis=0), "entropy_profile": prof["entropy"].mean(axis=0),
            "gate_profile": gates.mean(dim=0).numpy(), "delimiters": delims,
            "ess_drops": delimiter_drops(tol, delims, d_k),
            "entropy_drops": delimiter_drops(prof["entropy"], delims, d_k)}
    if delimited and model.cfg.mixer in GATED:   # the positive control: a hard reset on the delimiter
        reset = task_ess(with_hard_reset(model, vocab.delimiter), tokens[:n_ess], taus=(tau,))
        out["reset_entropy_profile"] = reset["entropy"].mean(axis=0)
        out["reset_entropy_drops"] = delimiter_drops(reset["entropy"], delims, d_k)
    return out


def run_delimited(d_k: int, n_pairs: int, seed: int, *, root: int, delimited: bool, n_segments: int = 3,
                  segment_length: int = 16, n_keys: int = 8, p_absent: float = 0.25,
                  steps: int = 400, batch: int = 32, lr: float = 3e-3, d_model: int = 48,
                  n_eval: int = 256, n_ess: int = 32, tau: float = 1e-2, mixer: str = "gla") -> dict:
    """Train a GLA model on the delimited task (``delimited=True``: ``n_segments`` segments of
    ``segment_length`` tokens joined by delimiters, ``L`` tokens in all) or, as the length-matched
    control, on single segments of the same length ``L`` (one set of ``n_pairs`` bindings held over
    the whole sequence; no delimiter ever seen), replicate ``seed`` under the chapter seed ``root``.
    Both arms of a replicate start from the same weights, train on ``L``-token sequences and are
    measured on the same delimited test sequences of length ``L``; their training batches are keyed
    by the task they train on. Measured: accuracy; the tolerance-ESS (``tau``) and entropy-ESS
    profiles over positions (mean over ``n_ess`` sequences), the mean gate; per test sequence the
    drop after delimiters (:func:`delimiter_drops`, cap ``d_k``) of the tolerance-ESS
    (``ess_drops``) and of the entropy-ESS (``entropy_drops``); for the delimited arm also
    ``reset_entropy_drops`` (and its profile), the entropy drops of the same model with a hard
    reset on the delimiter (:func:`with_hard_reset`, the positive control). ``mixer="linear"``: the
    same model without its gate (linear attention, which cannot reset; from the same initial weights,
    on the same batches; its gate profile is 1 and it has no hard-reset control).
    :func:`run_delimited_replicates` computes the same for several replicates at once."""
    task = dict(delimited=delimited, n_segments=n_segments, segment_length=segment_length, p_absent=p_absent)
    cfg, tc, init, batches = _delimited_member(d_k, n_pairs, seed, n_keys=n_keys, steps=steps, batch=batch,
                                               lr=lr, d_model=d_model, mixer=mixer, **task)
    model, _ = train(cfg, tc, root=root, init=init, batches=batches)
    return _measure_delimited(model, tc, d_k, n_pairs, seed, root=root, n_eval=n_eval, n_ess=n_ess, tau=tau,
                              **task)


def run_delimited_replicates(d_k: int, n_pairs: int, seed: int, *, replicates: int, n_seeds: int | None = None,
                             root: int, delimited: bool, n_segments: int = 3, segment_length: int = 16,
                             n_keys: int = 8, p_absent: float = 0.25, steps: int = 400, batch: int = 32,
                             lr: float = 3e-3, d_model: int = 48, n_eval: int = 256, n_ess: int = 32,
                             tau: float = 1e-2, mixer: str = "gla") -> dict:
    """:func:`run_delimited` of the replicates ``seed, seed + 1, …`` (``replicates`` of them, none
    from ``n_seeds`` on), the models trained as one population (the same numbers, bit for bit):
    one sweep point. Returns ``{"models": [run_delimited(...) of each replicate]}``."""
    task = dict(delimited=delimited, n_segments=n_segments, segment_length=segment_length, p_absent=p_absent)
    seeds = _replicates(seed, replicates, n_seeds)
    members = [_delimited_member(d_k, n_pairs, s, n_keys=n_keys, steps=steps, batch=batch, lr=lr,
                                 d_model=d_model, mixer=mixer, **task) for s in seeds]
    trained = train_groups(members[0][0], [m[1] for m in members], root=root,
                               inits=[m[2] for m in members], batches=[m[3] for m in members])
    return {"models": [_measure_delimited(model, m[1], d_k, n_pairs, s, root=root, n_eval=n_eval, n_ess=n_ess,
                                          tau=tau, **task)
                       for s, m, (model, _) in zip(seeds, members, trained)]}


#: The arms of the delimiter study: (trained with delimiters?, mixer). ``control``: the same GLA
#: model trained on single segments of the same length; ``linear``: the same model without its
#: gate (linear attention), trained with delimiters on the same batches, which cannot reset.
DELIMITER_ARMS = {"delimited": (True, "gla"), "control": (False, "gla"), "linear": (True, "linear")}


def run_delimited_arm(d_k: int, n_pairs: int, arm: str, seed: int, **kw) -> dict:
    """:func:`run_delimited_replicates` of one arm of :data:`DELIMITER_ARMS` (a sweep point)."""
    if arm not in DELIMITER_ARMS:
        raise ValueError(f"arm must be one of {sorted(DELIMITER_ARMS)}, got {arm!r}")
    delimited, mixer = DELIMITER_ARMS[arm]
    return run_delimited_replicates(d_k, n_pairs, seed, delimited=delimited, mixer=mixer, **kw)
