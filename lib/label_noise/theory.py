"""The theory's quantities: T₁, the Stage I growth rates, Theorem 4.2's bound, the heuristic
phase boundary and Kou et al.'s benign-overfitting exponent."""

from __future__ import annotations

import numpy as np


def t1_prediction(n: int, m: int, eta: float, sigma_xi: float, d: int) -> float:
    """The Stage I time scale of Theorem 4.1, T₁ = n·m/(η·σ_ξ²·d), with constant 1."""
    return n * m / (eta * sigma_xi**2 * d)


def stage_one_rates(n: int, m: int, d: int, eta: float, mu_norm: float, sigma_xi: float,
                    tau: float) -> tuple[float, float]:
    """Early-time slopes (per GD step) of γ and of the activated ρ, with every |ℓ′| = ½.

    A filter's signal coefficient is pushed by the half of the samples whose class activates
    it, clean ones up and noisy ones down: Δγ = η‖μ‖²(1−2τ)/(4m). A noise coefficient
    ρ_{j,r,i} with j = ỹ_i and ⟨w_{j,r}, ξ_i⟩ > 0 grows by Δρ = η‖ξ_i‖²/(2nm) ≈ ησ_ξ²d/(2nm).
    """
    return eta * mu_norm**2 * (1 - 2 * tau) / (4 * m), eta * sigma_xi**2 * d / (2 * n * m)


def stage_two_bound(tau_pos: float, tau_neg: float) -> float:
    """Theorem 4.2's lower bound on the test error at the end of Stage II: ½·min(τ₊, τ₋)."""
    return 0.5 * min(tau_pos, tau_neg)


def noisy_label_error(err_pos: np.ndarray, err_neg: np.ndarray, tau_pos: float,
                      tau_neg: float) -> np.ndarray:
    """Expected error against *noisy* test labels of a classifier whose error against the true
    labels is ``err_pos`` on class +1 and ``err_neg`` on class −1 (classes equally likely):
    ½[τ₊ + (1 − 2τ₊)·e₊] + ½[τ₋ + (1 − 2τ₋)·e₋]."""
    return 0.5 * (tau_pos + (1 - 2 * tau_pos) * np.asarray(err_pos)) + \
        0.5 * (tau_neg + (1 - 2 * tau_neg) * np.asarray(err_neg))


def heuristic_boundary(tau: np.ndarray | float) -> np.ndarray | float:
    """n·SNR² at which Stage I's signal gain equals its noise gain: 2/(1 − 2τ).

    From :func:`stage_one_rates`, Δγ/Δρ = (1−2τ)·n·SNR²/2; a clean Stage I (noisy samples
    still predicted by their true label) needs γ to outgrow ρ.
    """
    return 2.0 / (1.0 - 2.0 * np.asarray(tau, float))


def benign_exponent(n_snr2: float, n: int, d: int) -> float:
    """n‖μ‖⁴/(σ_ξ⁴d) = (n·SNR²)²·d/n: Kou et al. (2023) put this model's overfitting on the
    benign side (clean test error at most exp(−Ω(n‖μ‖⁴/(σ_ξ⁴d)))) when it is large."""
    return n_snr2**2 * d / n
