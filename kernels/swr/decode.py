"""Token-by-token SWR decoding with two numbers of state per channel.

Per channel keep the block-local state ``h`` (the recurrence restarted at the current block's
start), the previous block's end state ``c_prev``, and per head the running product ``r`` of
``a`` since the block start. Each token:

    h ← a·h + u;   r ← a·r;   y = h + r·c_prev
    at a block end:  c_prev ← h,  h ← 0,  r ← 1

which reproduces ``swr(a, u, block=ℓ)`` exactly: ``y`` is block ``t``'s local state plus the
previous block's end state carried through ``a`` over block ``t`` so far (the jagged window).
"""

from __future__ import annotations

import torch


class SWRState:
    """Streaming state for ``batch × heads`` heads of ``dim`` channels.

    >>> state = SWRState(1, 2, 16, block=16)
    >>> y_t = state.step(a_t, u_t)   # a_t: (B, H), u_t: (B, H, D) → (B, H, D)
    """

    def __init__(self, batch: int, heads: int, dim: int, *, block: int = 16,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        if block < 1:
            raise ValueError(f"block must be a positive integer, got {block}")
        self.block = int(block)
        self.h = torch.zeros(batch, heads, dim, dtype=dtype, device=device)
        self.c_prev = torch.zeros_like(self.h)
        self.r = torch.ones(batch, heads, dtype=dtype, device=device)
        self.position = 0

    def step(self, a_t: torch.Tensor, u_t: torch.Tensor) -> torch.Tensor:
        """Consume one token (``a_t``: ``(B, H)``, ``u_t``: ``(B, H, D)``); return its output."""
        if a_t.shape != self.r.shape or u_t.shape != self.h.shape:
            raise ValueError(f"SWRState.step expects a_t {tuple(self.r.shape)} and u_t "
                             f"{tuple(self.h.shape)}, got {tuple(a_t.shape)} and {tuple(u_t.shape)}")
        a_t = a_t.to(self.h.dtype)
        self.h = a_t[..., None] * self.h + u_t.to(self.h.dtype)
        self.r = a_t * self.r
        y = self.h + self.r[..., None] * self.c_prev
        self.position += 1
        if self.position % self.block == 0:
            self.c_prev = self.h
            self.h = torch.zeros_like(self.h)
            self.r = torch.ones_like(self.r)
        return y

    def run(self, a: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Feed a whole ``(B, H, L)``, ``(B, H, L, D)`` sequence token by token."""
        return torch.stack([self.step(a[..., i], u[..., i, :]) for i in range(u.shape[-2])], dim=-2)

    def state_size(self) -> int:
        """Floats of state per head: ``2·D`` (``h`` and ``c_prev``) plus ``r``."""
        return 2 * self.h.shape[-1] + 1
