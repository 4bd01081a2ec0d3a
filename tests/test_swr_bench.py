"""The benchmark's baselines compute what they claim, and its table has the promised shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from kernels import swa
from kernels.swr import available_impls, bench, naive, scan




def _inputs(L=70, D=4):
    return bench._make_inputs(1, 2, L, D, torch.float64, seed=0)


def test_scans_are_the_full_recurrence():
    a, x, _, _ = _inputs()
    full = scan(a, x, impl="reference")
    assert (bench.scan_sequential(a, x) - full).abs().max() <= 1e-12
    assert (bench.scan_parallel(a, x) - full).abs().max() <= 1e-10


def test_blocked_swa_is_attention_over_the_jagged_window():
    a, x, q, k = _inputs(L=53)
    mask = naive.jagged_mask(53, 16).bool()
    scores = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~mask, float("-inf"))
    dense = torch.softmax(scores, dim=-1) @ x
    assert (swa.swa_blocked(q, k, x, 16) - dense).abs().max() <= 1e-12


def test_run_table_and_summary():
    df, bw = bench.run([64, 128], H=2, D=4, repeats=1, copy_gib=0)
    assert set(df.impl) == set(bench.IMPLS) and set(df["pass"]) == set(bench.PASSES)
    assert {"seconds", "tokens_per_s", "gb_per_s", "ratio_to_swr"} <= set(df.columns)
    assert (df[df.impl == "swr"].ratio_to_swr == 1).all() and (df.seconds > 0).all()
    summary = bench.summary(df, bw, {"compiled": 1.0})
    for pass_ in bench.PASSES:
        assert f"swr_{pass_}_fraction_of_copy_bw_at_L=128" in summary
        assert f"swr_{pass_}_loglog_slope_L>=4096" in summary  # NaN here: lengths below 4096
    assert summary["decode_tokens_per_s_compiled"] == 1.0
    with pytest.raises(ValueError):
        bench.run([64], impls=["nope"], copy_gib=0)
    with pytest.raises(ValueError):
        bench.run([64], passes=["sideways"], copy_gib=0)


def test_bytes_counted_per_pass():
    """Forward moves a, x → y; backward a, x, dy → da, dx; both passes are the sum."""
    a, x, q, k = _inputs(L=32)
    sizes = {p: bench._callable("swr", a, x, q, k, 16, p)[1] for p in bench.PASSES}
    assert sizes["fwd"] == (a.numel() + 2 * x.numel()) * 8
    assert sizes["bwd"] == (2 * a.numel() + 3 * x.numel()) * 8
    assert sizes["fwd+bwd"] == sizes["fwd"] + sizes["bwd"]


@pytest.mark.parametrize("impl", bench.IMPLS)
def test_backward_pass_can_be_timed_repeatedly(impl):
    a, x, q, k = _inputs(L=40)
    run, _ = bench._callable(impl, a, x, q, k, 8, "bwd")
    run()
    run()  # a second backward through the same graph raises unless the graph is kept


def test_baselines_can_stop_early_and_slope_of_a_linear_law():
    df, _ = bench.run([64, 128], H=1, D=2, repeats=1, copy_gib=0, passes=["fwd"],
                      max_baseline_L=64)
    assert set(df[df.L == 128].impl) == {"swr"} and set(df[df.L == 64].impl) == set(bench.IMPLS)
    df, _ = bench.run([64, 128], H=1, D=2, repeats=1, copy_gib=0, passes=["fwd", "bwd"],
                      max_slow_bwd_L=64)
    slow = {"scan-sequential", "attention-full"}
    long_bwd = set(df[(df.L == 128) & (df["pass"] == "bwd")].impl)
    assert long_bwd == set(bench.IMPLS) - slow
    assert set(df[(df.L == 128) & (df["pass"] == "fwd")].impl) == set(bench.IMPLS)
    assert bench.common_length(df, "fwd") == 128 and bench.common_length(df, "bwd") == 64
    fake = pd.DataFrame({"impl": "swr", "pass": "fwd", "L": [4096, 8192, 16384],
                         "seconds": [1.0, 2.0, 4.0]})
    assert bench.loglog_slope(fake) == pytest.approx(1.0)
    assert np.isnan(bench.loglog_slope(fake, low=16384))


def test_decode_throughput_runs_both_decoders():
    for impl in ("torch", "compiled") if "compiled" in available_impls() else ("torch",):
        assert bench.decode_throughput(1, 2, 4, tokens=20, impl=impl, repeats=1) > 0
