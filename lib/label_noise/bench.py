"""Benchmark: the chapter's loop both ways in one process — the compiled kernels of
:mod:`lib.label_noise.compiled` against the plain numpy path they are tested against — and their ratio
on the machine at hand (``python -m lib.label_noise.bench``)."""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from lib.label_noise.data import make_data, mu_norm_for
from lib.label_noise.model import CoefficientGD, init_weights
from lib.seeding import stream


def bench(steps: int = 2000, n: int = 200, d: int = 800, m: int = 10, reps: int = 2) -> dict:
    """Train the chapter's default network (n, d, m, n·SNR² = 10, τ = 0.2, η = 0.1) for ``steps``
    GD steps with the numpy step and with the compiled one, from the same draws; print and return
    the time ratio (process time, one BLAS thread) and the largest difference of γ and ρ."""
    rng = stream(0, "bench")
    data = make_data(n, d, mu_norm_for(10.0, n, d), rng, tau_pos=0.2, tau_neg=0.2)
    W0 = init_weights(m, d, 0.01, rng)
    CoefficientGD(W0, data, 0.1, compiled=True).step()  # compile, or load from numba's cache
    out, coef = {}, {}
    with threadpool_limits(limits=1):
        for compiled in (False, True):
            t0 = time.process_time()
            for _ in range(reps):
                gd = CoefficientGD(W0, data, 0.1, compiled=compiled)
                for _ in range(steps):
                    gd.step()
            out[compiled] = (time.process_time() - t0) / reps
            coef[compiled] = gd.coef.stacked()
    diff = float(np.abs(coef[True] - coef[False]).max())
    ratio = out[False] / out[True]
    print(f"coefficient GD, n = {n}, d = {d}, m = {m}, {steps} steps: numpy {out[False]:.3f} s, "
          f"compiled {out[True]:.3f} s, ratio {ratio:.1f}, max |Δ(γ, ρ)| {diff:.1e}")
    return {"numpy_s": out[False], "compiled_s": out[True], "ratio": ratio, "max_abs_diff": diff}


if __name__ == "__main__":  # python -m lib.label_noise.bench [steps n d m]
    import sys

    bench(*[int(a) for a in sys.argv[1:5]])
