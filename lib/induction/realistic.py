"""The "realistic" transformer of the paper's Fig. 4: several pre-norm layers of causal
multi-head attention (separate keys and queries) and MLPs with residual connections, learned
token and absolute position embeddings, all trained together with AdamW on the last token's
cross-entropy. The paper gives 3 layers, N = 32, N_trg = 1; width, heads, learning rate and
steps are our choices (see the chapter's "What we reconstructed").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lib.induction.data import PAD, Batch, LengthDist, sample_ood, sample_train
from lib.seeding import seed_torch, stream


@dataclass(frozen=True)
class RealisticConfig:
    n_vocab: int = 32
    n_trg: int = 1
    n_pos: int = 84
    n_layers: int = 3
    d_model: int = 128
    n_heads: int = 4
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch: int = 256
    steps: int = 10_000  # the most steps; training stops earlier once it solves the task
    target_accuracy: float = 0.99  # in-distribution accuracy at which training stops
    check_every: int = 50  # steps between in-distribution checks
    m_check: int = 512  # held-out pretraining sequences per check
    early_stop: bool = True  # False: a fixed schedule of ``steps`` steps, whatever the accuracy
    curve_every: int = 0  # steps between OOD evaluations along training (0: none)
    shortcut_free: bool = False  # pretrain on independent ℓ1, ℓ2 (no positional shortcut), see sample_train


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = self.ln1(h)
        h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        return h + self.mlp(self.ln2(h))


class Transformer(nn.Module):
    def __init__(self, cfg: RealisticConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.n_vocab + 1, cfg.d_model)  # the last id pads
        self.pos = nn.Embedding(cfg.n_pos, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads)
                                    for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_vocab)
        self.pad = cfg.n_vocab

    def forward(self, tokens: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """Logits for the token after position ``T`` of each (right-padded) sequence."""
        B, T = tokens.shape
        h = self.tok(tokens.masked_fill(tokens == PAD, self.pad)) + self.pos(torch.arange(T))
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for block in self.blocks:
            h = block(h, causal)
        return self.head(self.ln(h[torch.arange(B), length - 1]))


def _tensors(batch: Batch):
    return torch.as_tensor(batch.tokens), torch.as_tensor(batch.length)


def train(cfg: RealisticConfig, dist: LengthDist, *, root: int, rep: int = 0,
          ood_test: Batch | None = None, foreach: bool = True) -> tuple[Transformer, dict]:
    """Train a fresh model with AdamW on batches of fresh pretraining sequences until it solves
    the in-distribution task (accuracy ≥ ``cfg.target_accuracy`` on ``cfg.m_check`` held-out
    pretraining sequences, checked every ``cfg.check_every`` steps) or ``cfg.steps`` steps
    have passed; with ``cfg.early_stop = False`` it runs all ``cfg.steps`` steps. Returns the
    model and ``{"steps", "id_accuracy", "curve"}`` at the end; ``curve`` lists
    ``(step, OOD accuracy on ood_test)`` every ``cfg.curve_every`` steps (and at step 0 and
    the last step) when both are given, else it is empty.

    The initialisation, the training batches and the held-out sequences come from streams
    ``("realistic-init" | "realistic-train" | "realistic-held-out", ℓ_min, ℓ_max, rep)`` of
    the chapter seed ``root`` (``rep``: the replicate index; with ``cfg.shortcut_free`` the key
    starts with ``"shortcut-free"`` after the name, and pretraining draws ``ℓ1, ℓ2``
    independently). AdamW updates all tensors with one call per operation (``foreach``): the
    same arithmetic as its per-tensor loop (``foreach=False``; bitwise equal, see :func:`bench`)
    in a tenth of the operator calls."""
    if 2 * dist.l_max + 3 > cfg.n_pos:
        raise ValueError(f"n_pos={cfg.n_pos} is too small for ℓ_max={dist.l_max}")
    key = (dist.l_min, dist.l_max, rep)
    rng = stream(root, "realistic-train", *key)
    if cfg.shortcut_free:  # the positive control's own streams
        key = ("shortcut-free", *key)
    held_out = sample_train(stream(root, "realistic-held-out", *key),
                            cfg.n_vocab, cfg.n_trg, dist, cfg.m_check, cfg.shortcut_free)
    seed_torch(root, "realistic-init", *key)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            foreach=foreach)
    track = ood_test is not None and cfg.curve_every > 0
    curve = [(0, evaluate(model, ood_test)["accuracy"])] if track else []
    step, id_accuracy = 0, evaluate(model, held_out)["accuracy"]
    while step < cfg.steps and (id_accuracy < cfg.target_accuracy or not cfg.early_stop):
        batch = sample_train(rng, cfg.n_vocab, cfg.n_trg, dist, cfg.batch, cfg.shortcut_free)
        loss = nn.functional.cross_entropy(model(*_tensors(batch)),
                                           torch.as_tensor(batch.target))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % cfg.check_every == 0 or step == cfg.steps:
            id_accuracy = evaluate(model, held_out)["accuracy"]
        if track and (step % cfg.curve_every == 0 or step == cfg.steps):
            curve.append((step, evaluate(model, ood_test)["accuracy"]))
    if track and curve[-1][0] != step:
        curve.append((step, evaluate(model, ood_test)["accuracy"]))
    return model, {"steps": step, "id_accuracy": id_accuracy, "curve": curve}


@torch.no_grad()
def evaluate(model: Transformer, batch: Batch) -> dict:
    """Accuracy, pseudo rate and leftmost rate of the argmax prediction (as in the one-layer
    model's :func:`lib.induction.one_layer.evaluate`)."""
    model.eval()
    pred = model(*_tensors(batch)).argmax(dim=1).numpy()
    model.train()
    return {"accuracy": float(np.mean(pred == batch.target)),
            "pseudo": float(np.mean(pred == batch.pseudo)),
            "leftmost": float(np.mean(pred == batch.leftmost))}


def realistic_cell(l_min: int, l_max: int, seed: int, *, root: int, m_test: int = 1024,
                   **config) -> dict:
    """One cell of Fig. 4: train on ``Unif{l_min..l_max}`` (see :func:`train`), test on the OOD
    distribution: accuracy, pseudo and leftmost rates, steps taken, final in-distribution
    accuracy and the OOD accuracy along training (``curve``, see :func:`train`). ``seed`` is
    the replicate index and ``root`` the chapter seed; the OOD test comes from stream
    ``("realistic-ood-test", l_min, l_max, seed)``."""
    cfg = RealisticConfig(**config)
    dist = LengthDist.uniform(l_min, l_max)
    test = sample_ood(stream(root, "realistic-ood-test", l_min, l_max, seed), cfg.n_vocab,
                      cfg.n_trg, l_min, l_max, m_test)
    model, info = train(cfg, dist, root=root, rep=seed, ood_test=test)
    return {**evaluate(model, test), **info}


def bench(l_min: int = 2, l_max: int = 16, repeats: int = 3, **config) -> dict:
    """One cell's training (the chapter's default sizes unless ``config`` says otherwise) with
    AdamW's per-tensor loop and with its ``foreach`` update, both in this process on one thread:
    the best time of each over ``repeats``, their ratio, the steps taken and the largest
    difference of the trained weights (zero: the same arithmetic)."""
    import time

    torch.set_num_threads(1)
    cfg = RealisticConfig(**{"n_pos": 36, "d_model": 32, "n_heads": 2, "lr": 3e-3, "batch": 32,
                             "steps": 2000, "curve_every": 100, **config})
    dist = LengthDist.uniform(l_min, l_max)
    test = sample_ood(stream(0, "bench"), cfg.n_vocab, cfg.n_trg, l_min, l_max, 1024)
    out = {}
    for foreach in (False, True):
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            model, info = train(cfg, dist, root=0, ood_test=test, foreach=foreach)
            best = min(best, time.perf_counter() - start)
        out[foreach] = (best, model, info)
    pairs = zip(out[False][1].parameters(), out[True][1].parameters())
    diff = max(float((a - b).detach().abs().max()) for a, b in pairs)
    res = {"per_tensor_s": out[False][0], "foreach_s": out[True][0],
           "ratio": out[False][0] / out[True][0], "steps": out[True][2]["steps"],
           "same_steps": out[False][2]["steps"] == out[True][2]["steps"], "max_weight_diff": diff}
    print(f"realistic cell {l_min}..{l_max}: AdamW per tensor {res['per_tensor_s']:.3f} s, foreach "
          f"{res['foreach_s']:.3f} s, ratio {res['ratio']:.2f}; {res['steps']} steps (same: "
          f"{res['same_steps']}); largest weight difference {diff:.1e}")
    return res


if __name__ == "__main__":
    bench()
