"""Fused block two-pass SWR for CUDA GPUs in Triton (in progress)."""

from __future__ import annotations

import torch


def available(device: torch.device | str = "cuda") -> bool:
    """Whether the Triton kernel can run on ``device``."""
    return False


def swr_triton(a: torch.Tensor, u: torch.Tensor, block: int) -> torch.Tensor:
    raise ValueError("impl='triton' is not available in this environment")
