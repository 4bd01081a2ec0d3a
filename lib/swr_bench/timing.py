"""The SWR benchmark's measurements: the alternatives it times beside SWR, one timing paired
with a triad run of the roof (:func:`measure`), the table over lengths, passes and methods
(:func:`run`) and the decoder's throughput (:func:`decode_throughput`). The methods are listed
in the package's docstring (:mod:`lib.swr_bench`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from kernels.swa import attention_full, swa_blocked
from kernels.swr import SWRState, scan, swr
from lib.seeding import constant_torch_generator
from lib.swr_bench.roofline import Roof

IMPLS = ("swr", "scan-compiled", "swr-chunked", "scan-torch-loop", "scan-parallel",
         "swa-blocked", "attention-full")
EXTRA_IMPLS = ("swr-loops", "scan-compiled-loops")
#: The compiled O(L·D) kernels: bound by memory bandwidth, paired with the roof at every
#: timing, and followed to the longest length (``max_baseline_L`` does not stop them).
STREAMING = ("swr", "scan-compiled", "swr-loops", "scan-compiled-loops")
PASSES = ("fwd", "bwd", "fwd+bwd")


# -- the alternatives ---------------------------------------------------------------------
def scan_torch_loop(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The full recurrence as a Python loop over time of PyTorch operations."""
    state = torch.zeros_like(x[..., 0, :])
    out = torch.empty_like(x) if not x.requires_grad else None
    outs = []
    for i in range(x.shape[-2]):
        state = a[..., i, None] * state + x[..., i, :]
        if out is not None:
            out[..., i, :] = state
        else:
            outs.append(state)
    return out if out is not None else torch.stack(outs, dim=-2)


def scan_parallel(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    A = torch.cumsum(torch.log(a), dim=-1)[..., None]
    log_pos = torch.log(torch.clamp(x, min=0.0))
    log_neg = torch.log(torch.clamp(-x, min=0.0))
    pos = torch.exp(A + torch.logcumsumexp(log_pos - A, dim=-2))
    neg = torch.exp(A + torch.logcumsumexp(log_neg - A, dim=-2))
    return pos - neg


# -- measurement ----------------------------------------------------------------------------
def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _make_inputs(B, H, L, D, dtype, seed, attention: bool = True):
    """``a, x`` and, for the attention methods, ``q, k`` (drawn after ``a, x``, which are the
    same either way; ``None`` when ``attention`` is false, to spare memory at long L)."""
    g = constant_torch_generator("swr-bench-inputs", seed)
    a = 0.5 + 0.49 * torch.rand(B, H, L, generator=g, dtype=dtype)
    x = torch.randn(B, H, L, D, generator=g, dtype=dtype)
    if not attention:
        return a, x, None, None
    q, k = torch.randn(2, B, H, L, D, generator=g, dtype=dtype)
    return a, x, q, k


def _callable(impl: str, a, x, q, k, block: int, pass_: str):
    """``(run, bytes)``: a function timing one ``pass_`` of ``impl`` and the bytes it must move."""
    recurrences = {
        "swr": lambda a, x: swr(a, x, block=block),
        "scan-compiled": lambda a, x: scan(a, x, impl="compiled"),
        "swr-chunked": lambda a, x: swr(a, x, block=block, impl="chunked"),
        "scan-torch-loop": scan_torch_loop, "scan-parallel": scan_parallel,
        "swr-loops": lambda a, x: _loops(lambda: swr(a, x, block=block)),
        "scan-compiled-loops": lambda a, x: _loops(lambda: scan(a, x, impl="compiled")),
    }
    if impl in recurrences:
        fn = recurrences[impl]
        args = (a, x)
        fwd_bytes, bwd_bytes = a.numel() + 2 * x.numel(), 2 * a.numel() + 3 * x.numel()
    else:
        fn = {"swa-blocked": lambda q, k, v: swa_blocked(q, k, v, block),
              "attention-full": attention_full}[impl]
        args = (q, k, x)
        fwd_bytes, bwd_bytes = 4 * x.numel(), 7 * x.numel()
    size = x.element_size()
    if pass_ == "fwd":
        def run():
            with torch.no_grad():
                return fn(*args)
        return run, fwd_bytes * size
    leaves = [t.detach().clone().requires_grad_() for t in args]
    grad = torch.randn_like(x)

    def clear():
        for t in leaves:
            t.grad = None

    if pass_ == "fwd+bwd":
        def run_both():
            fn(*leaves).backward(grad)
            clear()
        return run_both, (fwd_bytes + bwd_bytes) * size
    out = fn(*leaves)  # one forward, kept for repeated backward passes

    def run_bwd():
        out.backward(grad, retain_graph=True)
        clear()
    return run_bwd, bwd_bytes * size


def _loops(call):
    """``call()`` with the compiled kernels' channel loops instead of vector rows (forward and
    the backward of what it returns: the choice is recorded in the autograd node)."""
    from kernels.swr import compiled

    previous = compiled.VECTOR_ROWS
    compiled.VECTOR_ROWS = False
    try:
        return call()
    finally:
        compiled.VECTOR_ROWS = previous


def measure(fn: Callable[[], object], nbytes: float, repeats: int,
            roof: Roof | None) -> dict:
    """Time ``fn`` ``repeats`` times (after one untimed warm-up call), each time right after
    one run of ``roof`` when given. Returns the median and best seconds, the median effective
    bandwidth (``nbytes`` per median time), the median triad bandwidth and the median of the
    paired fractions (effective / triad)."""
    fn()  # warm-up (JIT compilation, allocator)
    seconds, roofs = [], []
    for _ in range(repeats):
        if roof is not None:
            roofs.append(roof.measure())
        seconds.append(_time(fn))
    seconds = np.array(seconds)
    out = {"seconds": float(np.median(seconds)), "best_seconds": float(seconds.min()),
           "gb_per_s": nbytes / float(np.median(seconds)) / 1e9,
           "roof_gb_per_s": float("nan"), "fraction_of_roof": float("nan"), "paired": False}
    if roofs:
        roofs = np.array(roofs)
        out.update(roof_gb_per_s=float(np.median(roofs)) / 1e9, paired=True,
                   fraction_of_roof=float(np.median(nbytes / seconds / roofs)))
    return out


def run(lengths: Sequence[int], B: int = 1, H: int = 16, D: int = 16, *, block: int = 16,
        impls: Sequence[str] = IMPLS, passes: Sequence[str] = PASSES,
        repeats: int = 5, baseline_repeats: int | None = 3,
        dtype: torch.dtype = torch.float32, seed: int = 0,
        max_sequential_L: int = 16384, max_attention_L: int = 16384,
        max_baseline_L: int | None = None, max_slow_bwd_L: int | None = 4096,
        roof_mib: float = 256.0,
        threads: int | None = None, progress: bool = False) -> tuple[pd.DataFrame, float]:
    """Time every implementation at every length; returns ``(table, roof_bytes_per_s)``, the
    second the median of every triad run (NaN with ``roof_mib=0``: no roof, no fractions).

    ``repeats`` timings of each compiled kernel (:data:`STREAMING`), each paired with a triad
    run; ``baseline_repeats`` (``None``: ``repeats``) of every other method, whose single calls
    take up to seconds and need no pairing.

    ``threads``: PyTorch intra-op threads during the run (restored afterwards; ``None``, the
    default, leaves PyTorch's count: all cores, or what the runner set). The compiled kernels
    and the triad follow the same count, so every method gets the same cores.

    The Python-loop scan and full attention are skipped beyond ``max_sequential_L`` and
    ``max_attention_L`` (their cost is known: linear with a large constant, and quadratic),
    their backward passes also beyond ``max_slow_bwd_L`` (the slowest measurements of all:
    tens of seconds at L = 8192 on two cores), and every method but the compiled kernels
    (:data:`STREAMING`) beyond ``max_baseline_L`` (when given), so that those can be followed
    to very long sequences."""
    known = IMPLS + EXTRA_IMPLS
    unknown = set(impls) - set(known)
    if unknown:
        raise ValueError(f"unknown impls {sorted(unknown)}; choose from {known}")
    bad_pass = set(passes) - set(PASSES)
    if bad_pass:
        raise ValueError(f"passes must be among {PASSES}, got {sorted(bad_pass)}")
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        roof = Roof(roof_mib) if roof_mib > 0 else None
        limits = {"scan-torch-loop": max_sequential_L, "attention-full": max_attention_L}
        counts = (repeats, repeats if baseline_repeats is None else baseline_repeats)
        df = _run(lengths, B, H, D, block, impls, passes, counts, dtype, seed, limits,
                  max_baseline_L, max_slow_bwd_L, roof, progress)
        del roof
    finally:
        torch.set_num_threads(previous)
    df.attrs["threads"] = threads or previous
    return df, df.attrs["roof_bytes_per_s"]


def _run(lengths, B, H, D, block, impls, passes, counts, dtype, seed, limits, max_baseline_L,
         max_slow_bwd_L, roof, progress):
    def skip(impl, L, pass_="fwd"):
        limit = limits.get(impl)
        if impl not in STREAMING and max_baseline_L is not None:
            limit = max_baseline_L if limit is None else min(limit, max_baseline_L)
        if impl in limits and pass_ != "fwd" and max_slow_bwd_L is not None:
            limit = max_slow_bwd_L if limit is None else min(limit, max_slow_bwd_L)
        return limit is not None and L > limit

    rows = []
    for L in lengths:
        attention = any(i in ("swa-blocked", "attention-full") and not skip(i, L) for i in impls)
        a, x, q, k = _make_inputs(B, H, L, D, dtype, seed, attention)
        for pass_ in passes:
            for impl in impls:
                if skip(impl, L, pass_):
                    continue
                fn, nbytes = _callable(impl, a, x, q, k, block, pass_)
                streaming = impl in STREAMING
                m = measure(fn, nbytes, counts[0] if streaming else counts[1],
                            roof if streaming else None)
                rows.append({"impl": impl, "L": L, "pass": pass_, **m,
                             "tokens_per_s": B * L / m["seconds"]})
                del fn
                if progress:
                    frac = f"  {m['fraction_of_roof']:.2f} of the roof" if m["paired"] else ""
                    print(f"  {impl:20s} L={L:7d} {pass_:8s} {m['seconds'] * 1e3:10.2f} ms{frac}",
                          flush=True)
    df = pd.DataFrame(rows)
    paired = df[df.paired].roof_gb_per_s
    roof_bw = float(np.median(paired)) * 1e9 if len(paired) else float("nan")
    # methods timed without a triad beside them: against the run's median triad
    df.loc[~df.paired, "roof_gb_per_s"] = roof_bw / 1e9
    df.loc[~df.paired, "fraction_of_roof"] = df.gb_per_s / (roof_bw / 1e9)
    ref = df[df.impl == "swr"].set_index(["L", "pass"]).seconds
    df["ratio_to_swr"] = [s / ref.get((L, p), float("nan"))
                          for s, L, p in zip(df.seconds, df.L, df["pass"])]
    df.attrs["roof_bytes_per_s"] = roof_bw
    return df


def decode_throughput(B: int = 1, H: int = 16, D: int = 16, *, block: int = 16,
                      tokens: int = 2048, impl: str = "auto", dtype: torch.dtype = torch.float32,
                      seed: int = 0, repeats: int = 3) -> float:
    """Tokens per second (``B`` sequences at once, so ``B`` tokens a step) of
    :meth:`SWRState.step` over ``tokens`` steps, best of ``repeats``; inputs prepared beforehand."""
    a, x, _, _ = _make_inputs(B, H, tokens, D, dtype, seed)
    steps = [(a[..., i].contiguous(), x[..., i, :].contiguous()) for i in range(tokens)]

    def decode():
        state = SWRState(B, H, D, block=block, dtype=dtype, impl=impl)
        with torch.no_grad():
            for a_t, u_t in steps:
                state.step(a_t, u_t)

    decode()  # warm-up (JIT compilation)
    return B * tokens / min(_time(decode) for _ in range(repeats))
