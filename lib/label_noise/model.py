"""The two-layer ReLU CNN with a fixed second layer,

    f(W, x) = F₊₁(x) − F₋₁(x),   F_j(x) = (1/m) Σ_r [σ(⟨w_{j,r}, y·μ⟩) + σ(⟨w_{j,r}, ξ⟩)],

trained by full-batch gradient descent on the logistic loss ℓ(z) = log(1 + e^{−z}) of ỹ·f.

Every GD iterate lies in w⁽⁰⁾ + span{μ, ξ₁, …, ξ_n}, so it is described exactly by the
signal coefficients γ_{j,r} and the noise coefficients ρ_{j,r,i}:

    w_{j,r}⁽ᵗ⁾ = w_{j,r}⁽⁰⁾ + j·γ_{j,r}⁽ᵗ⁾·μ/‖μ‖² + Σ_i ρ_{j,r,i}⁽ᵗ⁾·ξ_i/‖ξ_i‖².

The same training run is computed two ways, which must agree to round-off:

* :func:`gd_step` — the reference: GD on the weights W ∈ R^{2×m×d}; :func:`project`
  recovers (γ, ρ) from W by least squares on the basis {μ, ξ_i};
* :class:`CoefficientGD` — the fast path: the paper's exact recursions for (γ, ρ), with the
  pre-activations computed from Gram matrices (never forming W).
  :func:`lib.label_noise.training.train` uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lib.label_noise.data import SignalNoiseData

#: Index 0 of the first weight axis is the j = +1 filter bank, index 1 is j = −1.
J = np.array([1.0, -1.0])
LOG2 = math.log(2.0)


def init_weights(m: int, d: int, sigma0: float, rng: np.random.Generator) -> np.ndarray:
    """First-layer weights w_{j,r} ~ N(0, σ₀² I_d), shape (2, m, d) (axis 0: j = +1, −1)."""
    return rng.normal(0.0, sigma0, size=(2, m, d))


def preactivations(W: np.ndarray, mu: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """⟨w_{j,r}, μ⟩ of shape (2, m) and ⟨w_{j,r}, ξ_i⟩ of shape (2, m, n) (the latter as one
    (2m × d)·(d × n) product: numpy multiplies a stack of matrices one at a time, more slowly)."""
    return W @ mu, (W.reshape(-1, W.shape[-1]) @ xi.T).reshape(W.shape[:-1] + (len(xi),))


def output(pre_mu: np.ndarray, pre_xi: np.ndarray, y: np.ndarray) -> np.ndarray:
    """f(W, x_i) from the pre-activations; the signal patch of sample i is y_i·μ."""
    relu = np.maximum
    signal = relu(pre_mu[:, :, None] * y[None, None, :], 0.0)   # (2, m, n)
    per_filter = signal + relu(pre_xi, 0.0)
    return J @ per_filter.mean(axis=1)


def loss_derivative(margin: np.ndarray) -> np.ndarray:
    """ℓ′(z) = −1/(1 + e^{z}) of the logistic loss, evaluated stably."""
    return -0.5 * (1.0 - np.tanh(0.5 * margin))


def logistic_loss(margin: np.ndarray) -> np.ndarray:
    """ℓ(z) = log(1 + e^{−z}), evaluated stably."""
    return np.logaddexp(0.0, -margin)


def gd_step(W: np.ndarray, data: SignalNoiseData, eta: float) -> np.ndarray:
    """One full-batch GD step on the weights (the reference implementation)."""
    pre_mu, pre_xi = preactivations(W, data.mu, data.xi)
    margin = data.y_obs * output(pre_mu, pre_xi, data.y)
    g = loss_derivative(margin) * data.y_obs                            # ∂ℓ_i/∂f_i, (n,)
    act_mu = (pre_mu[:, :, None] * data.y > 0) * data.y                 # σ′·y_i, (2, m, n)
    act_xi = (pre_xi > 0).astype(float)                                 # (2, m, n)
    grad = (J[:, None, None] / (data.n * W.shape[1])) * (
        np.einsum("jri,i->jr", act_mu, g)[:, :, None] * data.mu
        + ((act_xi * g).reshape(-1, data.n) @ data.xi).reshape(W.shape))
    return W - eta * grad


@dataclass
class Coefficients:
    """The signal-noise decomposition of W − W⁽⁰⁾: γ of shape (2, m), ρ of shape (2, m, n)."""

    gamma: np.ndarray
    rho: np.ndarray

    def stacked(self) -> np.ndarray:
        return np.concatenate([self.gamma[:, :, None], self.rho], axis=2)


def project(W: np.ndarray, W0: np.ndarray, mu: np.ndarray, xi: np.ndarray) -> tuple[Coefficients, float]:
    """(γ, ρ) of W by least squares on the basis {μ/‖μ‖², ξ_i/‖ξ_i‖²}, and the relative
    norm of the part of W − W⁽⁰⁾ outside that span (zero for a GD iterate)."""
    basis = np.concatenate([mu[None, :] / (mu @ mu),
                            xi / np.einsum("id,id->i", xi, xi)[:, None]])   # (n+1, d)
    delta = (W - W0).reshape(-1, W.shape[-1])                               # (2m, d)
    coef, *_ = np.linalg.lstsq(basis.T, delta.T, rcond=None)                # (n+1, 2m)
    residual = np.linalg.norm(delta - coef.T @ basis) / max(np.linalg.norm(delta), 1e-300)
    coef = coef.T.reshape(2, W.shape[1], -1)
    return Coefficients(gamma=J[:, None] * coef[:, :, 0], rho=coef[:, :, 1:]), float(residual)


class CoefficientGD:
    """Full-batch GD run in the coefficients (γ, ρ) through the paper's exact recursions

        γ_{j,r} ← γ_{j,r} − (η/(nm))·‖μ‖²·Σ_i ℓ′_i·σ′(⟨w_{j,r}, y_i μ⟩)·ỹ_i·y_i,
        ρ_{j,r,i} ← ρ_{j,r,i} − (η/(nm))·‖ξ_i‖²·ℓ′_i·σ′(⟨w_{j,r}, ξ_i⟩)·j·ỹ_i,

    with the pre-activations written in the same coefficients:
    ⟨w, μ⟩ = ⟨w⁽⁰⁾, μ⟩ + jγ + Σ_k ρ_k⟨ξ_k, μ⟩/‖ξ_k‖² and
    ⟨w, ξ_i⟩ = ⟨w⁽⁰⁾, ξ_i⟩ + jγ⟨μ, ξ_i⟩/‖μ‖² + Σ_k ρ_k⟨ξ_k, ξ_i⟩/‖ξ_k‖².
    The weights are never formed: a step costs one (2m × n)·(n × (n+1)) product. With
    ``compiled`` (the default) the elementwise work around that product runs in the two loops of
    :mod:`lib.label_noise.compiled` (the same numbers, bit for bit); without, in numpy (the
    reference).
    """

    def __init__(self, W0: np.ndarray, data: SignalNoiseData, eta: float, compiled: bool = True):
        self.data, self.eta, self.compiled = data, eta, compiled
        self.m = W0.shape[1]
        self.mu2 = float(data.mu @ data.mu)
        self.xi2 = np.einsum("id,id->i", data.xi, data.xi)
        self.pre0_mu, self.pre0_xi = preactivations(W0, data.mu, data.xi)
        # Row k: ⟨ξ_k, [μ, ξ_1, …, ξ_n]⟩/‖ξ_k‖², the contribution of ρ_k to each pre-activation.
        self.noise_gram = (data.xi @ np.concatenate([data.mu[None], data.xi]).T) / self.xi2[:, None]
        self.mu_xi = data.xi @ data.mu / self.mu2          # ⟨μ, ξ_i⟩/‖μ‖²
        self.coef = Coefficients(np.zeros((2, self.m)), np.zeros((2, self.m, data.n)))

    def preactivations(self) -> tuple[np.ndarray, np.ndarray]:
        jg = J[:, None] * self.coef.gamma
        from_rho = self.coef.rho @ self.noise_gram                          # (2, m, n+1)
        pre_mu = self.pre0_mu + jg + from_rho[:, :, 0]
        pre_xi = self.pre0_xi + jg[:, :, None] * self.mu_xi + from_rho[:, :, 1:]
        return pre_mu, pre_xi

    def margins(self) -> np.ndarray:
        """ỹ_i·f(W, x_i) for the training samples."""
        return self.data.y_obs * output(*self.preactivations(), self.data.y)

    def step(self) -> None:
        if self.compiled:
            return self._compiled_step()
        d, c = self.data, self.coef
        pre_mu, pre_xi = self.preactivations()
        lp = loss_derivative(d.y_obs * output(pre_mu, pre_xi, d.y))                 # ℓ′_i
        scale = self.eta / (d.n * self.m)
        signal_on = pre_mu[:, :, None] * d.y > 0                                    # (2, m, n)
        c.gamma = c.gamma - scale * self.mu2 * (signal_on * (lp * d.y_obs * d.y)).sum(axis=2)
        c.rho = c.rho - scale * self.xi2 * lp * (pre_xi > 0) * J[:, None, None] * d.y_obs

    def _compiled_step(self) -> None:
        from lib.label_noise.compiled import margins_kernel, update_kernel

        d, c = self.data, self.coef
        if not hasattr(self, "_work"):  # buffers for ρ·Gram, the pre-activations and f
            self._work = (np.empty(c.rho.shape[:2] + (d.n + 1,)), np.empty_like(c.gamma),
                          np.empty_like(c.rho), np.empty(d.n))
        from_rho, pre_mu, pre_xi, f = self._work
        np.matmul(c.rho, self.noise_gram, out=from_rho)
        margins_kernel(c.gamma, from_rho, self.pre0_mu, self.pre0_xi, self.mu_xi, d.y, pre_mu, pre_xi, f)
        update_kernel(c.gamma, c.rho, pre_mu, pre_xi, loss_derivative(d.y_obs * f), d.y, d.y_obs, self.mu2,
                      self.xi2, self.eta / (len(f) * self.m))


class TestSet:
    """Test samples seen through a :class:`CoefficientGD` run: the inner products with the
    training basis are computed once, so f(W, x) costs one small product per evaluation."""

    def __init__(self, gd: CoefficientGD, W0: np.ndarray, test: SignalNoiseData):
        self.test, self.gd = test, gd
        self.pre0 = W0 @ test.xi.T                                       # ⟨w⁽⁰⁾, ξ⟩, (2, m, n_test)
        self.mu_xi = test.xi @ gd.data.mu / gd.mu2                       # ⟨μ, ξ⟩/‖μ‖²
        self.cross = (gd.data.xi @ test.xi.T) / gd.xi2[:, None]          # ⟨ξ_k, ξ⟩/‖ξ_k‖²

    def output(self) -> np.ndarray:
        c = self.gd.coef
        pre_mu, _ = self.gd.preactivations()
        pre_xi = self.pre0 + (J[:, None] * c.gamma)[:, :, None] * self.mu_xi + c.rho @ self.cross
        return output(pre_mu, pre_xi, self.test.y)

    def accuracy(self) -> float:
        """Accuracy against the true labels."""
        return float(np.mean(self.test.y * self.output() > 0))

    def class_accuracy(self) -> tuple[float, float, float]:
        """Accuracy against the true labels: overall, on class +1, on class −1."""
        right = self.test.y * self.output() > 0
        pos = self.test.y > 0
        return float(right.mean()), float(right[pos].mean()), float(right[~pos].mean())
