"""Side-by-side benchmark of SWR against the alternatives (``companion bench swr``).

Every implementation gets the same inputs in the same process, forward and forward+backward,
at each sequence length:

* ``swr``            — :func:`kernels.swr.swr` with ``impl="auto"`` (the compiled kernel on CPU)
* ``swr-chunked``    — the block two-pass algorithm in PyTorch ops
* ``scan-sequential``— the full recurrence as a time loop of PyTorch ops
* ``scan-parallel``  — the full recurrence as a log-space parallel scan: with ``A = cumsum log a``,
  ``y_i = Σ_j e^{A_i − A_j} x_j`` split into positive and negative parts of ``x`` and evaluated
  with ``logcumsumexp`` (stable, O(L) work, O(log L) depth)
* ``swa-blocked``    — sliding-window attention with the *same* jagged window as SWR: queries of
  block ``t`` attend causally to keys of blocks ``t−1`` and ``t`` (O(L·2ℓ·D), no L×L matrix)
* ``attention-full`` — PyTorch SDPA with a causal mask (O(L²·D))

Reported: the best of ``repeats`` timings (the least disturbed by other work on a shared
machine), tokens/s, and an *effective* bandwidth: the bytes each method must touch at least once
(inputs read + outputs written: ``a, x → y`` for recurrences, ``q, k, v → o`` for attention;
twice that for forward+backward) divided by the time, to compare with the machine's copy
bandwidth, measured by copying a ≥ 1 GiB buffer into a preallocated destination and counting
read + write. ``ratio_to_swr`` is each time divided by ``swr``'s at the same length and pass.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from kernels.swa import attention_full, swa_blocked
from kernels.swr import swr

IMPLS = ("swr", "swr-chunked", "scan-sequential", "scan-parallel", "swa-blocked", "attention-full")


# -- the alternatives ---------------------------------------------------------------------
def scan_sequential(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
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
def copy_bandwidth(gib: float = 1.0, repeats: int = 3) -> float:
    """Bytes per second (read + write) copying a ``gib`` GiB float32 buffer into a
    preallocated destination, best of ``repeats``."""
    n = int(gib * 2**30) // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page before timing
    best = min(_time(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * n * 4 / best


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _make_inputs(B, H, L, D, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a = 0.5 + 0.49 * torch.rand(B, H, L, generator=g, dtype=dtype)
    x = torch.randn(B, H, L, D, generator=g, dtype=dtype)
    q, k = torch.randn(2, B, H, L, D, generator=g, dtype=dtype)
    return a, x, q, k


def _callable(impl: str, a, x, q, k, block: int, backward: bool):
    if impl in ("swr", "swr-chunked", "scan-sequential", "scan-parallel"):
        fn = {"swr": lambda a, x: swr(a, x, block=block),
              "swr-chunked": lambda a, x: swr(a, x, block=block, impl="chunked"),
              "scan-sequential": scan_sequential, "scan-parallel": scan_parallel}[impl]
        args = (a, x)
        nbytes = (a.numel() + 2 * x.numel()) * x.element_size()
    else:
        fn = {"swa-blocked": lambda q, k, v: swa_blocked(q, k, v, block),
              "attention-full": attention_full}[impl]
        args = (q, k, x)
        nbytes = 4 * x.numel() * x.element_size()
    if not backward:
        def run():
            with torch.no_grad():
                return fn(*args)
        return run, nbytes
    leaves = [t.detach().clone().requires_grad_() for t in args]
    grad = torch.randn_like(x)

    def run_bwd():
        out = fn(*leaves)
        out.backward(grad)
        for t in leaves:
            t.grad = None
    return run_bwd, 2 * nbytes


def run(lengths: Sequence[int], B: int = 1, H: int = 16, D: int = 16, *, block: int = 16,
        impls: Sequence[str] = IMPLS, passes: Sequence[str] = ("fwd", "fwd+bwd"),
        repeats: int = 3, dtype: torch.dtype = torch.float32, seed: int = 0,
        max_sequential_L: int = 16384, max_attention_L: int = 16384, copy_gib: float = 1.0,
        threads: int | None = 1, progress: bool = False) -> tuple[pd.DataFrame, float]:
    """Time every implementation at every length; returns ``(table, copy_bytes_per_s)``.

    ``threads``: PyTorch intra-op threads during the run (restored afterwards; ``None`` leaves
    them alone). The default, 1, compares every method on one core, as the compiled SWR kernel
    runs; it also keeps PyTorch's OpenMP workers from spinning against other jobs on a shared
    machine, which made multi-threaded timings of the PyTorch baselines erratic.

    The sequential scan and full attention are skipped beyond ``max_sequential_L`` and
    ``max_attention_L`` (their cost is known: linear with a large constant, and quadratic)."""
    unknown = set(impls) - set(IMPLS)
    if unknown:
        raise ValueError(f"unknown impls {sorted(unknown)}; choose from {IMPLS}")
    bad_pass = set(passes) - {"fwd", "fwd+bwd"}
    if bad_pass:
        raise ValueError(f"passes must be 'fwd' and/or 'fwd+bwd', got {sorted(bad_pass)}")
    # the machine's bandwidth: copied with PyTorch's default (all-core) threads
    bandwidth = copy_bandwidth(copy_gib) if copy_gib > 0 else float("nan")
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        df = _run(lengths, B, H, D, block, impls, passes, repeats, dtype, seed,
                  max_sequential_L, max_attention_L, bandwidth, progress)
    finally:
        torch.set_num_threads(previous)
    df.attrs["threads"] = threads or previous
    return df, bandwidth


def _run(lengths, B, H, D, block, impls, passes, repeats, dtype, seed, max_sequential_L,
         max_attention_L, bandwidth, progress):
    rows = []
    for L in lengths:
        a, x, q, k = _make_inputs(B, H, L, D, dtype, seed)
        for pass_ in passes:
            for impl in impls:
                if (impl == "scan-sequential" and L > max_sequential_L) or (
                        impl == "attention-full" and L > max_attention_L):
                    continue
                fn, nbytes = _callable(impl, a, x, q, k, block, pass_ == "fwd+bwd")
                fn()  # warm-up (JIT compilation, allocator)
                seconds = min(_time(fn) for _ in range(repeats))
                rows.append({"impl": impl, "L": L, "pass": pass_, "seconds": seconds,
                             "tokens_per_s": B * L / seconds, "gb_per_s": nbytes / seconds / 1e9})
                if progress:
                    print(f"  {impl:16s} L={L:6d} {pass_:8s} {seconds * 1e3:9.2f} ms", flush=True)
    df = pd.DataFrame(rows)
    ref = df[df.impl == "swr"].set_index(["L", "pass"]).seconds
    df["ratio_to_swr"] = [s / ref.get((L, p), float("nan"))
                          for s, L, p in zip(df.seconds, df.L, df["pass"])]
    df["fraction_of_copy_bw"] = df.gb_per_s * 1e9 / bandwidth
    return df


def loglog_slope(df: pd.DataFrame, impl: str = "swr", pass_: str = "fwd",
                 low: int = 4096, high: int = 65536) -> float:
    """Slope of log(time) against log(L) between ``low`` and ``high`` (1 = linear)."""
    d = df[(df.impl == impl) & (df["pass"] == pass_) & (df.L >= low) & (df.L <= high)]
    if len(d) < 2:
        return float("nan")
    return float(np.polyfit(np.log(d.L), np.log(d.seconds), 1)[0])


def plot(df: pd.DataFrame, bandwidth: float | None = None):
    """Time against L for each implementation, one panel per pass."""
    from lib import plotting as P

    passes = list(dict.fromkeys(df["pass"]))
    fig, axes = P.figure(ncols=len(passes), width=5.2, height=3.8)
    axes = np.atleast_1d(axes)
    for ax, pass_ in zip(axes, passes):
        for n, impl in enumerate(dict.fromkeys(df.impl)):
            d = df[(df.impl == impl) & (df["pass"] == pass_)].sort_values("L")
            P.simulation(ax, d.L, d.seconds, label=impl, index=n, connect=True)
        if bandwidth and pass_ == "fwd":
            Ls = np.array(sorted(df.L.unique()))
            n_swr = df[df.impl == "swr"]
            if len(n_swr):
                per_token = (n_swr.gb_per_s * n_swr.seconds / n_swr.L).iloc[0] * 1e9
                P.theory(ax, Ls, per_token * Ls / bandwidth, label="copy-bandwidth floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        P.label(ax, "sequence length $L$ (tokens)", "time (s)", title=pass_, legend=False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    return fig


def summary(df: pd.DataFrame, bandwidth: float) -> dict:
    """The issue's performance goals, as measured numbers (not assertions)."""
    fwd = df[df["pass"] == "fwd"]
    out = {"copy_gb_per_s": bandwidth / 1e9, "swr_fwd_loglog_slope_4k_64k": loglog_slope(df)}
    for impl in ("scan-sequential", "swa-blocked", "attention-full"):
        d = fwd[(fwd.impl == impl) & (fwd.L >= 4096)]
        out[f"min_speedup_vs_{impl}_L>=4096"] = float(d.ratio_to_swr.min()) if len(d) else None
    big = fwd[(fwd.impl == "swr")]
    if len(big):
        row = big.sort_values("L").iloc[-1]
        out[f"swr_fwd_fraction_of_copy_bw_at_L={int(row.L)}"] = float(row.fraction_of_copy_bw)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="companion bench swr", description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[256, 1024, 2048, 4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--batch", "-B", type=int, default=1)
    parser.add_argument("--heads", "-H", type=int, default=16)
    parser.add_argument("--dim", "-D", type=int, default=16)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--passes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--max-sequential-L", type=int, default=16384)
    parser.add_argument("--max-attention-L", type=int, default=16384)
    parser.add_argument("--copy-gib", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch threads for every method (0: leave PyTorch's default)")
    parser.add_argument("--plot", default="swr-bench.png", help="where to save the plot ('' for none)")
    parser.add_argument("--csv", default="", help="also save the table as CSV")
    args = parser.parse_args(argv)
    df, bw = run(args.lengths, args.batch, args.heads, args.dim, block=args.block, impls=args.impls,
                 passes=args.passes, repeats=args.repeats, dtype=getattr(torch, args.dtype),
                 max_sequential_L=args.max_sequential_L, max_attention_L=args.max_attention_L,
                 copy_gib=args.copy_gib, threads=args.threads or None, progress=True)
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\ncopy bandwidth (read + write, {args.copy_gib:g} GiB buffer, "
          f"{torch.get_num_threads()} threads): {bw / 1e9:.2f} GB/s; "
          f"torch threads during the run: {df.attrs['threads']}")
    for key, value in summary(df, bw).items():
        print(f"{key}: {value if value is None else f'{value:.3g}'}")
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.plot:
        fig = plot(df, bw)
        fig.savefig(args.plot)
        print(f"plot saved to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
