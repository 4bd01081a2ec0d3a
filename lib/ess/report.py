"""How chapter 09 reports its trained models: their tables, the mixers' rankings and per-family
correlations in words, and the power statements of the chapter's four statistical claims
(:class:`lib.claims.Power`). The statistics themselves live in :mod:`lib.ess.analysis`."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats

from lib.claims import Power
from lib.ess.analysis import FAR_BETTER_GAP, SATURATED_ACCURACY

__all__ = ["mqar_table", "regulariser_table", "regulariser_means", "accuracy_spread", "utilisation", "ranking",
           "family_rhos", "direction", "effect_position", "rival_text", "pooled_text", "accuracy_power",
           "unresolved_text", "delimiter_reading", "delimiter_power", "regulariser_pairs", "stalled_text",
           "gain_power", "tracking_power", "control_pairs"]

# -- tables of trained models ------------------------------------------------------------------------------


def mqar_table(points, mixers, widths, pairs, ess_col: str) -> pd.DataFrame:
    """One row per trained MQAR model of the sweep ``points`` (each ``{"mixer", "d_k", "models": [...]}``,
    as :func:`lib.ess.experiments.run_mqar_replicates` returns them), in the order of ``mixers``,
    ``widths``, ``pairs`` and seed; ``ess`` is the column ``ess_col`` (the reported tolerance) and
    ``ess_per_kv``, ``tss_per_kv``, ``cap_per_kv`` are ESS, TSS and the position-capped TSS
    (:func:`lib.ess.analysis.capped_tss`) per key–value pair."""
    records = sorted(({"mixer": p["mixer"], "d_k": p["d_k"], **r} for p in points for r in p["models"]),
                     key=lambda r: (mixers.index(r["mixer"]), widths.index(r["d_k"]), pairs.index(r["n_pairs"]),
                                    r["seed"]))
    df = pd.DataFrame(records)
    df["ess"] = df[ess_col]
    df["ess_per_kv"] = df["ess"] / df["n_pairs"]
    df["tss_per_kv"] = df["tss"] / df["n_pairs"]
    df["cap_per_kv"] = df["tss_capped"] / df["n_pairs"]
    return df


def regulariser_table(points, ess_col: str) -> pd.DataFrame:
    """One row per model of the regulariser's sweep ``points`` (each ``{"reg": λ, "models": [...]}``),
    its weight λ in the column ``lambda`` and ``ess`` the column ``ess_col``."""
    df = pd.DataFrame([{"lambda": p["reg"], **{k: v for k, v in r.items() if k != "n_pairs"}}
                       for p in points for r in p["models"]])
    df["ess"] = df[ess_col]
    return df


def regulariser_means(df: pd.DataFrame) -> pd.DataFrame:
    """Mean accuracy, ESS and gate of a :func:`regulariser_table` per λ, in increasing λ."""
    return df.groupby("lambda")[["accuracy", "ess", "mean_gate"]].mean()


def regulariser_pairs(df: pd.DataFrame, lam0: float, lam1: float) -> pd.DataFrame:
    """The models of a :func:`regulariser_table` paired by seed: per seed (index, ascending) the
    ``accuracy`` and entropy-ESS (``entropy``) at ``lam0`` (suffix ``_0``) and ``lam1`` (``_1``).
    Only seeds trained at both weights are kept (a sweep trains every seed at every weight)."""
    cols = {"accuracy": "accuracy", "ess_entropy": "entropy"}
    sides = [df[df["lambda"] == lam].set_index("seed")[list(cols)].rename(
        columns={k: f"{v}_{j}" for k, v in cols.items()}) for j, lam in enumerate((lam0, lam1))]
    return sides[0].join(sides[1], how="inner").sort_index()


def accuracy_spread(df: pd.DataFrame) -> float:
    """The widest range (largest − smallest) of accuracy among the models of one λ of a
    :func:`regulariser_table`: how far training noise alone moves a model's accuracy."""
    return float(df.groupby("lambda")["accuracy"].agg(lambda a: a.max() - a.min()).max())


def utilisation(df: pd.DataFrame) -> pd.Series:
    """Per fixed-state mixer (every mixer but softmax) of a :func:`mqar_table`, the mean over its models
    of ESS / TSS: the share of the state a trained model uses."""
    fixed = df[df.mixer != "softmax"]
    return fixed.assign(u=fixed.ess / fixed.tss).groupby("mixer").u.mean()


# -- results in words --------------------------------------------------------------------------------------

def ranking(means) -> str:
    """The names of ``means`` (a :class:`pandas.Series` or mapping name → mean) by decreasing mean,
    joined by '>' or by '=' where the means agree to 3 decimals (ties keep the given order)."""
    v = pd.Series(means).round(3).sort_values(ascending=False, kind="stable")
    text = v.index[0]
    for prev, (name, val) in zip(v.to_numpy()[:-1], list(v.items())[1:]):
        text += (" = " if val == prev else " > ") + name
    return text


def family_rhos(fam: dict, accuracy, family, families) -> str:
    """Each family's ρ_ESS against ρ_TSS from a :func:`lib.ess.analysis.within_family_spearman`
    result ``fam``, or why it has none (``accuracy`` and ``family`` label the models it ranked):
    all its models reach the same accuracy, or a measure is constant."""
    accuracy, family = np.asarray(accuracy, dtype=float), np.asarray(family)

    def one(m):
        if m not in fam["undefined"]:
            return f"{m}: {fam['rho_a'][m]:.2f} against {fam['rho_b'][m]:.2f}"
        acc_m = accuracy[family == m]
        if np.unique(acc_m).size == 1:
            return f"{m}: undefined (all its models reach the same accuracy, {acc_m[0]:.2f})"
        return f"{m}: undefined (a constant measure)"

    return "; ".join(one(m) for m in families)


def direction(rho_ess: float, rho_tss: float) -> str:
    """Whether ESS ranks better than TSS, the paper's direction, in words."""
    return "the paper's direction" if rho_ess > rho_tss else "against the paper's direction"


def effect_position(effect: float, low: float, high: float) -> str:
    """Where ``effect`` lies against the interval ``[low, high]``: inside, above or below it."""
    if low <= effect <= high:
        return "lies inside"
    return "lies above" if effect > high else "lies below"


def pooled_text(boot: dict, n_models: int) -> str:
    """The pooled comparison of :func:`lib.ess.analysis.spearman_gap_bootstrap` over ``n_models`` in a
    sentence."""
    return (f"Pooled over the {n_models} models of every mixer, ρ_ESS = {boot['rho_a']:.2f} against ρ_TSS = "
            f"{boot['rho_b']:.2f} (gap interval [{boot['gap_low']:.2f}, {boot['gap_high']:.2f}], positive in "
            f"{boot['p_a_better']:.1%} of resamples: " + direction(boot["rho_a"], boot["rho_b"]) + ").")


def rival_text(cmp: dict, names: dict) -> str:
    """Per rival of a :func:`lib.ess.analysis.rival_comparison` result ``cmp`` (``names``: rival → words)
    and per family kept: ρ_ESS against the rival's ρ, the two predictors' own correlation and the
    ceiling it leaves, then the mean gap, its interval and the share of resamples at or below 0."""
    parts = []
    for name, r in cmp["per_rival"].items():
        fam, ceil = r["fam"], r["ceiling"]
        fams = [f for f in cmp["kept"] if f not in fam["undefined"]]
        per = "; ".join(f"{f}: ρ_ESS {fam['rho_a'][f]:.2f} against {fam['rho_b'][f]:.2f}, the two measures "
                        f"correlating at {r['rho_ab'][f]:.2f} (ceiling {ceil['per_family'][f]:.2f})" for f in fams)
        parts.append(f"against {names[name]}: {per or 'no family with defined correlations'}"
                     + (f"; mean gap {fam['mean_gap']:.2f} (95% interval [{fam['gap_low']:.2f}, "
                        f"{fam['gap_high']:.2f}], share of resamples ≤ 0: {fam['p_not_better']:.4f})" if fams else ""))
    return "; ".join(parts)


#: The largest correlation between ESS/κ and a rival within a family at which the family's ceiling
#: √(2(1 − ρ)) reaches the stated effect (:func:`lib.ess.analysis.rival_ceiling`).
CEILING_RHO = 1.0 - FAR_BETTER_GAP ** 2 / 2


def undecidable_text(cmp: dict, names: dict, profile: str | None = None) -> str:
    """Where the ceiling lies below the stated effect: why no number of seeds decides the claim, and
    what design would (ESS/κ and the rival parting within a family); empty otherwise. ``profile``: the
    run's profile; the words about the paper profile's grid say only what this run shows (at
    ``"paper"`` it is that grid), not what another run showed."""
    if not cmp.get("defined") or cmp["ceiling"] >= FAR_BETTER_GAP:
        return ""
    rhos = "; ".join(f"{names[k]} " + ", ".join(f"{f} {v:.3f}" for f, v in r["rho_ab"].items()
                                                      if f in cmp.get("kept", r["rho_ab"]) and np.isfinite(v))
                     for k, r in cmp["per_rival"].items() if isinstance(r.get("rho_ab"), dict))
    return (f" The ceiling, not the seeds, keeps this claim from being decided: more seeds narrow the bootstrap "
            f"but cannot raise a ceiling set by how alike ESS/κ and the rival rank the models, and a family's "
            f"ceiling reaches {FAR_BETTER_GAP:.2f} only where they correlate at most {CEILING_RHO:.3f}"
            + (f" (here: {rhos})" if rhos else "")
            + (". This run is the paper profile's, the widest grid of widths and κ this CPU reaches, and it does not "
               "part them; " if profile == "paper" else
               ". The paper profile's wider grid of widths and κ is the widest this CPU reaches, and its record says "
               "whether it parts them; ")
            + "what would decide the claim is a design where ESS/κ and TSS/κ part within a family, such as deeper "
              "models trained to convergence on tasks hard enough for gated models to collapse (ESS ≪ TSS), as the "
              "paper reports.")


def accuracy_power(cmp: dict, names: dict, *, families, n_models: int, alpha: float, n_layers: int,
                   steps: int, pooled: str, profile: str | None = None) -> Power:
    """The power statement of the claim that ESS/κ ranks accuracy better than every rival (``names``:
    rival → words) within each family: of :func:`lib.ess.analysis.rival_comparison`'s result ``cmp``
    over ``n_models`` models of ``families``, per rival its detectable gap at ``alpha`` and its ceiling
    (:func:`lib.ess.analysis.rival_ceiling`, on the families the statistic uses), the rule's detectable
    gap (the largest) and ceiling (the smallest) against the stated effect, whether ``n_layers`` and
    ``steps`` are the paper's regime (two layers or more, 2000 steps or more), and the ``pooled``
    comparison. Without a defined design (no family ranks) the control fails."""
    sat = cmp["saturated"]
    paper_regime = n_layers >= 2 and steps >= 2000
    designs = {k: r["design"] for k, r in cmp["per_rival"].items()}
    statement = (
        f"{n_models} models of {len(families)} families ({', '.join(families)}); "
        + (f"left out of the statistic and of its ceiling alike as saturated (at least half the models reach "
           f"accuracy {SATURATED_ACCURACY}, so their ranking is one of near-ties): {', '.join(sat)}; " if sat else "")
        + f"the paper gives no coefficients, so its \"far better\" is taken a priori as a mean gap of "
          f"{FAR_BETTER_GAP:.2f} (Cohen's medium correlation), against each rival. "
        + ("".join(f"Against {names[k]}: bootstrap standard error {d['se']:.3f}, detectable gap {d['detectable']:.2f} "
                   f"(probability 0.8 at {alpha:.1e}), ceiling {d['ceiling']:.2f}. " for k, d in designs.items())
           + "Each family's ceiling is the smaller of a perfect ranking's gain, 1 − ρ_rival, and √(2(1 − ρ)), "
             "ρ the correlation of ESS/κ with the rival: no accuracy whatever can separate two measures that "
             f"rank the models alike by more. The rule needs every rival beaten: detectable {cmp['detectable']:.2f}, "
             f"ceiling {cmp['ceiling']:.2f}. "
           if cmp["defined"] else "No family has defined correlations, so no gap can be estimated. ")
        + (f"{n_layers}-layer models trained {steps} steps: the paper's regime (two layers or more, trained to "
           "convergence)." if paper_regime else
           f"{n_layers}-layer models trained {steps} steps, short of the paper's regime (two layers or more, "
           "trained to convergence; the CPU budget sets the steps).")
        + " " + pooled + undecidable_text(cmp, names, profile))
    value = {k: {kk: d[kk] for kk in ("se", "detectable", "ceiling", "seeds_needed")} for k, d in designs.items()}
    for k, d in designs.items():  # more seeds cannot raise a ceiling set by how alike ESS/κ and the rival rank
        if d.get("ceiling") is not None and d["ceiling"] < FAR_BETTER_GAP:
            value[k]["seeds_needed"] = None
        value[k]["ceiling_needs_rho_at_most"] = CEILING_RHO
    if cmp["defined"]:
        return Power(statement, detectable=cmp["detectable"], effect=FAR_BETTER_GAP, ceiling=cmp["ceiling"],
                     value=value)
    return Power(statement, control=False, value=value)


def unresolved_text(dt: dict, n_seeds: int, accuracy, alpha: float) -> str:
    """Which replicates of :func:`lib.ess.analysis.delimiter_test`'s result ``dt`` (of ``n_seeds``) do
    not resolve their own drop after the delimiters, with the sign test's statistic (the share of test
    sequences whose drop is positive), its p-value at ``alpha`` and ``accuracy`` (per replicate), and
    what that means: below the smallest resolved drop, a
    training run that solves the task without resetting; otherwise the run cannot decide the claim."""
    unresolved, drop_means = dt["unresolved"], dt["means"]["drop"]
    if not unresolved.size:
        return "every replicate's own drop is resolved"
    return (
        f"{len(unresolved)} of {n_seeds} replicates "
        + ("does not resolve its" if len(unresolved) == 1 else "do not resolve their") + " own drop: positive in "
        + ", ".join(f"{dt['positive_share']['drop'][k]:.0%} of its test sequences (sign test p = "
                    f"{dt['p']['drop'][k]:.1g} against {alpha:.1e}; mean drop {drop_means[k]:.2f}, accuracy "
                    f"{accuracy[k]:.2f})" for k in unresolved)
        + (f", below the smallest drop of a replicate that resolves one ({dt['smallest_resolved']:.2f}): "
           + ("this training run solves" if len(unresolved) == 1 else "these training runs solve")
           + " the task without resetting, so the test's power is not what fails"
           if dt["below_resolved"] else
           "; a drop as large as the smallest one another replicate resolves cannot be excluded there, "
           "so this run cannot tell a training run without a reset from one with a small reset; it "
           "counts as a run that does not reset"
           if dt["resolved"].size else "; no replicate resolves a drop"))


def interior_cap_share(profiles, d_k: int) -> float:
    """The mean ESS profile away from the sequence ends (positions 2·d_k to ℓ − 2·d_k, where the
    cap min(d_k, i, ℓ − i) is d_k) as a share of d_k; NaN when the sequences are too short to
    have such an interior (a `quick` run)."""
    interior = [np.asarray(profile)[2 * d_k:-2 * d_k] for profile in profiles]
    if not all(len(part) for part in interior):
        return float("nan")
    return float(np.mean([part.mean() for part in interior])) / d_k


def delimiter_reading(p: dict, alpha: float) -> str:
    """What the delimiter tests' p-values ``p`` (test → per seed) show at ``alpha``: every seed resolves
    every test, or which tests some seed does not resolve."""
    sig = {test: bool(np.all(v < alpha)) for test, v in p.items()}
    failed = [{"drop": "its own drop", "control": "the margin over the length-matched control",
               "linear": "the margin over linear attention"}[t] for t, ok in sig.items() if not ok]
    return ("on every seed the delimiter-trained GLA's entropy-ESS falls after a delimiter, by more than "
            "the length-matched control's and by more than linear attention's" if not failed else
            "not every seed resolves " + " and ".join(failed))


def share_in_words(q: float, most: int = 100) -> str:
    """A share as the nearest fraction with a denominator of at most ``most``, in words: 0.95 → "19 in 20"."""
    f = Fraction(q).limit_denominator(most)
    return f"{f.numerator} in {f.denominator}"


def delimiter_power(dt: dict, share: dict, run_power: dict, reset_drops: np.ndarray, accuracy: dict, *,
                    alpha: float, eval_length: int, negative: dict, observed: dict | None = None,
                    length_matched: dict | None = None, flip: float | None = None) -> Power:
    """The power statement of the delimiter claim, the training run as the unit: the design of
    :func:`lib.ess.analysis.run_share_test`'s result ``share`` (the smallest share of resetting runs
    its rule detects with probability 0.8 at ``alpha``, given each resetting run's chance
    ``run_power`` of passing its own tests, from the chapter's chosen share by
    :func:`lib.ess.analysis.design_run_power`;
    the stated share; ceiling 1), its positive control (:func:`lib.ess.analysis.delimiter_test`'s tests
    on the hard-reset model, ``reset_drops``), its negative control ``negative`` ({statement, value,
    holds}: the same rule on linear attention, which cannot reset; the comparison is unmatched if it
    passes), the shares the resetting runs showed (``observed``, :func:`lib.ess.analysis.reset_run_power`;
    descriptive, selected by the tests), and each arm's accuracy range (``accuracy``: arm → per
    replicate) at the length ``eval_length``. ``length_matched``: the length-matched GLA, never trained on
    delimiters, as the model under test by the part of the rule it can be judged by ({statement, value,
    holds}); descriptive, not a control of the verdict, since the claim's own margin over that model
    already excludes a drop it shows.
    ``flip``: :func:`lib.ess.analysis.reset_share_flip_point`, the per-sequence share below which the
    rule no longer detects the stated share of runs."""
    acc = accuracy
    max_p_reset = max(v.max() for v in dt["p_positive"].values())
    rp = run_power
    seen = ("" if observed is None else
            f" (The {observed['basis']} runs here show positive differences in "
            + ", ".join(f"{v:.0%}" for v in observed["share"].values())
            + " of sequences; shares of runs the tests selected, so they do not set the power.)")
    return Power(
        f"The unit is the training run: {share['n']} independent runs, each tested at {share['alpha_run']:.1e} "
        f"by exact sign tests over its {dt['n_sequences']} test sequences (valid for skewed drops), so that a "
        f"chapter seed whose runs never reset passes with probability below {alpha:.1e}. Per run, the chapter's own "
        f"choice (the paper's text was not available, and the notes on it record only a graded effect): a run that "
        f"resets is taken to show a positive difference in a share {rp['share']:.2f} of its sequences "
        f"({share_in_words(rp['share'])}) "
        f"for each of the {rp['n_tests']} tests "
        f"(the drop, the margin over the control and over linear attention). Each test then rejects with "
        f"probability {rp['per_test']:.3f} (exact binomial power) and all {rp['n_tests']} with probability at least "
        f"{rp['power']:.3f} (Bonferroni); a test detects a share of {rp['share_detectable']:.2f} with probability "
        f"0.8, below the stated {rp['share']:.2f} and the ceiling 1.{seen}"
        + ("" if flip is None else
           " The design hinges on that choice: at this many sequences no share lets the rule detect the stated "
           "share of resetting runs, so the verdict cannot read \"not reproduced\"." if not math.isfinite(flip) else
           f" The design hinges on that choice: below a share of {flip:.3f} per sequence the rule no longer detects "
           f"the stated share of resetting runs, so a verdict of \"not reproduced\" says that fewer than about "
           f"{share['effect']:.0%} of runs reset in at least about {flip:.2f} of their sequences, not that no run "
           "resets at all.")
        + f" The paper's finding is taken a priori "
        f"as a share of {share['effect']:.1f} of runs that reset, and the rule (one run or more) detects a share of "
        f"{share['detectable']:.2f} with probability 0.8 at that per-run power, against the ceiling 1. Positive "
        f"control: the same per-run tests on the delimiter-trained GLA with a hard reset on the delimiter (mean "
        f"entropy drop {reset_drops.mean():.2f}; largest p over runs and tests {max_p_reset:.1e}). Negative "
        f"control, by the claim's own rule: {negative['statement']}: "
        + ("it passes, so the rule does not single out a model that can reset (unmatched)" if negative["holds"]
           else "it fails, as it must")
        + ("" if length_matched is None else
           f". Beside it, descriptive (the claim's margin over this model already excludes a drop it shows): "
           f"{length_matched['statement']}: " + ("it passes that part of the rule" if length_matched["holds"]
                                                 else "it does not pass that part of the rule"))
        + f". All arms trained and measured at {eval_length} tokens for the same steps; accuracy "
        f"{acc['delimited'].min():.2f}–{acc['delimited'].max():.2f} (GLA with delimiters), "
        f"{acc['control'].min():.2f}–{acc['control'].max():.2f} (control), "
        f"{acc['linear'].min():.2f}–{acc['linear'].max():.2f} (linear attention); a one-layer model on a "
        "synthetic delimited recall task stands in for the paper's language models.",
        detectable=share["detectable"], effect=share["effect"], ceiling=share["ceiling"],
        control=bool(dt["control_passes"]),
        matched=not negative["holds"],
        value={"reset_drop": float(reset_drops.mean()), "max_p_reset": float(max_p_reset),
               "share_detectable_per_run": rp["share_detectable"], "sequence_share_effect": rp["share"],
               "sequence_share_ceiling": rp["ceiling"], "run_power": rp["power"],
               "run_power_per_test": rp["per_test"], "run_power_basis": rp["basis"],
               "observed_shares": None if observed is None else observed["share"],
               "k": share["k"], "n": share["n"], "alpha_run": share["alpha_run"],
               "resets": dt["resets"].tolist(), "resets_positive": dt["resets_positive"].tolist(),
               "negative_control": negative, "length_matched_descriptive": length_matched,
               "sequence_share_flip_point": flip})


def stalled_text(stalled: dict, n_seeds: int, chance: float) -> str:
    """The models of the regulariser study that did not train (``stalled``: λ → seeds whose accuracy is
    at most twice ``chance``), in words; they stay in the tests."""
    if not any(len(v) for v in stalled.values()):
        return f"Every model trained (accuracy above twice chance, {2 * chance:.3f})"
    return ("Models that did not train (accuracy at most twice chance, " + f"{2 * chance:.3f}), kept in the tests: "
            + "; ".join(f"λ = {lam:g}: {len(v)} of {n_seeds}" + (f" (seeds {', '.join(map(str, v))})" if v else "")
                        for lam, v in stalled.items()))


def _level_text(test: dict, alpha: float, smallest: str) -> str:
    return ("" if test["reachable"] else
            f" With {test['n']} seeds the smallest p-value the test can give is {smallest}, above {alpha:.1e}: "
            f"it cannot hold at all, so the design detects nothing ({test['n_level']} seeds reach the level).")


def gain_power(gain: dict, stalled: str, *, lam1: float, alpha: float) -> Power:
    """The power statement of the claim that the regulariser (weight ``lam1``) raises accuracy, paired by
    seed: :func:`lib.ess.analysis.paired_gain_test`'s design (the exact sign-flip test's detectable gain
    at ``alpha`` and its power at the stated effect, for Normal differences of the observed spread; the
    ceiling; unmatched where the seeds cannot reach ``alpha``) and which models did not train
    (``stalled``, in words)."""
    return Power(
        f"{gain['n']} seeds, each trained without and with the regulariser (λ = {lam1:g}) from the same initial "
        f"weights on the same batches; the paper gives no number, so the gain is taken a priori as "
        f"{gain['effect']:.2f} in accuracy (a tenth of the queries). Exact sign-flip test"
        + (f": with {gain['n']} seeds only {gain['n']} positive differences of {gain['n']} reach {alpha:.1e}, so its "
           "power is the chance that every seed gains" if gain["all_positive_only"] else "")
        + f". For Normal paired differences of the observed spread {gain['sd']:.3f} (standard deviation) it detects "
        f"a mean gain of {gain['detectable']:.3f} with probability 0.8 at {alpha:.1e}, and the stated "
        f"{gain['effect']:.2f} with probability {gain['power_at_effect']:.2f} (exact test, "
        + ("closed form" if gain["all_positive_only"] else "simulated" if gain["n"] <= 32 else
           "by the paired t-test's noncentral t, which it approaches at this many seeds")
        + f"; the t approximation would say "
        f"{gain['detectable_t']:.3f}); accuracy cannot exceed 1, so the largest mean gain possible is "
        f"{gain['ceiling']:.2f}. {stalled}."
        + _level_text(gain, alpha, f"2^-{gain['n']} = {2.0 ** -gain['n']:.1e}"),
        detectable=gain["detectable"] if math.isfinite(gain["detectable"]) else None, effect=gain["effect"],
        ceiling=gain["ceiling"], matched=gain["reachable"],
        control=None if math.isfinite(gain["detectable"]) else False,
        value={k: (gain[k] if not isinstance(gain[k], float) or math.isfinite(gain[k]) else None)
               for k in ("n", "sd", "se", "detectable", "power_at_effect", "detectable_t", "ceiling", "effect",
                         "reachable")})


def contrast_pairs_needed(alpha: float, effect: float, power: float = 0.8) -> int:
    """The pairs per group at which the Fisher-z formula for a difference of two correlations,
    (z_{1−α} + z_power)·√(2/(n − 3)), comes down to ``effect`` (Fisher z): a lower bound on what the
    permutation contrast needs, since the formula overstates that test's power (it assumes a test at
    its nominal level, and the permutation contrast is conservative where the groups' spreads differ)."""
    z = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    return int(math.ceil(2 * (z / effect) ** 2 + 3))


def mediation_text(med: dict | None) -> str:
    """The mediation reading (:func:`lib.ess.analysis.origin_mediation`'s ``med``) in words, from two
    intervals: the predicted gain's (whether the ESS change accounts for any of the gain: "none" only
    where it holds 0) and the residual's (whether it accounts for all of it: where it holds 0).
    ``None``: too few pairs to fit."""
    if med is None:
        return "too few pairs to fit the control line"
    whole = not med["excludes_zero"]                  # the residual's interval holds 0
    if med["pred_high"] < 0:
        where = "the control line predicts a loss at the treatment's ESS change: against the paper's account"
    elif med["predicted_excludes_zero"] and med["high"] < 0:
        where = "the control line predicts more than the whole gain at the treatment's ESS change"
    elif med["predicted_excludes_zero"]:
        where = ("the ESS change accounts for part of the gain" if not whole else
                 "the ESS change accounts for some of the gain, and the interval does not exclude all of it")
    else:
        where = ("the ESS change accounts for none of the gain this interval resolves: against the paper's account"
                 if not whole else "this run cannot tell whether the ESS change carries the gain")
    return (f"the predicted gain is {med['predicted']:+.3f} ({med['level']:.0%} bootstrap interval "
            f"[{med['pred_low']:+.3f}, {med['pred_high']:+.3f}]) and the residual {med['residual']:+.3f} "
            f"([{med['low']:+.3f}, {med['high']:+.3f}]; pairs resampled within each group, {med['n_treat']} "
            f"treatment and {med['n_ctl']} control pairs): {where}")


def tracking_power(track: dict, contrast: dict, med: dict, *, alpha: float, max_pairs: int | None = None,
                   med_trained: dict | None = None, untrained: tuple[int, int] | None = None,
                   threshold: float | None = None) -> Power:
    """The power statement of the claim that the regulariser's gain goes through the entropy-ESS: an
    intersection of :func:`lib.ess.analysis.gain_tracking_test` (the treatment pairs' changes
    correlate) and :func:`lib.ess.analysis.correlation_contrast_test`'s ``contrast`` (more than the
    λ-free control pairs' changes do). Its design is the contrast's, in Fisher-z units (detectable
    difference at ``alpha`` against the stated effect: treatment at the tracking effect, control at 0),
    the harder of the two; unmatched where the seeds cannot reach ``alpha``; the pairs per group the
    Fisher-z formula asks for (:func:`contrast_pairs_needed`, a lower bound), set beside ``max_pairs``, the
    most pairs per group any profile trains (the paper profile's). The stated effect puts the control at
    r = 0; the observed control r and ``untrained`` (the treatment and control pairs containing a run
    whose accuracy is at most ``threshold``) are set beside that assumption. The mediation reading
    ``med`` (:func:`lib.ess.analysis.origin_mediation`) is reported beside it, on all pairs and
    (``med_trained``) on the pairs where both runs trained, both ways (leaving pairs out conditions on
    an outcome of the treatment, which may rescue a run that would have stalled)."""
    c = contrast
    need = contrast_pairs_needed(alpha, c["effect"])
    return Power(
        f"{track['n']} treatment pairs (with/without the regulariser, same initial weights and batches) and "
        f"{c['n_ctl']} control pairs (two λ-free runs of different seeds: initial weights and batches both differ, "
        "since two λ-free runs that shared both would be the same run). The claim holds when the treatment pairs' "
        f"changes correlate (permutation test, r = {track['r']:.2f}, p = {track['p']:.1e}) and correlate more than "
        f"the control pairs' (r = {c['r_ctl']:.2f}): the difference r_T − r_C = {c['diff']:+.2f} by a permutation test "
        f"that reassigns pairs between the groups (p = {c['p']:.1e}; valid if the pairs of both groups are "
        f"exchangeable under the null). The paper's account is taken a priori as a treatment correlation of "
        f"{track['effect']:.1f} against none in the control, {c['effect']:.2f} in Fisher z; by the Fisher-z formula "
        f"the contrast detects a difference of {c['detectable']:.2f} with probability 0.8 at {alpha:.1e}, "
        + ("within" if c["detectable"] <= c["effect"] else "beyond")
        + f" that effect (observed {c['z_diff']:+.2f}). That formula assumes a test at its nominal level and "
        f"overstates this permutation contrast's power, which is conservative where the groups' spreads differ as "
        f"here, so the {need} pairs per group it asks for to detect the effect are a lower bound: "
        + (f"no profile this CPU reaches decides the claim (the largest, paper, trains {max_pairs} pairs per group), "
           if max_pairs is not None and max_pairs < need else "")
        + f"what would decide it is at least {need} treatment and {need} control pairs (or a power of the "
        f"permutation contrast simulated at the design). "
        + (f"The stated effect also assumes control pairs that correlate at 0; here r_C = {c['r_ctl']:.2f}"
           + ("" if untrained is None else
              f", with {untrained[1]} of {c['n_ctl']} control pairs and {untrained[0]} of {track['n']} treatment pairs "
              f"containing a run that did not train (accuracy at most {threshold:.3f}), which moves ESS and "
              f"accuracy together in any pair")
           + f". A control correlation above 0 leaves less contrast to detect, so {need} pairs per group is a lower "
             "bound on what a decision would need for that reason too. ")
        + f"Mediation, beside the rule: the control pairs' line of gain on ESS change through the origin (slope "
        f"{med['slope']:+.3f}) predicts a gain of {med['predicted']:+.3f} at the treatment's mean ESS change "
        f"({track['measure_mean']:+.3f}; sign-flip p = {track['measure_p']:.1e} for a rise), against its mean gain "
        f"{med['gain']:+.3f}; with all pairs, {mediation_text(med)}"
        + ("" if untrained is None else
           f"; with the pairs containing a run that did not train left out, {mediation_text(med_trained)}") + "."
        + _level_text(track, alpha, f"1/{track['n']}! = {1.0 / math.factorial(track['n']):.1e}"),
        detectable=c["detectable"], effect=c["effect"], ceiling=None, matched=bool(track["reachable"]),
        value={k: track[k] for k in ("n", "r", "p", "measure_mean", "measure_p", "reachable")}
        | {f"contrast_{k}": c[k] for k in ("r_ctl", "diff", "z_diff", "p", "detectable", "effect")}
        | {"pairs_needed_at_least": need}
        | {f"mediation_{k}": med[k] for k in ("slope", "predicted", "pred_low", "pred_high", "gain", "residual", "low",
                                              "high", "level")}
        | {"untrained_pairs": None if untrained is None else {"treatment": untrained[0], "control": untrained[1]},
           "mediation_trained": None if med_trained is None else
           {k: med_trained[k] for k in ("slope", "predicted", "pred_low", "pred_high", "gain", "residual", "low",
                                        "high", "n_treat", "n_ctl")}})


def control_pairs(df: pd.DataFrame, control: pd.DataFrame, lam0: float, offset: int) -> pd.DataFrame:
    """The negative control's pairs: each seed ``s`` of a :func:`regulariser_table` ``df`` at ``lam0``
    (suffix ``_0``) beside the control run of seed ``s + offset`` at the same weight (``control``, a
    :func:`regulariser_table` of other seeds; suffix ``_1``): two λ-free runs that differ only in
    their seed. Columns as :func:`regulariser_pairs`, index the seed ``s``."""
    cols = {"accuracy": "accuracy", "ess_entropy": "entropy"}
    a = df[df["lambda"] == lam0].set_index("seed")[list(cols)].rename(columns={k: f"{v}_0" for k, v in cols.items()})
    b = (control[control["lambda"] == lam0].assign(seed=lambda t: t["seed"] - offset).set_index("seed")[list(cols)]
         .rename(columns={k: f"{v}_1" for k, v in cols.items()}))
    return a.join(b, how="inner").sort_index()
