"""Chapter 02: sliding-window recurrences (SWR) and Phalanx layers (arXiv:2512.13921).

Three parts, each used by the chapter and tested in ``tests/test_phalanx.py``:

* **theory** — the jagged window, the exact truncation error and its bound, the work/depth table;
* **layers** — the Phalanx layer on :func:`kernels.swr.swr`, sliding-window attention over the
  same jagged window, full causal attention, and a small pre-norm decoder whose mixer per layer
  follows a pattern such as ``"LLLG"`` (3 local : 1 global);
* **corpus and training** — bytes of a fixed list of Python standard-library modules (read from
  the running interpreter, hashed), a fixed train/validation split, and a tiny training loop.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels.swr import naive, scan, swr
from kernels.swa import swa_blocked
from lib.llama import RMSNorm, SwiGLU, rope
from lib.seeding import seed_torch, torch_generator

# ---------------------------------------------------------------------------------------------
# theory
# ---------------------------------------------------------------------------------------------
window_start = naive.window_start
window_length = naive.window_length


def error_bound(rho: float, length: int, block: int, u_inf: float) -> np.ndarray:
    """``ρ^{w_i} ‖u‖∞ / (1 − ρ)`` for every position: the truncation error bound when all
    coefficients satisfy ``|a| ≤ ρ < 1`` (0 in blocks 0 and 1, which are exact)."""
    w = window_length(length, block).numpy().astype(float)
    bound = rho ** w * u_inf / (1.0 - rho)
    bound[window_start(length, block).numpy() == 0] = 0.0
    return bound


def truncation_experiment(rho: float, length: int, block: int, channels: int,
                          generator: torch.Generator, jitter: float = 0.0) -> dict:
    """One fp64 draw from ``generator``: ``u ~ N(0, 1)`` and ``a_i = ρ`` (or uniform in
    ``[ρ(1−jitter), ρ]``); returns the measured error ``|x − x̃|`` (max over channels), the exact
    identity and the bound at every position."""
    g = generator
    a = rho * (1 - jitter * torch.rand(1, 1, length, generator=g, dtype=torch.float64))
    u = torch.randn(1, 1, length, channels, generator=g, dtype=torch.float64)
    full = scan(a, u)
    approx = swr(a, u, block=block)
    err = (full - approx)[0, 0]
    identity = naive.truncation_error(a, full, block)[0, 0]
    bound = error_bound(rho, length, block, float(u.abs().max()))
    return {"error": err.abs().max(-1).values.numpy(), "identity": identity.abs().max(-1).values.numpy(),
            "identity_gap": float((err - identity).abs().max()),
            "bound": bound, "bound_ratio": float(np.max(err.abs().max(-1).values.numpy()
                                                        / np.where(bound > 0, bound, np.inf)))}


def truncation_point(rho: float, seed: int, *, root: int, length: int, block: int, channels: int,
                     jitter: float = 0.0) -> dict:
    """One sweep point of the truncation experiment: :func:`truncation_experiment` on input
    ``seed`` (the sweep's replicate index) of decay bound ``rho``, drawn from the sub-stream
    ``("truncation-input", rho, seed)`` of chapter seed ``root`` alone, so the result does not
    depend on which other points ran before it, or where."""
    gen = torch_generator(root, "truncation-input", rho, seed)
    return truncation_experiment(rho, length, block, channels, generator=gen, jitter=jitter)


def implementation_agreement(shapes, block: int = 16, root: int = 0) -> dict:
    """Max |difference| (fp64) of B2P (``chunked``), the compiled kernel, the masked operator
    ``L ⊙ M`` and streaming decode against the window definition, over ``shapes`` (B, H, L, D);
    the input of a shape is drawn from the sub-stream ``("agreement-input", block, shape)`` of
    chapter seed ``root``."""
    from kernels.swr import SWRState, available_impls

    worst: dict[str, float] = {}
    for B, H, L, D in shapes:
        g = torch_generator(root, "agreement-input", block, (B, H, L, D))
        a = 0.05 + 0.94 * torch.rand(B, H, L, generator=g, dtype=torch.float64)
        u = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
        ref = naive.swr_reference(a, u, block)
        outs = {"masked": naive.swr_masked(a, u, block),
                "decode": SWRState(B, H, D, block=block, dtype=torch.float64).run(a, u)}
        for impl in available_impls("cpu"):
            if impl != "reference":
                outs[impl] = swr(a, u, block=block, impl=impl)
        for name, y in outs.items():
            worst[name] = max(worst.get(name, 0.0), float((y - ref).abs().max()))
    return worst


def cost_table():
    """Work and depth of one sequence mixer over ``n`` tokens (``ℓ`` block, ``w`` window), the
    paper's comparison; our CPU timings come from :mod:`lib.swr_bench`."""
    import pandas as pd

    rows = [("full attention", "O(n²·d)", "O(1)", "quadratic work"),
            ("sliding-window attention", "O(n·w·d)", "O(1)", "window w = 2ℓ here"),
            ("recurrence, sequential scan", "O(n·d)", "O(n)", "one step at a time"),
            ("recurrence, parallel scan", "O(n·d)", "O(log n)", "GLA/Mamba-type kernels"),
            ("SWR, block two-pass", "O(n·ℓ·d)", "O(1)", "two passes, neighbour-only carry")]
    return pd.DataFrame(rows, columns=["mixer", "work", "depth", "note"]).set_index("mixer")


# ---------------------------------------------------------------------------------------------
# corpus
# ---------------------------------------------------------------------------------------------
#: The corpus: these standard-library modules, in this order (source bytes of the running
#: interpreter; their SHA-256 is recorded, since another Python version has other bytes).
CORPUS_MODULES = ("textwrap", "string", "json/encoder", "json/decoder", "csv", "heapq", "bisect",
                  "queue", "fractions", "statistics", "difflib", "argparse", "calendar", "shlex",
                  "pprint", "functools", "dataclasses", "tokenize")


@dataclass
class Corpus:
    train: torch.Tensor       # uint8 → long byte ids
    valid: torch.Tensor
    hashes: dict[str, str]    # module → sha256 of its source bytes
    n_bytes: int


def load_corpus(modules=CORPUS_MODULES, valid_fraction: float = 0.1) -> Corpus:
    """Bytes of ``modules`` concatenated; the last ``valid_fraction`` of *each* module is held
    out (so both splits cover every module and no text crosses the split)."""
    if not 0 < valid_fraction < 1:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
    root = Path(sysconfig.get_paths()["stdlib"])
    train, valid, hashes = [], [], {}
    for name in modules:
        path = root / f"{name}.py"
        if not path.is_file():
            raise ValueError(f"corpus module {name!r} not found at {path}")
        data = path.read_bytes()
        hashes[name] = hashlib.sha256(data).hexdigest()
        cut = int(len(data) * (1 - valid_fraction))
        train.append(data[:cut])
        valid.append(data[cut:])
    to_ids = lambda parts: torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).long()
    tr, va = to_ids(train), to_ids(valid)
    return Corpus(train=tr, valid=va, hashes=hashes, n_bytes=len(tr) + len(va))


DATA = ("source", "recall")


def recall_span(seq_len: int) -> int:
    """The distance at which a ``"recall"`` window repeats itself: half the window (its
    ``seq_len + 1`` bytes are a span of this length followed by the same span)."""
    return (seq_len + 2) // 2


def _windows(data: torch.Tensor, start: torch.Tensor, seq_len: int, mode: str) -> torch.Tensor:
    """``seq_len + 1`` bytes per start: consecutive bytes (``"source"``), or a span of
    :func:`recall_span` bytes followed by the same span again, cut to ``seq_len + 1``
    (``"recall"``: every byte of the second half is the byte one span earlier, so a model
    predicts it only if it sees that far back)."""
    if mode not in DATA:
        raise ValueError(f"data must be one of {DATA}, got {mode!r}")
    if mode == "source":
        return data[start[:, None] + torch.arange(seq_len + 1)]
    span = recall_span(seq_len)
    offsets = torch.arange(seq_len + 1) % span
    return data[start[:, None] + offsets]


def sample_batch(data: torch.Tensor, batch: int, seq_len: int, generator: torch.Generator,
                 mode: str = "source"):
    """Random windows: inputs ``(batch, seq_len)`` and next-byte targets (``mode``: see
    :func:`_windows`)."""
    start = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=generator)
    chunk = _windows(data, start, seq_len, mode)
    return chunk[:, :-1], chunk[:, 1:]


def valid_batches(data: torch.Tensor, seq_len: int, max_windows: int, mode: str = "source"):
    """The fixed validation set: consecutive non-overlapping windows from the start."""
    n = min(max_windows, (len(data) - 1) // seq_len)
    chunk = _windows(data, torch.arange(n) * seq_len, seq_len, mode)
    return chunk[:, :-1], chunk[:, 1:]


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------
HEAD_DIM = 16


class Attention(nn.Module):
    """Multi-head causal softmax attention with RoPE: full (``window=None``) or restricted to
    SWR's jagged window of block ``window`` (blocks ``t−1`` and ``t``), computed in blocks."""

    def __init__(self, d: int, window: int | None = None):
        super().__init__()
        if d % HEAD_DIM:
            raise ValueError(f"d_model must be a multiple of {HEAD_DIM}, got {d}")
        self.heads = d // HEAD_DIM
        self.window = window
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, L, d = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = rope(q), rope(k)
        if self.window is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = swa_blocked(q, k, v, self.window)
        return self.out(y.transpose(1, 2).reshape(B, L, d))


class Phalanx(nn.Module):
    """The Phalanx mixer: per head (16 channels) one decay ``a = σ(W_a x + b_a)``; per channel a
    sigmoid pre-gate ``B``, a linear post-gate ``C`` and values ``V``;
    ``h = SWR(a, B ⊙ V)``, ``y = C ⊙ h + V``, ``out = W_o y``. ``bc_heads`` < heads shares
    B and C across groups of heads (GQA-style). ``full=True`` replaces the truncated SWR by the
    full recurrence (:func:`kernels.swr.scan`): the same layer without truncation, the arm that
    measures what truncation costs."""

    def __init__(self, d: int, block: int = 16, bc_heads: int | None = None,
                 decay_range: tuple[float, float] = (0.5, 0.95), impl: str = "auto",
                 full: bool = False):
        super().__init__()
        if d % HEAD_DIM:
            raise ValueError(f"d_model must be a multiple of {HEAD_DIM}, got {d}")
        self.heads = d // HEAD_DIM
        self.bc_heads = bc_heads or self.heads
        if self.heads % self.bc_heads:
            raise ValueError(f"bc_heads={self.bc_heads} must divide heads={self.heads}")
        self.block, self.impl, self.full = block, impl, full
        self.decay = nn.Linear(d, self.heads)
        self.bc = nn.Linear(d, 2 * self.bc_heads * HEAD_DIM)
        self.value = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        with torch.no_grad():  # [choice] initial decays spread over decay_range across heads
            lo, hi = decay_range
            target = torch.linspace(lo, hi, self.heads)
            self.decay.bias.copy_(torch.log(target / (1 - target)))
            self.decay.weight.mul_(0.1)

    def forward(self, x):
        B_, L, d = x.shape
        a = torch.sigmoid(self.decay(x)).clamp(min=1e-6).transpose(1, 2)  # (B, H, L)
        b, c = self.bc(x).view(B_, L, 2, self.bc_heads, HEAD_DIM).unbind(2)
        rep = self.heads // self.bc_heads
        b = torch.sigmoid(b).repeat_interleave(rep, dim=2)
        c = c.repeat_interleave(rep, dim=2)
        v = self.value(x).view(B_, L, self.heads, HEAD_DIM)
        u = (b * v).transpose(1, 2).contiguous()
        h = scan(a.contiguous(), u) if self.full else swr(a.contiguous(), u, block=self.block,
                                                          impl=self.impl)
        y = c * h.transpose(1, 2) + v
        return self.out(y.reshape(B_, L, d))


MIXERS = {"attention": "G", "swa": "S", "phalanx": "P", "phalanx-full": "F", "swa-wide": "W"}


def make_mixer(kind: str, d: int, block: int, wide_block: int | None = None) -> nn.Module:
    """``G`` full attention, ``S`` SWA over the jagged window of ``block``, ``P`` Phalanx, ``F``
    Phalanx with the full (untruncated) scan, ``W`` SWA over the jagged window of ``wide_block``
    (default ``4·block``)."""
    if kind == "G":
        return Attention(d)
    if kind == "S":
        return Attention(d, window=block)
    if kind == "W":
        return Attention(d, window=wide_block or 4 * block)
    if kind == "P":
        return Phalanx(d, block=block)
    if kind == "F":
        return Phalanx(d, block=block, full=True)
    raise ValueError(f"mixer code must be G (attention), S (SWA), W (wide SWA), P (Phalanx) or "
                     f"F (Phalanx, full scan), got {kind!r}")


class Block(nn.Module):
    def __init__(self, kind: str, d: int, block: int, mlp_ratio: float,
                 wide_block: int | None = None):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.mixer = make_mixer(kind, d, block, wide_block)
        self.mlp = SwiGLU(d, int(mlp_ratio * d))

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Byte-level pre-norm decoder; ``pattern`` names each layer's mixer: ``G`` full attention,
    ``S`` sliding-window attention, ``P`` Phalanx (e.g. ``"SSSG"``: an SWA 3:1 hybrid), ``F``
    Phalanx with the full scan, ``W`` SWA over the wider jagged window of ``wide_block``."""

    def __init__(self, pattern: str, d_model: int = 64, block: int = 16, mlp_ratio: float = 8 / 3,
                 vocab: int = 256, wide_block: int | None = None):
        super().__init__()
        if not pattern or set(pattern) - set(MIXERS.values()):
            raise ValueError(f"pattern must be a non-empty string over G/S/P/F/W, got {pattern!r}")
        self.pattern = pattern
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(k, d_model, block, mlp_ratio, wide_block) for k in pattern)
        self.norm = RMSNorm(d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x) @ self.embed.weight.T  # tied output head

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def hybrid_pattern(local: str, n_layers: int, ratio: int = 3) -> str:
    """``ratio`` local layers then one global, repeated: ``hybrid_pattern("P", 4) == "PPPG"``."""
    return "".join("G" if (i + 1) % (ratio + 1) == 0 else local for i in range(n_layers))


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
def unigram_loss(corpus: Corpus) -> float:
    """Cross-entropy (nats/byte) of the validation bytes under the training bytes' frequencies
    (add-one smoothing over the 256 byte values): the loss of a model that ignores context, the
    level a language model must get well below before a comparison of mixers means anything."""
    counts = torch.bincount(corpus.train.flatten().long(), minlength=256).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[corpus.valid.flatten().long()].mean())


@torch.no_grad()
def evaluate(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch: int = 32) -> float:
    """Mean next-byte cross-entropy (nats) over the fixed validation windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(inputs), batch):
        logits = model(inputs[i:i + batch])
        total += float(F.cross_entropy(logits.flatten(0, 1), targets[i:i + batch].flatten(),
                                       reduction="sum"))
        count += targets[i:i + batch].numel()
    model.train()
    return total / count


def train_lm(pattern: str, corpus: Corpus, *, root: int, rep: int = 0, steps: int, batch: int,
             seq_len: int, d_model: int = 64, block: int = 16, lr: float = 3e-3, eval_every: int = 50,
             valid_windows: int = 64, threads: int | None = 1, wide_block: int | None = None,
             data: str = "source") -> dict:
    """Train replicate ``rep`` of one model; returns validation loss curve, final loss, tokens/s,
    parameter count. Draws come from chapter seed ``root``: the initialisation from the sub-stream
    ``("lm-init", pattern, rep)``, the training batches from ``("lm-batches", rep)``, shared by
    every pattern, so the models of one replicate see the same batches (a paired comparison).

    ``threads``: PyTorch intra-op threads while training (restored afterwards). Models this
    small run faster on one thread than on two, and far faster on a shared machine.

    ``data``: ``"source"`` (windows of the corpus) or ``"recall"`` (each window a span of the
    corpus repeated once, :func:`_windows`: a data set where reach beyond the local window pays).
    The schedule follows ``steps`` (:func:`lr_factor`), so a run of half the steps is a complete
    run of its own, not the first half of a longer one."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _train(pattern, corpus, root=root, rep=rep, steps=steps, batch=batch, seq_len=seq_len,
                      d_model=d_model, block=block, lr=lr, eval_every=eval_every,
                      valid_windows=valid_windows, wide_block=wide_block, data=data)
    finally:
        torch.set_num_threads(previous)


def lm_point(pattern: str, seed: int, *, root: int, corpus_sha256: dict[str, str], **train_kw) -> dict:
    """One sweep point of the language-model comparison: replicate ``seed`` (the sweep's replicate
    index) of :func:`train_lm` with chapter seed ``root``, on the corpus named by
    ``corpus_sha256`` (module → SHA-256 of its source), read where the point runs. A worker whose
    Python has other standard-library sources is refused rather than trained on other data."""
    corpus = load_corpus(tuple(corpus_sha256))
    if corpus.hashes != dict(corpus_sha256):
        differ = sorted(m for m in corpus_sha256 if corpus.hashes.get(m) != corpus_sha256[m])
        raise ValueError(f"this worker's standard-library sources differ from the chapter's corpus "
                         f"({', '.join(differ)}): run the workers with the same Python as the chapter")
    return train_lm(pattern, corpus, root=root, rep=seed, **train_kw)


def lr_factor(step: int, steps: int) -> float:
    """The learning rate at optimizer step ``step`` (0-based) of ``steps``, as a fraction of the
    peak: a linear warm-up over the first tenth of the steps, then a cosine decay that reaches
    zero at ``steps`` — the last update runs at about ``(π/steps)²/4`` of the peak, so the end of a run
    is a plateau of its schedule, whatever its length."""
    warmup = max(1, steps // 10)
    return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))


def _train(pattern, corpus, *, root, rep, steps, batch, seq_len, d_model, block, lr, eval_every,
           valid_windows, wide_block=None, data="source") -> dict:
    seed_torch(root, "lm-init", pattern, rep)
    model = Decoder(pattern, d_model=d_model, block=block, wide_block=wide_block)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps))
    gen = torch_generator(root, "lm-batches", rep)
    vx, vy = valid_batches(corpus.valid, seq_len, valid_windows, data)
    curve_steps, curve = [0], [evaluate(model, vx, vy)]
    train_time = 0.0
    for step in range(1, steps + 1):
        x, y = sample_batch(corpus.train, batch, seq_len, gen, data)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        train_time += time.perf_counter() - t0
        if step % eval_every == 0 or step == steps:
            curve_steps.append(step)
            curve.append(evaluate(model, vx, vy))
    return {"pattern": pattern, "rep": rep, "steps": curve_steps, "valid_loss": curve,
            "final_valid_loss": curve[-1], "tokens_per_s": steps * batch * seq_len / train_time,
            "n_params": model.n_params()}


# ---------------------------------------------------------------------------------------------
# deciding the hybrids' comparison
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NonInferiority:
    """A one-sided paired t-test that the mean gap lies below ``margin`` (the null: it is at least
    ``margin``). ``upper``: the one-sided ``1 − alpha`` upper confidence bound of the mean gap;
    ``holds``: ``upper < margin``, which under the null happens with probability at most
    ``alpha`` (the rule's false-alarm rate). ``detectable``: the smallest distance between the true
    mean gap and the margin the test detects with probability ``power`` at ``alpha`` (``(t_α +
    t_power)·se``), ``None`` with fewer than two gaps. ``lower``: the matching lower bound, which
    says whether the first arm is also *better* at the same rate."""

    mean: float
    se: float
    n: int
    margin: float
    alpha: float
    upper: float
    lower: float
    holds: bool
    detectable: float | None
    all_below_zero: bool


def noninferiority(gaps, margin: float, alpha: float, power: float = 0.8) -> NonInferiority:
    """:class:`NonInferiority` of per-seed paired gaps (relative loss differences, first arm
    against the second) against ``margin`` at false-alarm rate ``alpha``."""
    from scipy import stats as st

    if not (0 < alpha < 0.5 and 0 < power < 1 and margin > 0):
        raise ValueError(f"need 0 < alpha < 1/2, 0 < power < 1 and margin > 0, got {alpha}, {power}, {margin}")
    d = np.asarray(gaps, dtype=float)
    n = d.size
    mean = float(d.mean()) if n else math.nan
    if n < 2 or not np.all(np.isfinite(d)):
        return NonInferiority(mean, math.inf, n, margin, alpha, math.inf, -math.inf, False, None,
                              bool(n and np.all(d < 0)))
    se = float(d.std(ddof=1) / math.sqrt(n))
    crit = float(st.t.isf(alpha, n - 1))
    return NonInferiority(mean, se, n, margin, alpha, mean + crit * se, mean - crit * se,
                          bool(mean + crit * se < margin),
                          (crit + float(st.t.isf(1 - power, n - 1))) * se, bool(np.all(d < 0)))


def step_doubling(gap_half, gap_full, tolerance: float, alpha: float = 0.05) -> dict:
    """Whether the paired gap is stable when the training steps double: runs of half the steps
    (each with its own complete schedule) against runs of all the steps, on the same seeds. The
    per-seed change ``gap_full − gap_half`` is paired; the gap counts as stable only when the
    two-sided ``1 − 2·alpha`` Student-t interval of its mean change lies within ``±tolerance``
    (an equivalence test, two one-sided tests at ``alpha``): a point estimate inside the band
    while its own noise is larger shows nothing. A comparison whose gap may still move by more
    than ``tolerance`` measures how fast each mixer learns, not where it ends. With fewer than
    two seeds the interval is unbounded and the gap not stable. Returns ``{"half", "full",
    "change", "se", "lower", "upper", "stable"}``."""
    from scipy import stats as st

    if not (0 < alpha < 0.5 and tolerance > 0):
        raise ValueError(f"need 0 < alpha < 1/2 and tolerance > 0, got {alpha}, {tolerance}")
    half_g, full_g = np.asarray(gap_half, float), np.asarray(gap_full, float)
    if half_g.shape != full_g.shape:
        raise ValueError(f"paired gaps need the same seeds, got {half_g.shape} and {full_g.shape}")
    d = full_g - half_g
    half, full = float(np.mean(half_g)), float(np.mean(full_g))
    change = float(np.mean(d)) if d.size else math.nan
    if d.size < 2 or not np.all(np.isfinite(d)):
        return {"half": half, "full": full, "change": change, "se": math.inf, "lower": -math.inf,
                "upper": math.inf, "stable": False}
    se = float(d.std(ddof=1) / math.sqrt(d.size))
    crit = float(st.t.isf(alpha, d.size - 1))
    lower, upper = change - crit * se, change + crit * se
    return {"half": half, "full": full, "change": change, "se": se, "lower": lower, "upper": upper,
            "stable": bool(-tolerance <= lower and upper <= tolerance)}


def wider_window_helps(narrow_losses, wide_losses, alpha: float) -> dict:
    """The positive control of a long-context regime: does the SWA hybrid with the wider window
    reach a lower validation loss than the narrow one, seed by seed (paired relative gaps
    ``wide/narrow − 1``), by a one-sided t-test at ``alpha``? Returns ``{"gaps", "mean", "upper",
    "holds"}`` (``upper``: the one-sided ``1 − alpha`` upper bound of the mean gap; ``holds``:
    it is below zero)."""
    from scipy import stats as st

    narrow, wide = np.asarray(narrow_losses, float), np.asarray(wide_losses, float)
    gaps = wide / narrow - 1
    if gaps.size < 2:
        return {"gaps": gaps.tolist(), "mean": float(gaps.mean()) if gaps.size else math.nan,
                "upper": math.inf, "holds": False}
    se = float(gaps.std(ddof=1) / math.sqrt(gaps.size))
    upper = float(gaps.mean() + st.t.isf(alpha, gaps.size - 1) * se)
    return {"gaps": gaps.tolist(), "mean": float(gaps.mean()), "upper": upper, "holds": bool(upper < 0)}


def comparison_design(test: NonInferiority, *, learned: bool, stable: bool, param_ratio: float,
                      max_param_ratio: float, context_control: bool | None) -> dict:
    """The numbers behind the comparison's :class:`lib.claims.Power`: ``detectable`` (the
    smallest distance from the margin the paired test detects, see :func:`noninferiority`),
    ``effect`` (the paper's "matched" gap 0 lies ``margin`` below the margin), ``ceiling`` (none:
    a relative gap is unbounded), ``control`` (the long-context positive control where it ran,
    else ``None``) and ``matched``: the arms are compared on equal terms only when their
    parameter counts lie within ``max_param_ratio`` (the batches are the same by construction),
    both hybrids learned more than byte frequencies (``learned``) and their gap is stable under
    step doubling (``stable``). Otherwise the gap measures how fast each mixer starts, not what
    it reaches, and decides nothing either way. Where the long-context positive control ran and
    failed (the wider SWA window does not help), the regime does not use the context the paper's
    claim is about: the arms are not compared where their difference matters, so ``matched`` is
    False too (a pass would otherwise read as reproduced). With fewer than two seeds nothing is
    detectable: ``detectable`` and ``effect`` are ``None`` and ``control`` False."""
    out = {"effect": test.margin, "ceiling": None,
           "matched": bool(param_ratio <= max_param_ratio and learned and stable
                           and context_control is not False),
           "detectable": test.detectable, "control": context_control}
    if test.detectable is None:
        out.update(detectable=None, effect=None, control=False)
    return out


def final_losses(records, pattern: str | None = None) -> np.ndarray:
    """The final validation loss of each run in ``records`` (of ``pattern`` only, when given),
    in replicate order: replicate ``k`` of every model saw the same batches, so two models'
    arrays are paired seed by seed."""
    return np.array([r["final_valid_loss"] for r in sorted(records, key=lambda r: r["rep"])
                     if pattern is None or r["pattern"] == pattern])


def estimable(value, spec: str) -> str:
    """``value`` formatted by ``spec``, or the words for a statistic that fewer than two seeds
    leave undefined (``None`` or not finite)."""
    return format(value, spec) if value is not None and np.isfinite(value) else \
        "not estimable from fewer than two seeds"
