"""Token-by-token SWR decoding with two numbers of state per channel.

Per channel keep the block-local state ``h`` (the recurrence restarted at the current block's
start), the previous block's end state ``c_prev``, and per head the running product ``r`` of
``a`` since the block start. Each token:

    h ← a·h + u;   r ← a·r;   y = h + r·c_prev
    at a block end:  c_prev ← h,  h ← 0,  r ← 1

which reproduces ``swr(a, u, block=ℓ)`` exactly: ``y`` is block ``t``'s local state plus the
previous block's end state carried through ``a`` over block ``t`` so far (the jagged window).

A step is a handful of tiny tensor operations, so in PyTorch its cost is the per-operation
overhead, not the arithmetic. On CPU tensors that need no gradient the step therefore runs as
one compiled (numba) call over all ``B·H`` heads that updates the state in place
(``impl="compiled"``, the default where numba is installed); ``impl="torch"`` keeps the
tensor-operation form, which also runs on GPUs and under autograd.
"""

from __future__ import annotations

import torch

try:
    import numba
    import numpy as np
except ImportError:  # pragma: no cover - numba is optional
    numba = None

_COMPILED_DTYPES = (torch.float32, torch.float64)


if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _step_kernel(a_t, u_t, h, c_prev, r, block_end):  # pragma: no cover - compiled
        """One token for every head: ``a_t``, ``r`` (B, H); ``u_t``, ``h``, ``c_prev``
        (B, H, D). Updates ``h``, ``c_prev``, ``r`` in place and returns ``y`` (B, H, D)."""
        y = np.empty_like(h)
        batch, heads, dim = h.shape
        for b in range(batch):
            for n in range(heads):
                ai = a_t[b, n]
                rn = ai * r[b, n]
                hn = h[b, n]
                cn = c_prev[b, n]
                un = u_t[b, n]
                yn = y[b, n]
                for d in range(dim):
                    hd = ai * hn[d] + un[d]
                    hn[d] = hd
                    yn[d] = hd + rn * cn[d]
                if block_end:
                    cn[:] = hn
                    hn[:] = 0
                    r[b, n] = 1
                else:
                    r[b, n] = rn
        return y


class SWRState:
    """Streaming state for ``batch × heads`` heads of ``dim`` channels.

    >>> state = SWRState(1, 2, 16, block=16)
    >>> y_t = state.step(a_t, u_t)   # a_t: (B, H), u_t: (B, H, D) → (B, H, D)

    ``impl``: ``"auto"`` (compiled where it can run, else torch), ``"compiled"`` or ``"torch"``.
    """

    def __init__(self, batch: int, heads: int, dim: int, *, block: int = 16,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 impl: str = "auto"):
        if block < 1:
            raise ValueError(f"block must be a positive integer, got {block}")
        if impl not in ("auto", "compiled", "torch"):
            raise ValueError(f"impl must be 'auto', 'compiled' or 'torch', got {impl!r}")
        self.block = int(block)
        self.h = torch.zeros(batch, heads, dim, dtype=dtype, device=device)
        self.c_prev = torch.zeros_like(self.h)
        self.r = torch.ones(batch, heads, dtype=dtype, device=device)
        self.position = 0
        can_compile = (numba is not None and self.h.device.type == "cpu"
                       and dtype in _COMPILED_DTYPES)
        if impl == "compiled" and not can_compile:
            raise ValueError("impl='compiled' needs numba and float32/float64 CPU state")
        self.impl = "compiled" if impl != "torch" and can_compile else "torch"
        self._arrays_of = None  # the ``h`` that the cached NumPy views below belong to
        self._arrays = ()

    def _state_arrays(self) -> tuple:
        """NumPy views of ``h``, ``c_prev``, ``r`` (rebuilt after a tensor-operation step,
        which replaces ``h`` and may replace the others)."""
        if self._arrays_of is not self.h:
            self._arrays = (self.h.numpy(), self.c_prev.numpy(), self.r.numpy())
            self._arrays_of = self.h
        return self._arrays

    def _use_compiled(self, a_t: torch.Tensor, u_t: torch.Tensor) -> bool:
        if self.impl != "compiled":
            return False
        if torch.is_grad_enabled() and (a_t.requires_grad or u_t.requires_grad):
            return False  # autograd needs the tensor-operation form
        return a_t.device.type == "cpu" and u_t.device.type == "cpu" and not self.h.requires_grad

    def step(self, a_t: torch.Tensor, u_t: torch.Tensor) -> torch.Tensor:
        """Consume one token (``a_t``: ``(B, H)``, ``u_t``: ``(B, H, D)``); return its output."""
        if a_t.shape != self.r.shape or u_t.shape != self.h.shape:
            raise ValueError(f"SWRState.step expects a_t {tuple(self.r.shape)} and u_t "
                             f"{tuple(self.h.shape)}, got {tuple(a_t.shape)} and {tuple(u_t.shape)}")
        self.position += 1
        block_end = self.position % self.block == 0
        if self._use_compiled(a_t, u_t):
            dtype = self.h.dtype  # conversions only where needed: each costs about a microsecond
            if a_t.dtype != dtype or not a_t.is_contiguous():
                a_t = a_t.to(dtype).contiguous()
            if u_t.dtype != dtype or not u_t.is_contiguous():
                u_t = u_t.to(dtype).contiguous()
            y = _step_kernel(a_t.detach().numpy(), u_t.detach().numpy(), *self._state_arrays(),
                             block_end)
            return torch.from_numpy(y)
        a_t = a_t.to(self.h.dtype)
        self.h = a_t[..., None] * self.h + u_t.to(self.h.dtype)
        self.r = a_t * self.r
        y = self.h + self.r[..., None] * self.c_prev
        if block_end:
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
