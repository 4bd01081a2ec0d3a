"""Readable reference implementations of the sliding-window recurrence (SWR) operator.

Everything here follows the definitions literally and is meant for tests and small figures,
not for speed. Notation (per channel, 0-based positions, block length ``ℓ``):

* full recurrence ``x_i = a_i x_{i-1} + u_i`` with ``x_{-1} = 0`` — :func:`scan_reference`;
  its transfer operator ``L_ij = a_{j+1} ⋯ a_i`` (``i ≥ j``) — :func:`transfer_matrix`;
* SWR: position ``i`` of block ``t = i // ℓ`` runs the same recurrence restarted from zero at
  ``window_start(i) = max(0, ℓ(t−1))``, i.e. over the *jagged window* ``[ℓ(t−1), i]`` of
  length ``ℓ + (i mod ℓ) + 1`` (block 0 is exact) — :func:`swr_reference`; the same
  operator as ``L ⊙ M`` with the jagged 0/1 mask ``M`` — :func:`swr_masked`.

Shapes follow the public API: ``a`` is ``(B, H, L)``, ``u`` is ``(B, H, L, D)``.
"""

from __future__ import annotations

import torch


def window_start(length: int, block: int) -> torch.Tensor:
    """First input index each output position sees: ``max(0, ℓ(⌊i/ℓ⌋ − 1))``."""
    i = torch.arange(length)
    return torch.clamp(block * (i // block - 1), min=0)


def window_length(length: int, block: int) -> torch.Tensor:
    """Number of inputs each output position sees (``i+1`` in block 0, else ``ℓ+1 … 2ℓ``)."""
    return torch.arange(length) - window_start(length, block) + 1


def scan_reference(a: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The full (untruncated) recurrence, one time step at a time."""
    state = torch.zeros_like(u[..., 0, :])
    out = []
    for i in range(u.shape[-2]):
        state = a[..., i, None] * state + u[..., i, :]
        out.append(state)
    return torch.stack(out, dim=-2)


def swr_reference(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    """SWR by its definition: for every block ``t`` run the recurrence from zero over blocks
    ``t−1`` and ``t`` (``2ℓ`` steps, all blocks at once) and keep the outputs of block ``t``."""
    length = u.shape[-2]
    nb = -(-length // block)
    pad = nb * block - length
    a_p = torch.nn.functional.pad(a, (0, pad), value=1.0).unflatten(-1, (nb, block))
    u_p = torch.nn.functional.pad(u, (0, 0, 0, pad)).unflatten(-2, (nb, block))
    # the window of block t = (block t−1, block t); block −1 is empty (zero inputs)
    a_prev = torch.cat([torch.ones_like(a_p[..., :1, :]), a_p[..., :-1, :]], dim=-2)
    u_prev = torch.cat([torch.zeros_like(u_p[..., :1, :, :]), u_p[..., :-1, :, :]], dim=-3)
    a_win = torch.cat([a_prev, a_p], dim=-1)  # (..., nb, 2ℓ)
    u_win = torch.cat([u_prev, u_p], dim=-2)  # (..., nb, 2ℓ, D)
    state = torch.zeros_like(u_win[..., 0, :])
    out = []
    for k in range(2 * block):
        state = a_win[..., k, None] * state + u_win[..., k, :]
        if k >= block:
            out.append(state)
    y = torch.stack(out, dim=-2)  # (..., nb, ℓ, D)
    return y.flatten(-3, -2)[..., :length, :]


def transfer_matrix(a: torch.Tensor) -> torch.Tensor:
    """``L = (I − AZ)^{-1}`` for one channel's coefficients ``a`` of shape ``(L,)``:
    ``L_ij = a_{j+1} ⋯ a_i`` for ``i ≥ j`` (explicit products, no logarithms)."""
    n = a.shape[-1]
    out = torch.zeros(n, n, dtype=a.dtype, device=a.device)
    for j in range(n):
        out[j, j] = 1.0
        out[j + 1:, j] = torch.cumprod(a[j + 1:], dim=0)
    return out


def jagged_mask(length: int, block: int, dtype=torch.float64) -> torch.Tensor:
    """``M_ij = 1`` if ``window_start(i) ≤ j ≤ i`` else 0."""
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    return ((j >= window_start(length, block)[:, None]) & (j <= i)).to(dtype)


def swr_matrix(a: torch.Tensor, block: int) -> torch.Tensor:
    """The SWR operator ``L̃ = L ⊙ M`` for coefficients ``a`` of shape ``(L,)``."""
    return transfer_matrix(a) * jagged_mask(a.shape[-1], block, a.dtype)


def swr_masked(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    """SWR as the masked operator ``(L ⊙ M) u``, built per (batch, head). O(L²): small L only."""
    out = torch.empty_like(u)
    for b in range(a.shape[0]):
        for h in range(a.shape[1]):
            out[b, h] = swr_matrix(a[b, h], block) @ u[b, h]
    return out


def truncation_error(a: torch.Tensor, full: torch.Tensor, block: int) -> torch.Tensor:
    """The exact error identity ``x_i − x̃_i = (Π_{k=s_i}^{i} a_k) · x_{s_i − 1}``,
    ``s_i = window_start(i)``, evaluated from the full recurrence's states ``full``
    (zero where ``s_i = 0``: block 0 and block 1 are exact)."""
    length = a.shape[-1]
    start = window_start(length, block)
    nb = -(-length // block)
    a_b = torch.nn.functional.pad(a, (0, nb * block - length), value=1.0).unflatten(-1, (nb, block))
    inside = torch.cumprod(a_b, dim=-1)  # Π over block t up to i (explicit products)
    whole_prev = torch.cat([torch.ones_like(a_b[..., :1, 0]), a_b[..., :-1, :].prod(-1)], dim=-1)
    prod = (whole_prev[..., None] * inside).flatten(-2)[..., :length]  # Π_{k=s_i}^{i} a_k
    prev = torch.where((start > 0)[:, None], full[..., (start - 1).clamp(min=0), :],
                       torch.zeros_like(full))
    return prod[..., None] * prev
