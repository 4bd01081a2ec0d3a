"""The SWR benchmark's figure: time against L per pass, and the compiled kernels' effective
bandwidth under the memory roof."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lib.swr_bench.timing import STREAMING


def plot(df: pd.DataFrame, bandwidth: float | None = None):
    """Time against L for each implementation, one panel per pass, and a last panel with the
    compiled kernels' effective bandwidth against L under the triad bandwidth (the roof: the
    run's median, ``bandwidth``)."""
    from lib import plotting as P

    passes = list(dict.fromkeys(df["pass"]))
    fig, axes = P.figure(ncols=len(passes) + 1, width=4.4, height=3.8)
    axes = np.atleast_1d(axes)
    impls = list(dict.fromkeys(df.impl))
    for ax, pass_ in zip(axes, passes):
        for n, impl in enumerate(impls):
            d = df[(df.impl == impl) & (df["pass"] == pass_)].sort_values("L")
            if len(d):
                P.simulation(ax, d.L, d.seconds, label=impl, index=n, connect=True)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        P.label(ax, "sequence length $L$ (tokens)", "time (s)", title=pass_, legend=False)
    ax = axes[-1]
    for impl in (i for i in impls if i in STREAMING):
        rows = df[df.impl == impl]
        for n, pass_ in enumerate(passes):  # the method's colour, one marker per pass
            d = rows[rows["pass"] == pass_].sort_values("L")
            P.simulation(ax, d.L, d.gb_per_s, label=f"{impl} {pass_}",
                         color=P.PALETTE[impls.index(impl) % len(P.PALETTE)],
                         marker=P.MARKERS[n % len(P.MARKERS)], connect=True,
                         markerfacecolor=None if n == 0 else "white")
    if bandwidth and np.isfinite(bandwidth):
        Ls = np.array(sorted(df.L.unique()))
        P.theory(ax, Ls, np.full(len(Ls), bandwidth / 1e9), label="triad bandwidth (roof)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    P.label(ax, "sequence length $L$ (tokens)", "effective bandwidth (GB/s)",
            title="compiled kernels vs the memory roof")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    return fig
