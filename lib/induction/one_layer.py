"""The one-layer transformer of eq. (2.1) and Algorithm 1 (two gradient steps from zero).

    f(X) = W_V · X · softmax(Xᵀ W_KQ x_T)        (N logits; prediction softmax(f))

with a fixed embedding ``x_t = [p_t; e_{z_t}; e_{z_{t−1}}]`` of size ``D = L + 2N``
(one-hot position, token and previous token; the token before position 1 is the zero
vector). Rows of ``W_KQ`` index key features, columns query features, so the score of key
``t`` is ``x_tᵀ W_KQ x_T``. Attention is causal over ``1..T``; the loss is cross-entropy on
``z_{T+1} = o``.

Algorithm 1: ``W_KQ = W_V = 0``; one gradient step on ``W_V`` (step ``η_V``, ``M_V`` samples;
attention is uniform because ``W_KQ = 0``); one gradient step on ``W_KQ`` at ``W_KQ = 0``
with the new ``W_V`` (step ``η_KQ``, ``M_KQ`` fresh samples). The "population" version is the
same two steps with a very large sample, streamed in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lib.induction import compiled
from lib.induction.data import PAD, Batch, LengthDist, sample_train


@dataclass(frozen=True)
class Embedding:
    """Sizes of the fixed embedding: ``n_pos`` positions (``L``) and ``n_vocab`` tokens."""

    n_pos: int
    n_vocab: int

    @property
    def dim(self) -> int:
        return self.n_pos + 2 * self.n_vocab

    def blocks(self) -> dict[str, slice]:
        """Feature blocks of ``x_t``: position, token, previous token."""
        L, N = self.n_pos, self.n_vocab
        return {"position": slice(0, L), "token": slice(L, L + N),
                "previous": slice(L + N, L + 2 * N)}

    def __call__(self, tokens: np.ndarray) -> torch.Tensor:
        """``(B, T_max)`` token ids (``PAD`` beyond each sequence) → ``(B, T_max, D)`` floats."""
        B, T = tokens.shape
        if T > self.n_pos:
            raise ValueError(f"sequence length {T} exceeds the embedding's n_pos={self.n_pos}")
        L, N = self.n_pos, self.n_vocab
        tok = torch.as_tensor(tokens, dtype=torch.long)
        valid = tok != PAD
        x = torch.zeros(B, T, self.dim)
        x[:, :, :T] += torch.eye(T) * valid[:, :, None]
        x.scatter_add_(2, (L + tok.clamp(min=0))[:, :, None], valid[:, :, None].float())
        prev = torch.cat([torch.full((B, 1), PAD), tok[:, :-1]], dim=1)
        pvalid = (prev != PAD) & valid
        x.scatter_add_(2, (L + N + prev.clamp(min=0))[:, :, None], pvalid[:, :, None].float())
        return x

    def features(self, tokens: np.ndarray) -> torch.Tensor:
        """The three active features of each ``x_t`` as indices ``(B, T_max, 3)`` into
        ``0..D`` (position, token, previous token); ``D`` marks an absent feature (the token
        before position 1, padding). The sparse twin of ``__call__``."""
        B, T = tokens.shape
        L, N, D = self.n_pos, self.n_vocab, self.dim
        tok = torch.as_tensor(tokens, dtype=torch.long)
        valid = tok != PAD
        prev = torch.cat([torch.full((B, 1), PAD), tok[:, :-1]], dim=1)
        idx = torch.stack([torch.arange(T).expand(B, T), L + tok, L + N + prev], dim=2)
        absent = torch.stack([~valid, ~valid, ~valid | (prev == PAD)], dim=2)
        return idx.masked_fill(absent, D)


def attention(x: torch.Tensor, length: torch.Tensor, w_kq: torch.Tensor) -> torch.Tensor:
    """Attention weights ``softmax(Xᵀ W_KQ x_T)`` over ``1..T`` for each sequence: ``(B, T_max)``."""
    B, T, _ = x.shape
    query = x[torch.arange(B), length - 1]                      # (B, D)
    scores = torch.einsum("btd,de,be->bt", x, w_kq, query)
    scores = scores.masked_fill(torch.arange(T)[None, :] >= length[:, None], float("-inf"))
    return torch.softmax(scores, dim=1)


def forward(x: torch.Tensor, length: torch.Tensor, w_kq: torch.Tensor,
            w_v: torch.Tensor) -> torch.Tensor:
    """Logits ``f(X)`` of eq. (2.1): ``(B, N)``."""
    s = attention(x, length, w_kq)
    return torch.einsum("bt,btd,nd->bn", s, x, w_v)


def reference_grad(emb: Embedding, batch: Batch, w_kq: torch.Tensor, w_v: torch.Tensor,
                   wrt: str) -> torch.Tensor:
    """Gradient of the mean cross-entropy w.r.t. ``W_KQ`` (``wrt="kq"``) or ``W_V`` (``"v"``)
    by autograd through the dense model: the readable reference the fast path is tested
    against."""
    param = (w_kq if wrt == "kq" else w_v).clone().requires_grad_(True)
    kq, v = (param, w_v) if wrt == "kq" else (w_kq, param)
    logits = forward(emb(batch.tokens), torch.as_tensor(batch.length), kq, v)
    loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(batch.target))
    (g,) = torch.autograd.grad(loss, param)
    return g


# -- fast path: the same gradients in closed form on the sparse (3-hot) embedding -----------
#
# At W_KQ = 0 attention is uniform, s_t = 1/T, so f = W_V x̄ with x̄ the mean embedding.
# With g = softmax(f) − e_o (the cross-entropy gradient in f):
#   ∂ℓ/∂W_V  = g x̄ᵀ
#   ∂ℓ/∂W_KQ = Σ_t (1/T)(v_t − v̄) x_t x_Tᵀ,   v_t = gᵀ W_V x_t,  v̄ = (1/T) Σ_t v_t,
# the softmax Jacobian at uniform weights being (1/T)(I − 11ᵀ/T). The sparse sums are compiled
# (lib.induction.compiled); _grads_dense is the same as dense torch products.

def _scatter(idx: torch.Tensor, weight: torch.Tensor, dim: int) -> torch.Tensor:
    """``Σ_t weight_t x_t`` for every sequence: ``(B, D+1)`` (last column: absent features)."""
    B = idx.shape[0]
    out = torch.zeros(B, dim + 1, dtype=weight.dtype)
    return out.scatter_add_(1, idx.reshape(B, -1),
                            weight[:, :, None].expand(*idx.shape).reshape(B, -1))


def _gather(h: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``h_b · x_t`` for every sequence ``b`` and position ``t``, ``h`` of shape ``(B, D+1)``."""
    B, T, _ = idx.shape
    return torch.gather(h, 1, idx.reshape(B, -1)).reshape(B, T, 3).sum(-1)


def _grads_at_zero_kq(emb: Embedding, batch: Batch, w_v: torch.Tensor | None, kq: bool = True,
                      v: bool = True):
    """Sums over the batch of ``∂ℓ/∂W_V`` and ``∂ℓ/∂W_KQ`` at ``W_KQ = 0`` (float64), each
    ``None`` where not asked for (``v=False``, ``kq=False``). ``w_v=None`` stands for
    ``W_V = 0`` (Algorithm 1's first step), where the logits are zero without a product. The
    sparse sums are compiled (:mod:`lib.induction.compiled`); the dense products that remain
    are ``x̄ W_Vᵀ`` and ``g W_V``."""
    L, N = emb.n_pos, emb.n_vocab
    tokens, length = np.ascontiguousarray(batch.tokens), np.ascontiguousarray(batch.length)
    if w_v is None and not kq:
        grad_v = (torch.from_numpy(compiled.value_grad_at_zero(tokens, length, batch.target, L, N))
                  if v else None)
        return grad_v, None
    if w_v is None:
        w_v = torch.zeros(N, emb.dim, dtype=torch.float64)
    xbar = torch.from_numpy(compiled.mean_embedding(tokens, length, L, N))
    g = torch.softmax(xbar @ w_v.T, dim=1)
    g[torch.arange(len(batch)), torch.as_tensor(batch.target)] -= 1.0
    grad_v = g.T @ xbar if v else None
    if not kq:
        return grad_v, None
    h = (g @ w_v).numpy()
    return grad_v, torch.from_numpy(compiled.key_query_grad(tokens, length, h, L, N))


def _grads_dense(emb: Embedding, batch: Batch, w_v: torch.Tensor, kq: bool = True):
    """Both sums of :func:`_grads_at_zero_kq` as dense torch products (the sparse features
    scattered into ``(B, D)`` rows, then multiplied), ``W_KQ``'s only with ``kq``: the plain
    version the compiled one is tested and timed against."""
    D = emb.dim
    idx = emb.features(batch.tokens)
    B, T, _ = idx.shape
    length = torch.as_tensor(batch.length)
    inside = (torch.arange(T)[None, :] < length[:, None]).double()
    xbar = _scatter(idx, inside / length[:, None], D)[:, :D]
    f = xbar @ w_v.T
    g = torch.softmax(f, dim=1)
    g[torch.arange(B), torch.as_tensor(batch.target)] -= 1.0
    grad_v = g.T @ xbar
    if not kq:
        return grad_v, None
    h = torch.nn.functional.pad(g @ w_v, (0, 1))
    v = _gather(h, idx) * inside
    vbar = v.sum(1, keepdim=True) / length[:, None]
    c = (v - vbar) * inside / length[:, None]
    keys = _scatter(idx, c, D)[:, :D]
    query = _scatter(idx[torch.arange(B), length - 1][:, None, :], torch.ones(B, 1,
                     dtype=torch.float64), D)[:, :D]
    return grad_v, keys.T @ query


def train_two_step(rng: np.random.Generator, emb: Embedding, n_trg: int, dist: LengthDist, *,
                   eta_v: float, eta_kq: float, m_v: int, m_kq: int,
                   chunk: int = 16384, chunks_out: list | None = None, dense: bool = False,
                   shortcut_free: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1: returns ``(W_KQ, W_V)`` (float64) after the two steps.

    ``m_v`` and ``m_kq`` fresh pretraining sequences for the two steps, streamed in chunks of
    ``chunk``, so a "population" run (``m ~ 10⁶``) needs little memory. Gradients are the
    closed forms above (tested against autograd in :func:`reference_grad`), compiled, or with
    ``dense`` the plain torch products (:func:`_grads_dense`). If ``chunks_out``
    is a list, the ``W_KQ`` step of each chunk alone (``−η_KQ`` × its mean gradient) is appended
    to it, for batch-means errors of what the step estimates. ``shortcut_free``: pretraining
    sequences with independent ``ℓ1, ℓ2`` (:func:`lib.induction.data.sample_train`), which
    violates Lemma 7's hypothesis ``ℓ1 = ℓ2``.
    """
    if 2 * dist.l_max + 3 > emb.n_pos:
        raise ValueError(f"n_pos={emb.n_pos} is too small for ℓ_max={dist.l_max} "
                         f"(need ≥ {2 * dist.l_max + 3})")
    N, D = emb.n_vocab, emb.dim
    w_v = torch.zeros(N, D, dtype=torch.float64)
    grad = torch.zeros_like(w_v)
    for start in range(0, m_v, chunk):
        batch = sample_train(rng, N, n_trg, dist, min(chunk, m_v - start), shortcut_free)
        grad += (_grads_dense(emb, batch, w_v, kq=False) if dense
                 else _grads_at_zero_kq(emb, batch, None, kq=False))[0]
    w_v = w_v - eta_v * grad / m_v
    grad = torch.zeros(D, D, dtype=torch.float64)
    for start in range(0, m_kq, chunk):
        batch = sample_train(rng, N, n_trg, dist, min(chunk, m_kq - start), shortcut_free)
        part = (_grads_dense(emb, batch, w_v) if dense
                else _grads_at_zero_kq(emb, batch, w_v, v=False))[1]
        grad += part
        if chunks_out is not None:
            chunks_out.append(-eta_kq * part / len(batch))
    return -eta_kq * grad / m_kq, w_v


def predict(emb: Embedding, batch: Batch, w_kq: torch.Tensor, w_v: torch.Tensor,
            chunk: int = 4096) -> np.ndarray:
    """Argmax predictions of the model on a batch (sparse evaluation of eq. 2.1)."""
    D = emb.dim
    w_kq = torch.nn.functional.pad(torch.as_tensor(w_kq, dtype=torch.float64), (0, 1, 0, 1))
    w_v = torch.as_tensor(w_v, dtype=torch.float64)
    idx_all = emb.features(batch.tokens)
    length_all = torch.as_tensor(batch.length)
    out = []
    with torch.no_grad():
        for start in range(0, len(batch), chunk):
            idx, length = idx_all[start:start + chunk], length_all[start:start + chunk]
            B, T, _ = idx.shape
            qidx = idx[torch.arange(B), length - 1]                       # (B, 3)
            u = w_kq[:, qidx].sum(-1).T                                  # W_KQ x_T: (B, D+1)
            scores = _gather(u, idx)
            scores = scores.masked_fill(torch.arange(T)[None, :] >= length[:, None],
                                        float("-inf"))
            s = torch.softmax(scores, dim=1)
            logits = _scatter(idx, s, D)[:, :D] @ w_v.T
            out.append(logits.argmax(dim=1).numpy())
    return np.concatenate(out)


def evaluate(emb: Embedding, batch: Batch, w_kq: torch.Tensor, w_v: torch.Tensor) -> dict:
    """Accuracy and the two error modes on a batch: the fraction of argmax predictions equal to
    the output (``accuracy``), to the token at ``ℓ̄+2`` (``pseudo``) and at ``ℓ_min+2``
    (``leftmost``)."""
    pred = predict(emb, batch, w_kq, w_v)
    return {"accuracy": float(np.mean(pred == batch.target)),
            "pseudo": float(np.mean(pred == batch.pseudo)),
            "leftmost": float(np.mean(pred == batch.leftmost))}
