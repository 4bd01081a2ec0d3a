"""The benchmark's baselines compute what they claim, its roof is the STREAM triad, and its
table has the promised shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from kernels import swa
from kernels.swr import available_impls, naive, scan, swr
from lib import swr_bench as bench
from lib.swr_bench import timing

ALL = bench.IMPLS + bench.EXTRA_IMPLS


def _inputs(L=70, D=4):
    return timing._make_inputs(1, 2, L, D, torch.float64, seed=0)


def test_scans_are_the_full_recurrence():
    a, x, _, _ = _inputs()
    full = scan(a, x, impl="reference")
    assert (bench.scan_torch_loop(a, x) - full).abs().max() <= 1e-12
    assert (bench.scan_parallel(a, x) - full).abs().max() <= 1e-10
    if "compiled" in available_impls():
        assert (scan(a, x, impl="compiled") - full).abs().max() <= 1e-12


@pytest.mark.skipif("compiled" not in available_impls(), reason="numba not installed")
@pytest.mark.parametrize("impl,plain", [("swr-loops", "swr"), ("scan-compiled-loops", "scan-compiled")])
def test_loop_variants_compute_the_same_thing(impl, plain):
    a, x, q, k = timing._make_inputs(1, 2, 50, 16, torch.float32, seed=1)
    for pass_ in ("fwd",):
        got = timing._callable(impl, a, x, q, k, 16, pass_)[0]()
        ref = timing._callable(plain, a, x, q, k, 16, pass_)[0]()
        assert torch.equal(got, ref)  # the forward rows do the loops' operations in order
    assert torch.equal(timing._callable("swr", a, x, q, k, 16, "fwd")[0](), swr(a, x, block=16))


def test_blocked_swa_is_attention_over_the_jagged_window():
    a, x, q, k = _inputs(L=53)
    mask = naive.jagged_mask(53, 16).bool()
    scores = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~mask, float("-inf"))
    dense = torch.softmax(scores, dim=-1) @ x
    assert (swa.swa_blocked(q, k, x, 16) - dense).abs().max() <= 1e-12


@pytest.mark.skipif("compiled" not in available_impls(), reason="numba not installed")
def test_roof_is_the_stream_triad():
    roof = bench.Roof(mib=1)
    assert roof.n == 2**18 and roof.a.ctypes.data % 64 == 0
    roof.b[:] = np.arange(roof.n)
    roof.c[:] = 1.0
    previous = torch.get_num_threads()
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            roof.a[:] = -1
            assert roof.measure() > 0
            assert np.array_equal(roof.a, roof.b + 3.0)  # every element, on every split
    finally:
        torch.set_num_threads(previous)


class _FakeRoof:
    def __init__(self, values):
        self.values = iter(values)

    def measure(self):
        return next(self.values)


def test_measure_pairs_each_timing_with_a_triad(monkeypatch):
    """The fraction is the median of the pairs (effective / triad just before), not the ratio
    of the medians: here the pairs give 0.5, 2 and 2, the medians 4 GB/s over 4 GB/s."""
    times = iter([2.0, 4.0, 1.0])  # the warm-up call is not timed
    monkeypatch.setattr(timing, "_time", lambda fn: next(times))
    m = bench.measure(lambda: None, nbytes=8e9, repeats=3, roof=_FakeRoof([8e9, 1e9, 4e9]))
    assert m["seconds"] == 2.0 and m["best_seconds"] == 1.0 and m["paired"]
    assert m["gb_per_s"] == pytest.approx(4.0) and m["roof_gb_per_s"] == pytest.approx(4.0)
    assert m["fraction_of_roof"] == pytest.approx(2.0)
    times = iter([1.0, 2.0])
    m = bench.measure(lambda: None, nbytes=1.0, repeats=2, roof=None)
    assert not m["paired"] and np.isnan(m["fraction_of_roof"])


def test_run_table_and_summary():
    df, bw = bench.run([64, 128], H=2, D=4, repeats=1, roof_mib=0)
    assert set(df.impl) == set(bench.IMPLS) and set(df["pass"]) == set(bench.PASSES)
    assert {"seconds", "tokens_per_s", "gb_per_s", "ratio_to_swr", "fraction_of_roof"} <= set(df.columns)
    assert (df[df.impl == "swr"].ratio_to_swr == 1).all() and (df.seconds > 0).all()
    assert np.isnan(bw)  # no roof asked for
    summary = bench.summary(df, bw, {"compiled": 1.0})
    for pass_ in bench.PASSES:
        assert f"swr_{pass_}_fraction_of_roof_at_L=128" in summary
        assert f"scan-compiled_{pass_}_fraction_of_roof_at_L=128" in summary
        assert f"swr_{pass_}_loglog_slope_L>=4096" in summary  # NaN here: lengths below 4096
    assert summary["decode_tokens_per_s_compiled"] == 1.0
    with pytest.raises(ValueError):
        bench.run([64], impls=["nope"], roof_mib=0)
    with pytest.raises(ValueError):
        bench.run([64], passes=["sideways"], roof_mib=0)


@pytest.mark.skipif("compiled" not in available_impls(), reason="numba not installed")
def test_run_with_a_roof_pairs_the_compiled_kernels_only():
    df, bw = bench.run([64], H=2, D=16, repeats=2, roof_mib=1, passes=["fwd"],
                       impls=["swr", "scan-compiled", "scan-parallel"])
    assert bw > 0 and set(df[df.paired].impl) == {"swr", "scan-compiled"}
    other = df[df.impl == "scan-parallel"].iloc[0]
    assert other.roof_gb_per_s == pytest.approx(bw / 1e9)
    assert other.fraction_of_roof == pytest.approx(other.gb_per_s / (bw / 1e9))
    assert (df.fraction_of_roof > 0).all()


def test_bytes_counted_per_pass():
    """Forward moves a, x → y; backward a, x, dy → da, dx; both passes are the sum."""
    a, x, q, k = _inputs(L=32)
    for impl in ("swr", "scan-compiled"):
        sizes = {p: timing._callable(impl, a, x, q, k, 16, p)[1] for p in bench.PASSES}
        assert sizes["fwd"] == (a.numel() + 2 * x.numel()) * 8
        assert sizes["bwd"] == (2 * a.numel() + 3 * x.numel()) * 8
        assert sizes["fwd+bwd"] == sizes["fwd"] + sizes["bwd"]


@pytest.mark.parametrize("impl", ALL)
def test_backward_pass_can_be_timed_repeatedly(impl):
    a, x, q, k = _inputs(L=40)
    run, _ = timing._callable(impl, a, x, q, k, 8, "bwd")
    run()
    run()  # a second backward through the same graph raises unless the graph is kept


def test_baselines_can_stop_early_and_slope_of_a_linear_law():
    df, _ = bench.run([64, 128], H=1, D=2, repeats=1, roof_mib=0, passes=["fwd"],
                      max_baseline_L=64)
    assert set(df[df.L == 128].impl) == {"swr", "scan-compiled"}  # the compiled kernels go on
    assert set(df[df.L == 64].impl) == set(bench.IMPLS)
    df, _ = bench.run([64, 128], H=1, D=2, repeats=1, roof_mib=0, passes=["fwd", "bwd"],
                      max_slow_bwd_L=64)
    slow = {"scan-torch-loop", "attention-full"}
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


def test_speed_phrase_says_faster_slower_or_as_fast():
    assert bench.speed_phrase(3.0) == "3× faster than"
    assert bench.speed_phrase(0.25) == "4× slower than"
    assert bench.speed_phrase(1.05) == "as fast as (time ratio 1.05)"
    assert bench.speed_phrase(1 / 1.05).startswith("as fast as")


def test_the_chapter_table_formats_each_measurement():
    df = pd.DataFrame({"impl": ["swr", "scan-compiled"], "pass": ["fwd", "fwd"], "L": [512, 512],
                       "seconds": [0.0012345, 0.0024690], "ratio_to_swr": [1.0, 2.0], "gb_per_s": [12.345, 6.1725],
                       "roof_gb_per_s": [20.0, 20.0], "fraction_of_roof": [0.61725, 0.308625]})
    t = bench.table(df)
    assert t.index.names == ["method", "pass", "L (tokens)"]
    row = t.loc[("scan-compiled", "fwd", 512)]
    assert row["time (ms)"] == "2.47" and row["time / SWR's"] == "2" and row["fraction of the roof"] == "0.31"
    assert t.loc[("swr", "fwd", 512), "effective GB/s"] == "12.3"
