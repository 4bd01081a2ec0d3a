"""``companion bench swr``: the SWR benchmark from the command line (a table, the summary, and
optionally the figure and a CSV)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pandas as pd
import torch

import lib.swr_bench as package
from lib.swr_bench.plotting import plot
from lib.swr_bench.summary import summary
from lib.swr_bench.timing import EXTRA_IMPLS, IMPLS, PASSES, decode_throughput, run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="companion bench swr", description=package.__doc__.split("\n")[0])
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
