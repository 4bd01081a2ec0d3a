"""The numbers read off the SWR benchmark's table: the log-log slope of time against L, the
longest length every method reached, the performance goals as measured numbers, and the words
and table the chapter shows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lib.swr_bench.timing import EXTRA_IMPLS, IMPLS, STREAMING


def loglog_slope(df: pd.DataFrame, impl: str = "swr", pass_: str = "fwd",
                 low: int = 4096, high: int | None = None) -> float:
    """Slope of log(time) against log(L) for ``low ≤ L ≤ high`` (1 = linear; NaN with fewer
    than two lengths)."""
    d = df[(df.impl == impl) & (df["pass"] == pass_) & (df.L >= low)
           & (df.L <= (high if high is not None else df.L.max()))]
    if d.L.nunique() < 2:
        return float("nan")
    return float(np.polyfit(np.log(d.L), np.log(d.seconds), 1)[0])


def common_length(df: pd.DataFrame, pass_: str = "fwd") -> int:
    """The longest L at which every implementation in ``df`` was timed for ``pass_`` (the slow
    baselines stop at ``max_baseline_L``, ``max_slow_bwd_L``), where ratios compare them all."""
    d = df[df["pass"] == pass_]
    timed = d.groupby("L").impl.nunique()
    return int(timed[timed == d.impl.nunique()].index.max())


def summary(df: pd.DataFrame, bandwidth: float, decode: dict | None = None) -> dict:
    """The performance goals as measured numbers (not assertions): the median triad bandwidth;
    for each compiled kernel and pass, its fraction of the roof (median of the pairs) and
    tokens/s at the longest length; the log-log slope of the SWR kernel's time against L from
    L = 4096 up (1 = linear); the smallest speed-up over each alternative at L ≥ 4096
    (forward); and decode tokens/s (``decode``: from :func:`decode_throughput`)."""
    out = {"roof_gb_per_s": bandwidth / 1e9}
    for impl in (i for i in STREAMING if i in set(df.impl)):
        rows = df[df.impl == impl]
        for pass_ in dict.fromkeys(rows["pass"]):
            row = rows[rows["pass"] == pass_].sort_values("L").iloc[-1]
            out[f"{impl}_{pass_}_fraction_of_roof_at_L={int(row.L)}"] = float(row.fraction_of_roof)
            out[f"{impl}_{pass_}_tokens_per_s_at_L={int(row.L)}"] = float(row.tokens_per_s)
    for pass_ in dict.fromkeys(df[df.impl == "swr"]["pass"]):
        out[f"swr_{pass_}_loglog_slope_L>=4096"] = loglog_slope(df, pass_=pass_)
    fwd = df[df["pass"] == "fwd"]
    for impl in (i for i in IMPLS + EXTRA_IMPLS if i != "swr"):
        d = fwd[(fwd.impl == impl) & (fwd.L >= 4096)]
        out[f"min_speedup_vs_{impl}_L>=4096"] = float(d.ratio_to_swr.min()) if len(d) else None
    for name, value in (decode or {}).items():
        out[f"decode_tokens_per_s_{name}"] = value
    return out


def speed_phrase(ratio: float) -> str:
    """How SWR's time compares with a baseline's (``ratio`` = baseline time / SWR time), in
    words: faster or slower beyond a factor 1.1, otherwise as fast."""
    if ratio >= 1.1:
        return f"{ratio:.2g}× faster than"
    if ratio <= 1 / 1.1:
        return f"{1 / ratio:.2g}× slower than"
    return f"as fast as (time ratio {ratio:.2f})"


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The benchmark's table as the chapter shows it: one row per method, pass and length, times
    in ms and bandwidths to three significant figures, the fraction of the roof to two decimals."""
    return pd.DataFrame({
        "method": df.impl, "pass": df["pass"], "L (tokens)": df.L,
        "time (ms)": (1e3 * df.seconds).map(lambda v: f"{v:.3g}"),
        "time / SWR's": df.ratio_to_swr.map(lambda v: f"{v:.3g}"),
        "effective GB/s": df.gb_per_s.map(lambda v: f"{v:.3g}"),
        "triad GB/s": df.roof_gb_per_s.map(lambda v: f"{v:.3g}"),
        "fraction of the roof": df.fraction_of_roof.map(lambda v: f"{v:.2f}"),
    }).set_index(["method", "pass", "L (tokens)"])
