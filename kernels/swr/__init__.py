"""Sliding-window recurrences (SWR): ``y_i = a_i y_{i−1} + x_i`` restarted from zero at the
start of the previous block, so output ``i`` of block ``t = i // block`` sees exactly the inputs
``[block·(t−1), i]`` (a jagged window of ``block+1 … 2·block`` tokens; block 0 is exact).

Public API (chapters 02 and 09 call exactly this)::

    from kernels.swr import swr, scan, SWRState
    y = swr(a, x, block=16, impl="auto")   # a: (B, H, L) in (0, 1], x: (B, H, L, D)
    full = scan(a, x)                        # the untruncated recurrence, same shapes
    state = SWRState(B, H, D, block=16)      # token-by-token decode, equal to swr

Implementations (``impl``), one file each, modelled on flash-linear-attention's ``fla/ops``:

* ``"reference"`` — :mod:`kernels.swr.naive`: the window definition, looped; for tests.
* ``"chunked"``   — :mod:`kernels.swr.chunk`: block two-pass (B2P) in PyTorch ops with a
  hand-written backward; the readable blocked algorithm that the GPU kernel fuses.
* ``"compiled"``  — :mod:`kernels.swr.compiled`: the streaming two-state loop compiled with
  numba (forward and adjoint), the CPU fast path.
* ``"triton"``    — :mod:`kernels.swr.triton_b2p`: fused B2P for CUDA GPUs.
* ``"auto"``      — compiled on CPU (when numba is available); on CUDA, triton for float32 and
  half-precision inputs once it has passed a numerical self-check for that dtype and block
  (:func:`triton_verified`), otherwise chunked (float64, blocks that are not powers of two, or a
  failed check — the last two with one warning); chunked everywhere else.
"""

from __future__ import annotations

import warnings

import torch

from kernels.swr.decode import SWRState
from kernels.swr.naive import scan_reference, swr_reference

__all__ = ["IMPLS", "SWRState", "available_impls", "scan", "swr", "triton_verified"]

IMPLS = ("reference", "chunked", "compiled", "triton", "auto")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check(a: torch.Tensor, x: torch.Tensor, block: int | None = None, values: bool = True) -> None:
    if not isinstance(a, torch.Tensor) or not isinstance(x, torch.Tensor):
        raise ValueError("a and x must be torch tensors")
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H, L, D), got {tuple(x.shape)}")
    if a.shape != x.shape[:3]:
        raise ValueError(f"a must have shape (B, H, L) = {tuple(x.shape[:3])} to match x, "
                         f"got {tuple(a.shape)}")
    if x.shape[2] < 1 or x.shape[3] < 1:
        raise ValueError(f"need L ≥ 1 and D ≥ 1, got x of shape {tuple(x.shape)}")
    for name, t in (("a", a), ("x", x)):
        if t.dtype not in _FLOATS:
            raise ValueError(f"{name} must be float16/bfloat16/float32/float64, got {t.dtype}")
    if a.device != x.device:
        raise ValueError(f"a and x must be on the same device, got {a.device} and {x.device}")
    if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 1):
        raise ValueError(f"block must be a positive integer, got {block!r}")
    if not values:
        return
    with torch.no_grad():
        if a.numel() and not bool(((a > 0) & (a <= 1)).all()):
            raise ValueError("the coefficients a must lie in (0, 1]")


def _numba_ok() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _triton_ok(device: torch.device) -> bool:
    from kernels.swr import triton_b2p

    return triton_b2p.available(device)


def available_impls(device: torch.device | str = "cpu") -> list[str]:
    """The implementations that can run on ``device`` in this environment."""
    device = torch.device(device)
    out = ["reference", "chunked"]
    if device.type == "cpu" and _numba_ok():
        out.append("compiled")
    if _triton_ok(device):
        out.append("triton")
    return out


def resolve_impl(impl: str, device: torch.device, dtype: torch.dtype = torch.float32,
                 block: int = 16) -> str:
    """The concrete implementation ``impl`` stands for on ``device`` for inputs of ``dtype``
    and this ``block`` (``auto`` resolved; may run :func:`triton_verified` once)."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        if device.type == "cpu" and _numba_ok():
            return "compiled"
        if (device.type == "cuda" and dtype != torch.float64 and _triton_ok(device)
                and triton_verified(dtype, block, device)):
            return "triton"
        return "chunked"
    if impl not in available_impls(device):
        raise ValueError(f"impl {impl!r} is not available on {device} here; "
                         f"available: {available_impls(device)}")
    return impl


# -- the Triton self-check ---------------------------------------------------------------------
#: Largest relative difference from ``chunked`` (in float64) that the self-check accepts, per
#: input dtype: float32 rounding over a few blocks, and the inputs' own rounding for halves.
SELF_CHECK_RTOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
_verified: dict[tuple[str, torch.dtype, int], bool] = {}


def triton_verified(dtype: torch.dtype, block: int, device: torch.device | str = "cuda") -> bool:
    """Whether the Triton kernel computes SWR correctly here for this ``dtype`` and ``block``.

    Checked once per process and (device, dtype, block): on a small input (two heads, three
    blocks and a partial one) the Triton forward and both gradients are compared with the
    ``chunked`` implementation in float64 on the same device, within :data:`SELF_CHECK_RTOL`
    of the largest value. A block the kernel cannot take (not a power of two, or one it fails
    to compile for) or a mismatch returns ``False`` and warns once."""
    device = torch.device(device)
    key = (str(device), dtype, int(block))
    if key not in _verified:
        with torch.inference_mode(False), torch.enable_grad():  # callers may be in no_grad
            problem = _triton_problem(dtype, int(block), device)
        _verified[key] = problem is None
        if problem is not None:
            warnings.warn(f"kernels.swr: impl='auto' uses 'chunked' instead of the Triton kernel "
                          f"for {dtype} and block {block} on {device}: {problem}",
                          RuntimeWarning, stacklevel=4)
    return _verified[key]


def _triton_problem(dtype: torch.dtype, block: int, device: torch.device) -> str | None:
    """Why the Triton kernel must not be used (``None``: it passed the self-check)."""
    from kernels.swr import triton_b2p

    if dtype not in SELF_CHECK_RTOL:
        return f"no self-check tolerance for {dtype}"
    if block & (block - 1):
        return "the kernel takes power-of-two blocks only"
    g = torch.Generator().manual_seed(0)
    length, dim = 3 * block + max(1, block // 2), 8
    a = (0.5 + 0.49 * torch.rand(1, 2, length, generator=g, dtype=torch.float64))
    x = torch.randn(1, 2, length, dim, generator=g, dtype=torch.float64)
    dy = torch.randn(1, 2, length, dim, generator=g, dtype=torch.float64)
    # the reference sees exactly the (rounded) inputs the kernel gets
    a, x = a.to(dtype).to(device), x.to(dtype).to(device)
    dy = dy.to(device)
    reference = lambda a, x: swr(a.double(), x.double(), block=block, impl="chunked")
    fused = lambda a, x: triton_b2p.swr_triton(a.float(), x, block)  # as swr() calls it
    results = []
    for run in (reference, fused):
        a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
        try:
            y = run(a_, x_)
            (y.double() * dy).sum().backward()
        except Exception as err:  # noqa: BLE001 - any failure means "do not use it"
            return f"it raised {type(err).__name__}: {err}"
        results.append([t.detach().double().cpu() for t in (y, a_.grad, x_.grad)])
    for name, ref, got in zip(("output", "grad a", "grad x"), *results):
        err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        if not err <= SELF_CHECK_RTOL[dtype]:
            return (f"its {name} differs from 'chunked' by {err:.2e} (relative), more than "
                    f"{SELF_CHECK_RTOL[dtype]:.0e}")
    return None


def _low_precision_on_cpu(x: torch.Tensor) -> bool:
    return x.device.type != "cuda" and x.dtype in (torch.float16, torch.bfloat16)


def swr(a: torch.Tensor, x: torch.Tensor, *, block: int = 16, impl: str = "auto") -> torch.Tensor:
    """The SWR operator applied to ``x`` (``(B, H, L, D)``) with per-head coefficients ``a``
    (``(B, H, L)``, values in (0, 1]); returns ``(B, H, L, D)`` in ``x``'s dtype.

    Differentiable in ``a`` and ``x`` for every implementation. Half-precision inputs are
    accumulated in float32."""
    _check(a, x, block, values=False)
    name = resolve_impl(impl, x.device, x.dtype, block)
    if name != "compiled":  # the compiled kernel checks the values as it reads them
        _check(a, x, block)
    out_dtype = x.dtype
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    if name != "triton" or _low_precision_on_cpu(x):
        a, x = a.to(work), x.to(work)
    else:
        a = a.to(work)
    if name == "reference":
        y = swr_reference(a, x, block)
    elif name == "chunked":
        from kernels.swr.chunk import swr_chunked

        y = swr_chunked(a, x, block)
    elif name == "compiled":
        from kernels.swr.compiled import swr_compiled

        y = swr_compiled(a, x, block)
    else:
        from kernels.swr.triton_b2p import swr_triton

        y = swr_triton(a, x, block)
    return y.to(out_dtype)


def scan(a: torch.Tensor, x: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """The full, untruncated recurrence ``y_i = a_i y_{i−1} + x_i`` (same shapes as :func:`swr`).

    ``impl``: ``"reference"`` (a time loop in PyTorch) or ``"compiled"`` (a compiled sequential
    scan, :func:`kernels.swr.compiled.scan_compiled`: one O(L·D) pass, forward and backward);
    ``"auto"`` picks ``"compiled"`` on CPU when numba is available. Both are differentiable."""
    _check(a, x, values=False)
    if impl not in ("reference", "compiled", "auto"):
        raise ValueError(f"scan impl must be 'reference', 'compiled' or 'auto', got {impl!r}")
    if impl == "auto":
        impl = "compiled" if x.device.type == "cpu" and _numba_ok() else "reference"
    out_dtype = x.dtype
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    a, x = a.to(work), x.to(work)
    if impl == "reference":
        _check(a, x)
    if impl == "compiled":
        from kernels.swr.compiled import scan_compiled

        return scan_compiled(a, x).to(out_dtype)
    return scan_reference(a, x).to(out_dtype)
