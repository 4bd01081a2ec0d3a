"""Benchmark: the chapter's loop both ways in one process — the compiled kernels of
:mod:`lib.tmc.compiled` against the plain numpy path they are tested against — and their ratio
on the machine at hand (``python -m lib.tmc.bench``)."""

from __future__ import annotations

import time

import numpy as np

from lib.seeding import stream
from lib.tmc.compiled import post_train_compiled
from lib.tmc.methods import TRAINERS, post_train
from lib.tmc.policy import pretrain
from lib.tmc.tree import Setting, paper_tmc, random_tmc


def bench(steps: int = 1000, seeds: int = 4, shape: tuple[int, int, int] | None = None) -> dict:
    """Post-train with every method both ways (numpy and compiled) from the same seeds, on the
    paper tree with a pretrained base (or, with ``shape``, on a random tree with the true chain
    as base, as in the chapter's tree experiment); print and return each method's time ratio
    and the largest difference of the final logits."""
    if shape is None:
        tree = paper_tmc()
        base = pretrain(tree, 2000, 256, 1.0, stream(0, "bench", "pretrain"))
    else:
        tree = random_tmc(shape[0], shape[1], shape[1], shape[2], stream(0, "bench", "tree"))
        base = [np.log(p) for p in tree.probs]
    setting = Setting.of(tree, tree.tasks[0], base)
    hyper = dict(probes=4, group=4, beta=0.3, epochs=2, clip=0.2)
    for method in TRAINERS:  # compile, or load from numba's cache, before timing
        post_train_compiled(setting, method, 2, 0.25, stream(0, "bench", "warm-up"), 1, **hyper)
    out = {}
    for method in TRAINERS:
        times, diff = {}, 0.0
        finals = {}
        for compiled in (False, True):
            t0 = time.perf_counter()
            finals[compiled] = [post_train(setting, method, steps, 0.25, stream(s, "bench", "post-train"), steps,
                                           compiled=compiled, **hyper)[-1] for s in range(seeds)]
            times[compiled] = time.perf_counter() - t0
        diff = max(float(np.abs(a - b).max()) for fa, fb in zip(finals[False], finals[True])
                   for a, b in zip(fa, fb))
        out[method] = {"numpy_s": times[False], "compiled_s": times[True],
                       "ratio": times[False] / times[True], "max_abs_diff": diff}
        print(f"{method:10s} numpy {times[False]:7.3f} s  compiled {times[True]:7.4f} s  "
              f"ratio {times[False] / times[True]:7.1f}  max |Δ logits| {diff:.2e}")
    return out


if __name__ == "__main__":  # python -m lib.tmc.bench [steps seeds [L M C]]
    import sys

    args = [int(a) for a in sys.argv[1:]]
    bench(*args[:2], shape=tuple(args[2:5]) if len(args) >= 5 else None)
