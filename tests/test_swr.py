"""Tests of kernels.swr: every implementation against the literal definition."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.swr import SWRState, available_impls, scan, swr
from kernels.swr import naive



FAST = [i for i in available_impls("cpu") if i != "reference"]
BLOCK = 16


def _inputs(B, H, L, D, dtype=torch.float64, seed=0, low=0.05, high=0.99):
    g = torch.Generator().manual_seed(seed)
    a = low + (high - low) * torch.rand(B, H, L, generator=g, dtype=torch.float64)
    x = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    return a.to(dtype), x.to(dtype)


@pytest.mark.parametrize("L", [1, 2, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 37, 100])
def test_reference_equals_masked_operator(L):
    a, x = _inputs(2, 2, L, 3)
    torch.testing.assert_close(naive.swr_reference(a, x, BLOCK), naive.swr_masked(a, x, BLOCK),
                               rtol=0, atol=1e-12)


def test_window_is_the_sawtooth():
    w = naive.window_length(64, 16)
    assert w[:16].tolist() == list(range(1, 17))
    assert w[16:32].tolist() == list(range(17, 33)) and w[32:48].tolist() == list(range(17, 33))
    M = naive.jagged_mask(64, 16)
    assert torch.equal(M.sum(1), w.to(M.dtype))


def test_masked_operator_by_hand():
    """block 1: y_i = x_i + a_i x_{i−1} (window of two)."""
    a = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
    expect = torch.tensor([[1, 0, 0], [0.25, 1, 0], [0, 0.125, 1]], dtype=torch.float64)
    assert torch.equal(naive.swr_matrix(a, 1), expect)


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("L", [1, BLOCK, BLOCK + 1, 3 * BLOCK - 5, 4 * BLOCK, 1000])
def test_fast_paths_match_reference_fp64(impl, L):
    a, x = _inputs(2, 3, L, 5, seed=L)
    y = swr(a, x, block=BLOCK, impl=impl)
    assert y.shape == x.shape and y.dtype == torch.float64
    assert (y - naive.swr_reference(a, x, BLOCK)).abs().max() <= 1e-10


@pytest.mark.parametrize("impl", FAST)
def test_fast_paths_match_reference_fp32(impl):
    a, x = _inputs(1, 4, 333, 16, seed=1)
    ref = naive.swr_reference(a, x, BLOCK)
    y = swr(a.float(), x.float(), block=BLOCK, impl=impl)
    assert y.dtype == torch.float32
    assert ((y.double() - ref).abs().max() / ref.abs().max()) <= 1e-5


@pytest.mark.parametrize("impl", FAST)
def test_long_sequence(impl):
    a, x = _inputs(1, 2, 8192 + 3, 4, seed=2)
    ref = naive.swr_reference(a, x, BLOCK)
    assert (swr(a, x, impl=impl) - ref).abs().max() <= 1e-10


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("L,block", [(1, 4), (4, 4), (5, 4), (11, 4), (9, 3)])
def test_gradcheck(impl, L, block):
    a, x = _inputs(1, 2, L, 3, seed=L + block, low=0.2, high=0.95)
    a.requires_grad_()
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, x: swr(a, x, block=block, impl=impl), (a, x))


@pytest.mark.parametrize("impl", FAST)
def test_gradients_match_autograd_of_reference(impl):
    a, x = _inputs(2, 2, 77, 4, seed=3)
    dy = torch.randn_like(x)
    grads = []
    for name in ("reference", impl):
        a_ = a.clone().requires_grad_()
        x_ = x.clone().requires_grad_()
        (swr(a_, x_, impl=name) * dy).sum().backward()
        grads.append((a_.grad, x_.grad))
    for g_ref, g in zip(*grads):
        assert (g - g_ref).abs().max() <= 1e-10


@pytest.mark.parametrize("L", [1, 15, 16, 17, 50])
def test_decode_equals_batch(L):
    a, x = _inputs(2, 3, L, 4, seed=5)
    y = SWRState(2, 3, 4, block=BLOCK, dtype=torch.float64).run(a, x)
    assert (y - swr(a, x, impl="reference")).abs().max() <= 1e-12


@pytest.mark.parametrize("impl", ["reference", "compiled"])
def test_scan_is_the_full_recurrence(impl):
    a, x = _inputs(1, 2, 70, 3, seed=6)
    manual = torch.zeros_like(x)
    state = torch.zeros_like(x[..., 0, :])
    for i in range(70):
        state = a[..., i, None] * state + x[..., i, :]
        manual[..., i, :] = state
    assert (scan(a, x, impl=impl) - manual).abs().max() <= 1e-12
    assert (naive.transfer_matrix(a[0, 0]) @ x[0, 0] - manual[0, 0]).abs().max() <= 1e-12


@pytest.mark.parametrize("block", [1, 4, 16])
def test_exact_error_identity(block):
    a, x = _inputs(2, 2, 90, 3, seed=7, low=0.5, high=0.99)
    full = scan(a, x)
    err = full - swr(a, x, block=block)
    assert (err - naive.truncation_error(a, full, block)).abs().max() <= 1e-12
    assert err[..., : 2 * block, :].abs().max() <= 1e-12  # blocks 0 and 1 are exact


def test_block_spanning_the_sequence_is_the_scan():
    a, x = _inputs(1, 1, 40, 2, seed=8)
    for impl in FAST:
        assert (swr(a, x, block=64, impl=impl) - scan(a, x)).abs().max() <= 1e-12


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 70), block=st.integers(1, 20), D=st.integers(1, 5),
       seed=st.integers(0, 2**16), impl=st.sampled_from(FAST))
def test_property_matches_reference(L, block, D, seed, impl):
    a, x = _inputs(1, 2, L, D, seed=seed, low=1e-3, high=1.0)
    ref = naive.swr_reference(a, x, block)
    assert (swr(a, x, block=block, impl=impl) - ref).abs().max() <= 1e-10 * (1 + ref.abs().max())


def test_half_precision_inputs_accumulate_in_fp32():
    a, x = _inputs(1, 2, 40, 16, seed=9)
    y = swr(a.bfloat16(), x.bfloat16())
    assert y.dtype == torch.bfloat16
    ref = swr(a.bfloat16().double(), x.bfloat16().double(), impl="reference")
    assert ((y.double() - ref).abs().max() / ref.abs().max()) <= 1e-2


@pytest.mark.parametrize("bad", [
    lambda a, x: (a[..., :-1], x),                  # L mismatch
    lambda a, x: (a, x[0]),                         # x not 4-d
    lambda a, x: (a.long(), x),                     # integer dtype
    lambda a, x: (a * 0, x),                        # a = 0
    lambda a, x: (a + 1, x),                        # a > 1
])
@pytest.mark.parametrize("impl", ["reference", *FAST])
def test_bad_inputs_raise_value_error(bad, impl):
    a, x = _inputs(1, 2, 20, 3)
    with pytest.raises(ValueError):
        swr(*bad(a, x), impl=impl)


def test_bad_impl_and_block():
    a, x = _inputs(1, 1, 4, 1)
    with pytest.raises(ValueError, match="impl"):
        swr(a, x, impl="fast")
    with pytest.raises(ValueError, match="block"):
        swr(a, x, block=0)
