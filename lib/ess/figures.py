"""Chapter 09's figures of trained models that the shared :mod:`lib.plotting` does not draw in one
call: accuracy against ESS/κ and TSS/κ, the ESS and gate profiles around delimiters, and the
regulariser's models side by side. Each returns the figure for :meth:`lib.chapter.Chapter.figure`."""

from __future__ import annotations

import matplotlib.ticker as mticker
import numpy as np

from lib import plotting as P

__all__ = ["accuracy_vs_ess", "delimiter_profiles", "regulariser"]


def accuracy_vs_ess(df, mixers):
    """MQAR accuracy of every model of a :func:`lib.ess.report.mqar_table` against its ESS/κ (top) and
    TSS/κ (bottom), on log axes, one colour per mixer."""
    fig, axes = P.figure(nrows=2, width=6.0, height=3.0, sharey=True)
    for k, mixer in enumerate(mixers):
        sub = df[df.mixer == mixer]
        for ax, col in zip(axes, ["ess_per_kv", "tss_per_kv"]):
            P.simulation(ax, sub[col], sub["accuracy"], index=k, label=mixer)
    for ax in axes:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(mticker.NullFormatter())
        ax.set_ylim(0, 1.02)
    P.label(axes[0], r"ESS / $\kappa$", "MQAR accuracy", legend=False)
    P.label(axes[1], r"TSS / $\kappa$", "MQAR accuracy", legend=False)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center")
    return fig


#: The delimiter figure's curves: (arm, profile, label).
DELIMITER_CURVES = [("delimited", "entropy_profile", "GLA trained with delimiters"),
                    ("control", "entropy_profile", "GLA, length-matched control (no delimiters)"),
                    ("linear", "entropy_profile", "linear attention trained with delimiters (no gate)"),
                    ("delimited", "reset_entropy_profile",
                     "positive control: GLA with a hard reset at the delimiter")]


def delimiter_profiles(runs: dict, d_k: int, length: int):
    """The entropy-ESS (top) and mean gate (bottom) over the positions of the delimited test
    sequences (``length`` tokens), each replicate thin and their mean bold, for every arm of ``runs``
    (arm → the replicates' records of :func:`lib.ess.experiments.run_delimited_arm`) and the
    hard-reset control; the positions just after a delimiter dotted, and the cap ``min(d_k, i, ℓ−i)``."""
    fig, axes = P.figure(nrows=2, width=6.4, height=2.6, sharex=True)
    for k, (arm, key, lab) in enumerate(DELIMITER_CURVES):
        prof = np.array([r[key] for r in runs[arm]])
        x = np.arange(prof.shape[1])
        for row in prof:
            axes[0].plot(x, row, color=P.PALETTE[k], linewidth=0.6, alpha=0.4)
        axes[0].plot(x, prof.mean(0), color=P.PALETTE[k], linewidth=1.6, marker=P.MARKERS[k],
                     markersize=3, label=lab)
        if key == "entropy_profile":
            gate = np.array([r["gate_profile"] for r in runs[arm]])
            for row in gate:
                axes[1].plot(x, row, color=P.PALETTE[k], linewidth=0.6, alpha=0.4)
            axes[1].plot(x, gate.mean(0), color=P.PALETTE[k], linewidth=1.6, marker=P.MARKERS[k],
                         markersize=3, label=lab)
    for ax in axes:
        for d in runs["delimited"][0]["delimiters"]:
            ax.axvline(d + 1, color="0.5", linewidth=0.8, linestyle=":")
    i = np.arange(length)
    P.theory(axes[0], i, np.minimum(d_k, np.minimum(i, len(i) - i)), label=r"cap $\min(d_k, i, \ell-i)$")
    P.label(axes[0], "", r"entropy-ESS$_i$")
    P.label(axes[1], "position $i$ (dotted: just after a delimiter)", r"mean gate $\bar\alpha_i$",
            legend=False)
    return fig


def regulariser(df, lambdas, d_k: int, tau: float):
    """ESS (against TSS ``d_k``), accuracy and mean gate of every model of a
    :func:`lib.ess.report.regulariser_table`, one column of points per weight in ``lambdas`` with
    its mean as a bar."""
    fig, axes = P.figure(ncols=3, width=2.9, height=3.0)
    for ax, col, lab, ylim in zip(axes, ["ess", "accuracy", "mean_gate"],
                                  [rf"ESS, $\tau={tau:g}$", "MQAR accuracy", r"mean gate $\bar\alpha$"],
                                  [(0, d_k + 0.5), (0, 1.02), (0.8, 1.002)]):
        if col == "ess":
            P.theory(ax, [-0.3, len(lambdas) - 0.7], [d_k] * 2, label="TSS")
        for k, lam in enumerate(lambdas):
            vals = df.loc[df["lambda"] == lam, col].to_numpy()
            ax.scatter(np.full(len(vals), k) + np.linspace(-0.08, 0.08, len(vals)), vals, s=18,
                       color=P.PALETTE[k], marker=P.MARKERS[k], alpha=0.7,
                       label="single seeds" if k == 0 else "_nolegend_")
            ax.hlines(vals.mean(), k - 0.2, k + 0.2, color=P.PALETTE[k], linewidth=2,
                      label="mean" if k == 0 else "_nolegend_")
        ax.set_xticks(range(len(lambdas)), [f"λ = {lam:g}" for lam in lambdas])
        ax.set_xlim(-0.5, len(lambdas) - 0.5)
        ax.set_ylim(*ylim)
        P.label(ax, "regulariser", lab, legend=col == "ess")
    return fig
