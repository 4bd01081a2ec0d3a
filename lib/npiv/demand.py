"""The demand design (Hartford et al., 2017): an NPIV benchmark with a known structural function.

Ticket sales ``Y`` depend on price ``P``, time of year ``T`` and customer type ``S``; price is
endogenous (it shares the noise ``V`` with the sales shock ``ε``) and fuel cost ``C`` is the
instrument:

    T ~ U[0, 10],  S ~ U{1, …, 7},  C, V ~ N(0, 1),  ε ~ N(ρV, 1 − ρ²)
    P = 25 + (C + 3) ψ(T) + V
    Y = h°(P, T, S) + ε,   h°(p, t, s) = 100 + (10 + p) s ψ(t) − 2p
    ψ(t) = 2 ((t − 5)⁴ / 600 + exp(−4 (t − 5)²) + t / 10 − 2)

Treatment ``A = (P, T, S)``, instrument ``W = (C, T, S)``. Every variable is standardised with
fixed constants (from a large reference sample), and so is ``h°``: test errors are in units of
the outcome's standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from lib.seeding import constant_stream

#: The confounding correlation ρ of Hartford et al.'s design (the outcome noise ε ~ ρV + √(1−ρ²)·ξ).
RHO = 0.5
#: Draws of the fixed reference sample whose means and standard deviations standardise the data.
REFERENCE_DRAWS = 200_000


def psi(t: np.ndarray) -> np.ndarray:
    return 2 * ((t - 5) ** 4 / 600 + np.exp(-4 * (t - 5) ** 2) + t / 10 - 2)


def structural(p: np.ndarray, t: np.ndarray, s: np.ndarray) -> np.ndarray:
    """h°(p, t, s) on the original scale."""
    return 100 + (10 + p) * s * psi(t) - 2 * p


def _raw(n: int, rng: np.random.Generator, rho: float) -> dict[str, np.ndarray]:
    t = rng.uniform(0, 10, n)
    s = rng.integers(1, 8, n).astype(float)
    c = rng.standard_normal(n)
    v = rng.standard_normal(n)
    eps = rho * v + np.sqrt(1 - rho**2) * rng.standard_normal(n)
    p = 25 + (c + 3) * psi(t) + v
    return {"p": p, "t": t, "s": s, "c": c, "y": structural(p, t, s) + eps}


@lru_cache(maxsize=8)
def _scales(rho: float) -> dict[str, tuple[float, float]]:
    # a constant of the model, not a draw of the experiment: the standardising constants come
    # from one fixed reference sample, the same whatever the chapter seed
    ref = _raw(REFERENCE_DRAWS, constant_stream("demand", "reference-sample"), rho)
    return {k: (float(v.mean()), float(v.std())) for k, v in ref.items()}


@dataclass
class DemandSample:
    A: np.ndarray       # (n, 3) standardised (P, T, S)
    W: np.ndarray       # (n, 3) standardised (C, T, S)
    Y: np.ndarray       # (n,)   standardised outcome
    h_true: np.ndarray  # (n,)   standardised h°(A)


def sample(n: int, rng: np.random.Generator, rho: float = RHO) -> DemandSample:
    """``n`` draws of the demand design, standardised."""
    raw = _raw(n, rng, rho)
    sc = _scales(rho)

    def z(k, v=None):
        m, s = sc[k]
        return ((raw[k] if v is None else v) - m) / s

    A = np.stack([z("p"), z("t"), z("s")], 1)
    W = np.stack([z("c"), z("t"), z("s")], 1)
    h = z("y", structural(raw["p"], raw["t"], raw["s"]))
    return DemandSample(A, W, z("y"), h)


def test_mse(h_pred: np.ndarray, test: DemandSample) -> np.ndarray:
    """Mean squared error of predictions of h° on a test sample (last axis = points)."""
    return ((np.asarray(h_pred) - test.h_true) ** 2).mean(-1)
