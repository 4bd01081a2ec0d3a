"""Several same-shaped :class:`~lib.ess.models.MixerLM` models trained as one batched model.

The models of one sweep point (say the κ values and replicates of one mixer and width) differ in
their weights and their data, not in their shapes. :func:`train_population` stacks their
parameters on a leading member axis and runs every operator of a training step once for all of
them, so the per-operator overhead that dominates these tiny models is paid once per step
rather than once per model; the training loop and AdamW with the one-cycle schedule are
:func:`lib.population.train_stacked` with this module's batched forward pass in place of its
``vmap``. It computes what :func:`lib.ess.models.train` computes for each member, bit for bit: a
member's initial weights, batches, forward and backward pass and Adam updates depend only on its
own settings, never on who else is in the population (tested).

Bit-for-bit is a choice of operators. The batched matrix products (``bmm`` / ``baddbmm`` over
members, except for maps with a single output, where ``F.linear`` takes a matrix-vector path) and
the elementwise operators round as the single-model ones do, and so do the mixers' operators with
the members folded into the batch axis. The operators whose batched forms sum in another order —
the layer norm with per-member weights, the cross-entropy's mean, the regulariser's mean, the
convolution's filter gather, the SSM's decay rates — run once per member instead (a few operators
per member and step). ``torch.func.vmap`` is not used: its batching rules for the layer norm and
the cross-entropy compute the same numbers in another order (differences of one rounding, which
training amplifies).

Batching pays where the per-operator overhead dominates: every mixer but the gated ones at larger
``d_k``, whose (batch, ℓ, ℓ, d_k) decay tensors make a step elementwise arithmetic; stacked, they
fall out of cache and a population is no faster (:func:`bench`). :func:`train_groups` therefore
splits the gated mixers' populations (:data:`GATED_BUDGET`).
"""

from __future__ import annotations

import functools

import time

import numpy as np
import torch
import torch.nn.functional as F

from lib.ess.models import GATED, MixerLM, ModelConfig, TrainConfig, _batch, train, transition_penalty
from lib.ess.tasks import IGNORE
from lib.population import one_cycle, train_stacked
from lib.seeding import seed_torch, stream
from lib.sweep import one_thread

__all__ = ["train_population", "train_groups", "GATED_BUDGET", "bench"]


def _linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """Each member's ``F.linear(x_m, W_m, b_m)``: ``x`` (M, …, d_in), ``weight`` (M, d_out, d_in)."""
    if weight.shape[1] == 1:       # a single output: F.linear takes a matrix-vector path, bmm does not
        return _per_member(F.linear, x, weight, *([] if bias is None else [bias]))
    M = x.shape[0]
    flat = x.reshape(M, -1, x.shape[-1])
    y = torch.bmm(flat, weight.transpose(1, 2)) if bias is None else \
        torch.baddbmm(bias[:, None, :], flat, weight.transpose(1, 2))
    return y.reshape(*x.shape[:-1], weight.shape[1])


def _one_by_one(cfg, tcs, inits, keys) -> list:
    """The models of :func:`bench`'s point trained one after another (the plain path)."""
    return [train(cfg, tc, root=0, init=i, batches=b) for tc, i, b in zip(tcs, inits, keys)]


def _per_member(fn, *tensors) -> torch.Tensor:
    """``fn`` applied to each member's slices of ``tensors``, stacked."""
    return torch.stack([fn(*parts) for parts in zip(*tensors)])


class _Population:
    """The batched forward pass of models shaped as ``template`` (config ``cfg``)."""

    def __init__(self, cfg: ModelConfig, template: MixerLM):
        self.cfg, self.template = cfg, template

    def forward(self, P: dict[str, torch.Tensor], tokens: torch.Tensor):
        """Logits (M, B, L, V) and the gates' ``log α`` (M, B, L, n_layers·d_k; None without
        gates) for tokens (M, B, L): :meth:`MixerLM.forward` of every member, whose parameters
        are ``P`` (each stacked over the members: leading dimension M)."""
        cfg = self.cfg
        M, B, L = tokens.shape
        E = P["embed.weight"]
        offsets = torch.arange(M)[:, None, None] * E.shape[1]        # member m's rows of the stack
        h = F.embedding(tokens + offsets, E.reshape(-1, E.shape[2]))
        gates = []
        for i, layer in enumerate(self.template.layers()):
            p = "" if i == 0 else f"extra.{i - 1}."
            h_prev = F.pad(h, (0, 0, 1, 0))[:, :, :-1]                # token shift, as MixerLM._qkv
            q, k, v = _linear(h, P[p + "W_q.weight"]), _linear(h_prev, P[p + "W_k.weight"]), \
                _linear(h, P[p + "W_v.weight"])
            if cfg.mixer not in ("softmax", "swa"):
                q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            log_a = None
            if cfg.mixer in ("gla", "swr"):
                log_a = F.logsigmoid(_linear(h, P[p + "W_g.weight"], P[p + "W_g.bias"]))
            elif cfg.mixer == "ssm":
                log_a = _per_member(lambda x_, w, b, a: -F.softplus(F.linear(x_, w, b)) * torch.exp(a),
                                    h, P[p + "W_dt.weight"], P[p + "W_dt.bias"], P[p + "A_log"])
            gates.append(log_a)
            if cfg.mixer == "conv":
                mask = layer._mask(L, tokens.device)
                T = _per_member(lambda w, op=layer._conv_operator, mask=mask: op(w, mask, B),
                                P[p + "conv_w"]).flatten(0, 1)
            else:
                T = layer._operator(q.flatten(0, 1), k.flatten(0, 1),
                                    None if log_a is None else log_a.flatten(0, 1))
            y = (T @ v.flatten(0, 1)).view(M, B, L, -1)
            h = h + _per_member(lambda y_, w, b, eps=layer.norm.eps: F.layer_norm(y_, w.shape, w, b, eps),
                                y, P[p + "norm.weight"], P[p + "norm.bias"])
        logits = _linear(h, P["W_o.weight"], P["W_o.bias"])
        return logits, (None if gates[0] is None else torch.cat(gates, dim=-1))


def train_population(cfg: ModelConfig, tcs: list[TrainConfig], *, root: int, inits: list[tuple],
                     batches: list[tuple]) -> list[tuple[MixerLM, list[float]]]:
    """:func:`lib.ess.models.train` of every member ``(tcs[i], inits[i], batches[i])``, trained
    as one batched model (see the module docstring); returns each member's model and loss curve.
    The members share ``cfg``, the steps, batch, learning rate and weight decay and the training
    length; their tasks (κ, segments) and regularisers ``reg`` may differ. Runs single-threaded."""
    if len({(tc.steps, tc.batch, tc.lr, tc.weight_decay) for tc in tcs}) != 1:
        raise ValueError("a population shares the steps, the batch, the learning rate and the weight decay")
    if not len(tcs) == len(inits) == len(batches) >= 1:
        raise ValueError("need a member at least, and one init and one batch stream per member")
    with one_thread():
        models = []
        for init in inits:
            with torch.random.fork_rng():
                seed_torch(root, *init)
                models.append(MixerLM(cfg))
        pop = _Population(cfg, models[0])
        rngs = [stream(root, *key) for key in batches]
        tc = tcs[0]

        def data():
            for _ in range(tc.steps):
                draws = [_batch(rng, t, t.batch) for rng, t in zip(rngs, tcs)]
                yield torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws])

        def losses(params, batch):   # trained on: cross-entropy + regulariser; recorded: cross-entropy
            tokens, targets = batch
            logits, log_a = pop.forward(params, tokens)
            ce = [F.cross_entropy(logits[m].flatten(0, 1), targets[m].flatten(), ignore_index=IGNORE)
                  for m in range(len(tcs))]
            totals = [loss + t.reg * transition_penalty(None if log_a is None else log_a[m])
                      for m, (loss, t) in enumerate(zip(ce, tcs))]
            return torch.stack(totals), torch.stack(ce)

        params, _, curves = train_stacked(models, data(), None, lr=tc.lr, weight_decay=tc.weight_decay,
                                          schedule=one_cycle(tc.steps, tc.lr, 0.1), stacked_loss=losses)
        with torch.no_grad():
            for m, model in enumerate(models):
                for name, param in model.named_parameters():
                    param.copy_(params[name][m])
    return [(model, curves[:, m].tolist()) for m, model in enumerate(models)]


#: The most entries of the gated mixers' (batch, ℓ, ℓ, d_k) decay tensors that one population holds
#: per layer and step: beyond it the stacked elementwise work falls out of cache and a population is
#: no faster than its members one by one (:func:`bench`), so :func:`train_groups` splits it.
GATED_BUDGET = 2 ** 18


def train_groups(cfg: ModelConfig, tcs: list[TrainConfig], *, root: int, inits: list[tuple],
                 batches: list[tuple]) -> list[tuple[MixerLM, list[float]]]:
    """:func:`train_population` of the members in groups: all of them at once, except for the gated
    mixers (GLA, SSM, SWR), whose groups hold at most :data:`GATED_BUDGET` decay-tensor entries
    (a group of one trains with :func:`lib.ess.models.train`). The same numbers either way."""
    size = len(tcs)
    if cfg.mixer in GATED:
        tc = tcs[0]
        length = tc.n_segments * (tc.length or 3 * tc.n_pairs) + tc.n_segments - 1
        size = max(1, GATED_BUDGET // (tc.batch * length ** 2 * cfg.d_k))
    out = []
    for a in range(0, len(tcs), size):
        part = slice(a, a + size)
        if size == 1:
            out.append(train(cfg, tcs[a], root=root, init=inits[a], batches=batches[a]))
        else:
            out += train_population(cfg, tcs[part], root=root, inits=inits[part], batches=batches[part])
    return out


def bench(mixers=("softmax", "linear", "gla", "ssm", "conv", "swa", "swr"), d_k: int = 8,
          pairs=(4, 8), seeds=(0, 1, 2), *, steps: int = 200, batch: int = 32, length: int = 32,
          d_model: int = 32, n_layers: int = 1) -> list[dict]:
    """Train the models of one chapter sweep point per mixer (every κ in ``pairs`` and replicate
    in ``seeds``) three ways in this process — one after another (:func:`lib.ess.models.train`),
    as one population (:func:`train_population`) and in the chapter's groups
    (:func:`train_groups`), in an order that rotates from mixer to mixer — and return their times
    and the largest difference of any loss or trained weight from the one-by-one models (0: bit
    for bit)."""
    rows = []
    for j, mixer in enumerate(mixers):
        cfg = ModelConfig(mixer, d_k, d_model=d_model, n_layers=n_layers)
        tcs = [TrainConfig(n_pairs=n, steps=steps, batch=batch, length=length) for n in pairs for _ in seeds]
        inits = [("bench", "init", mixer, d_k, n, s) for n in pairs for s in seeds]
        keys = [("bench", "batches", n, s) for n in pairs for s in seeds]
        train_population(cfg, tcs[:2], root=0, inits=inits[:2], batches=keys[:2])        # warm-up
        ways = [("single", functools.partial(_one_by_one, cfg, tcs, inits, keys)),
                ("population", functools.partial(train_population, cfg, tcs, root=0, inits=inits, batches=keys)),
                ("groups", functools.partial(train_groups, cfg, tcs, root=0, inits=inits, batches=keys))]
        out, row = {}, {"mixer": mixer, "models": len(tcs)}
        for name, fn in ways[j % 3:] + ways[:j % 3]:
            t = time.perf_counter()
            out[name] = fn()
            row[name + "_s"] = time.perf_counter() - t
        with torch.no_grad():
            row["max_abs_difference"] = max(
                max(float(np.max(np.abs(np.subtract(a[1], b[1])))),
                    max(float((p - r).abs().max()) for p, r in zip(a[0].parameters(), b[0].parameters())))
                for way in ("population", "groups") for a, b in zip(out["single"], out[way]))
        rows.append(row)
    return rows


if __name__ == "__main__":  # python -m lib.ess.population [d_k steps d_model n_layers]
    import sys

    args = dict(zip(("d_k", "steps", "d_model", "n_layers"), map(int, sys.argv[1:5])))
    rows = bench(**args)
    for r in rows:
        print(f"{r['mixer']:8s} {r['models']} models: one by one {r['single_s']:6.2f} s, as one population "
              f"{r['population_s']:6.2f} s ({r['single_s'] / r['population_s']:.2f}×), in groups "
              f"{r['groups_s']:6.2f} s ({r['single_s'] / r['groups_s']:.2f}×); largest difference "
              f"{r['max_abs_difference']:.1e}")
    total = {way: sum(r[way + "_s"] for r in rows) for way in ("single", "population", "groups")}
    print(f"all: one by one {total['single']:.2f} s, as populations {total['population']:.2f} s "
          f"({total['single'] / total['population']:.2f}×), in groups {total['groups']:.2f} s "
          f"({total['single'] / total['groups']:.2f}×)")
