"""The LLaMA-style building blocks (RMSNorm, RoPE, SwiGLU), shared by the chapters' models, and
a small decoder made of them: pre-norm blocks of RMSNorm, causal attention with rotary
position embeddings (RoPE), and a SwiGLU MLP; tied input/output embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding: rotate channel pairs of ``x: (B, H, L, Dh)`` (Dh even) by
    position-dependent angles (computed in float32)."""
    L, Dh = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, Dh, 2, dtype=torch.float32, device=x.device) / Dh)
    angles = torch.arange(L, dtype=torch.float32, device=x.device)[:, None] * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_hidden: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp = SwiGLU(d_model, d_hidden)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 d_hidden: int | None = None):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_hidden or 2 * d_model) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, return_hidden: bool = False):
        """Logits ``(B, L, vocab)``; with ``return_hidden`` also the final normalised hidden
        states ``(B, L, d_model)``."""
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        h = self.norm(h)
        logits = h @ self.embed.weight.T
        return (logits, h) if return_hidden else logits
