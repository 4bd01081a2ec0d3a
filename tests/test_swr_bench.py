"""The benchmark's baselines compute what they claim, and its table has the promised shape."""

from __future__ import annotations

import pytest
import torch

from kernels import swa
from kernels.swr import bench, naive, scan




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
    df, bw = bench.run([64, 128], H=2, D=4, repeats=1, copy_gib=0, passes=("fwd", "fwd+bwd"))
    assert set(df.impl) == set(bench.IMPLS) and set(df["pass"]) == {"fwd", "fwd+bwd"}
    assert {"seconds", "tokens_per_s", "gb_per_s", "ratio_to_swr"} <= set(df.columns)
    assert (df[df.impl == "swr"].ratio_to_swr == 1).all() and (df.seconds > 0).all()
    assert "swr_fwd_loglog_slope_4k_64k" in bench.summary(df, bw)
    with pytest.raises(ValueError):
        bench.run([64], impls=["nope"], copy_gib=0)
