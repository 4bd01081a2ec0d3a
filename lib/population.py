"""Train a population of same-shaped small torch models as one batched model (``torch.func``).

    members = [{"seed": s, "lr": lr} for s in range(4) for lr in (1e-3, 3e-3)]
    trained = train(members, make, batch, loss, steps=500)
    trained.losses          # [steps, members] training losses
    trained.member(3)       # member 3 as an ordinary nn.Module

``make(member)`` builds one member's model (its weights are drawn inside
``torch.random.fork_rng`` seeded from the member's init stream, :func:`lib.seeding.seed_torch`
of the chapter seed and the member's settings, so the global generator is left alone);
``batch(member, generator)`` draws one training batch for it from its own
``torch.Generator``; ``loss(forward, batch)`` is the scalar loss, with ``forward(*inputs)``
standing for the model. The members' parameters are stacked (``stack_module_state``), the
forward pass is ``vmap`` over ``functional_call``, and Adam (the formula of ``torch.optim.Adam``)
or SGD steps every member at once with its own learning rate. Each member's numbers depend only on
the chapter seed and its own settings, never on who else is in the batch (tested: a member trained alone and
in a batch agree to float tolerance). :func:`train_stacked` is that loop on models already made and
data already drawn, with a learning-rate and β₁ schedule (:func:`one_cycle`), weight decay, a hook
before each step and, in place of the ``vmap``, a batched loss of the caller's own (chapter 10's
metadata models and chapter 09's mixers train with it).

Batching pays for the smallest models, where one model's step is dominated by per-operation
overhead; at larger sizes the batched matmuls are no faster (see :func:`bench`). vmap has no
batching rule for ``scaled_dot_product_attention`` (it falls back to a loop): write attention as
matmuls, as :class:`TinyAttention` does.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from lib import seeding


def member_key(member: Mapping) -> tuple:
    """A member's stream key: its settings, sorted by name (its replicate index among them)."""
    return tuple(sorted(member.items()))


def data_generator(root: int, member: Mapping) -> torch.Generator:
    """The ``torch.Generator`` a member's training batches are drawn from (chapter seed ``root``)."""
    return seeding.torch_generator(root, "population-data", member_key(member))


def build(make: Callable[[Mapping], nn.Module], member: Mapping, root: int) -> nn.Module:
    """``make(member)`` with its weights drawn from the member's own init stream."""
    with torch.random.fork_rng(devices=[]):
        seeding.seed_torch(root, "population-init", member_key(member))
        return make(member)


@dataclass
class Trained:
    members: list[dict]
    losses: np.ndarray  # [steps, members]
    params: dict[str, torch.Tensor]  # stacked: leading dimension = member
    buffers: dict[str, torch.Tensor]
    template: nn.Module

    def member(self, i: int) -> nn.Module:
        """Member ``i`` as an ordinary module."""
        model = copy.deepcopy(self.template)
        state = {k: v[i].detach().clone() for k, v in {**self.params, **self.buffers}.items()}
        model.load_state_dict(state)
        return model


def train(members: Sequence[Mapping], make: Callable[[Mapping], nn.Module],
          batch: Callable[[Mapping, torch.Generator], tuple], loss: Callable[[Callable, tuple], torch.Tensor],
          steps: int, lr: float = 1e-3, optimizer: str = "adam", betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, root: int = 0) -> Trained:
    """Train every member for ``steps`` steps as one batched model; see the module docstring. A
    member's ``"lr"``, where it has one, overrides ``lr``; ``root`` is the chapter seed."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")
    members = [dict(m) for m in members]
    models = [build(make, m, root) for m in members]
    gens = [data_generator(root, m) for m in members]
    rates = torch.tensor([float(m.get("lr", lr)) for m in members])
    data = (tuple(torch.stack(parts) for parts in zip(*[batch(m, g) for m, g in zip(members, gens)]))
            for _ in range(steps))
    params, buffers, history = train_stacked(models, data, loss, lr=rates, optimizer=optimizer, betas=betas, eps=eps)
    return Trained(members, history, params, buffers, models[0])


def train_stacked(models: Sequence[nn.Module], data, loss: Callable[[Callable, tuple], torch.Tensor] | None, *, lr,
                  optimizer: str = "adam", betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                  weight_decay: float = 0.0, schedule: Callable[[int], tuple[float, float]] | None = None,
                  on_step: Callable[[int, Callable[[], list]], None] | None = None,
                  stacked_loss: Callable[[dict, tuple], tuple[torch.Tensor, torch.Tensor]] | None = None):
    """The loop of :func:`train` on models already made (one shape; they are not changed until
    ``on_step`` asks for them) and data already drawn: ``data`` yields each step's batch as a tuple of
    tensors stacked over the members (leading dimension), and ``loss(forward, batch)`` is one
    member's scalar loss. The parameters are stacked, the forward pass is ``vmap`` over
    ``functional_call``, and each step is :func:`adam_step` (AdamW with ``weight_decay``) or SGD at
    ``lr``, a float or one rate per member. ``schedule(t)``, where given, returns step ``t``'s learning
    rate and β₁ (counting from 1), a float each, in place of ``lr`` and ``betas[0]``. ``on_step(step,
    current)`` is called before each step's update (``step`` from 0) with ``current()``, which loads
    the current parameters into ``models`` and returns them. Returns the stacked parameters, the
    buffers and the losses ``[steps, members]``.

    ``stacked_loss(params, batch)``, where given, replaces ``loss`` and the ``vmap``: a batched forward
    pass of the caller's own on the stacked parameters, returning two tensors ``[members]``, the losses
    trained on (their sum is differentiated) and the losses recorded (say the cross-entropy without a
    regulariser). A parameter that gets no gradient is left alone, as ``torch.optim`` leaves one whose
    ``.grad`` is None."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', not {optimizer!r}")
    models = list(models)
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    if stacked_loss is None:
        base = copy.deepcopy(models[0]).to("meta")

        def member_loss(p, b, data):
            return loss(lambda *inputs: functional_call(base, (p, b), inputs), data)

        batched_loss = vmap(member_loss)

        def stacked_loss(p, data):
            losses = batched_loss(p, buffers, data)
            return losses, losses

    def current() -> list:
        for i, model in enumerate(models):
            model.load_state_dict({k: v[i].detach() for k, v in {**params, **buffers}.items()})
        return models

    state = {k: (torch.zeros_like(v), torch.zeros_like(v)) for k, v in params.items()}
    history = []
    for step, batch in enumerate(data):
        if on_step is not None:
            on_step(step, current)
        objective, recorded = stacked_loss(params, batch)
        grads = torch.autograd.grad(objective.sum(), list(params.values()), allow_unused=True)
        history.append(recorded.detach().cpu().numpy())
        t = step + 1
        rate, b = lr, betas
        if schedule is not None:
            rate, b1 = schedule(t)
            b = (b1, betas[1])
        with torch.no_grad():
            if optimizer == "sgd":
                for p, g in zip(params.values(), grads):
                    if g is None:
                        continue
                    p.sub_((rate if isinstance(rate, float) else rate.view(-1, *[1] * (p.dim() - 1))) * g)
            else:
                adam_step(list(params.values()), grads, [state[k] for k in params], t, rate, b, eps, weight_decay)
    history = np.array(history, dtype=np.float64).reshape(-1, len(models))
    return {k: v.detach() for k, v in params.items()}, buffers, history


def adam_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
              moments: Sequence[tuple[torch.Tensor, torch.Tensor]], t: int, lr,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
              l2_decay: float = 0.0) -> None:
    """One step of ``torch.optim.AdamW``'s update (Adam when ``weight_decay`` is 0), in place, with
    the same floating-point operations in the same order as its single-tensor path. ``moments``
    holds each tensor's (first, second) moment; ``t`` counts steps from 1. ``lr`` is a float, or a
    tensor of one rate per member (the parameters' leading dimension). A step's ``lr`` and β₁ may
    change from step to step (a schedule): the bias corrections use the current β₁, as torch does. A
    tensor whose gradient is None is skipped (weights and moments unchanged), as torch skips a
    parameter without ``.grad``. ``l2_decay`` is ``torch.optim.Adam``'s own weight decay instead: added
    to the gradient (``g + l2_decay·p``) before the moments see it."""
    b1, b2 = betas
    c1, c2 = 1 - b1 ** t, (1 - b2 ** t) ** 0.5
    for p, g, (m, v) in zip(params, grads, moments):
        if g is None:
            continue
        r = lr if isinstance(lr, float) else lr.view(-1, *[1] * (p.dim() - 1))
        if l2_decay:
            g = g.add(p, alpha=l2_decay)
        if weight_decay:
            p.mul_(1 - r * weight_decay)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / c2).add_(eps)
        if isinstance(r, float):
            p.addcdiv_(m, denom, value=-r / c1)
        else:
            p.sub_(r / c1 * m / denom)


def one_cycle(steps: int, lr: float, warmup: float) -> Callable[[int], tuple[float, float]]:
    """The schedule of ``torch.optim.lr_scheduler.OneCycleLR`` (``max_lr=lr``, ``total_steps=steps``,
    ``pct_start=warmup``: cosine warm-up over ``warmup`` of the steps, cosine decay, β₁ cycled
    0.95 → 0.85 → 0.95) as :func:`train_stacked` takes it: ``schedule(t)`` is step ``t``'s learning
    rate and β₁ (``t`` from 1), read off torch's scheduler stepped ``steps`` times."""
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=warmup)
    table = []
    for _ in range(steps):
        table.append((opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]))
        opt.step()
        sched.step()
    return lambda t: table[t - 1]


class TinyAttention(nn.Module):
    """One causal self-attention layer with a readout, attention written as matmuls (vmap-able)."""

    def __init__(self, vocab: int, d: int, length: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(length, d) / math.sqrt(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.full((length, length), float("-inf")).triu(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + self.mask
        return self.out(x + scores.softmax(-1) @ v)


def copy_task(vocab: int, batch_size: int, length: int):
    """A member's batch for :class:`TinyAttention`: random tokens; the target at each position is
    the token before it (the first position's is the first token)."""
    def draw(member: Mapping, g: torch.Generator) -> tuple:
        tokens = torch.randint(vocab, (batch_size, length), generator=g)
        return tokens, torch.cat([tokens[:, :1], tokens[:, :-1]], dim=1)
    return draw


def cross_entropy(forward: Callable, data: tuple) -> torch.Tensor:
    tokens, targets = data
    logits = forward(tokens)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def bench(n_models: int = 16, d: int = 32, batch_size: int = 32, length: int = 32, vocab: int = 16,
          steps: int = 100, lr: float = 3e-3) -> dict:
    """Train ``n_models`` :class:`TinyAttention` models one after another (plain loop,
    ``torch.optim.Adam``) and as one population (:func:`train`), in this process, on the same
    members and data; their times, achieved GFLOP/s (matmul FLOPs of one step, counted by
    ``FlopCounterMode``) and the speed-up of the population. Both train the same members, so the
    largest difference of their final losses is reported as a check."""
    from torch.utils.flop_counter import FlopCounterMode

    members = [{"seed": s} for s in range(n_models)]
    make = lambda m: TinyAttention(vocab, d, length)  # noqa: E731
    draw = copy_task(vocab, batch_size, length)

    def one_after_another() -> list[float]:
        finals = []
        for m in members:
            model = build(make, m, 0)
            g = data_generator(0, m)
            opt = torch.optim.Adam(model.parameters(), lr=lr)
            for _ in range(steps):
                value = cross_entropy(model, draw(m, g))
                opt.zero_grad()
                value.backward()
                opt.step()
            finals.append(float(value.detach()))
        return finals

    model = build(make, members[0], 0)
    with FlopCounterMode(display=False) as counter:
        cross_entropy(model, draw(members[0], data_generator(0, members[0]))).backward()
    flops = counter.get_total_flops() * n_models * steps
    train(members[:2], make, draw, cross_entropy, steps=2, lr=lr)  # warm-up
    t = time.perf_counter()
    sequential = one_after_another()
    t_seq = time.perf_counter() - t
    t = time.perf_counter()
    trained = train(members, make, draw, cross_entropy, steps=steps, lr=lr)
    t_pop = time.perf_counter() - t
    return {"n_models": n_models, "d": d, "batch": batch_size, "length": length, "steps": steps,
            "threads": torch.get_num_threads(), "sequential_s": t_seq, "population_s": t_pop,
            "sequential_gflops": flops / t_seq / 1e9, "population_gflops": flops / t_pop / 1e9,
            "speedup": t_seq / t_pop,
            "max_final_loss_difference": float(np.max(np.abs(np.array(sequential) - trained.losses[-1])))}


if __name__ == "__main__":  # python -m lib.population [d batch length steps]
    import sys

    sizes = [int(a) for a in sys.argv[1:5]]
    r = bench(**dict(zip(("d", "batch_size", "length", "steps"), sizes)))
    print(f"{r['n_models']} one-layer attention models, d={r['d']}, batch {r['batch']}, length {r['length']}, "
          f"{r['steps']} steps, {r['threads']} threads: one after another {r['sequential_s']:.2f} s "
          f"({r['sequential_gflops']:.1f} GFLOP/s), as one population {r['population_s']:.2f} s "
          f"({r['population_gflops']:.1f} GFLOP/s): {r['speedup']:.2f}× "
          f"(final losses differ by at most {r['max_final_loss_difference']:.1e})")
