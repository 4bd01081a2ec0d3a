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
    """The chapter's losses for M policies given as log π_θ over all outputs, logp (M, S), with
    log π_ref ``logp_ref`` (S,) and pair counts C (M, S, S), C[m, a, b] = #a beat b: ``"ddro"`` (the
    density-ratio loss with its clip) or ``"dpo"``; (M,). An output that never won contributes
    nothing to the first DDRO sum, also where π_θ is 0 there (the categorical optimum puts no mass
    on an output that only lost)."""
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


def ddro_step(h, p, C, radius, alpha: float = 0.5, clip: float = 1e-3, iters: int = 200):
    """The output-space step of :func:`fit_population` for M policies: the minimiser Δ (M, S) of
    Σ_y ℓ_y(h_y + Δ_y) subject to Σ_y p_y Δ_y = 0 (the normalisation, linearised at the current
    policy p) and Δ_y ∈ [lo_y, hi_y], hi_y = min(r, c − h_y), lo_y = min(−r, c − h_y), r = ``radius``
    (M,), with ℓ_y the smooth piece of the density-ratio loss of output y (see
    :func:`fit_population`), h = log π_θ − log π_ref, C the pair counts (M, S, S).

    Each ℓ_y is convex, so Δ minimises ℓ_y(h_y + Δ) + ν p_y Δ over its interval for the multiplier
    ν of the normalisation: ℓ′_y(x) = −ν p_y, i.e. α e^x/(1 − α e^x) = (N₊ − ν p_y N)/N₋ (x = −∞
    where the right side is ≤ 0; for N₋ = 0, ℓ′_y = −N₊/N is constant and Δ_y sits at an end of its
    interval), clipped to the interval. Σ p Δ(ν) does not increase in ν; ν is found by bisection,
    and where an output with N₋ = 0 jumps between its ends at the root, the two ends are mixed so
    that Σ p Δ = 0 holds exactly."""
    torch = _torch()
    c = math.log((1 - clip) / alpha)
    pos, neg, N = C.sum(2), C.sum(1), C.sum((1, 2))[:, None]
    r = radius[:, None]
    hi = torch.clamp(c - h, max=r)
    lo = torch.minimum(-r, c - h)

    def delta(nu):
        rho = (pos - nu[:, None] * p * N) / torch.where(neg > 0, neg, torch.ones_like(neg))
        x = torch.log(torch.where(rho > 0, rho / (1 + rho), torch.ones_like(rho)) / alpha)
        up = torch.where(neg > 0, torch.where(rho > 0, x - h, -math.inf),
                         torch.where(pos - nu[:, None] * p * N > 0, math.inf, -math.inf))
        return torch.minimum(torch.maximum(up, lo), hi)

    bound = (2 * (pos + neg) / (N * p)).amax(1) + 1.0
    a, b = -bound, bound.clone()                      # Σ p Δ(a) ≥ 0 ≥ Σ p Δ(b), or the nearest end
    for _ in range(iters):
        mid = (a + b) / 2
        s = (p * delta(mid)).sum(1)
        a = torch.where(s >= 0, mid, a)
        b = torch.where(s >= 0, b, mid)
    da, db = delta(a), delta(b)
    sa, sb = (p * da).sum(1), (p * db).sum(1)
    w = torch.where(sa - sb > 0, sa / (sa - sb), torch.where(sa <= 0, torch.zeros_like(sa), torch.ones_like(sa)))
    w = torch.clamp(w, 0.0, 1.0)[:, None]
    return (1 - w) * da + w * db


def dpo_step(h, p, C, radius, beta: float = 1.0, ridge: float = 1e-12):
    """The output-space step of :func:`fit_population` for DPO, for M policies: Newton's step
    Δ = −(H + εI)⁻¹ ∇ on the loss as a function of h = log π_θ − log π_ref (smooth and convex:
    ∇_a = −(β/N) Σ_b [C_ab σ(−β d_ab) − C_ba σ(−β d_ba)], H = (β²/N) (diag((W + Wᵀ)1) − W − Wᵀ),
    W_ab = C_ab σ(β d_ab) σ(−β d_ab), d_ab = h_a − h_b; ε = ``ridge``·tr H/S for the constant
    direction, to which the loss is blind), shifted by a constant so that Σ_y p_y Δ_y = 0 (the
    normalisation, linearised; the loss does not change) and scaled down so that |Δ_y| ≤ r,
    r = ``radius`` (M,)."""
    torch = _torch()
    N = C.sum((1, 2))[:, None]
    d = beta * (h[:, :, None] - h[:, None, :])
    lose = torch.sigmoid(-d)
    grad = -beta / N * ((C * lose).sum(2) - (C.transpose(1, 2) * lose.transpose(1, 2)).sum(2))
    W = C * torch.sigmoid(d) * lose
    W = W + W.transpose(1, 2)
    H = beta ** 2 / N[..., None] * (torch.diag_embed(W.sum(2)) - W)
    eps = ridge * H.diagonal(dim1=1, dim2=2).mean(1)
    S = h.shape[1]
    delta = -torch.linalg.solve(H + eps[:, None, None] * torch.eye(S, dtype=h.dtype), grad[..., None])[..., 0]
    delta = delta - (p * delta).sum(1, keepdim=True)
    scale = torch.clamp(radius / delta.abs().amax(1).clamp(min=1e-300), max=1.0)
    return delta * scale[:, None]


def fit_population(kind: str, logp_of, params: dict, logp_ref, C, best, tol, max_steps: int = 20000,
                   beta: float = 1.0, clip: float = 1e-3, alpha: float = 0.5, radius: float = 0.1,
                   max_radius: float = 1.0):
    """Minimise the loss ``kind`` for M policies at once, log π_θ = ``logp_of(params)`` (M, S), each
    parameter tensor with a leading member axis, member m on counts C[m], until
    L_m(θ) − ``best[m]`` ≤ ``tol[m]`` or ``max_steps``. Returns (log π_θ at the stop (M, S), steps,
    excess L_m − best[m] at the stop), by a trust-region Gauss–Newton method in output space.

    The loss depends on θ only through
    h = log π_θ − log π_ref: L = Σ_y ℓ_y(h_y), ℓ_y(h) = −[N₊(y) min(h, c) + N₋(y) log(1 − α
    e^{min(h, c)})]/N, c = log((1 − clip)/α). Each ℓ_y is smooth and convex below c and constant
    above it. An output that (almost) never loses has a negative slope from the left at c and zero
    from the right, and the minimiser over all policies puts it exactly at c, a kink; one that
    loses rarely sits just below c, at the bottom of a steep wall (curvature ∝ N₋/(1 − α e^h)²)
    with the flat piece just above: full-batch Adam can oscillate at both and leave the stopping
    rule's tolerance again after meeting it (:func:`adam_population` measures how often). The
    chapter's estimator, the categorical minimiser of :func:`categorical_optimum` whose loss is
    ``best``, minimises the loss over the policies with g ≤ (1 − clip)/α, i.e.
    h ≤ c, where L is the sum of the smooth pieces; the fit is kept in that set too: the clip is a
    constraint. One step, per member:

    1. Δ = :func:`ddro_step` (DPO: :func:`dpo_step`, Newton's step on its smooth convex loss in h,
       within the same box): the exact minimiser of Σ_y ℓ_y(h_y + Δ_y) over h + Δ ≤ c with the
       normalisation linearised (Σ_y π_θ(y) Δ_y = 0) and |Δ_y| ≤ r (an output above c may move
       down to c): a separable convex problem, solved through the multiplier of the normalisation;
    2. θ ← θ + Jᵀ (J Jᵀ + μ I)⁻¹ Δ, J = ∂log π_θ/∂θ (S × P, P ≫ S), μ = d·tr(J Jᵀ)/S: for small
       d the least-norm θ-step whose first-order change of log π_θ is Δ (Gauss–Newton; Δ is
       orthogonal to π_θ, the one direction J cannot produce), for larger d a damped one that
       leaves out J's weakest directions (Levenberg–Marquardt);
    3. a step that raises the loss is undone, r is halved and d multiplied by 10; an accepted step
       doubles r (to at most ``max_radius``) and divides d by 10 (to at least 10⁻¹²); d starts at
       10⁻⁶, r at ``radius``.

    Far from the optimum r and d bound the step; near it the box is inactive and the step is
    Newton's on the output-space problem with its exact kink (kinked outputs land at c), so the
    stopping rule and its tolerance are met as they are, in tens to hundreds of steps. Members
    share nothing (every quantity above is per member), so a member's numbers do not depend on the
    others up to float rounding of the batched products."""
    torch = _torch()
    M, S = len(best), logp_ref.shape[-1]
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    active = torch.arange(M)
    out = torch.zeros(M, S, dtype=torch.float64)
    steps = np.full(M, max_steps)
    excess = np.zeros(M)
    r = torch.full((M,), float(radius), dtype=torch.float64)
    damp = torch.full((M,), 1e-6, dtype=torch.float64)
    last = None                                        # the last accepted point: loss, θ, log π_θ, J
    for step in range(max_steps + 1):
        logp = logp_of(params)
        loss = batched_loss(kind, logp.detach(), logp_ref, C[active], beta=beta, clip=clip, alpha=alpha)
        gap = loss - best[active]
        done = gap <= tol[active] if step < max_steps else torch.ones_like(gap, dtype=torch.bool)
        if done.any():  # retire the members that met the rule: record them, drop their rows
            idx = active[done]
            out[idx] = logp.detach()[done]
            for i, g in zip(idx.tolist(), gap[done].tolist()):
                steps[i] = min(steps[i], step)
                excess[i] = g
            keep = ~done
            active = active[keep]
            if len(active) == 0:
                break
            params = {k: v[keep].detach().requires_grad_(True) for k, v in params.items()}
            r, damp, loss = r[keep], damp[keep], loss[keep]
            last = None if last is None else tuple(x[keep] for x in last)
            logp = logp_of(params)
        J, theta = _jacobian(logp, params)
        with torch.no_grad():
            z = logp.detach()
            if last is not None:
                loss, theta, z, J, r, damp = _accept_or_undo(loss, theta, z, J, last, r, damp, max_radius)
            last = (loss, theta, z, J)
            if kind == "ddro":
                delta = ddro_step(z - logp_ref, torch.exp(z), C[active], r, alpha, clip)
            else:
                delta = dpo_step(z - logp_ref, torch.exp(z), C[active], r, beta)
            params = _unflatten(_gauss_newton(J, theta, delta, damp), params)
    return out, steps, excess


def _jacobian(logp, params: dict):
    """J = ∂log π_θ/∂θ per member (m, S, P), by S batched backward passes, and θ flattened (m, P)."""
    torch = _torch()
    m, S = logp.shape
    eye = torch.eye(S, dtype=logp.dtype)[:, None, :].expand(S, m, S)
    rows = torch.autograd.grad(logp, list(params.values()), grad_outputs=eye, is_grads_batched=True)
    J = torch.cat([x.reshape(S, m, -1) for x in rows], dim=2).transpose(0, 1)
    theta = torch.cat([v.detach().reshape(m, -1) for v in params.values()], dim=1)
    return J, theta


def _accept_or_undo(loss, theta, z, J, last, r, damp, max_radius: float):
    """Step 3 of :func:`fit_population`: members whose loss rose since ``last`` go back to it with
    half the radius and 10× the damping; the others double the radius and divide the damping."""
    torch = _torch()
    worse = loss > last[0]
    r = torch.where(worse, r / 2, torch.clamp(2 * r, max=max_radius))
    damp = torch.where(worse, damp * 10, torch.clamp(damp / 10, min=1e-12))
    back = worse[:, None]
    return (torch.where(worse, last[0], loss), torch.where(back, last[1], theta),
            torch.where(back, last[2], z), torch.where(back[..., None], last[3], J), r, damp)


def _gauss_newton(J, theta, delta, damp):
    """Step 2 of :func:`fit_population`: θ + Jᵀ (J Jᵀ + μ I)⁻¹ Δ with μ = d·tr(J Jᵀ)/S, per member."""
    torch = _torch()
    K = J @ J.transpose(1, 2)
    mu = damp * K.diagonal(dim1=1, dim2=2).mean(1)
    K = K + mu[:, None, None] * torch.eye(K.shape[-1], dtype=K.dtype)
    return theta + (J.transpose(1, 2) @ torch.linalg.solve(K, delta[..., None]))[..., 0]


def _unflatten(theta, like: dict) -> dict:
    """The rows of ``theta`` (m, P) as leaf tensors shaped like ``like``'s, requiring grad."""
    params, start = {}, 0
    for k, v in like.items():
        size = v[0].numel()
        params[k] = theta[:, start:start + size].reshape(v.shape).clone().requires_grad_(True)
        start += size
    return params


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


def _population_start(kind: str, ref: GRUPolicy, pi: np.ndarray, counts: list[np.ndarray], vocab: int,
                      length: int, rho: float, beta: float, clip: float):
    """What both population fits start from: the reference weights and log-probabilities, the
    pair counts as one (M, S) tensor, each member's categorical optimum and its loss (the lower
    bound the stopping rule measures from), and each member's tolerance ρ (S − 1) / N_m."""
    torch = _torch()
    S = vocab ** length
    w0 = gru_weights(ref)
    logp_ref = tree_log_probs(w0, vocab, length)[0].detach()
    Ct = torch.as_tensor(np.stack(counts), dtype=torch.float64)
    optimum = np.stack([categorical_optimum(kind, pi, c, beta, clip) for c in counts])
    with torch.no_grad():
        best = batched_loss(kind, torch.log(torch.as_tensor(optimum)), logp_ref, Ct, beta=beta, clip=clip)
    tol = np.array([rho * (S - 1) / c.sum() for c in counts])
    return w0, logp_ref, Ct, optimum, best, tol


def train_population(kind: str, ref: GRUPolicy, pi: np.ndarray, counts, vocab: int, length: int,
                     rho: float = 1e-3, max_steps: int = 20000, beta: float = 1.0, clip: float = 1e-3) -> Fits:
    """Fine-tune M copies of the reference GRU at once, copy m on pair counts ``counts[m]``, in
    float64 by a trust-region Gauss–Newton method (:func:`fit_population`; for DDRO it treats the
    clip as a constraint), each until it meets the stopping rule on its training objective:

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
    M = len(counts)
    with one_thread():
        w0, logp_ref, Ct, optimum, best, tol = _population_start(kind, ref, pi, counts, vocab, length, rho, beta,
                                                                 clip)
        tol = torch.as_tensor(tol, dtype=torch.float64)
        params = {k: v.expand(M, *v.shape[1:]) for k, v in w0.items()}
        logp, steps, excess = fit_population(kind, lambda w: tree_log_probs(w, vocab, length), params, logp_ref,
                                             Ct, best, tol, max_steps, beta, clip)
    pol = torch.exp(logp).numpy()
    return Fits(pol / pol.sum(1, keepdims=True), steps, steps < max_steps, excess, tol.numpy(), optimum)


@dataclass
class AdamFits:
    """A batch of policies fine-tuned by full-batch Adam for a fixed number of steps: the final
    ``policies`` (M, S); per member the first step at which it met the stopping rule (``met``, −1
    if never), its final ``excess`` training loss over the categorical optimum, the smallest excess
    it reached (``min_excess``), the ``tolerance`` of the stopping rule, and ``trace`` (T, M), the
    excess every ``steps // T`` steps."""

    policies: np.ndarray
    met: np.ndarray
    excess: np.ndarray
    min_excess: np.ndarray
    tolerance: np.ndarray
    trace: np.ndarray


def adam_population(kind: str, ref: GRUPolicy, pi: np.ndarray, counts, vocab: int, length: int,
                    steps: int = 2000, lr: float = 1e-2, rho: float = 1e-3, beta: float = 1.0,
                    clip: float = 1e-3, n_trace: int = 50) -> AdamFits:
    """Fine-tune M copies of the reference GRU at once, copy m on pair counts ``counts[m]``, by
    full-batch Adam (``lr``, ``steps`` steps, :func:`lib.population.adam_step`: per member and per
    weight, so the members stay independent) on the loss ``kind`` in float64, the first-order
    alternative to :func:`train_population`'s trust-region method on the same pairs. It records
    when each member first meets :func:`train_population`'s stopping rule (it does not stop
    there: an unstable fit may leave the tolerance again) and its excess training loss over the
    categorical optimum along the way. Nothing is random."""
    torch = _torch()
    from lib.population import adam_step

    if steps < 1 or not lr > 0:
        raise ValueError("need steps ≥ 1 and lr > 0")
    counts = [np.asarray(c, float) for c in counts]
    M = len(counts)
    every = max(1, steps // n_trace)
    with one_thread():
        w0, logp_ref, Ct, _, best, tol = _population_start(kind, ref, pi, counts, vocab, length, rho, beta, clip)
        params = {k: v.detach().expand(M, *v.shape[1:]).clone().requires_grad_(True) for k, v in w0.items()}
        moments = [(torch.zeros_like(v), torch.zeros_like(v)) for v in params.values()]
        met = np.full(M, -1)
        lowest = np.full(M, np.inf)
        trace = []
        for t in range(steps + 1):
            loss = batched_loss(kind, tree_log_probs(params, vocab, length), logp_ref, Ct, beta=beta, clip=clip)
            excess = (loss - best).detach().numpy()
            met[(met < 0) & (excess <= tol)] = t
            lowest = np.minimum(lowest, excess)
            if t % every == 0:
                trace.append(excess)
            if t == steps:
                break
            grads = torch.autograd.grad(loss.sum(), list(params.values()))
            with torch.no_grad():
                adam_step(list(params.values()), grads, moments, t + 1, lr)
        with torch.no_grad():
            pol = torch.exp(tree_log_probs(params, vocab, length)).numpy()
    return AdamFits(pol / pol.sum(1, keepdims=True), met, excess, lowest, tol, np.array(trace))


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
