"""Side-by-side benchmark of SWR against the alternatives (``companion bench swr``).

Every implementation gets the same inputs in the same process, at each sequence length, in up
to three passes: ``fwd`` (forward), ``bwd`` (backward alone, after one untimed forward) and
``fwd+bwd``:

* ``swr``             — :func:`kernels.swr.swr` with ``impl="auto"`` (the compiled kernel on CPU)
* ``scan-compiled``   — the full recurrence as a compiled sequential scan
  (:func:`kernels.swr.scan`, ``impl="compiled"``): one O(L·D) pass per head, vectorised across
  channels, heads on all cores — the baseline a CPU user would pick, built like the SWR kernel
  (same threads, same vector rows), so the two differ only in the recurrence they evaluate
* ``swr-chunked``     — the block two-pass algorithm in PyTorch ops
* ``scan-torch-loop`` — the full recurrence as a Python loop over time of PyTorch ops (one
  small operation per token: it measures Python and dispatch overhead, not the recurrence)
* ``scan-parallel``   — the full recurrence as a log-space parallel scan: with ``A = cumsum log a``,
  ``y_i = Σ_j e^{A_i − A_j} x_j`` split into positive and negative parts of ``x`` and evaluated
  with ``logcumsumexp`` (stable, O(L) work, O(log L) depth)
* ``swa-blocked``     — sliding-window attention with the *same* jagged window as SWR
  (:func:`kernels.swa.swa_blocked`, O(L·2ℓ·D), no L×L matrix)
* ``attention-full``  — PyTorch SDPA with a causal mask (:func:`kernels.swa.attention_full`,
  O(L²·D))

and, on request (:data:`EXTRA_IMPLS`), ``swr-loops`` and ``scan-compiled-loops``: the same two
compiled kernels with their channel loops left to numba instead of one vector operation per
token row (:data:`kernels.swr.compiled.VECTOR_ROWS`), to measure what the vector rows bring.

Reported per measurement: the median of ``repeats`` timings, tokens/s, and an *effective*
bandwidth: the bytes each method must touch at least once divided by the time. Forward: inputs
read and output written (``a, x → y`` for recurrences, ``q, k, v → o`` for attention); backward:
the output's gradient and the inputs (or the output) read, the inputs' gradients written
(``a, x, dy → da, dx``; ``q, k, v, do → dq, dk, dv``); ``fwd+bwd``: the sum.

**The roof** is the machine's memory bandwidth as STREAM measures it: the triad
``a = b + s·c`` on three float32 arrays far larger than the caches (:class:`Roof`), compiled,
with the run's threads, counting two reads and one write per element. The compiled kernels'
timings (:data:`STREAMING`) are each paired with a triad run just before them, and
``fraction_of_roof`` is the median over repeats of (effective bandwidth / that triad's
bandwidth): a machine that slows down or speeds up between runs (other jobs, frequency) moves
both numbers of a pair together, so their ratio stays put where either alone would not. The
other methods, bound by arithmetic or overhead rather than memory, are set against the median
of all triad runs. ``ratio_to_swr`` is each time divided by ``swr``'s at the same length and pass.

Every method runs with PyTorch's thread count (all cores unless ``threads`` says otherwise;
the compiled kernels and the triad follow it too). :func:`decode_throughput` times the
token-by-token decoder (:class:`kernels.swr.SWRState`) in tokens/s, to set beside the
full-sequence kernel's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from kernels.swa import attention_full, swa_blocked
from kernels.swr import SWRState, scan, swr

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
def _triad_kernel():
    import numba

    @numba.njit(cache=True, nogil=True, fastmath=True)
    def triad(a, b, c, s, i0, i1):  # pragma: no cover - compiled
        for i in range(i0, i1):
            a[i] = b[i] + s * c[i]
    return triad


class Roof:
    """The STREAM triad ``a = b + s·c`` on three float32 arrays of ``mib`` MiB each, compiled
    (numba) and split over the threads the SWR kernels use (:mod:`kernels.swr.compiled`'s pool,
    ``torch.get_num_threads()`` contiguous ranges). :meth:`measure` runs it once and returns
    bytes per second, counting ``3·4`` bytes per element (two reads, one write; like the
    kernels' effective bandwidth, not the write-allocate traffic).

    The default, 256 MiB per array (768 MiB in all), is far beyond a core's private caches and
    larger than the whole last-level cache of the machines the book runs on (the 2-core VMs
    report 504 MiB of L3 shared with their host; one core's triad bandwidth is flat from 16 MiB
    to 1 GiB per array there)."""

    def __init__(self, mib: float = 256.0):
        from kernels.swr import compiled

        self._compiled = compiled
        self.n = max(1024, int(mib * 2**20) // 4)
        self.a, self.b, self.c = (compiled.aligned_empty((self.n,), np.float32) for _ in range(3))
        self.b.fill(1.0)
        self.c.fill(2.0)
        self._triad = _triad_kernel()
        self.measure()  # compile, and touch every page

    def _ranges(self) -> list[tuple[int, int]]:
        threads = max(1, torch.get_num_threads())
        cuts = [(self.n * j // threads) // 16 * 16 for j in range(threads)] + [self.n]
        return [(s, e) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]

    def measure(self) -> float:
        ranges = self._ranges()
        args = lambda j, r: (self.a, self.b, self.c, np.float32(3.0), *r)
        t0 = time.perf_counter()
        self._compiled._parallel(self._triad, ranges, args)
        return 3 * 4 * self.n / (time.perf_counter() - t0)


def copy_bandwidth(gib: float = 1.0, repeats: int = 3) -> float:
    """Bytes per second (read + write) copying a ``gib`` GiB float32 buffer into a
    preallocated destination with PyTorch, best of ``repeats`` (the roof used before
    :class:`Roof`; kept for comparison)."""
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
    compiled kernels' effective bandwidth against L under the triad bandwidth (the roof: the
    run's median, ``bandwidth``)."""
    from lib import plotting as P

    passes = list(dict.fromkeys(df["pass"]))
    fig, axes = P.figure(ncols=len(passes) + 1, width=4.4, height=3.8)
    axes = np.atleast_1d(axes)
    impls = list(dict.fromkeys(df.impl))
    for ax, pass_ in zip(axes, passes):
        for n, impl in enumerate(impls):
            d = df[(df.impl == impl) & (df["pass"] == pass_)].sort_values("L")
            if len(d):
                P.simulation(ax, d.L, d.seconds, label=impl, index=n, connect=True)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        P.label(ax, "sequence length $L$ (tokens)", "time (s)", title=pass_, legend=False)
    ax = axes[-1]
    for impl in (i for i in impls if i in STREAMING):
        rows = df[df.impl == impl]
        for n, pass_ in enumerate(passes):  # the method's colour, one marker per pass
            d = rows[rows["pass"] == pass_].sort_values("L")
            P.simulation(ax, d.L, d.gb_per_s, label=f"{impl} {pass_}",
                         color=P.PALETTE[impls.index(impl) % len(P.PALETTE)],
                         marker=P.MARKERS[n % len(P.MARKERS)], connect=True,
                         markerfacecolor=None if n == 0 else "white")
    if bandwidth and np.isfinite(bandwidth):
        Ls = np.array(sorted(df.L.unique()))
        P.theory(ax, Ls, np.full(len(Ls), bandwidth / 1e9), label="triad bandwidth (roof)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    P.label(ax, "sequence length $L$ (tokens)", "effective bandwidth (GB/s)",
            title="compiled kernels vs the memory roof")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    return fig


def summary(df: pd.DataFrame, bandwidth: float, decode: dict | None = None) -> dict:
    """The performance goals as measured numbers (not assertions): the median triad bandwidth;
    for each compiled kernel and pass, its fraction of the roof (median of the pairs) and
    tokens/s at the longest length; the log-log slope of the SWR kernel's time against L from
    L = 4096 up (1 = linear); the smallest speed-up over each alternative at L ≥ 4096
    (forward); and decode tokens/s (``decode``: from :func:`decode_throughput`)."""
    out = {"roof_gb_per_s": bandwidth / 1e9}
    for impl in (i for i in STREAMING if i in set(df.impl)):
        rows = df[df.impl == impl]
        for pass_ in dict.fromkeys(rows["pass"]):
            row = rows[rows["pass"] == pass_].sort_values("L").iloc[-1]
            out[f"{impl}_{pass_}_fraction_of_roof_at_L={int(row.L)}"] = float(row.fraction_of_roof)
            out[f"{impl}_{pass_}_tokens_per_s_at_L={int(row.L)}"] = float(row.tokens_per_s)
    for pass_ in dict.fromkeys(df[df.impl == "swr"]["pass"]):
        out[f"swr_{pass_}_loglog_slope_L>=4096"] = loglog_slope(df, pass_=pass_)
    fwd = df[df["pass"] == "fwd"]
    for impl in (i for i in IMPLS + EXTRA_IMPLS if i != "swr"):
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
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS + EXTRA_IMPLS)
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES)
    parser.add_argument("--repeats", type=int, default=5,
                        help="timings of each compiled kernel, each after a triad run")
    parser.add_argument("--baseline-repeats", type=int, default=3,
                        help="timings of every other method")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--max-sequential-L", type=int, default=16384,
                        help="longest L for the Python-loop scan")
    parser.add_argument("--max-attention-L", type=int, default=16384)
    parser.add_argument("--max-slow-bwd-L", type=int, default=4096)
    parser.add_argument("--max-baseline-L", type=int, default=None,
                        help="skip every method but the compiled kernels beyond this length")
    parser.add_argument("--roof-mib", type=float, default=256.0,
                        help="MiB per array of the triad (0: no roof)")
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
                 passes=args.passes, repeats=args.repeats,
                 baseline_repeats=args.baseline_repeats, dtype=dtype,
                 max_sequential_L=args.max_sequential_L, max_attention_L=args.max_attention_L,
                 max_baseline_L=args.max_baseline_L,
                 max_slow_bwd_L=args.max_slow_bwd_L, roof_mib=args.roof_mib,
                 threads=args.threads or None, progress=True)
    decode = {}
    if args.decode_tokens:
        for impl in ("compiled", "torch"):
            try:
                decode[impl] = decode_throughput(args.batch, args.heads, args.dim, block=args.block,
                                                 tokens=args.decode_tokens, impl=impl, dtype=dtype)
            except ValueError:  # no numba: no compiled decoder
                pass
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(df.drop(columns=["paired"]).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\ntriad bandwidth (STREAM counting, {args.roof_mib:g} MiB per array, "
          f"{df.attrs['threads']} threads), median of the run: {bw / 1e9:.2f} GB/s")
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
