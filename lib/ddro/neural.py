"""A tiny autoregressive GRU policy over short token sequences (all sequences enumerable, so
distances to p₊ are exact), fine-tuned with the density-ratio loss or DPO: many copies at once
(one batched model over a leading member axis), each trained until a stopping rule on its
training objective is met."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from lib.ddro.preferences import Preference, paired_target
from lib.seeding import stream, torch_generator
from lib.sweep import one_thread


# ----------------------------------------------------------------------------------------------
# A tiny autoregressive policy over short token sequences
# ----------------------------------------------------------------------------------------------


def all_sequences(vocab: int, length: int) -> np.ndarray:
    """Every sequence of ``length`` tokens from ``vocab``, (vocab**length, length), in
    lexicographic order."""
    return np.array(list(itertools.product(range(vocab), repeat=length)), dtype=np.int64)


def sequence_preference(seqs: np.ndarray, vocab: int, cycle: float = 2.0, *, root: int) -> Preference:
    """A non-Bradley–Terry preference on sequences: P(a ≻ b) = sigmoid(u(a) − u(b) + c(a, b)),
    with an additive utility u(y) = Σ_t w[y_t] (token weights ~ N(0, ½)) and a rock–paper–scissors
    term c(a, b) = ``cycle`` · rps(a_0, b_0) on the first tokens (token k beats token k+1 mod
    vocab), which makes the preference intransitive. The token weights are the stream
    ``"sequence-token-weights"`` of the chapter seed ``root``."""
    w = stream(root, "sequence-token-weights").normal(0.0, math.sqrt(0.5), vocab)
    u = w[seqs].sum(1)
    first = seqs[:, 0]
    beats = ((first[None, :] - first[:, None]) % vocab == 1).astype(float)
    c = cycle * (beats - beats.T)
    return Preference("sequence (intransitive)", expit(u[:, None] - u[None, :] + c))


def _torch():
    import torch

    return torch


class GRUPolicy:
    """π(y) = Π_t softmax(W h_t)[y_t], h_t = GRU(embed(y_{t−1}), h_{t−1}), y_{−1} = BOS.

    Built lazily on torch; ``log_probs()`` returns log π(y) for every sequence in ``seqs``. Every
    weight is drawn N(0, 1/fan-in) from ``generator`` (a ``torch.Generator``, e.g.
    :func:`lib.seeding.torch_generator`)."""

    def __init__(self, vocab: int, seqs: np.ndarray, hidden: int = 32, *, generator,
                 temperature: float = 1.0):
        torch = _torch()
        self.vocab, self.temperature = vocab, temperature
        self.embed = torch.nn.Embedding(vocab + 1, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(max(1, p.shape[-1])))
        bos = torch.full((len(seqs), 1), vocab, dtype=torch.long)
        y = torch.as_tensor(seqs)
        self._inputs = torch.cat([bos, y[:, :-1]], dim=1)
        self._targets = y

    def parameters(self):
        return [*self.embed.parameters(), *self.gru.parameters(), *self.head.parameters()]

    def load_from(self, other: GRUPolicy) -> GRUPolicy:
        torch = _torch()
        with torch.no_grad():
            for p, q in zip(self.parameters(), other.parameters()):
                p.copy_(q)
        return self

    def log_probs(self):
        torch = _torch()
        h, _ = self.gru(self.embed(self._inputs))
        logits = self.head(h) / self.temperature
        lp = torch.log_softmax(logits, dim=-1).gather(-1, self._targets[..., None])[..., 0]
        return lp.sum(1)


def neural_loss(kind: str, logp, logp_ref, C, alpha: float = 0.5, beta: float = 1.0,
                clip: float = 1e-3):
    """The chapter's losses for a policy given as log π_θ over all outputs (a torch vector) and
    pair counts C (torch, C[a, b] = #a beat b): ``"ddro"`` (the density-ratio loss with its clip)
    or ``"dpo"``."""
    torch = _torch()
    h = logp - logp_ref
    N = C.sum()
    if kind == "ddro":
        logg = torch.clamp(h, max=math.log((1 - clip) / alpha))
        pos, neg = C.sum(1), C.sum(0)
        won = torch.where(pos > 0, pos * logg, torch.zeros_like(logg))       # 0·log 0 = 0
        return -won.sum() / N - (neg * torch.log1p(-alpha * torch.exp(logg))).sum() / N
    if kind == "dpo":
        d = beta * (h[:, None] - h[None, :])
        return -(C * torch.nn.functional.logsigmoid(d)).sum() / N
    raise ValueError(f"kind must be 'ddro' or 'dpo', got {kind!r}")


def gru_weights(policy: GRUPolicy) -> dict:
    """The reference policy's weights as float64 tensors with a leading member axis of length 1,
    in the layout of :func:`tree_log_probs` (PyTorch's GRU gate order r, z, n)."""
    torch = _torch()
    g = policy.gru
    w = {"embed": policy.embed.weight, "w_ih": g.weight_ih_l0, "w_hh": g.weight_hh_l0, "b_ih": g.bias_ih_l0,
         "b_hh": g.bias_hh_l0, "w_out": policy.head.weight, "b_out": policy.head.bias}
    with torch.no_grad():
        return {k: v.detach().to(torch.float64).clone()[None] for k, v in w.items()}


def tree_log_probs(w: dict, vocab: int, length: int):
    """log π(y) of every sequence (lexicographic order) for a batch of M GRU policies with weights
    ``w`` (each tensor has a leading member axis): (M, vocab**length).

    The same function as :meth:`GRUPolicy.log_probs` (temperature 1), computed over the prefix tree:
    a prefix's hidden state does not depend on what follows it, so level t holds the vocab**t
    distinct prefixes of length t, each computed once from its parent's state and its last token
    (1 + vocab + … + vocab**(length−1) GRU steps instead of length · vocab**length), and
    log π(y) = Σ_t log softmax(W h(y_<t))[y_t]."""
    torch = _torch()
    M, H = w["w_hh"].shape[0], w["w_hh"].shape[2]
    wi, wh = w["w_ih"].transpose(1, 2), w["w_hh"].transpose(1, 2)
    wo = w["w_out"].transpose(1, 2)
    gi_tok = torch.baddbmm(w["b_ih"][:, None, :], w["embed"], wi)        # (M, vocab + 1, 3H)

    def cell(gi, h):
        gh = torch.baddbmm(w["b_hh"][:, None, :], h, wh)
        r = torch.sigmoid(gi[..., :H] + gh[..., :H])
        z = torch.sigmoid(gi[..., H:2 * H] + gh[..., H:2 * H])
        n = torch.tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
        return (1 - z) * n + z * h

    h = cell(gi_tok[:, vocab:vocab + 1], torch.zeros(M, 1, H, dtype=gi_tok.dtype))   # after BOS
    total = torch.zeros(M, vocab ** length, dtype=gi_tok.dtype)
    seq = torch.arange(vocab ** length)
    for t in range(length):
        lp = torch.log_softmax(torch.baddbmm(w["b_out"][:, None, :], h, wo), dim=-1)  # (M, vocab**t, vocab)
        total = total + lp.reshape(M, -1)[:, seq // vocab ** (length - 1 - t)]
        if t + 1 < length:
            child = torch.arange(vocab ** (t + 1))
            h = cell(gi_tok[:, child % vocab], h[:, child // vocab])
    return total


def batched_loss(kind: str, logp, logp_ref, C, alpha: float = 0.5, beta: float = 1.0, clip: float = 1e-3):
    """:func:`neural_loss` for M policies at once: logp (M, S), logp_ref (S,), C (M, S, S); (M,).
    An output that never won contributes nothing to the first DDRO sum, also where π_θ is 0 there
    (the categorical optimum puts no mass on an output that only lost)."""
    torch = _torch()
    h = logp - logp_ref
    N = C.sum((1, 2))
    if kind == "ddro":
        logg = torch.clamp(h, max=math.log((1 - clip) / alpha))
        pos, neg = C.sum(2), C.sum(1)
        won = torch.where(pos > 0, pos * logg, torch.zeros_like(logg))       # 0·log 0 = 0
        return -(won.sum(1) + (neg * torch.log1p(-alpha * torch.exp(logg))).sum(1)) / N
    if kind == "dpo":
        d = beta * (h[:, :, None] - h[:, None, :])
        return -(C * torch.nn.functional.logsigmoid(d)).sum((1, 2)) / N
    raise ValueError(f"kind must be 'ddro' or 'dpo', got {kind!r}")


def categorical_optimum(kind: str, pi: np.ndarray, C: np.ndarray, beta: float = 1.0,
                        clip: float = 1e-3) -> np.ndarray:
    """The minimiser over all categorical policies of the loss ``kind`` on pair counts C (the
    exact DDRO minimiser with its clip, or DPO's Bradley–Terry fit): the lowest value any policy,
    the GRU included, can reach."""
    from lib.ddro.categorical import fit_ddro_categorical, fit_dpo_categorical

    if kind == "ddro":
        return fit_ddro_categorical(pi, C.sum(1), C.sum(0), 0.5, clip)
    return fit_dpo_categorical(pi, C, beta)


@dataclass
class Fits:
    """A batch of fine-tuned policies: ``policies`` (M, S) over every sequence; per member the
    ``steps`` taken, whether it ``converged`` (met the stopping rule before ``max_steps``), its
    final ``excess`` training loss over the categorical optimum and the ``tolerance`` it had to
    reach, and the ``optimum`` policies (M, S)."""

    policies: np.ndarray
    steps: np.ndarray
    converged: np.ndarray
    excess: np.ndarray
    tolerance: np.ndarray
    optimum: np.ndarray


def train_population(kind: str, ref: GRUPolicy, pi: np.ndarray, counts, vocab: int, length: int,
                     lr: float = 0.02, rho: float = 1e-3, max_steps: int = 20000, beta: float = 1.0,
                     clip: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> Fits:
    """Fine-tune M copies of the reference GRU at once, copy m on pair counts ``counts[m]``, with
    full-batch Adam (the formula of ``torch.optim.Adam``) in float64, each until it meets the
    stopping rule on its training objective:

        L_m(θ) − L_m* ≤ ρ (S − 1) / N_m,

    with L_m* the loss of the categorical optimum (:func:`categorical_optimum`, a lower bound for
    every policy), S the number of sequences and N_m the number of pairs. (S − 1)/(2N) is the
    order of the training loss's statistical excess at p₊ over the empirical optimum (S − 1 free
    probabilities), so ρ = 10⁻³ stops when the optimisation error in the loss is a small
    fraction of the estimation error. A member that meets the rule leaves the batch; one that
    reaches ``max_steps`` first is reported unconverged. The members share nothing but the
    reference weights they start from, so a member's numbers do not depend on the others (up to
    float rounding of the batched products; tested). Nothing is random."""
    torch = _torch()
    counts = [np.asarray(c, float) for c in counts]
    M, S = len(counts), vocab ** length
    with one_thread():
        w0 = gru_weights(ref)
        logp_ref = tree_log_probs(w0, vocab, length)[0].detach()
        Ct = torch.as_tensor(np.stack(counts), dtype=torch.float64)
        optimum = np.stack([categorical_optimum(kind, pi, c, beta, clip) for c in counts])
        with torch.no_grad():
            best = batched_loss(kind, torch.log(torch.as_tensor(optimum)), logp_ref, Ct, beta=beta, clip=clip)
        tol = torch.as_tensor([rho * (S - 1) / c.sum() for c in counts], dtype=torch.float64)
        params = {k: v.expand(M, *v.shape[1:]).clone().requires_grad_(True) for k, v in w0.items()}
        m1 = {k: torch.zeros_like(v) for k, v in params.items()}
        m2 = {k: torch.zeros_like(v) for k, v in params.items()}
        active = torch.arange(M)
        out = torch.zeros(M, S, dtype=torch.float64)
        steps = np.full(M, max_steps)
        excess = np.zeros(M)
        for step in range(max_steps + 1):
            loss = batched_loss(kind, tree_log_probs(params, vocab, length), logp_ref, Ct[active], beta=beta,
                                clip=clip)
            gap = (loss - best[active]).detach()
            done = gap <= tol[active]
            if step == max_steps:
                done = torch.ones_like(done)
            if done.any():
                idx = active[done]
                with torch.no_grad():
                    sub = {k: v[done] for k, v in params.items()}
                    out[idx] = torch.exp(tree_log_probs(sub, vocab, length))
                for i, g in zip(idx.tolist(), gap[done].tolist()):
                    steps[i] = min(steps[i], step)
                    excess[i] = g
                keep = ~done
                active = active[keep]
                if len(active) == 0:
                    break
                params = {k: v[keep].detach().requires_grad_(True) for k, v in params.items()}
                m1 = {k: v[keep] for k, v in m1.items()}
                m2 = {k: v[keep] for k, v in m2.items()}
                loss = batched_loss(kind, tree_log_probs(params, vocab, length), logp_ref, Ct[active], beta=beta,
                                    clip=clip)
            grads = torch.autograd.grad(loss.sum(), list(params.values()))
            t = step + 1
            with torch.no_grad():
                for (k, p), g in zip(params.items(), grads):
                    m1[k].mul_(betas[0]).add_(g, alpha=1 - betas[0])
                    m2[k].mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                    denom = (m2[k] / (1 - betas[1] ** t)).sqrt_().add_(eps)
                    p.addcdiv_(m1[k], denom, value=-lr / (1 - betas[0] ** t))
    pol = out.numpy()
    return Fits(pol / pol.sum(1, keepdims=True), steps, steps < max_steps, excess, tol.numpy(), optimum)


# ----------------------------------------------------------------------------------------------
# The sequence study, one training run per sweep point
# ----------------------------------------------------------------------------------------------


@dataclass
class SequenceSetup:
    """The sequence study's fixed pieces: every sequence, the reference GRU, its distribution
    π_ref, the intransitive preference and its target p₊."""

    seqs: np.ndarray
    ref: GRUPolicy
    pi: np.ndarray
    pref: Preference
    target: np.ndarray


def sequence_setup(vocab: int, length: int, hidden: int, root: int) -> SequenceSetup:
    """Build the sequence study from its parameters and the chapter seed ``root`` alone (the
    reference GRU's weights are its stream ``"gru-reference-init"``), on one PyTorch thread, so
    that the chapter and every sweep worker (local process or cluster) compute the same bits.
    π_ref is computed in float64 from those weights, as the fine-tuning computes it."""
    torch = _torch()
    with one_thread():
        seqs = all_sequences(vocab, length)
        ref = GRUPolicy(vocab, seqs, hidden=hidden, generator=torch_generator(root, "gru-reference-init"))
        with torch.no_grad():
            pi = np.exp(tree_log_probs(gru_weights(ref), vocab, length)[0].numpy())
    pi /= pi.sum()
    pref = sequence_preference(seqs, vocab, root=root)
    return SequenceSetup(seqs, ref, pi, pref, paired_target(pi, pref))
