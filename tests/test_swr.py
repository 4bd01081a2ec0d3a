"""Tests of kernels.swr: every implementation against the literal definition."""

from __future__ import annotations

import numpy as np
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


DECODE_IMPLS = ["torch", "compiled"] if "compiled" in FAST else ["torch"]


@pytest.mark.parametrize("impl", DECODE_IMPLS)
@pytest.mark.parametrize("L", [1, 15, 16, 17, 50])
def test_decode_equals_batch(L, impl):
    a, x = _inputs(2, 3, L, 4, seed=5)
    state = SWRState(2, 3, 4, block=BLOCK, dtype=torch.float64, impl=impl)
    assert state.impl == impl
    y = state.run(a, x)
    assert (y - swr(a, x, impl="reference")).abs().max() <= 1e-12


@pytest.mark.skipif("compiled" not in DECODE_IMPLS, reason="numba not installed")
def test_compiled_decode_mixes_with_autograd_steps_and_casts_inputs():
    """Steps that need gradients take the tensor-operation path; later steps go back to the
    compiled one on the state those left; float64 inputs to a float32 state are cast."""
    a, x = _inputs(1, 2, 40, 3, seed=6)
    ref = swr(a, x, block=8, impl="reference")
    state = SWRState(1, 2, 3, block=8, dtype=torch.float64)
    ys = []
    for i in range(40):
        u_t = x[..., i, :].clone().requires_grad_(10 <= i < 20)
        ys.append(state.step(a[..., i], u_t).detach())
        if i == 19:  # leave the autograd graph behind, as a generation loop would
            state.h, state.c_prev, state.r = (t.detach() for t in (state.h, state.c_prev, state.r))
    assert (torch.stack(ys, dim=-2) - ref).abs().max() <= 1e-12
    y32 = SWRState(1, 2, 3, block=8).run(a, x)  # float32 state, float64 inputs
    assert y32.dtype == torch.float32 and (y32.double() - ref).abs().max() <= 1e-5


def test_decode_rejects_bad_impl():
    with pytest.raises(ValueError, match="impl"):
        SWRState(1, 1, 1, impl="fast")


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


# -- the compiled kernel's threads and output buffers ------------------------------------------
compiled = pytest.importorskip("kernels.swr.compiled") if "compiled" in FAST else None
needs_compiled = pytest.mark.skipif(compiled is None, reason="numba not installed")


@needs_compiled
@pytest.mark.parametrize("heads,dim,itemsize,threads", [
    (16, 16, 4, 2), (3, 16, 4, 4), (1, 16, 4, 2), (1, 16, 8, 2), (1, 40, 8, 3), (2, 300, 8, 7),
    (5, 3, 8, 3), (7, 1, 4, 1)])
def test_plan_covers_every_head_and_channel_once(heads, dim, itemsize, threads):
    ranges = compiled.plan(heads, dim, itemsize, threads)
    cover = torch.zeros(heads, dim, dtype=torch.int64)
    for h0, h1, d0, d1 in ranges:
        cover[h0:h1, d0:d1] += 1
        # channel groups start on a cache line, so no two threads write the same line
        assert (d0 * itemsize) % compiled.CACHE_LINE == 0
    assert (cover == 1).all() and len(ranges) <= max(1, threads)
    if heads >= threads:
        assert len(ranges) == threads
    elif dim * itemsize >= 2 * compiled.CACHE_LINE:
        assert len(ranges) > 1  # fewer heads than threads: the channels are split instead


@needs_compiled
@pytest.mark.parametrize("B,H,L,D,block,threads", [
    (2, 3, 37, 5, 4, 2),     # heads split, odd L
    (1, 5, 33, 3, 5, 3),     # uneven head ranges
    (1, 1, 50, 64, 4, 2),    # B·H < threads: channel groups
    (1, 2, 101, 40, 16, 4),  # B·H < threads, D not a multiple of a cache line
    (1, 1, 7, 300, 16, 7),   # L < block, many groups
    (1, 3, 1, 17, 16, 2),    # L = 1
    (1, 4, 45, 16, 16, 2),   # 16 fp64 channels: vector rows of 128 bytes, partial last block
    (1, 1, 40, 32, 8, 2),    # channel groups of 16: vector rows per group
])
@pytest.mark.parametrize("vector", [True, False])
def test_parallel_paths_match_reference(B, H, L, D, block, threads, vector):
    a, x = _inputs(B, H, L, D, seed=L + D, low=0.1, high=0.99)
    dy = torch.randn_like(x)
    outs = []
    for fn in (lambda a, x: naive.swr_reference(a, x, block),
               lambda a, x: compiled.swr_compiled(a, x, block, threads=threads, vector=vector)):
        a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
        y = fn(a_, x_)
        (y * dy).sum().backward()
        outs.append((y.detach(), a_.grad, x_.grad))
    for ref, got in zip(*outs):
        assert (got - ref).abs().max() <= 1e-12 * (1 + ref.abs().max())


@needs_compiled
@pytest.mark.parametrize("B,H,L,D,threads", [
    (2, 3, 37, 5, 2),    # heads split
    (1, 5, 33, 3, 3),    # uneven head ranges
    (1, 1, 50, 64, 2),   # B·H < threads: channel groups
    (1, 2, 101, 40, 4),  # channel groups, D not a multiple of a cache line
    (1, 3, 1, 17, 2),    # L = 1
    (1, 2, 2, 3, 1),     # L = 2, one thread
    (1, 3, 29, 16, 2),   # vector rows
])
@pytest.mark.parametrize("vector", [True, False])
def test_compiled_scan_matches_the_reference_scan(B, H, L, D, threads, vector):
    """The compiled sequential scan (the benchmark's CPU baseline) is the full recurrence:
    output and both gradients equal the PyTorch time loop's (autograd) in fp64, on every split,
    and one block spanning the sequence of the SWR kernel."""
    a, x = _inputs(B, H, L, D, seed=L + D + 1, low=0.1, high=1.0)
    dy = torch.randn_like(x)
    outs = []
    for fn in (naive.scan_reference,
               lambda a, x: compiled.scan_compiled(a, x, threads=threads, vector=vector),
               lambda a, x: compiled.swr_compiled(a, x, L, threads=threads, vector=vector)):
        a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
        y = fn(a_, x_)
        (y * dy).sum().backward()
        outs.append((y.detach(), a_.grad, x_.grad))
    for other in outs[1:]:
        for ref, got in zip(outs[0], other):
            assert (got - ref).abs().max() <= 1e-12 * (1 + ref.abs().max())


@needs_compiled
def test_compiled_scan_fp32_and_gradcheck():
    a, x = _inputs(2, 4, 300, 16, seed=12, low=0.5, high=0.999)
    ref = naive.scan_reference(a, x)
    got = scan(a.float(), x.float(), impl="compiled")
    assert got.dtype == torch.float32
    assert (got.double() - ref).abs().max() <= 1e-5 * ref.abs().max()
    a, x = _inputs(1, 1, 13, 24, seed=5, low=0.2, high=0.95)
    a.requires_grad_()
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, x: compiled.scan_compiled(a, x, threads=3), (a, x))
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        compiled.scan_compiled(a.detach() * 0 - 0.5, x.detach())


@needs_compiled
@pytest.mark.parametrize("dtype,D,block", [(torch.float32, 16, 16), (torch.float32, 8, 5),
                                           (torch.float64, 16, 16), (torch.float32, 64, 16)])
def test_vector_rows_equal_the_channel_loops(dtype, D, block):
    """The vector rows do the loops' forward operations in the same order (identical outputs)
    and the backward's channel sums in another order (equal to rounding)."""
    a, x = _inputs(2, 3, 83, D, dtype=dtype, seed=D + block, low=0.3, high=1.0)
    assert compiled.vector_width_ok(D, x.element_size())
    dy = torch.randn_like(x)
    for fn in (lambda a, x, v: compiled.swr_compiled(a, x, block, threads=2, vector=v),
               lambda a, x, v: compiled.scan_compiled(a, x, threads=2, vector=v)):
        outs = []
        for vector in (False, True):
            a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
            y = fn(a_, x_, vector)
            (y * dy).sum().backward()
            outs.append((y.detach(), a_.grad, x_.grad))
        assert torch.equal(outs[0][0], outs[1][0])
        eps = torch.finfo(dtype).eps
        for ref, got in zip(outs[0][1:], outs[1][1:]):
            assert (got - ref).abs().max() <= 64 * eps * (1 + ref.abs().max())


@needs_compiled
def test_vector_widths_and_aligned_buffers():
    assert compiled.vector_width_ok(16, 4) and compiled.vector_width_ok(16, 8)
    assert compiled.vector_width_ok(4, 4) and not compiled.vector_width_ok(3, 4)
    assert not compiled.vector_width_ok(5, 8) and not compiled.vector_width_ok(128, 4)
    for shape in [(3,), (2, 5, 7), (1 << 20,)]:
        buf = compiled.aligned_empty(shape, np.float32)
        assert buf.shape == shape and buf.dtype == np.float32 and buf.ctypes.data % 64 == 0
        assert buf.flags.c_contiguous and buf.flags.writeable


@needs_compiled
def test_parallel_gradcheck():
    a, x = _inputs(1, 1, 11, 24, seed=4, low=0.2, high=0.95)  # 24 fp64 channels: three lines
    a.requires_grad_()
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, x: compiled.swr_compiled(a, x, 4, threads=3), (a, x))


@needs_compiled
def test_threads_follow_torch_above_the_threshold(monkeypatch):
    seen = []
    plan = compiled.plan
    monkeypatch.setattr(compiled, "plan", lambda *args: seen.append(args[-1]) or plan(*args))
    a, x = _inputs(1, 4, 40, 8)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(compiled.threads, "MIN_PARALLEL_WORK", x.numel() + 1)
        y_small = swr(a, x, impl="compiled")
        monkeypatch.setattr(compiled.threads, "MIN_PARALLEL_WORK", x.numel())
        y_big = swr(a, x, impl="compiled")
    finally:
        torch.set_num_threads(previous)
    assert seen == [1, 2] and torch.equal(y_small, y_big)


@needs_compiled
def test_recycled_outputs_are_never_live(monkeypatch):
    monkeypatch.setattr(compiled.buffers, "RECYCLE_MIN_BYTES", 1000)
    monkeypatch.setattr(compiled.buffers, "_recycled", [])
    a, x = _inputs(1, 2, 100, 4)
    y1 = swr(a, x, impl="compiled")
    first = y1.data_ptr()
    view = y1[0, 1]
    del y1
    y2 = swr(a, x, impl="compiled")
    assert y2.data_ptr() != first  # a view still uses the first buffer
    expected = view.clone()
    y3 = swr(a, x * 2, impl="compiled")
    assert torch.equal(view, expected) and y3.data_ptr() not in (first, y2.data_ptr())
    del view
    y4 = swr(a, x, impl="compiled")
    assert y4.data_ptr() == first  # free again: reused
    assert torch.equal(y4, y2) and torch.equal(y3, 2 * y2)


# -- impl="auto" on GPUs: Triton only after its self-check ----------------------------------------
@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend Triton can run on a CUDA device, with a stub self-check that counts its calls."""
    import kernels.swr as S

    calls = []
    outcome = {"problem": None}
    monkeypatch.setattr(S, "_triton_ok", lambda device: True)
    monkeypatch.setattr(S, "_verified", {})
    monkeypatch.setattr(S, "_triton_problem",
                        lambda dtype, block, device: calls.append((dtype, block)) or outcome["problem"])
    return S, calls, outcome


def test_auto_uses_triton_on_cuda_after_one_passing_self_check(fake_cuda, recwarn):
    S, calls, _ = fake_cuda
    cuda = torch.device("cuda")
    assert [S.resolve_impl("auto", cuda, torch.float32, 16) for _ in range(3)] == ["triton"] * 3
    assert S.resolve_impl("auto", cuda, torch.bfloat16, 16) == "triton"
    assert calls == [(torch.float32, 16), (torch.bfloat16, 16)]  # once per (dtype, block)
    assert S.resolve_impl("auto", cuda, torch.float64, 16) == "chunked"  # kernel is float32 inside
    assert len(calls) == 2 and not [w for w in recwarn if w.category is RuntimeWarning]
    assert S.resolve_impl("auto", torch.device("cpu"), torch.float32, 16) in ("compiled", "chunked")


def test_auto_falls_back_to_chunked_with_one_warning_when_the_check_fails(fake_cuda):
    S, calls, outcome = fake_cuda
    outcome["problem"] = "its output differs"
    with pytest.warns(RuntimeWarning, match="its output differs") as caught:
        picks = [S.resolve_impl("auto", torch.device("cuda"), torch.float32, 8) for _ in range(3)]
    assert picks == ["chunked"] * 3 and len(caught) == 1 and len(calls) == 1


def test_blocks_triton_cannot_take_fall_back_the_same_way(monkeypatch):
    import kernels.swr as S

    monkeypatch.setattr(S, "_triton_ok", lambda device: True)
    monkeypatch.setattr(S, "_verified", {})
    with pytest.warns(RuntimeWarning, match="power-of-two") as caught:
        picks = [S.resolve_impl("auto", torch.device("cuda"), torch.float32, 12) for _ in range(2)]
    assert picks == ["chunked"] * 2 and len(caught) == 1
