"""Baselines for NPIV: sieve 2SLS and kernel IV (closed forms) and DFIV (deep features with
closed-form ridge stages).

All three estimate ``h`` in ``E[Y | W] = E[h(A) | W]`` by two regressions: stage I projects
treatment features on instrument features, stage II regresses ``Y`` on the projected
treatment features. A treatment may be a linear functional of ``h`` (off-policy evaluation):
it is given as ``(z, z_next, kappa)`` and its features are ``φ(z) + κ φ(z_next)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lib.population import adam_step
from lib.seeding import seed_torch, stream


def _sq_dists(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum((x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2 * x @ y.T, 0.0)


def median_bandwidth(x: np.ndarray) -> float:
    """The median heuristic: the median pairwise distance of (up to 500 of) the points."""
    d = np.sqrt(_sq_dists(x[:500], x[:500]))
    return float(np.median(d[np.triu_indices(len(d), 1)]))


def gauss_kernel(x: np.ndarray, y: np.ndarray, bandwidth: float) -> np.ndarray:
    return np.exp(-_sq_dists(x, y) / (2 * bandwidth**2))


def two_stage_least_squares(psi_a: np.ndarray, phi_w: np.ndarray, y: np.ndarray,
                            ridge1: float = 1e-6, ridge2: float = 1e-6) -> np.ndarray:
    """Coefficients θ of ``h = ψᵀθ`` from treatment features ``psi_a`` (n, p), instrument
    features ``phi_w`` (n, q) and outcomes ``y``: stage I ``ψ̂ = P ψ`` with the ridge
    projection ``P = Φ(ΦᵀΦ + nλ₁I)⁻¹Φᵀ``; stage II ``θ = (ψ̂ᵀψ̂ + nλ₂I)⁻¹ ψ̂ᵀ y``.
    With ``λ₁ = λ₂ = 0`` and ``p = q`` this is the textbook 2SLS (ΦᵀΨ)⁻¹Φᵀy."""
    n = len(y)
    q = phi_w.shape[1]
    coef1 = np.linalg.solve(phi_w.T @ phi_w + n * ridge1 * np.eye(q), phi_w.T @ psi_a)
    psi_hat = phi_w @ coef1
    p = psi_a.shape[1]
    return np.linalg.solve(psi_hat.T @ psi_hat + n * ridge2 * np.eye(p), psi_hat.T @ y)


@dataclass
class Sieve2SLS:
    """2SLS on Gaussian radial-basis sieves (``n_basis`` centres drawn from the sample, the
    median-heuristic bandwidth) plus a constant, for treatment and instrument alike."""

    n_basis: int = 50
    ridge: float = 1e-4

    def fit(self, A: np.ndarray, W: np.ndarray, Y: np.ndarray, rng: np.random.Generator,
            z_next: np.ndarray | None = None, kappa: np.ndarray | None = None):
        """Fit on treatment inputs ``A`` (with ``z_next``/``kappa`` the treatment is the
        functional ``h(A) + κ h(z_next)``, whose features are ``ψ(A) + κ ψ(z_next)``)."""
        idx_a = rng.choice(len(A), self.n_basis, replace=False)
        idx_w = rng.choice(len(W), self.n_basis, replace=False)
        self.ca, self.cw = A[idx_a], W[idx_w]
        self.ba, self.bw = median_bandwidth(A), median_bandwidth(W)
        psi = self._fa(A)
        if z_next is not None:
            psi = psi + np.asarray(kappa)[:, None] * self._fa(z_next)
        self.theta = two_stage_least_squares(psi, self._fw(W), Y, self.ridge, self.ridge)
        return self

    def _fa(self, A):
        return np.hstack([np.ones((len(A), 1)), gauss_kernel(A, self.ca, self.ba)])

    def _fw(self, W):
        return np.hstack([np.ones((len(W), 1)), gauss_kernel(W, self.cw, self.bw)])

    def predict(self, A: np.ndarray) -> np.ndarray:
        return self._fa(A) @ self.theta


@dataclass
class KernelIV:
    """Kernel instrumental-variable regression (Singh, Sahani & Gretton, 2019), closed form.

    The sample is split in halves: stage I is a kernel ridge regression of the treatment's
    feature map on the instruments (half 1), stage II a ridge regression of ``Y`` (half 2)
    on the projected features. The two ridge parameters are chosen from a grid by the
    method's out-of-sample stage losses (stage I on half 2, stage II on half 1)."""

    grid: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)

    def fit(self, A: np.ndarray, W: np.ndarray, Y: np.ndarray, rng: np.random.Generator,
            z_next: np.ndarray | None = None, kappa: np.ndarray | None = None):
        """Fit on treatment inputs ``A``. With ``z_next``/``kappa`` the treatment is the
        functional ``h(A) + κ h(z_next)``: its feature map is ``k(A, ·) + κ k(z_next, ·)`` and
        the treatment Gram matrices combine the four kernel blocks accordingly."""
        perm = rng.permutation(len(Y))
        i1, i2 = perm[: len(Y) // 2], perm[len(Y) // 2:]
        self.ba, bw = median_bandwidth(A), median_bandwidth(W)
        if z_next is None:
            z_next, kappa = A, np.zeros(len(Y))
        kappa = np.asarray(kappa, float)
        self.A1, self.N1, self.k1 = A[i1], z_next[i1], kappa[i1]

        def gram(i, j):  # ⟨k(A_i,·) + κ_i k(N_i,·), k(A_j,·) + κ_j k(N_j,·)⟩
            k = gauss_kernel(A[i], A[j], self.ba)
            k = k + gauss_kernel(A[i], z_next[j], self.ba) * kappa[j][None, :]
            k = k + kappa[i][:, None] * gauss_kernel(z_next[i], A[j], self.ba)
            return k + kappa[i][:, None] * gauss_kernel(z_next[i], z_next[j], self.ba) \
                * kappa[j][None, :]

        KA11, KA12, KA22 = gram(i1, i1), gram(i1, i2), gram(i2, i2)
        KW11 = gauss_kernel(W[i1], W[i1], bw)
        KW12 = gauss_kernel(W[i1], W[i2], bw)
        n1, n2 = len(i1), len(i2)

        def stage1(lam1):  # (n1, n2): coefficients of the projected features at W2
            return np.linalg.solve(KW11 + n1 * lam1 * np.eye(n1), KW12)

        def loss1(lam1):  # out-of-sample stage-I loss, in RKHS norm
            G = stage1(lam1)
            return np.trace(KA22 - 2 * KA12.T @ G + G.T @ KA11 @ G) / n2

        lam1 = min(self.grid, key=loss1)
        Wm = KA11 @ stage1(lam1)  # (n1, n2)

        def stage2(xi):
            return np.linalg.solve(Wm @ Wm.T + n2 * xi * KA11, Wm @ Y[i2])

        G1 = np.linalg.solve(KW11 + n1 * lam1 * np.eye(n1), KW11)  # projection at W1

        def loss2(xi):  # out-of-sample stage-II loss on half 1
            alpha = stage2(xi)
            return np.mean((Y[i1] - (KA11 @ G1).T @ alpha) ** 2)

        self.alpha = stage2(min(self.grid, key=loss2))
        return self

    def predict(self, A: np.ndarray) -> np.ndarray:
        """``h(A) = Σ_i α_i (k(A, A_i) + κ_i k(A, N_i))``."""
        k = gauss_kernel(A, self.A1, self.ba) + gauss_kernel(A, self.N1, self.ba) * self.k1
        return k @ self.alpha


# --------------------------------------------------------------------------------- DFIV
def _mlp(d_in: int, width: int, d_out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(d_in, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, d_out))


def _ridge(X: torch.Tensor, Y: torch.Tensor, lam: float) -> torch.Tensor:
    """argmin_B ‖Y − XB‖² + n λ ‖B‖² (differentiable)."""
    n, p = X.shape
    return torch.linalg.solve(X.T @ X + n * lam * torch.eye(p, dtype=X.dtype), X.T @ Y)


@dataclass
class DFIV:
    """Deep feature instrumental variable regression (Xu et al., 2021).

    ``h(a) = uᵀ[ψ_θ(a), 1]``; instrument features ``φ_ξ(w)``. Each iteration takes
    ``stage1_steps`` Adam steps on ξ for the stage-I ridge loss (treatment features on
    instrument features) and one Adam step on θ for the stage-II loss, differentiating
    through both closed-form ridge solutions. Both stages use the whole sample."""

    width: int = 32
    n_features: int = 16
    iterations: int = 300
    stage1_steps: int = 2
    lr: float = 1e-3
    ridge1: float = 1e-3
    ridge2: float = 1e-3

    def fit(self, z, W, Y, root: int, key: tuple = (), z_next=None, kappa=None):
        """Fit; the networks' initialisation is drawn from the sub-stream ``("dfiv-init", *key)``
        of chapter seed ``root`` (torch's global generator is left as it was)."""
        with torch.random.fork_rng():
            seed_torch(root, "dfiv-init", *key)
            self.psi = _mlp(z.shape[1], self.width, self.n_features).double()
            self.phi = _mlp(W.shape[1], self.width, self.n_features).double()
        t = lambda a: None if a is None else torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
        z, W, Y, z_next, kappa = t(z), t(W), t(Y)[:, None], t(z_next), t(kappa)
        opt_psi = torch.optim.Adam(self.psi.parameters(), lr=self.lr)
        opt_phi = torch.optim.Adam(self.phi.parameters(), lr=self.lr)
        ones = torch.ones(len(Y), 1, dtype=torch.float64)

        def treat():
            f = torch.cat([self.psi(z), ones], 1)
            if z_next is not None:
                f = f + kappa[:, None] * torch.cat([self.psi(z_next), ones], 1)
            return f

        def inst():
            return torch.cat([self.phi(W), ones], 1)

        for _ in range(self.iterations):
            target = treat().detach()
            for _ in range(self.stage1_steps):
                Fw = inst()
                V = _ridge(Fw, target, self.ridge1)
                loss1 = ((target - Fw @ V) ** 2).sum(1).mean()
                opt_phi.zero_grad()
                loss1.backward()
                opt_phi.step()
            Fw = inst().detach()
            V = _ridge(Fw, treat(), self.ridge1)
            pred = Fw @ V
            u = _ridge(pred, Y, self.ridge2)
            loss2 = ((Y - pred @ u) ** 2).mean()
            opt_psi.zero_grad()
            loss2.backward()
            opt_psi.step()
        with torch.no_grad():
            Fw = inst()
            pred = Fw @ _ridge(Fw, treat(), self.ridge1)
            self.u = _ridge(pred, Y, self.ridge2)
        return self

    def predict(self, z) -> np.ndarray:
        with torch.no_grad():
            zt = torch.as_tensor(np.asarray(z), dtype=torch.float64)
            f = torch.cat([self.psi(zt), torch.ones(len(zt), 1, dtype=torch.float64)], 1)
            return (f @ self.u).squeeze(1).numpy()


class _FlatMLP:
    """A :func:`_mlp` whose six parameters are views of one flat tensor, with the forward pass,
    the backward pass from the gradient of a loss with respect to the output, and Adam, all
    written out: the operations autograd and ``torch.optim.Adam`` run (the same matrix products,
    sums and elementwise updates in the same order), so the numbers are theirs, but with no
    graph to build and one tensor to update instead of six (tested against them)."""

    def __init__(self, module: torch.nn.Sequential, lr: float, betas: tuple[float, float],
                 weight_decay: float, eps: float = 1e-8):
        params = [p.detach() for p in module.parameters()]
        self.theta = torch.cat([p.reshape(-1) for p in params])
        self.grad = torch.empty_like(self.theta)
        self.params, self.grads = self._views(self.theta, params), self._views(self.grad, params)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.theta), torch.zeros_like(self.theta)
        self.lr, self.betas, self.weight_decay, self.eps, self.steps = lr, betas, weight_decay, eps, 0

    @staticmethod
    def _views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
        views, at = [], 0
        for p in like:
            views.append(flat[at:at + p.numel()].view(p.shape))
            at += p.numel()
        return views

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """The output (n,) and the activations the backward pass needs."""
        W1, b1, W2, b2, W3, b3 = self.params
        h1 = torch.relu(torch.addmm(b1, x, W1.t()))
        h2 = torch.relu(torch.addmm(b2, h1, W2.t()))
        return torch.addmm(b3, h2, W3.t())[:, 0], (x, h1, h2)

    def backward(self, d_out: torch.Tensor, saved: tuple, accumulate: bool = False) -> None:
        """Write (or, with ``accumulate``, add) the gradient for ``d_out`` = ∂loss/∂output."""
        x, h1, h2 = saved
        W1, _, W2, _, W3, _ = self.params
        g = d_out.unsqueeze(1)               # ∂loss/∂(output layer's pre-activation)
        for layer, (W, inp) in enumerate(((W3, h2), (W2, h1), (W1, x))):
            grad_W, grad_b = self.grads[4 - 2 * layer], self.grads[5 - 2 * layer]
            if accumulate:                   # ∂/∂W = gᵀ·input, ∂/∂b = Σ g
                grad_W.add_(g.t().mm(inp))
                grad_b.add_(g.sum(0))
            else:
                torch.mm(g.t(), inp, out=grad_W)
                torch.sum(g, 0, out=grad_b)
            if inp is not x:                 # through the layer and the ReLU below it
                g = torch.ops.aten.threshold_backward(g.mm(W), inp, 0)

    def adam_step(self) -> None:
        """``torch.optim.Adam``'s update (L2 weight decay added to the gradient)."""
        self.steps += 1
        adam_step([self.theta], [self.grad], [(self.exp_avg, self.exp_avg_sq)], self.steps, self.lr, self.betas,
                  self.eps, l2_decay=self.weight_decay)

    def load_into(self, module: torch.nn.Sequential) -> None:
        with torch.no_grad():
            for p, v in zip(module.parameters(), self.params):
                p.copy_(v)


def _mse_scale(weight: float, n: int) -> torch.Tensor:
    """``weight / n`` in float32, as autograd's backward of ``weight · mean(·)`` over n computes it."""
    return torch.tensor(weight, dtype=torch.float32) / n


def _mse_grad(e: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """∂/∂e of ``weight · mean(e²)`` as autograd computes it: ``(weight / n) · (2e)``, with
    ``scale`` from :func:`_mse_scale`."""
    return scale * (2 * e)


@dataclass
class AdamF2BMLD:
    """F²BMLD as the authors' released code trains it: the same three objectives as the
    mean-field version (μ_w on G, μ_w̃ on F + λG, μ_a on λ[G(·, w̃) − G(·, w)]), but each model a
    ReLU network with two hidden layers of ``width`` units trained by Adam (``lr``, ``betas``,
    L2 ``weight_decay``) without Langevin noise. Every iteration draws a stage-I minibatch for
    ``inner_steps`` steps of w and then of w̃, and a separate stage-II minibatch for one step of
    the treatment model (batches of ``batch`` transitions). Outcomes are used as given (for OPE,
    unscaled rewards)."""

    lam: float = 0.3
    width: int = 50
    iterations: int = 300
    inner_steps: int = 10
    batch: int = 32
    lr: float = 1e-3
    betas: tuple[float, float] = (0.5, 0.9)
    weight_decay: float = 1e-5

    def fit(self, z, W, Y, root: int, key: tuple = (), z_next=None, kappa=None,
            autograd: bool = False, trace_z=None, trace_every: int = 0):
        """Fit; initialisation from the sub-stream ``("adam-f2bmld-init", *key)`` and minibatches
        from ``("adam-f2bmld-batches", *key)`` of chapter seed ``root``. The steps are written
        out (:class:`_FlatMLP`); ``autograd=True`` takes them with autograd and
        ``torch.optim.Adam`` instead (the same numbers, slower). With ``trace_z`` and
        ``trace_every`` > 0 (written-out steps only) the mean of the treatment model over
        ``trace_z`` (for OPE, the start states: the estimate) is recorded after every
        ``trace_every``-th iteration, as ``self.trace`` = (iterations, values); recording draws
        nothing and leaves the fit unchanged."""
        with torch.random.fork_rng():
            seed_torch(root, "adam-f2bmld-init", *key)
            self.a = _mlp(z.shape[1], self.width, 1)
            w = _mlp(W.shape[1], self.width, 1)
            wt = _mlp(W.shape[1], self.width, 1)
        rng = stream(root, "adam-f2bmld-batches", *key)
        t = lambda v: None if v is None else torch.as_tensor(np.asarray(v), dtype=torch.float32)  # noqa: E731
        z, W, Y, z_next, kappa = t(z), t(W), t(Y), t(z_next), t(kappa)
        if autograd:
            return self._fit_autograd(z, W, Y, z_next, kappa, w, wt, rng)
        fa, fw, fwt = (_FlatMLP(m, self.lr, self.betas, self.weight_decay)
                       for m in (self.a, w, wt))
        half, lam, neg_lam = (_mse_scale(v, self.batch)
                              for v in (0.5, 0.5 * self.lam, -(0.5 * self.lam)))

        def treat(i):  # the treatment h_a(z) + κ h_a(z'), and what a's backward pass needs
            out, saved = fa.forward(z[i])
            if z_next is None:
                return out, [(saved, None)]
            out_next, saved_next = fa.forward(z_next[i])
            return out + kappa[i] * out_next, [(saved, None), (saved_next, kappa[i])]

        n = len(Y)
        traced = trace_z is not None and trace_every > 0
        tz = t(trace_z) if traced else None
        trace_k, trace_v = [], []
        for it in range(self.iterations):
            i1, i2 = (torch.as_tensor(rng.choice(n, self.batch, replace=False)) for _ in range(2))
            target, W1, Y1 = treat(i1)[0], W[i1], Y[i1]
            for _ in range(self.inner_steps):   # stage I: w ≈ argmin G(a, ·)
                hw, saved = fw.forward(W1)
                fw.backward(_mse_grad(hw - target, half), saved)
                fw.adam_step()
            for _ in range(self.inner_steps):   # w̃ ≈ argmin F + λ G(a, ·)
                hwt, saved = fwt.forward(W1)
                fwt.backward(-_mse_grad(Y1 - hwt, half) + _mse_grad(hwt - target, lam), saved)
                fwt.adam_step()
            W2 = W[i2]                          # stage II on its own batch
            hw, hwt = fw.forward(W2)[0], fwt.forward(W2)[0]
            ha, saved = treat(i2)
            d_ha = -_mse_grad(hwt - ha, lam) + -_mse_grad(hw - ha, neg_lam)
            for k, (s, kap) in enumerate(saved):
                fa.backward(d_ha if kap is None else d_ha * kap, s, accumulate=k > 0)
            fa.adam_step()
            if traced and (it + 1) % trace_every == 0:
                trace_k.append(it + 1)
                trace_v.append(float(fa.forward(tz)[0].mean()))
        fa.load_into(self.a)
        self.trace = (np.array(trace_k, int), np.array(trace_v, float))
        return self

    def _fit_autograd(self, z, W, Y, z_next, kappa, w, wt, rng):
        opts = [torch.optim.Adam(m.parameters(), lr=self.lr, betas=self.betas,
                                 weight_decay=self.weight_decay) for m in (self.a, w, wt)]

        def treat(i):
            out = self.a(z[i])[:, 0]
            return out if z_next is None else out + kappa[i] * self.a(z_next[i])[:, 0]

        def step(opt, loss):
            opt.zero_grad()
            loss.backward()
            opt.step()

        n = len(Y)
        for _ in range(self.iterations):
            i1, i2 = (torch.as_tensor(rng.choice(n, self.batch, replace=False)) for _ in range(2))
            with torch.no_grad():
                target = treat(i1)
            for _ in range(self.inner_steps):   # stage I: w ≈ argmin G(a, ·)
                step(opts[1], 0.5 * ((w(W[i1])[:, 0] - target) ** 2).mean())
            for _ in range(self.inner_steps):   # w̃ ≈ argmin F + λ G(a, ·)
                hwt = wt(W[i1])[:, 0]
                step(opts[2], 0.5 * ((Y[i1] - hwt) ** 2).mean()
                     + 0.5 * self.lam * ((hwt - target) ** 2).mean())
            with torch.no_grad():               # stage II on its own batch
                hw, hwt = w(W[i2])[:, 0], wt(W[i2])[:, 0]
            ha = treat(i2)
            step(opts[0], 0.5 * self.lam * (((hwt - ha) ** 2).mean() - ((hw - ha) ** 2).mean()))
        return self

    def predict(self, z) -> np.ndarray:
        with torch.no_grad():
            return self.a(torch.as_tensor(np.asarray(z), dtype=torch.float32))[:, 0].numpy()
