"""Tiny recall models, their training, and the ESS of the trained mixers on task inputs.

Each model is ``embed → token mixer(s) → readout`` with a one-token shift on the keys, the
"short convolution" that lets a single mixer layer solve associative recall:

    q_r = W_q x_r,   k_j = W_k x_{j−1},   v_j = W_v x_j,   logits_r = W_o (LN(y_r) + x_r)

With ``n_layers > 1`` the residual stream runs ``h ← h + LN_l(T_l v_l)`` through every layer
(each with its own maps, computed from ``h``) before the read-out ``W_o h``.

so the key stored at a value token is its preceding key token, and a query that matches it
retrieves the value. One head; ``d_k`` is the key width (the state size per value channel of
the recurrent mixers). Mixers:

* ``"softmax"`` — causal softmax attention, ``y_r = Σ_{j≤r} softmax_j(q_r·k_j/√d_k) v_j``;
* ``"linear"``  — linear attention with L2-normalised q, k: ``y_r = Σ_{j≤r} (q̂_r·k̂_j) v_j``;
* ``"gla"``     — gated linear attention: a diagonal gate ``α_t = σ(W_g x_t + b) ∈ (0, 1)^{d_k}``
  per key dimension, ``S_t = diag(α_t) S_{t−1} + k̂_t v_tᵀ``, ``y_t = S_tᵀ q̂_t``;
* ``"ssm"``     — a selective (S6-like) diagonal SSM with ``N = d_k`` states: one input-dependent
  step ``Δ_t = softplus(w_Δ·x_t + b)`` per position and learned decay rates ``A_n > 0``
  (initialised to ``n``, as S4D-real), ``α_{t,n} = exp(−Δ_t A_n)``, with ``C_t = q̂_t`` and
  ``B_t = k̂_t`` in the roles of the SSM's read-out and input maps;
* ``"conv"``    — a learned causal convolution of the values of length ``k = d_k + 1``
  (input-independent: ``T_{rj} = w_{r−j}``), TSS ``k − 1 = d_k``;
* ``"swa"``     — softmax attention restricted to a window of ``w = d_k + 1`` tokens
  (``r − w < j ≤ r``), TSS ``w − 1 = d_k``;
* ``"swr"``     — ``d_k`` gated scalar sliding-window recurrences (chapter 02's SWR, block
  ``b``): GLA's operator restricted to the jagged window ``j ≥ b·(⌊r/b⌋ − 1)``; each scalar
  recurrence keeps two numbers, so TSS ``2 d_k``.

Because the mixing weights do not depend on the value channel, the operator ``T`` of a mixer
is the same for all value channels: :meth:`MixerLM.operator_factors` returns it once per
sequence (the dense matrix, and for the diagonal recurrences linear attention, GLA and the SSM
also the factors ``C = q̂, B = k̂, log_a = log α``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lib.ess import spectrum
from lib.ess.tasks import IGNORE, Vocab, delimited_mqar, mqar
from lib.seeding import seed_torch, stream
from lib.sweep import one_thread

__all__ = ["MODEL_MIXERS", "ModelConfig", "MixerLM", "TrainConfig", "train", "accuracy",
           "task_ess", "transition_penalty", "with_hard_reset"]

MODEL_MIXERS = ("softmax", "linear", "gla", "ssm", "conv", "swa", "swr")
FACTORED = ("linear", "gla", "ssm")      # exact diagonal recurrences: (C, B, log_a) factors
GATED = ("gla", "ssm", "swr")            # mixers with transitions A_t = diag(α_t)
RESET_LOG_GATE = -60.0                   # log α of a hard reset: e^{−60} ≈ 1e−26, below fp64's eps


@dataclass(frozen=True)
class ModelConfig:
    mixer: str
    d_k: int
    d_model: int = 64
    vocab_size: int = Vocab().size
    gate_bias: float = 3.0          # GLA gates start near σ(3) ≈ 0.95: little forgetting
    block: int = 8                  # SWR block length
    ssm_step: float = 0.05          # initial SSM step Δ (decays exp(−0.05 n) at the start)
    n_layers: int = 1               # mixer layers (residual: h ← h + LN(T_l v_l))

    def __post_init__(self):
        if self.mixer not in MODEL_MIXERS:
            raise ValueError(f"mixer must be one of {MODEL_MIXERS}, got {self.mixer!r}")
        if self.d_k < 1 or self.d_model < 1 or self.n_layers < 1:
            raise ValueError("d_k, d_model and n_layers must be positive")


def _add_mixer_weights(layer: nn.Module, cfg: ModelConfig) -> None:
    """The query, key, value maps and the norm of one mixer layer."""
    d, dk = cfg.d_model, cfg.d_k
    layer.W_q = nn.Linear(d, dk, bias=False)
    layer.W_k = nn.Linear(d, dk, bias=False)
    layer.W_v = nn.Linear(d, d, bias=False)
    layer.norm = nn.LayerNorm(d)


def _add_gate_weights(layer: nn.Module, cfg: ModelConfig) -> None:
    """The gates (GLA, SWR), the SSM's step and rates, or the convolution's filter."""
    d, dk = cfg.d_model, cfg.d_k
    if cfg.mixer in ("gla", "swr"):
        layer.W_g = nn.Linear(d, dk)
        nn.init.constant_(layer.W_g.bias, cfg.gate_bias)
    if cfg.mixer == "ssm":
        layer.W_dt = nn.Linear(d, 1)
        nn.init.constant_(layer.W_dt.bias, float(np.log(np.expm1(cfg.ssm_step))))
        layer.A_log = nn.Parameter(torch.log(torch.arange(1, dk + 1, dtype=torch.float32)))
    if cfg.mixer == "conv":
        layer.conv_w = nn.Parameter(torch.randn(dk + 1) / (dk + 1) ** 0.5)


class _MixerMethods:
    """The token mixer of one layer (shared by the first layer, :class:`MixerLM` itself, and the
    further layers, :class:`MixerLayer`)."""

    # -- pieces ------------------------------------------------------------------------
    def _qkv(self, x: torch.Tensor):
        x_prev = F.pad(x, (0, 0, 1, 0))[:, :-1]            # token shift: x_{j−1}, zero at j=0
        q, k, v = self.W_q(x), self.W_k(x_prev), self.W_v(x)
        if self.cfg.mixer not in ("softmax", "swa"):
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return q, k, v

    reset_token: int | None = None     # a hard reset (α = e^{−RESET_LOG_GATE}) on this token

    def log_gates(self, x: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor | None:
        """``log α_t`` (B, L, d_k) for the gated mixers (GLA, SSM, SWR), None otherwise. With
        ``reset_token`` set (:func:`with_hard_reset`) and ``tokens`` given, the gates on that
        token are replaced by ``exp(RESET_LOG_GATE)``: the state is erased there."""
        if self.cfg.mixer in ("gla", "swr"):
            log_a = F.logsigmoid(self.W_g(x))
        elif self.cfg.mixer == "ssm":
            log_a = -F.softplus(self.W_dt(x)) * torch.exp(self.A_log)
        else:
            return None
        if self.reset_token is not None and tokens is not None:
            log_a = log_a.masked_fill((tokens == self.reset_token)[..., None], RESET_LOG_GATE)
        return log_a

    def _mask(self, L: int, device) -> torch.Tensor:
        """Which (r, j) the mixer connects: causal, and for SWA / SWR their windows."""
        r = torch.arange(L, device=device)[:, None]
        j = torch.arange(L, device=device)[None, :]
        mask = j <= r
        if self.cfg.mixer in ("swa", "conv"):
            mask = mask & (r - j <= self.cfg.d_k)                       # w = k = d_k + 1
        if self.cfg.mixer == "swr":
            mask = mask & (j >= self.cfg.block * (r // self.cfg.block - 1))
        return mask

    def _conv_operator(self, conv_w: torch.Tensor, mask: torch.Tensor, B: int) -> torch.Tensor:
        """The convolution's (B, L, L) operator ``T_{rj} = w_{r−j}`` from its filter ``conv_w``."""
        L = mask.shape[0]
        lag = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).clamp(0, self.cfg.d_k)
        return (conv_w[lag] * mask).expand(B, L, L)

    def _operator(self, q, k, log_a):
        """The mixer's (B, L, L) operator: y = T v."""
        B, L = q.shape[:2]
        mask = self._mask(L, q.device)
        if self.cfg.mixer in ("softmax", "swa"):
            scores = (q @ k.transpose(1, 2)) / self.cfg.d_k ** 0.5
            return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        if self.cfg.mixer == "conv":
            return self._conv_operator(self.conv_w, mask, B).to(q.dtype)
        if log_a is None:
            return (q @ k.transpose(1, 2)) * mask
        S = torch.cumsum(log_a, dim=1)                                   # (B, L, d_k)
        diff = (S[:, :, None, :] - S[:, None, :, :]).masked_fill(~mask[..., None], float("-inf"))
        return (q[:, :, None, :] * torch.exp(diff) * k[:, None, :, :]).sum(-1)



class MixerLayer(nn.Module, _MixerMethods):
    """A mixer layer after the first (its weights as the first layer's)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        _add_mixer_weights(self, cfg)
        _add_gate_weights(self, cfg)


class MixerLM(nn.Module, _MixerMethods):
    """``embed → mixer layers → readout``; the first layer's weights are the model's own
    attributes, further layers (``n_layers > 1``) are :class:`MixerLayer` modules in
    ``self.extra``, created after the first layer's (so a one-layer model draws the same
    initial weights as before layers existed)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        _add_mixer_weights(self, cfg)
        self.W_o = nn.Linear(cfg.d_model, cfg.vocab_size)
        _add_gate_weights(self, cfg)
        self.extra = nn.ModuleList(MixerLayer(cfg) for _ in range(cfg.n_layers - 1))

    def layers(self) -> list:
        return [self, *self.extra]

    def tss(self, L: int) -> np.ndarray:
        """The architecture's state size per value channel at each position (shape ``L``)."""
        i = np.arange(L)
        if self.cfg.mixer == "softmax":
            return np.minimum(i, L - i).astype(float)
        per = 2 * self.cfg.d_k if self.cfg.mixer == "swr" else self.cfg.d_k
        return np.full(L, float(per))

    # -- forward -------------------------------------------------------------------------
    def _layer_passes(self, tokens: torch.Tensor):
        """Yield ``(q, k, log_a, T)`` of every layer while running the residual stream
        ``h ← h + LN_l(T_l v_l)``; returns the final ``h``."""
        h = self.embed(tokens)
        for layer in self.layers():
            q, k, v = layer._qkv(h)
            log_a = layer.log_gates(h, tokens)
            T = layer._operator(q, k, log_a)
            yield q, k, log_a, T
            h = h + layer.norm(T @ v)
        return h

    def forward(self, tokens: torch.Tensor, return_gates: bool = False):
        """Logits; with ``return_gates`` also ``log α`` of every layer concatenated along the
        last axis ((B, L, n_layers·d_k); None for mixers without gates)."""
        passes = self._layer_passes(tokens)
        gates = []
        while True:
            try:
                gates.append(next(passes)[2])
            except StopIteration as done:
                h = done.value
                break
        logits = self.W_o(h)
        if not return_gates:
            return logits
        return logits, (None if gates[0] is None else torch.cat(gates, dim=-1))

    @torch.no_grad()
    def layer_operator_factors(self, tokens: torch.Tensor) -> list[dict[str, np.ndarray]]:
        """Each layer's mixer operator on ``tokens`` in fp64: ``{"T": (B, L, L)}``, and
        additionally ``{"C", "B", "log_a"}`` (B, L, d_k) for the diagonal recurrences
        (:data:`FACTORED`)."""
        m = copy.deepcopy(self).double()
        out = []
        for q, k, log_a, T in m._layer_passes(tokens):
            f = {"T": T.numpy()}
            if self.cfg.mixer in FACTORED:
                f.update(C=q.numpy(), B=k.numpy(),
                         log_a=np.zeros_like(q.numpy()) if log_a is None else log_a.numpy())
            out.append(f)
        return out

    def operator_factors(self, tokens: torch.Tensor) -> dict[str, np.ndarray]:
        """The first layer's :meth:`layer_operator_factors`."""
        return self.layer_operator_factors(tokens)[0]


def with_hard_reset(model: MixerLM, token: int) -> MixerLM:
    """A copy of a gated ``model`` whose gates on ``token`` are ``exp(RESET_LOG_GATE)`` ≈ 1e−26:
    reading that token erases the state, so the positions after it see the past only through
    the token itself (a positive control for a reset)."""
    if model.cfg.mixer not in GATED:
        raise ValueError(f"a hard reset needs a gated mixer {GATED}, got {model.cfg.mixer!r}")
    m = copy.deepcopy(model)
    for layer in m.layers():
        layer.reset_token = int(token)
    return m


def transition_penalty(log_a: torch.Tensor | None) -> torch.Tensor:
    """``mean_t ‖A_t − I‖_F`` with ``A_t = diag(α_t)``: the paper's regulariser against
    forgetting (0 for mixers without transitions)."""
    if log_a is None:
        return torch.zeros(())
    return torch.linalg.vector_norm(1.0 - torch.exp(log_a), dim=-1).mean()


@dataclass(frozen=True)
class TrainConfig:
    n_pairs: int
    steps: int = 300
    batch: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.0
    reg: float = 0.0                 # λ of the transition regulariser
    length: int | None = None        # sequence (or segment) length; None: 3·n_pairs
    n_segments: int = 1              # > 1: the delimited task
    p_absent: float = 0.0            # fraction of queries for unbound keys (answer: null)
    vocab: Vocab = Vocab()


def _batch(rng, tc: TrainConfig, batch: int):
    if tc.n_segments > 1 or tc.p_absent > 0:
        t, y, _ = delimited_mqar(rng, batch, tc.n_pairs, tc.n_segments, tc.length, tc.vocab,
                                 tc.p_absent)
    else:
        t, y = mqar(rng, batch, tc.n_pairs, tc.length, tc.vocab)
    return torch.from_numpy(t), torch.from_numpy(y)


def train(cfg: ModelConfig, tc: TrainConfig, *, root: int, init: tuple,
          batches: tuple) -> tuple[MixerLM, list[float]]:
    """Train a fresh model with Adam on freshly drawn batches; returns the model and the loss
    curve. Deterministic given the chapter seed ``root`` and two stream keys: the initial weights
    come from torch's global generator seeded by ``seed_torch(root, *init)`` (in a forked RNG
    state: the caller's is untouched), the batches from ``stream(root, *batches)``. Runs
    single-threaded."""
    with one_thread():     # tiny models: one thread is fastest; parallelise across runs
        return _train(cfg, tc, root, init, batches)


def _train(cfg: ModelConfig, tc: TrainConfig, root: int, init: tuple,
           batches: tuple) -> tuple[MixerLM, list[float]]:
    with torch.random.fork_rng():
        seed_torch(root, *init)
        model = MixerLM(cfg)
    rng = stream(root, *batches)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=tc.lr, total_steps=tc.steps,
                                                pct_start=0.1)
    losses = []
    for _ in range(tc.steps):
        tokens, targets = _batch(rng, tc, tc.batch)
        logits, log_a = model(tokens, return_gates=True)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        total = loss + tc.reg * transition_penalty(log_a)
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return model, losses


@torch.no_grad()
def accuracy(model: MixerLM, tokens: np.ndarray, targets: np.ndarray) -> float:
    """Fraction of query positions whose arg-max prediction is the bound value."""
    logits = model(torch.from_numpy(tokens))
    t = torch.from_numpy(targets)
    mask = t != IGNORE
    return float((logits.argmax(-1)[mask] == t[mask]).float().mean())


def task_ess(model: MixerLM, tokens: np.ndarray, taus=(None, 1e-6, 1e-3, 1e-2)):
    """ESS profiles of the trained mixer on ``tokens`` (B, L), from the dense operator's Hankel
    blocks (a full SVD per position): a dict of ``(B, L)`` arrays (keys as
    :func:`lib.ess.spectrum.ess_profile`), averaged over the layers as the paper aggregates, plus
    ``"tss"`` (L,) — the model's TSS per position and layer (:meth:`MixerLM.tss`) — and
    ``"max_excess"``, the largest ``ESS_i − TSS_i`` (exact tolerance) of any layer, sequence and
    position. For the diagonal recurrences (:data:`FACTORED`) also ``"factored_rel_err"``: the
    largest difference between the factored path's singular values and the dense ones, relative
    to σ_1 of each block, over the layers."""
    per_layer = []
    excess, err = -np.inf, 0.0
    tss = model.tss(tokens.shape[1])
    for f in model.layer_operator_factors(torch.from_numpy(tokens)):
        dense = spectrum.hankel_singular_values(f["T"])
        prof = spectrum.ess_profile(dense, tuple(dict.fromkeys((None, *taus))))
        excess = max(excess, float(np.max(prof["tol=exact"] - tss)))
        per_layer.append({k: v for k, v in prof.items()
                          if k != "tol=exact" or None in taus})
        if model.cfg.mixer in FACTORED:
            fast = spectrum.factored_singular_values(f["C"], f["B"], f["log_a"])
            err = max(err, max((float(np.max(np.abs(a - b) / np.maximum(b[..., :1], np.finfo(float).tiny)))
                                for a, b in zip(fast[1:], dense[1:])), default=0.0))
    out = {k: np.mean([p[k] for p in per_layer], axis=0) for k in per_layer[0]}
    if model.cfg.mixer in FACTORED:
        out["factored_rel_err"] = np.array(err)
    out["tss"] = tss
    out["max_excess"] = excess
    return out


def config_dict(cfg: ModelConfig, tc: TrainConfig) -> dict:
    """A flat, JSON-able description of a run."""
    d = {**asdict(cfg), **{k: v for k, v in asdict(tc).items() if k != "vocab"}}
    d.update(n_keys=tc.vocab.n_keys, n_values=tc.vocab.n_values)
    return d
