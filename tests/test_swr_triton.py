"""The Triton B2P kernel against the reference, in Triton's CPU interpreter (no GPU here).

Triton decides when a kernel is decorated whether to interpret it, so under a normal run this
file re-runs itself in a subprocess with ``TRITON_INTERPRET=1`` (``test_in_interpreter``); the
kernel tests below run only inside that subprocess (or on a machine with a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from kernels.swr import naive  # noqa: E402

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_kernel = pytest.mark.skipif(not (INTERPRETING or DEVICE == "cuda"),
                                  reason="runs in the interpreter subprocess (test_in_interpreter)")


@pytest.mark.skipif(INTERPRETING, reason="already inside the interpreter run")
@pytest.mark.integration
def test_in_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout


@pytest.fixture(scope="module")
def kernel():
    import kernels.swr.triton_b2p as mod

    if not mod.available(DEVICE):
        pytest.skip("Triton cannot run here")
    return mod


def _inputs(L, D, dtype, seed, B=1, H=2):
    g = torch.Generator().manual_seed(seed)
    a = (0.1 + 0.89 * torch.rand(B, H, L, generator=g, dtype=torch.float64)).to(dtype)
    x = torch.randn(B, H, L, D, generator=g, dtype=torch.float64).to(dtype)
    return a, x


@pytest.mark.parametrize("L,block,D", [(1, 4, 3), (4, 4, 2), (5, 4, 5), (23, 8, 4), (40, 16, 16)])
@needs_kernel
def test_forward_matches_reference(kernel, L, block, D):
    a, x = _inputs(L, D, torch.float32, seed=L)
    ref = naive.swr_reference(a.double(), x.double(), block)
    y = kernel.swr_triton(a.to(DEVICE), x.to(DEVICE), block).cpu()
    assert ((y.double() - ref).abs().max() / ref.abs().max()) <= 1e-5


@pytest.mark.parametrize("L,block,D", [(5, 4, 3), (19, 8, 4)])
@needs_kernel
def test_backward_matches_reference(kernel, L, block, D):
    a, x = _inputs(L, D, torch.float32, seed=L + 1)
    dy = torch.randn_like(x)
    grads = []
    reference = lambda a, x: naive.swr_reference(a, x, block)
    fused = lambda a, x: kernel.swr_triton(a.to(DEVICE), x.to(DEVICE), block).cpu()
    for fn in (reference, fused):
        a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
        (fn(a_, x_) * dy).sum().backward()
        grads.append((a_.grad, x_.grad))
    for g_ref, g in zip(*grads):
        assert ((g - g_ref).abs().max() / g_ref.abs().max()) <= 1e-5


@needs_kernel
def test_rejects_non_power_of_two_block(kernel):
    a, x = _inputs(6, 2, torch.float32, seed=0)
    with pytest.raises(ValueError, match="power-of-two"):
        kernel.swr_triton(a, x, 3)


@needs_kernel
def test_self_check_passes_for_the_kernel(kernel, monkeypatch, recwarn):
    import kernels.swr as S

    monkeypatch.setattr(S, "_verified", {})
    with torch.no_grad():  # callers of swr() may be in no_grad; the check needs gradients
        assert S.triton_verified(torch.float32, 8, DEVICE)
    assert S.triton_verified(torch.float32, 8, DEVICE) and len(S._verified) == 1
    assert not [w for w in recwarn if w.category is RuntimeWarning]


@needs_kernel
def test_self_check_rejects_a_wrong_kernel(kernel, monkeypatch):
    import kernels.swr as S

    monkeypatch.setattr(S, "_verified", {})
    right = kernel.swr_triton
    monkeypatch.setattr(kernel, "swr_triton", lambda a, x, block: right(a, x, block) * (1 + 1e-3))
    with pytest.warns(RuntimeWarning, match="differs from 'chunked'") as caught:
        assert not S.triton_verified(torch.float32, 4, DEVICE)
        assert not S.triton_verified(torch.float32, 4, DEVICE)
    assert len(caught) == 1
