"""Mean-field two-layer networks as particle systems, and F²BMLD.

A mean-field network is the average of ``N`` neurons (particles) ``x = (w, b, c)``:

    h(z; μ_N) = (1/N) Σ_i Ψ(z, x_i),      Ψ(z, x) = R · tanh(c) · tanh(wᵀz + b),

so it is *linear* in the empirical measure μ_N of the particles. ``Ψ`` is bounded by ``R``, as
the mean-field Langevin theory assumes. For a loss ``𝓛(μ) = Σ_j ℓ_j(h(z_j; μ))`` the first
variation is ``δ𝓛/δμ(x) = Σ_j ℓ'_j · Ψ(z_j, x)`` and one step of mean-field Langevin dynamics
(MFLD) for ``𝓛 + (ζ/2) E_μ‖x‖² + σ Ent(μ)`` moves every particle by

    x ← x − η (∇_x δ𝓛/δμ(x) + ζ x) + √(2ησ) ξ,      ξ ~ N(0, I).

Everything is batched: a leading dimension ``B`` holds independent runs (seeds, λ values,
data sets) that advance together, so a sweep costs a few large tensor operations per step.
The pre-activations and the particle gradient, each one pass over the (B, n, N) hidden
activations, are compiled (:mod:`lib.npiv.compiled`); ``compiled=False`` runs the same steps
as torch operations (the reference the compiled path is tested against).

F²BMLD (the paper's fully first-order bilevel MFLD) runs three particle systems on the
penalty Lagrangian of the two-stage least-squares problem:

    G(μ_a, μ_w) = ½ E (h_w(W) − h_a(A))²          (stage I: instrument model fits treatment model)
    F(μ_w)      = ½ E (Y − h_w(W))²                (stage II: instrument model fits the outcome)
    L_λ(μ_a, μ_w̃) = F(μ_w̃) + λ [G_σ(μ_a, μ_w̃) − min_μ G_σ(μ_a, μ)] + (ζ/2) E_{μ_a}‖x‖² + σ Ent(μ_a),

with ``G_σ = G + (ζ/2)E‖x‖² + σ Ent``. ``μ_w`` tracks ``argmin G_σ(μ_a, ·)``, ``μ_w̃`` minimises
``F + λ G_σ(μ_a, ·)`` (so its L2 weight is ``λζ`` and its temperature ``λσ``) and ``μ_a``
descends ``λ [G(μ_a, μ_w̃) − G(μ_a, μ_w)]``, whose first variation needs only the two
instrument models — no implicit differentiation.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from lib.npiv import compiled as kernels
from lib.seeding import torch_generator

Tensor = torch.Tensor
DTYPE = torch.float32


@dataclass
class Inputs:
    """Where a network is evaluated: ``h(z) + κ · h(z_next)`` per sample.

    ``z``: (B, n, d). ``z_next``/``kappa`` (optional, (B, n, d) and (B, n)) express a
    treatment that is a linear functional of the network, such as the off-policy-evaluation
    treatment ``Q(s, a) − γ(1 − done) Q(s', π(s'))``.
    """

    z: Tensor
    z_next: Tensor | None = None
    kappa: Tensor | None = None

    @property
    def batch(self) -> int:
        return self.z.shape[0]

    @property
    def dim(self) -> int:
        return self.z.shape[-1]


def as_inputs(z, z_next=None, kappa=None, batch: int | None = None) -> Inputs:
    """Convert arrays to an :class:`Inputs` (adding the batch dimension, repeated if asked)."""

    def t(a, extra):
        if a is None:
            return None
        a = torch.as_tensor(np.asarray(a), dtype=DTYPE)
        if a.dim() == extra:  # no batch dimension yet
            a = a.unsqueeze(0)
        if batch is not None and a.shape[0] == 1 and batch > 1:
            a = a.expand(batch, *a.shape[1:]).contiguous()
        return a

    return Inputs(t(z, 2), t(z_next, 2), t(kappa, 1))


@dataclass
class Hidden:
    """Hidden activations ``tanh(wᵀz + b)`` of a network at its inputs (and next inputs),
    computed once per step and shared by the forward value and the particle gradient."""

    inp: Inputs
    s: Tensor                  # (B, n, N)
    s_next: Tensor | None      # (B, n, N) or None


@dataclass
class MeanFieldNet:
    """The particles of ``B`` independent mean-field networks: ``x`` has shape (B, N, d + 2),
    columns ``[w (d), b, c]``; ``R`` bounds the output."""

    x: Tensor
    R: float = 4.0

    @staticmethod
    def init(batch: int, n_particles: int, dim: int, generator: torch.Generator,
             scale: float = 0.05, R: float = 4.0, dtype=DTYPE, offset: float = 0.0,
             plus: float | Tensor = 1.0) -> MeanFieldNet:
        """Particles drawn i.i.d. from N(0, scale² I) (the paper's small initialisation);
        ``scale`` is a number or one value per run, shape (B,).

        With ``offset`` m > 0 the output-weight coordinate ``c`` of the first ``round(plus·N)``
        particles is shifted by +m and that of the others by −m: a unimodal cloud at c = +m
        (``plus`` 1), its mirror image at c = −m (``plus`` 0) or a bimodal one in between
        (``plus``: a number or one fraction per run, shape (B,)). Since Ψ(z, −x) = Ψ(z, x), the
        clouds with fractions p and 1 − p are mirror images of one another."""
        scale = torch.as_tensor(scale, dtype=DTYPE)
        scale = scale.reshape(-1, 1, 1) if scale.dim() else scale
        x = scale * torch.randn(batch, n_particles, dim + 2, generator=generator, dtype=DTYPE)
        if offset:
            n_plus = torch.round(torch.as_tensor(plus, dtype=torch.float64).expand(batch) * n_particles)
            sign = torch.where(torch.arange(n_particles) < n_plus.unsqueeze(-1), 1.0, -1.0)
            x[..., -1] += offset * sign.to(DTYPE)
        return MeanFieldNet(x.to(dtype), R)

    @property
    def n_particles(self) -> int:
        return self.x.shape[1]

    def output_weights(self) -> Tensor:
        """``R tanh(c)`` per particle, (B, N)."""
        return self.R * torch.tanh(self.x[..., -1])

    def hidden(self, inp: Inputs | Tensor, compiled: bool = True,
               out: tuple[Tensor | None, Tensor | None] = (None, None)) -> Hidden:
        """The hidden activations at ``inp``; ``out`` optionally gives buffers (B, n, N) to write
        them into (compiled path only)."""
        if isinstance(inp, Tensor):
            inp = Inputs(inp)
        if compiled and not self.x.requires_grad:
            s = self._activation(inp.z, out[0])
            s_next = None if inp.z_next is None else self._activation(inp.z_next, out[1])
            return Hidden(inp, s, s_next)
        w, b = self.x[..., :-2].transpose(1, 2), self.x[..., -2].unsqueeze(1)
        s = torch.tanh(torch.baddbmm(b, inp.z, w))
        s_next = None if inp.z_next is None else torch.tanh(torch.baddbmm(b, inp.z_next, w))
        return Hidden(inp, s, s_next)

    def _activation(self, z: Tensor, out: Tensor | None) -> Tensor:
        if out is None:
            out = torch.empty(z.shape[0], z.shape[1], self.n_particles, dtype=self.x.dtype)
        kernels.pre_activation(self.x.numpy(), z.contiguous().numpy(), out.numpy())
        return out.tanh_()

    def value(self, hid: Hidden) -> Tensor:
        """The network's value at the inputs of ``hid``, (B, n)."""
        g = self.output_weights().unsqueeze(-1)  # (B, N, 1)
        out = (hid.s @ g).squeeze(-1) / self.n_particles
        if hid.s_next is not None:
            out = out + hid.inp.kappa * (hid.s_next @ g).squeeze(-1) / self.n_particles
        return out

    def __call__(self, inp: Inputs | Tensor, compiled: bool = True) -> Tensor:
        return self.value(self.hidden(inp, compiled))

    def first_variation_grad(self, hid: Hidden, weights: Tensor, compiled: bool = True) -> Tensor:
        """∇_x of ``δ𝓛/δμ(x) = Σ_j weights_j · Ψ(j, x)`` at every particle, (B, N, d+2),
        where Ψ(j, x) is the neuron's contribution to the network's value at input ``j``.

        ``weights`` (B, n) are the derivatives ℓ'_j of the loss with respect to the network's
        value at each input (for a mean squared error, residual / n)."""
        tc = torch.tanh(self.x[..., -1])
        if compiled and not self.x.requires_grad:
            inp, grad = hid.inp, torch.empty_like(self.x)
            if hid.s_next is None:  # the second term has no samples
                s2, z2, r2 = hid.s[:, :0], inp.z[:, :0], weights[:, :0]
            else:
                s2, z2, r2 = hid.s_next, inp.z_next, weights * inp.kappa
            arrays = (hid.s, inp.z, weights, s2, z2, r2, self.R * tc, self.R * (1 - tc * tc))
            kernels.particle_grad(*(a.contiguous().numpy() for a in arrays), grad.numpy())
            return grad
        g = (self.R * tc).unsqueeze(1)  # (B, 1, N)
        grad = torch.empty_like(self.x)
        terms = [(hid.inp.z, hid.s, weights)]
        if hid.s_next is not None:
            terms.append((hid.inp.z_next, hid.s_next, weights * hid.inp.kappa))
        gw = gb = gc = 0
        for z, s, r in terms:
            r = r.unsqueeze(-1)
            m = r * (1 - s * s) * g  # (B, n, N): ∂/∂(pre-activation)
            gw = gw + m.transpose(1, 2) @ z
            gb = gb + m.sum(1)
            gc = gc + (r * s).sum(1)
        grad[..., :-2] = gw
        grad[..., -2] = gb
        grad[..., -1] = self.R * (1 - tc * tc) * gc
        return grad

    def asymmetry(self) -> Tensor:
        """``E_μ tanh(c)`` per run, (B,): the mean sign of the output weights. The objective is
        unchanged under x → −x (Ψ(z, −x) = Ψ(z, x)), so a unique minimiser of the entropy-
        regularised objective is symmetric and has asymmetry 0; noiseless descent keeps the
        split of its initial particles between the two mirror-image basins."""
        return torch.tanh(self.x[..., -1]).mean(-1)

    def second_moment(self) -> Tensor:
        """E_μ‖x‖² per run, (B,)."""
        return (self.x * self.x).sum(-1).mean(-1)

    def gaussian_neg_entropy(self, unbiased: bool = True) -> Tensor:
        """``∫ μ log μ`` of the Gaussian with the particles' mean and covariance, per run:
        ``−½ log det(2πe Σ)``. The Gaussian has the largest entropy for a given covariance,
        so this is a lower bound on the particle measure's (smoothed) negative entropy.

        ``log det`` of the sample covariance of N draws is biased low by
        :func:`logdet_bias` (N, d) — about −d(d + 1)/(2N), a 1/N term of the same order as the
        particle error the theory bounds; with ``unbiased`` it is removed (exact for Gaussian
        particles)."""
        xc = (self.x - self.x.mean(1, keepdim=True)).double()
        n = self.x.shape[1]
        cov = xc.transpose(1, 2) @ xc / (n - 1)
        d = cov.shape[-1]
        logdet = torch.logdet(cov) - (logdet_bias(n, d) if unbiased else 0.0)
        return (-0.5 * (logdet + d * np.log(2 * np.pi * np.e))).to(self.x.dtype)


def logdet_bias(n: int, d: int) -> float:
    """``E log det S − log det Σ`` for the sample covariance S (divisor n − 1) of n Gaussian
    draws in d dimensions: ``Σ_{i=1..d} ψ((n − i)/2) + d log(2/(n − 1))`` ((n − 1)S is Wishart)."""
    from scipy.special import digamma

    return float(sum(digamma((n - i) / 2) for i in range(1, d + 1)) + d * np.log(2 / (n - 1)))


def langevin_step(net: MeanFieldNet, drift: Tensor, eta: Tensor | float, zeta: Tensor | float,
                  temperature: Tensor | float, generator: torch.Generator) -> None:
    """One MFLD step in place: ``x ← x − η(drift + ζx) + √(2ησ) ξ``. Step, L2 weight and
    temperature are scalars or one value per run, shape (B,)."""
    _langevin_update(net, drift, langevin_coefficients(eta, zeta, temperature), generator)


def langevin_coefficients(eta: Tensor | float, zeta: Tensor | float,
                          temperature: Tensor | float) -> tuple[Tensor, Tensor, Tensor]:
    """``(η, ζ, √(2ησ))`` of :func:`langevin_step`, each a scalar or (B, 1, 1)."""
    def per_run(v):
        v = torch.as_tensor(v, dtype=DTYPE)
        return v.reshape(-1, 1, 1) if v.dim() else v

    eta, zeta, temperature = per_run(eta), per_run(zeta), per_run(temperature)
    return eta, zeta, torch.sqrt(2 * eta * temperature)


def _langevin_update(net: MeanFieldNet, drift: Tensor, coef: tuple[Tensor, Tensor, Tensor],
                     generator: torch.Generator) -> None:
    eta, zeta, noise_scale = coef
    noise = torch.randn(net.x.shape, generator=generator, dtype=DTYPE)
    net.x.sub_(eta * (drift + zeta * net.x)).add_(noise_scale * noise)


# --------------------------------------------------------------------------- the NPIV problem
@dataclass
class IVData:
    """An NPIV sample in batched tensors: treatment inputs ``A``, instruments ``W`` (B, n, d_w)
    and outcomes ``Y`` (B, n)."""

    A: Inputs
    W: Tensor
    Y: Tensor

    @property
    def n(self) -> int:
        return self.Y.shape[1]


@dataclass
class Lagrangian:
    """The pieces of L_λ at one iterate (each (B,)). The entropy of an empirical measure of
    particles is not defined; each ``Ent(μ)`` is replaced by that of the Gaussian with the
    particles' covariance (:meth:`MeanFieldNet.gaussian_neg_entropy`)."""

    F: Tensor          # ½ E (Y − h_w̃(W))²
    G_tilde: Tensor    # ½ E (h_w̃(W) − h_a(A))²
    G_inner: Tensor    # ½ E (h_w(W) − h_a(A))², the tracked value of min_μ G(μ_a, μ)
    value: Tensor      # L_λ


def lagrangian_from_values(ha: Tensor, hw: Tensor, hwt: Tensor, Y: Tensor, lam: Tensor,
                           zeta: float, sigma, regs: tuple[Tensor, Tensor, Tensor]) -> Lagrangian:
    """L_λ from the three networks' values on the sample and their regularisers
    ``(ζ/2) E‖x‖² + σ Ent`` per unit σ-weight, ``regs = (a, w, w̃)`` as returned by
    :func:`regulariser`."""
    F = 0.5 * ((Y - hwt) ** 2).mean(-1)
    Gt = 0.5 * ((hwt - ha) ** 2).mean(-1)
    Gi = 0.5 * ((hw - ha) ** 2).mean(-1)
    ra, rw, rwt = regs
    return Lagrangian(F, Gt, Gi, F + lam * (Gt + rwt - Gi - rw) + ra)


def regulariser(net: MeanFieldNet, zeta: float, sigma) -> Tensor:
    """``(ζ/2) E_μ‖x‖² + σ Ent(μ)`` with the Gaussian stand-in for the entropy, (B,)."""
    return 0.5 * zeta * net.second_moment() + torch.as_tensor(sigma) * net.gaussian_neg_entropy()


def lagrangian(a: MeanFieldNet, w: MeanFieldNet, wt: MeanFieldNet, data: IVData,
               lam, zeta: float, sigma) -> Lagrangian:
    """L_λ(μ_a, μ_w̃) with min_μ G_σ(μ_a, μ) replaced by its tracker μ_w (what the algorithm
    sees)."""
    lam = torch.as_tensor(lam, dtype=DTYPE)
    regs = tuple(regulariser(m, zeta, sigma) for m in (a, w, wt))
    return lagrangian_from_values(a(data.A), w(data.W), wt(data.W), data.Y, lam, zeta, sigma,
                                  regs)


@dataclass
class F2BMLDConfig:
    """Hyper-parameters of F²BMLD [step-size rule reconstructed]. μ_w̃ and μ_a step with
    h = η/(1 + λ), since the smoothness of F + λG grows like 1 + λ. With ``common_step``
    μ_w steps with the same h: the three systems then discretise one coupled mean-field
    Langevin flow on a single clock t = k·h (the flow the convergence theorem analyses).
    Without it μ_w steps with η, a faster time scale for the tracker."""

    n_particles: int = 64
    steps: int = 1500
    eta: float = 0.5
    zeta: float = 1e-3        # L2 weight ζ
    sigma: float = 1e-3       # temperature σ (μ_a and μ_w; μ_w̃ runs at λσ)
    R: float = 4.0
    init_scale: float = 0.05  # or one value per run, shape (B,)
    init_offset: float = 0.0  # shift ±m of the initial output weights c (MeanFieldNet.init)
    init_plus: float | Tensor = 1.0  # the fraction shifted by +m: a number or one per run (B,)
    inner_steps: int = 1      # steps of μ_w and μ_w̃ per step of μ_a
    polish_steps: int = 0     # extra steps on a copy of μ_w to measure min G (0: use μ_w)
    record_every: int = 10
    common_step: bool = False  # one step h = η/(1+λ) for all three systems
    tracker_steps: int = 1     # steps of μ_w (step η) per step of μ_w̃: μ_w ≈ argmin G_σ(μ_a, ·)
    flow_step: float | None = None  # if set, h for every run (equal flow time t = k·h for all λ)
    float64: bool = False      # run the particles in double precision (for gaps near 1e-8)
    anneal_factor: float = 1.0  # annealing: the run starts at this multiple of every temperature
    anneal_steps: int = 0       # ... which falls linearly to 1 over these steps, then holds (the
    #                             Lagrangian is always recorded at ``sigma``)


@dataclass
class F2BMLDRun:
    a: MeanFieldNet
    w: MeanFieldNet
    wt: MeanFieldNet
    lam: Tensor
    steps: np.ndarray                      # iterations at which L_λ was recorded
    dt: np.ndarray                         # (B,) step h = η/(1+λ) of μ_a: flow time t = k·h
    L: np.ndarray                          # (len(steps), B) L_λ, inner minimum polished
    snapshots: list = field(default_factory=list)  # particles of μ_a at chosen steps
    L_tracker: np.ndarray | None = None    # (len(steps), B) L_λ with the tracker μ_w as is
    asymmetry: np.ndarray | None = None    # (len(steps), B) E tanh(c) of μ_a (MeanFieldNet.asymmetry)
    energy: np.ndarray | None = None       # (len(steps), B) L_tracker without its σ·Ent terms


def _double(net: MeanFieldNet) -> MeanFieldNet:
    return MeanFieldNet(net.x.double(), net.R)


def _double_data(data: IVData) -> IVData:
    def d(v):
        return None if v is None else v.double()

    return IVData(Inputs(d(data.A.z), d(data.A.z_next), d(data.A.kappa)), d(data.W), d(data.Y))


def polish_inner(w: MeanFieldNet, ha: Tensor, data: IVData, cfg: F2BMLDConfig,
                 gen: torch.Generator, compiled: bool = True) -> MeanFieldNet:
    """A better estimate of ``argmin_μ G_σ(μ_a, μ)`` for measuring L_λ: ``cfg.polish_steps``
    more MFLD steps on a copy of the tracker μ_w (the run itself is left untouched)."""
    wc = MeanFieldNet(w.x.clone(), w.R)
    for _ in range(cfg.polish_steps):
        hid = wc.hidden(data.W, compiled)
        langevin_step(wc, wc.first_variation_grad(hid, (wc.value(hid) - ha) / data.n, compiled),
                      cfg.eta, cfg.zeta, cfg.sigma, gen)
    return wc


def _flushing_denormal() -> bool:
    """Whether this thread flushes subnormal floats to zero (torch has no getter: a subnormal
    operand reads as zero when it does)."""
    return torch.tensor([1e-310], dtype=torch.float64).mul(1.0).item() == 0.0


@contextlib.contextmanager
def flush_denormal():
    """Flush subnormal floats to zero (``torch.set_flush_denormal``) inside the block only; the
    previous setting is restored on the way out."""
    was = _flushing_denormal()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was)


def f2bmld(data: IVData, lam, cfg: F2BMLDConfig, root: int, key: tuple = (),
           snapshot_at: tuple[int, ...] = (), compiled: bool = True) -> F2BMLDRun:
    """Run F²BMLD on a batch of NPIV problems, one λ per run (``lam``: scalar or (B,)).

    The particles' initialisation and Langevin noise are drawn from the sub-stream
    ``("f2bmld", *key)`` of chapter seed ``root``, the polishing steps that measure L_λ from
    ``("f2bmld-measure", *key)`` (so measuring never moves the run).

    Returns the three particle systems, the recorded Lagrangian and, if asked, copies of the
    treatment particles at the iterations ``snapshot_at``. ``compiled=False`` runs every step
    as torch operations (the same draws; equal to rounding)."""
    with flush_denormal():  # subnormal floats slow tanh's tails down by 10-100x
        return _f2bmld(data, lam, cfg, root, key, snapshot_at, compiled)


def _f2bmld(data: IVData, lam, cfg: F2BMLDConfig, root: int, key: tuple,
            snapshot_at: tuple[int, ...], compiled: bool) -> F2BMLDRun:
    B = data.Y.shape[0]
    gen = torch_generator(root, "f2bmld", *key)
    measure_gen = torch_generator(root, "f2bmld-measure", *key)
    lam = torch.as_tensor(lam, dtype=DTYPE).expand(B).clone()
    d_a, d_w = data.A.dim, data.W.shape[-1]
    dtype = torch.float64 if cfg.float64 else DTYPE
    if cfg.float64:
        data = _double_data(data)
    shape = dict(offset=cfg.init_offset, plus=cfg.init_plus)
    a = MeanFieldNet.init(B, cfg.n_particles, d_a, gen, cfg.init_scale, cfg.R, dtype, **shape)
    w = MeanFieldNet.init(B, cfg.n_particles, d_w, gen, cfg.init_scale, cfg.R, dtype, **shape)
    wt = MeanFieldNet.init(B, cfg.n_particles, d_w, gen, cfg.init_scale, cfg.R, dtype, **shape)
    eta = cfg.eta / (1 + lam) if cfg.flow_step is None else torch.full_like(lam, cfg.flow_step)
    lam_col = lam.unsqueeze(-1)
    n = data.n
    rec_steps, rec_L, rec_L_tracker, rec_asym, rec_E, snaps = [], [], [], [], [], []
    data64 = _double_data(data)
    # the step coefficients of each system, (η, ζ, √(2ησ)), computed once
    def coefficients(sigma):
        return (langevin_coefficients(eta if cfg.common_step else cfg.eta, cfg.zeta, sigma),
                langevin_coefficients(eta, lam * cfg.zeta, lam * sigma),
                langevin_coefficients(cfg.eta, cfg.zeta, sigma),
                langevin_coefficients(eta, cfg.zeta, sigma))

    step_w, step_wt, step_tracker, step_a = coefficients(cfg.sigma)
    buffers = {}  # each system's hidden activations, rewritten in place every step

    def hidden(net, inp, name):
        if not compiled:
            return net.hidden(inp, compiled=False)
        inp = inp if isinstance(inp, Inputs) else Inputs(inp)
        if name not in buffers:
            shape = (B, inp.z.shape[1], net.n_particles)
            buffers[name] = tuple(None if z is None else torch.empty(shape, dtype=dtype)
                                  for z in (inp.z, inp.z_next))
        return net.hidden(inp, out=buffers[name])

    for k in range(cfg.steps + 1):
        if k < cfg.anneal_steps:  # the annealed temperature of this step, then σ itself
            hot = 1.0 + (cfg.anneal_factor - 1.0) * (1.0 - k / cfg.anneal_steps)
            step_w, step_wt, step_tracker, step_a = coefficients(
                torch.as_tensor(cfg.sigma, dtype=DTYPE) * hot)
        elif k == cfg.anneal_steps and k:
            step_w, step_wt, step_tracker, step_a = coefficients(cfg.sigma)
        Sa = hidden(a, data.A, "a")
        ha = a.value(Sa)
        for j in range(cfg.inner_steps):
            Sw, Swt = hidden(w, data.W, "w"), hidden(wt, data.W, "wt")
            hw, hwt = w.value(Sw), wt.value(Swt)
            if j == 0 and (k % cfg.record_every == 0 or k == cfg.steps):
                # measured in float64: the gaps of interest reach 1e-7 of L, near float32's
                # resolution
                a64, w64, wt64 = (_double(m) for m in (a, w, wt))
                ha64, hwt64 = a64(data64.A, compiled), wt64(data64.W, compiled)
                w_meas = w64
                if cfg.polish_steps:
                    w_meas = _double(polish_inner(w, ha, data, cfg, measure_gen, compiled))
                regs = tuple(regulariser(m, cfg.zeta, cfg.sigma) for m in (a64, w_meas, wt64))
                L = lagrangian_from_values(ha64, w_meas(data64.W, compiled), hwt64, data64.Y, lam,
                                           cfg.zeta, cfg.sigma, regs)
                rec_steps.append(k)
                rec_asym.append(a.asymmetry().numpy().astype(np.float64))
                rec_L.append(L.value.numpy().astype(np.float64))
                if cfg.polish_steps:  # else μ_w as is was the measure: the same numbers
                    regs = tuple(regulariser(m, cfg.zeta, cfg.sigma) for m in (a64, w64, wt64))
                    L = lagrangian_from_values(ha64, w64(data64.W, compiled), hwt64, data64.Y, lam,
                                               cfg.zeta, cfg.sigma, regs)
                rec_L_tracker.append(L.value.numpy().astype(np.float64))
                # the same objective without the entropy terms: comparable across temperatures
                regs0 = tuple(0.5 * cfg.zeta * m.second_moment() for m in (a64, w64, wt64))
                E = lagrangian_from_values(ha64, w64(data64.W, compiled), hwt64, data64.Y, lam,
                                           cfg.zeta, 0.0, regs0)
                rec_E.append(E.value.numpy().astype(np.float64))
            if k == cfg.steps:
                break
            # μ_w: argmin G(μ_a, ·), stage I for the current treatment model
            grad_w = w.first_variation_grad(Sw, (hw - ha) / n, compiled)
            # μ_w̃: argmin F + λ G(μ_a, ·), with L2 weight λζ and temperature λσ
            grad_wt = wt.first_variation_grad(Swt, ((hwt - data.Y) + lam_col * (hwt - ha)) / n,
                                              compiled)
            _langevin_update(w, grad_w, step_w, gen)
            _langevin_update(wt, grad_wt, step_wt, gen)
            for _ in range(cfg.tracker_steps - 1):  # keep μ_w near the inner minimum
                Sw = hidden(w, data.W, "w")
                _langevin_update(w, w.first_variation_grad(Sw, (w.value(Sw) - ha) / n, compiled),
                                 step_tracker, gen)
        if k in snapshot_at:
            snaps.append((k, a.x.clone()))
        if k == cfg.steps:
            break
        # μ_a: λ [G(μ_a, μ_w̃) − G(μ_a, μ_w)] has first variation λ ⟨h_w − h_w̃, Ψ(A, ·)⟩,
        # evaluated at the instrument models of the last inner step
        grad_a = a.first_variation_grad(Sa, lam_col * (hw - hwt) / n, compiled)
        _langevin_update(a, grad_a, step_a, gen)
    return F2BMLDRun(a, w, wt, lam, np.array(rec_steps), eta.numpy().astype(np.float64),
                     np.array(rec_L), snaps,
                     np.array(rec_L_tracker), np.array(rec_asym), np.array(rec_E))
