"""The causal operators of common token mixers on a fixed input, and their state-size theory.

Each ``*_operator`` function draws a generic input (queries, keys, gates, filters …) from a
NumPy ``Generator`` and returns the ℓ × ℓ lower-triangular operator ``T`` that maps one value
channel ``u`` to its output ``y = T u`` (fp64; batched over ``channels``). Recurrent mixers also
return their factors ``(C, B, log_a)`` for the fast path of :mod:`lib.ess.spectrum`.

Theory ([derived]; the chapter states and tests it). A recurrence with state size ``N`` at
position ``i`` factors ``H_i = T[i:, :i]`` through its state, so ``rank H_i ≤ N``; the block is
also ``(ℓ−i) × i``. On generic inputs the bound is attained:

=========================  ======================  ======================================
mixer                      TSS (per channel)       ESS_i on generic inputs
=========================  ======================  ======================================
linear attention           d_k                     min(d_k, i, ℓ−i)
gated linear attention     d_k                     min(d_k, i, ℓ−i)
diagonal SSM               N                       min(N, i, ℓ−i) (exact arithmetic)
convolution, length k      k − 1                   min(k−1, i, ℓ−i)
sliding-window attention   w − 1                   min(w−1, i, ℓ−i)
softmax attention          min(i, ℓ−i)             min(i, ℓ−i)
scalar recurrence          1                       1
SWR, block b               2                       1 at block starts, in block 0 and in the
                                                   last block; 2 elsewhere
=========================  ======================  ======================================
"""

from __future__ import annotations

import numpy as np

__all__ = ["MIXERS", "softmax_attention_operator", "linear_attention_operator", "gla_operator",
           "diagonal_ssm_operator", "convolution_operator", "sliding_window_operator",
           "scalar_recurrence_operator", "swr_operator", "tss", "generic_ess", "swr_ess"]

MIXERS = ("softmax", "linear", "gla", "ssm", "conv", "swa", "scalar", "swr")


def _softmax_rows(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    s = np.where(mask, scores, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    e = np.where(mask, np.exp(s), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_attention_operator(rng: np.random.Generator, ell: int, d_k: int = 16,
                               channels: int = 1, window: int | None = None,
                               exponential: bool = True) -> np.ndarray:
    """Causal softmax attention with Gaussian queries and keys (``q·k/√d_k`` of unit variance);
    ``window=w`` restricts position ``r`` to the keys ``r−w+1 … r`` (sliding-window attention).
    ``exponential=False`` removes the softmax's exponential (and its row normalisation, a diagonal
    scaling that changes no rank): the masked scores ``q·k/√d_k`` themselves, a causal linear
    attention of width ``d_k`` on the same draws, whose Hankel blocks have rank ≤ ``d_k``."""
    q = rng.standard_normal((channels, ell, d_k))
    k = rng.standard_normal((channels, ell, d_k))
    r, j = np.indices((ell, ell))
    mask = j <= r
    if window is not None:
        mask &= r - j < window
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    if not exponential:
        return np.where(mask, scores, 0.0)
    return _softmax_rows(scores, mask)


def sliding_window_operator(rng: np.random.Generator, ell: int, window: int, d_k: int = 16,
                            channels: int = 1) -> np.ndarray:
    """Sliding-window softmax attention of window ``w`` (each token sees itself and w−1 before)."""
    return softmax_attention_operator(rng, ell, d_k, channels, window=window)


def linear_attention_operator(rng: np.random.Generator, ell: int, d_k: int = 8,
                              channels: int = 1):
    """Causal linear attention ``T[r, j] = q_r · k_j`` (j ≤ r); returns ``(T, (C, B, None))``."""
    from lib.ess.spectrum import factored_operator

    C = rng.standard_normal((channels, ell, d_k)) / np.sqrt(d_k)
    B = rng.standard_normal((channels, ell, d_k))
    return factored_operator(C, B), (C, B, None)


def gla_operator(rng: np.random.Generator, ell: int, d_k: int = 8, channels: int = 1,
                 gate_range: tuple[float, float] = (0.7, 1.0)):
    """Gated linear attention with a diagonal, input-dependent gate ``α_t ∈ gate_range`` per key
    dimension: ``T[r, j] = Σ_m q_r[m] (Π_{t=j+1}^{r} α_t[m]) k_j[m]``. Returns ``(T, factors)``."""
    from lib.ess.spectrum import factored_operator

    C = rng.standard_normal((channels, ell, d_k)) / np.sqrt(d_k)
    B = rng.standard_normal((channels, ell, d_k))
    log_a = np.log(rng.uniform(*gate_range, size=(channels, ell, d_k)))
    return factored_operator(C, B, log_a), (C, B, log_a)


def diagonal_ssm_operator(rng: np.random.Generator, ell: int, n_state: int = 8,
                          channels: int = 1):
    """An S6-like selective diagonal SSM on one channel: ``A_n = −(n+1)`` (S4D-real),
    ``Δ_t = softplus(·) ∈ (0, ∞)`` input-dependent, ``a_t[n] = exp(Δ_t A_n)``, ``B_t``, ``C_t``
    Gaussian; ``T[r, j] = Σ_n C_r[n] (Π_{t=j+1}^{r} a_t[n]) Δ_j B_j[n]``. Returns ``(T, factors)``.

    Its modes decay at very different rates, so ``H_i`` is ill-conditioned: the chapter's
    tolerance figure shows how many of the ``N`` directions survive each ``τ``."""
    from lib.ess.spectrum import factored_operator

    A = -np.arange(1, n_state + 1, dtype=np.float64)
    delta = np.log1p(np.exp(rng.standard_normal((channels, ell, 1)) - 1.0))  # softplus
    log_a = delta * A
    B = delta * rng.standard_normal((channels, ell, n_state))
    C = rng.standard_normal((channels, ell, n_state))
    return factored_operator(C, B, log_a), (C, B, log_a)


def convolution_operator(rng: np.random.Generator, ell: int, k: int, channels: int = 1):
    """A causal convolution with a Gaussian filter of length ``k``: ``T[r, j] = h[r−j]``."""
    h = rng.standard_normal((channels, k))
    r, j = np.indices((ell, ell))
    lag = r - j
    valid = (lag >= 0) & (lag < k)
    return np.where(valid, h[:, np.clip(lag, 0, k - 1)], 0.0)


def scalar_recurrence_operator(rng: np.random.Generator, ell: int, channels: int = 1,
                               gate_range: tuple[float, float] = (0.5, 1.0)):
    """``y_i = a_i y_{i−1} + u_i`` with input-dependent ``a_i``: ``T[r, j] = Π_{t=j+1}^{r} a_t``.
    Returns ``(T, factors)`` (a diagonal recurrence with N = 1, C = B = 1)."""
    from lib.ess.spectrum import factored_operator

    log_a = np.log(rng.uniform(*gate_range, size=(channels, ell, 1)))
    ones = np.ones((channels, ell, 1))
    return factored_operator(ones, ones, log_a), (ones, ones, log_a)


def swr_operator(rng: np.random.Generator, ell: int, block: int = 16, channels: int = 1,
                 gate_range: tuple[float, float] = (0.5, 1.0), impl: str = "reference"):
    """The SWR operator (chapter 02) with random coefficients, materialised by pushing the ℓ unit
    vectors through :func:`kernels.swr.swr` in fp64 (column j of ``T`` is the response to
    ``e_j``). Returns ``(T, a)``."""
    import torch

    from kernels.swr import swr

    a = rng.uniform(*gate_range, size=(channels, ell))
    a_t = torch.from_numpy(a)[None]                               # (1, channels, ℓ)
    eye = torch.eye(ell, dtype=torch.float64).expand(1, channels, ell, ell).contiguous()
    with torch.no_grad():
        T = swr(a_t, eye, block=block, impl=impl)[0].numpy()       # y[…, r, j] = T[r, j]
    return T, a


# -- theory --------------------------------------------------------------------------------

def tss(mixer: str, ell: int, **size) -> np.ndarray:
    """The theoretically realisable state size per channel at each position ``i`` (shape ℓ):
    ``d_k`` (linear, gla), ``n_state`` (ssm), ``k−1`` (conv), ``window−1`` (swa),
    ``min(i, ℓ−i)`` (softmax), 1 (scalar), 2 (swr: its decode keeps two numbers per channel)."""
    i = np.arange(ell)
    if mixer == "softmax":
        return np.minimum(i, ell - i).astype(float)
    const = {"linear": lambda: size["d_k"], "gla": lambda: size["d_k"],
             "ssm": lambda: size["n_state"], "conv": lambda: size["k"] - 1,
             "swa": lambda: size["window"] - 1, "scalar": lambda: 1, "swr": lambda: 2}
    if mixer not in const:
        raise ValueError(f"unknown mixer {mixer!r}; expected one of {MIXERS}")
    try:
        value = const[mixer]()
    except KeyError as missing:
        raise ValueError(f"tss({mixer!r}) needs the size {missing}") from None
    return np.full(ell, float(value))


def swr_ess(ell: int, block: int) -> np.ndarray:
    """Exact ESS of the SWR operator at each position on generic coefficients.

    Inside block ``t ≥ 1`` at offset ``m ≥ 1``, rows of block t see inputs from block t−1 on and
    rows of block t+1 see only inputs from block t: two independent row patterns of the
    rank-one kernel ``Π a``, so rank 2 — unless block t+1 does not exist (last block). At block
    starts only block t sees the past (rank 1); in block 0 every later row that sees the past
    sees all of it (rank 1)."""
    out = np.zeros(ell)
    for i in range(1, ell):
        t, m = divmod(i, block)
        out[i] = 2.0 if (m > 0 and t >= 1 and (t + 1) * block < ell) else 1.0
    return out


def generic_ess(mixer: str, ell: int, **size) -> np.ndarray:
    """ESS_i of the mixer on generic inputs: ``min(TSS_i, i, ℓ−i)`` (SWR: :func:`swr_ess`)."""
    if mixer == "swr":
        return swr_ess(ell, size["block"])
    i = np.arange(ell)
    return np.minimum(tss(mixer, ell, **size), np.minimum(i, ell - i))
