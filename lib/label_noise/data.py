"""The synthetic data of Section 3: two patches x = [y·μ, ξ], ξ ~ N(0, σ_ξ² I_d), and an observed
label ỹ that is the true label y flipped with probability τ₊ (y = +1) or τ₋ (y = −1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SignalNoiseData:
    """n two-patch samples: signal patch y_i·μ, noise patch ξ_i, observed label ỹ_i."""

    mu: np.ndarray        # (d,)
    xi: np.ndarray        # (n, d)
    y: np.ndarray         # (n,) true labels ±1
    y_obs: np.ndarray     # (n,) observed (possibly flipped) labels ±1

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def d(self) -> int:
        return len(self.mu)

    @property
    def clean(self) -> np.ndarray:
        """Boolean mask of the samples whose observed label is the true one."""
        return self.y_obs == self.y

    def inputs(self) -> np.ndarray:
        """The samples as (n, 2, d) arrays [y_i·μ, ξ_i] (for checks by hand)."""
        return np.stack([self.y[:, None] * self.mu[None, :], self.xi], axis=1)


def mu_norm_for(n_snr2: float, n: int, d: int, sigma_xi: float = 1.0) -> float:
    """‖μ‖ that gives n·SNR² = ``n_snr2``, with SNR = ‖μ‖/(σ_ξ√d)."""
    return sigma_xi * math.sqrt(n_snr2 * d / n)


def snr(mu_norm: float, sigma_xi: float, d: int) -> float:
    """SNR = ‖μ‖/(σ_ξ√d)."""
    return mu_norm / (sigma_xi * math.sqrt(d))


def make_data(n: int, d: int, mu_norm: float, rng: np.random.Generator, *, sigma_xi: float = 1.0,
              tau_pos: float = 0.0, tau_neg: float = 0.0, mu: np.ndarray | None = None,
              orthogonal: bool = False) -> SignalNoiseData:
    """Draw n samples with class-conditional label flips (rates τ₊ for y = +1, τ₋ for y = −1).

    ``mu`` defaults to ‖μ‖·e₁; pass the training set's μ to draw a test set. With
    ``orthogonal`` the noise is projected onto μ's orthogonal complement.
    """
    if not (0.0 <= tau_pos < 0.5 and 0.0 <= tau_neg < 0.5):
        raise ValueError(f"flip rates must lie in [0, 1/2), got τ₊={tau_pos}, τ₋={tau_neg}")
    if mu is None:
        mu = np.zeros(d)
        mu[0] = mu_norm
    y = rng.choice([-1.0, 1.0], size=n)
    xi = rng.normal(0.0, sigma_xi, size=(n, d))
    if orthogonal:
        u = mu / np.linalg.norm(mu)
        xi -= np.outer(xi @ u, u)
    flip = rng.random(n) < np.where(y > 0, tau_pos, tau_neg)
    return SignalNoiseData(mu=np.asarray(mu, float), xi=xi, y=y, y_obs=np.where(flip, -y, y))


def make_reuse_test(train: SignalNoiseData, n_test: int, rng: np.random.Generator, *,
                    sigma_zeta: float) -> tuple[SignalNoiseData, np.ndarray]:
    """The paper's test distribution as a secondary source describes it: a test point's noise
    patch reuses a training noise vector, ξ_k with k uniform over the training samples, plus
    fresh Gaussian noise ζ ~ N(0, σ_ζ² I_d); its true label y is drawn afresh (±1 equally
    likely, independent of k) and its signal patch is y·μ. Returns the test set (observed labels
    equal to the true ones) and the index k of each point's training noise vector."""
    k = rng.integers(0, train.n, size=n_test)
    y = rng.choice([-1.0, 1.0], size=n_test)
    xi = train.xi[k] + rng.normal(0.0, sigma_zeta, size=(n_test, train.d))
    return SignalNoiseData(mu=train.mu, xi=xi, y=y, y_obs=y), k
