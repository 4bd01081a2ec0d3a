"""Attention references for the sliding-window recurrence benchmarks and layers.

* :func:`swa_blocked` — softmax attention over SWR's *jagged window* (queries of block ``t``
  attend causally to the keys of blocks ``t−1`` and ``t``), computed block by block in
  O(L·2ℓ·D) without an L×L matrix. The SWA layers of chapter 02's hybrids use it, and the
  benchmark compares the SWR kernel against it.
* :func:`attention_full` — causal softmax attention (PyTorch SDPA), O(L²·D).

Both take ``q, k, v`` of shape ``(B, H, L, D)``; the SWR reference they sit beside is
:mod:`kernels.swr.naive` (``naive.jagged_mask`` is the window they share).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["attention_full", "swa_blocked"]


def swa_blocked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int) -> torch.Tensor:
    """Softmax attention over SWR's jagged window: block ``t`` sees blocks ``t−1`` and ``t``."""
    B, H, L, D = q.shape
    nb = -(-L // block)
    pad = nb * block - L

    def blocks(t):
        return F.pad(t, (0, 0, 0, pad)).unflatten(-2, (nb, block))

    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    prev = lambda t: torch.cat([torch.zeros_like(t[..., :1, :, :]), t[..., :-1, :, :]], dim=-3)
    kw = torch.cat([prev(kb), kb], dim=-2)  # (B, H, nb, 2ℓ, D)
    vw = torch.cat([prev(vb), vb], dim=-2)
    scores = qb @ kw.transpose(-1, -2) / math.sqrt(D)  # (B, H, nb, ℓ, 2ℓ)
    i = torch.arange(block)[:, None]
    j = torch.arange(2 * block)[None, :]
    allowed = (j <= i + block).expand(nb, block, 2 * block).clone()
    allowed[0, :, :block] = False  # block 0 has no previous block
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vw
    return out.flatten(-3, -2)[..., :L, :]


def attention_full(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention over the whole prefix (PyTorch's fused SDPA)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
