"""Side-by-side benchmark of SWR against the alternatives (``companion bench swr``).

Every implementation gets the same inputs in the same process, at each sequence length, in up
to three passes: ``fwd`` (forward), ``bwd`` (backward alone, after one untimed forward) and
``fwd+bwd``:

* ``swr``            — :func:`kernels.swr.swr` with ``impl="auto"`` (the compiled kernel on CPU)
* ``swr-chunked``    — the block two-pass algorithm in PyTorch ops
* ``scan-sequential``— the full recurrence as a time loop of PyTorch ops
* ``scan-parallel``  — the full recurrence as a log-space parallel scan: with ``A = cumsum log a``,
  ``y_i = Σ_j e^{A_i − A_j} x_j`` split into positive and negative parts of ``x`` and evaluated
  with ``logcumsumexp`` (stable, O(L) work, O(log L) depth)
* ``swa-blocked``    — sliding-window attention with the *same* jagged window as SWR
  (:func:`kernels.swa.swa_blocked`, O(L·2ℓ·D), no L×L matrix)
* ``attention-full`` — PyTorch SDPA with a causal mask (:func:`kernels.swa.attention_full`,
  O(L²·D))

Reported: the best of ``repeats`` timings (the least disturbed by other work on a shared
machine), tokens/s, and an *effective* bandwidth: the bytes each method must touch at least once
divided by the time. Forward: inputs read and output written (``a, x → y`` for recurrences,
``q, k, v → o`` for attention); backward: the output's gradient and the inputs (or the output)
read, the inputs' gradients written (``a, x, dy → da, dx``; ``q, k, v, do → dq, dk, dv``);
``fwd+bwd``: the sum. It is compared with the machine's copy bandwidth, measured with all
threads by copying a ≥ 1 GiB buffer into a preallocated destination and counting read + write.
``ratio_to_swr`` is each time divided by ``swr``'s at the same length and pass.

Every method runs with PyTorch's thread count (all cores unless ``threads`` says otherwise;
the compiled SWR kernel follows it too). :func:`decode_throughput` times the token-by-token
decoder (:class:`kernels.swr.SWRState`) in tokens/s, to set beside the full-sequence kernel's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from kernels.swa import attention_full, swa_blocked
from kernels.swr import SWRState, swr

IMPLS = ("swr", "swr-chunked", "scan-sequential", "scan-parallel", "swa-blocked", "attention-full")
PASSES = ("fwd", "bwd", "fwd+bwd")


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
    preallocated destination, best of ``repeats``, with PyTorch's current thread count."""
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


def _make_inputs(B, H, L, D, dtype, seed, attention: bool = True):
    """``a, x`` and, for the attention methods, ``q, k`` (drawn after ``a, x``, which are the
    same either way; ``None`` when ``attention`` is false, to spare memory at long L)."""
    g = torch.Generator().manual_seed(seed)
    a = 0.5 + 0.49 * torch.rand(B, H, L, generator=g, dtype=dtype)
    x = torch.randn(B, H, L, D, generator=g, dtype=dtype)
    if not attention:
        return a, x, None, None
    q, k = torch.randn(2, B, H, L, D, generator=g, dtype=dtype)
    return a, x, q, k


def _callable(impl: str, a, x, q, k, block: int, pass_: str):
    """``(run, bytes)``: a function timing one ``pass_`` of ``impl`` and the bytes it must move."""
    if impl in ("swr", "swr-chunked", "scan-sequential", "scan-parallel"):
        fn = {"swr": lambda a, x: swr(a, x, block=block),
              "swr-chunked": lambda a, x: swr(a, x, block=block, impl="chunked"),
              "scan-sequential": scan_sequential, "scan-parallel": scan_parallel}[impl]
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


def run(lengths: Sequence[int], B: int = 1, H: int = 16, D: int = 16, *, block: int = 16,
        impls: Sequence[str] = IMPLS, passes: Sequence[str] = PASSES,
        repeats: int = 3, dtype: torch.dtype = torch.float32, seed: int = 0,
        max_sequential_L: int = 16384, max_attention_L: int = 16384,
        max_baseline_L: int | None = None, max_slow_bwd_L: int | None = 4096,
        copy_gib: float = 1.0,
        threads: int | None = None, progress: bool = False) -> tuple[pd.DataFrame, float]:
    """Time every implementation at every length; returns ``(table, copy_bytes_per_s)``.

    ``threads``: PyTorch intra-op threads during the run (restored afterwards; ``None``, the
    default, leaves PyTorch's count: all cores, or what the runner set). The compiled SWR
    kernel follows the same count, so every method gets the same cores.

    The sequential scan and full attention are skipped beyond ``max_sequential_L`` and
    ``max_attention_L`` (their cost is known: linear with a large constant, and quadratic),
    their backward passes also beyond ``max_slow_bwd_L`` (the slowest measurements of all:
    tens of seconds at L = 8192 on two cores), and every method but ``swr`` beyond
    ``max_baseline_L`` (when given), so that ``swr`` alone can be followed to very long
    sequences."""
    unknown = set(impls) - set(IMPLS)
    if unknown:
        raise ValueError(f"unknown impls {sorted(unknown)}; choose from {IMPLS}")
    bad_pass = set(passes) - set(PASSES)
    if bad_pass:
        raise ValueError(f"passes must be among {PASSES}, got {sorted(bad_pass)}")
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        # the machine's bandwidth: copied with the run's threads (all cores by default)
        bandwidth = copy_bandwidth(copy_gib) if copy_gib > 0 else float("nan")
        limits = {"scan-sequential": max_sequential_L, "attention-full": max_attention_L}
        df = _run(lengths, B, H, D, block, impls, passes, repeats, dtype, seed, limits,
                  max_baseline_L, max_slow_bwd_L, bandwidth, progress)
    finally:
        torch.set_num_threads(previous)
    df.attrs["threads"] = threads or previous
    return df, bandwidth


def _run(lengths, B, H, D, block, impls, passes, repeats, dtype, seed, limits, max_baseline_L,
         max_slow_bwd_L, bandwidth, progress):
    def skip(impl, L, pass_="fwd"):
        limit = limits.get(impl)
        if impl != "swr" and max_baseline_L is not None:
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
                fn()  # warm-up (JIT compilation, allocator)
                seconds = min(_time(fn) for _ in range(repeats))
                rows.append({"impl": impl, "L": L, "pass": pass_, "seconds": seconds,
                             "tokens_per_s": B * L / seconds, "gb_per_s": nbytes / seconds / 1e9})
                del fn
                if progress:
                    print(f"  {impl:16s} L={L:7d} {pass_:8s} {seconds * 1e3:10.2f} ms", flush=True)
    df = pd.DataFrame(rows)
    ref = df[df.impl == "swr"].set_index(["L", "pass"]).seconds
    df["ratio_to_swr"] = [s / ref.get((L, p), float("nan"))
                          for s, L, p in zip(df.seconds, df.L, df["pass"])]
    df["fraction_of_copy_bw"] = df.gb_per_s * 1e9 / bandwidth
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


def plot(df: pd.DataFrame, bandwidth: float | None = None):
    """Time against L for each implementation, one panel per pass, and a last panel with the
    SWR kernel's effective bandwidth against L under the copy bandwidth (the roof)."""
    from lib import plotting as P

    passes = list(dict.fromkeys(df["pass"]))
    fig, axes = P.figure(ncols=len(passes) + 1, width=4.4, height=3.8)
    axes = np.atleast_1d(axes)
    for ax, pass_ in zip(axes, passes):
        for n, impl in enumerate(dict.fromkeys(df.impl)):
            d = df[(df.impl == impl) & (df["pass"] == pass_)].sort_values("L")
            if len(d):
                P.simulation(ax, d.L, d.seconds, label=impl, index=n, connect=True)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        P.label(ax, "sequence length $L$ (tokens)", "time (s)", title=pass_, legend=False)
    ax = axes[-1]
    swr_rows = df[df.impl == "swr"]
    for n, pass_ in enumerate(passes):  # swr's colour, one marker (open after the first) per pass
        d = swr_rows[swr_rows["pass"] == pass_].sort_values("L")
        P.simulation(ax, d.L, d.gb_per_s, label=f"swr {pass_}", color=P.PALETTE[0],
                     marker=P.MARKERS[n % len(P.MARKERS)], connect=True,
                     markerfacecolor=None if n == 0 else "white")
    if bandwidth and np.isfinite(bandwidth):
        Ls = np.array(sorted(df.L.unique()))
        P.theory(ax, Ls, np.full(len(Ls), bandwidth / 1e9), label="copy bandwidth (roof)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    P.label(ax, "sequence length $L$ (tokens)", "effective bandwidth (GB/s)",
            title="swr vs the memory roof")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    return fig


def summary(df: pd.DataFrame, bandwidth: float, decode: dict | None = None) -> dict:
    """The performance goals as measured numbers (not assertions): the SWR kernel's fraction
    of the copy bandwidth at the longest length, per pass; the log-log slope of its time
    against L from L = 4096 up (1 = linear); the smallest speed-up over each alternative at
    L ≥ 4096 (forward); and decode tokens/s (``decode``: from :func:`decode_throughput`)."""
    out = {"copy_gb_per_s": bandwidth / 1e9}
    swr_rows = df[df.impl == "swr"]
    for pass_ in dict.fromkeys(swr_rows["pass"]):
        d = swr_rows[swr_rows["pass"] == pass_].sort_values("L")
        row = d.iloc[-1]
        out[f"swr_{pass_}_fraction_of_copy_bw_at_L={int(row.L)}"] = float(row.fraction_of_copy_bw)
        out[f"swr_{pass_}_tokens_per_s_at_L={int(row.L)}"] = float(row.tokens_per_s)
        out[f"swr_{pass_}_loglog_slope_L>=4096"] = loglog_slope(df, pass_=pass_)
    fwd = df[df["pass"] == "fwd"]
    for impl in ("scan-sequential", "swa-blocked", "attention-full"):
        d = fwd[(fwd.impl == impl) & (fwd.L >= 4096)]
        out[f"min_speedup_vs_{impl}_L>=4096"] = float(d.ratio_to_swr.min()) if len(d) else None
    for name, value in (decode or {}).items():
        out[f"decode_tokens_per_s_{name}"] = value
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
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--max-sequential-L", type=int, default=16384)
    parser.add_argument("--max-attention-L", type=int, default=16384)
    parser.add_argument("--max-slow-bwd-L", type=int, default=4096)
    parser.add_argument("--max-baseline-L", type=int, default=None,
                        help="skip every method but swr beyond this length")
    parser.add_argument("--copy-gib", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=0,
                        help="PyTorch (and compiled-kernel) threads for every method "
                             "(0, the default: PyTorch's default, all cores)")
    parser.add_argument("--decode-tokens", type=int, default=2048,
                        help="tokens for the decode throughput (0: skip)")
    parser.add_argument("--plot", default="swr-bench.png", help="where to save the plot ('' for none)")
    parser.add_argument("--csv", default="", help="also save the table as CSV")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    df, bw = run(args.lengths, args.batch, args.heads, args.dim, block=args.block, impls=args.impls,
                 passes=args.passes, repeats=args.repeats, dtype=dtype,
                 max_sequential_L=args.max_sequential_L, max_attention_L=args.max_attention_L,
                 max_baseline_L=args.max_baseline_L,
                 max_slow_bwd_L=args.max_slow_bwd_L, copy_gib=args.copy_gib,
                 threads=args.threads or None, progress=True)
    decode = {}
    if args.decode_tokens:
        for impl in ("compiled", "torch"):
            try:
                decode[impl] = decode_throughput(args.batch, args.heads, args.dim, block=args.block,
                                                 tokens=args.decode_tokens, impl=impl, dtype=dtype)
            except ValueError:  # no numba: no compiled decoder
                pass
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\ncopy bandwidth (read + write, {args.copy_gib:g} GiB buffer, "
          f"{df.attrs['threads']} threads): {bw / 1e9:.2f} GB/s; "
          f"threads during the run: {df.attrs['threads']}")
    for key, value in summary(df, bw, decode).items():
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
