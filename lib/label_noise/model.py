"""Label noise in feature learning: Han et al., "On the Role of Label Noise in the Feature
Learning Process" (ICML 2025, arXiv:2505.18909).

The setting (Section 3 of the paper). A sample is two patches, x = [y·μ, ξ] with
ξ ~ N(0, σ_ξ² I_d); its observed label ỹ is the true label y flipped with probability τ₊
(y = +1) or τ₋ (y = −1). The network is a two-layer ReLU CNN with a fixed second layer,

    f(W, x) = F₊₁(x) − F₋₁(x),   F_j(x) = (1/m) Σ_r [σ(⟨w_{j,r}, y·μ⟩) + σ(⟨w_{j,r}, ξ⟩)],

trained by full-batch gradient descent on the logistic loss ℓ(z) = log(1 + e^{−z}) of ỹ·f.

Every GD iterate lies in w⁽⁰⁾ + span{μ, ξ₁, …, ξ_n}, so it is described exactly by the
signal coefficients γ_{j,r} and the noise coefficients ρ_{j,r,i}:

    w_{j,r}⁽ᵗ⁾ = w_{j,r}⁽⁰⁾ + j·γ_{j,r}⁽ᵗ⁾·μ/‖μ‖² + Σ_i ρ_{j,r,i}⁽ᵗ⁾·ξ_i/‖ξ_i‖².

This module computes the same training run two ways, which must agree to round-off:

* :func:`gd_step` — the reference: GD on the weights W ∈ R^{2×m×d}; :func:`project`
  recovers (γ, ρ) from W by least squares on the basis {μ, ξ_i};
* :class:`CoefficientGD` — the fast path: the paper's exact recursions for (γ, ρ), with the
  pre-activations computed from Gram matrices (never forming W). :func:`train` uses it.

It also holds the theory quantities (T₁, the Stage I growth rates, the heuristic phase
boundary), stage detection, small-loss sample selection, and the real-data experiment
(two classes of scikit-learn's digits, symmetric label noise, a small CNN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lib.sweep import one_thread

#: Index 0 of the first weight axis is the j = +1 filter bank, index 1 is j = −1.
J = np.array([1.0, -1.0])
LOG2 = math.log(2.0)


# --------------------------------------------------------------------------- data


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


# --------------------------------------------------------------------------- theory


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


# --------------------------------------------------------------------------- model


def init_weights(m: int, d: int, sigma0: float, rng: np.random.Generator) -> np.ndarray:
    """First-layer weights w_{j,r} ~ N(0, σ₀² I_d), shape (2, m, d) (axis 0: j = +1, −1)."""
    return rng.normal(0.0, sigma0, size=(2, m, d))


def preactivations(W: np.ndarray, mu: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """⟨w_{j,r}, μ⟩ of shape (2, m) and ⟨w_{j,r}, ξ_i⟩ of shape (2, m, n)."""
    return W @ mu, W @ xi.T


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
        np.einsum("jri,i->jr", act_mu, g)[:, :, None] * data.mu + (act_xi * g) @ data.xi)
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
    The weights are never formed: a step costs one (2m × n)·(n × (n+1)) product.
    """

    def __init__(self, W0: np.ndarray, data: SignalNoiseData, eta: float):
        self.data, self.eta = data, eta
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
        d, c = self.data, self.coef
        pre_mu, pre_xi = self.preactivations()
        lp = loss_derivative(d.y_obs * output(pre_mu, pre_xi, d.y))                 # ℓ′_i
        scale = self.eta / (d.n * self.m)
        signal_on = pre_mu[:, :, None] * d.y > 0                                    # (2, m, n)
        c.gamma = c.gamma - scale * self.mu2 * (signal_on * (lp * d.y_obs * d.y)).sum(axis=2)
        c.rho = c.rho - scale * self.xi2 * lp * (pre_xi > 0) * J[:, None, None] * d.y_obs


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


# --------------------------------------------------------------------------- training runs


def log_steps(total: int, points: int, extra: tuple[int, ...] = ()) -> np.ndarray:
    """About ``points`` log-spaced recording steps in [0, total], plus ``extra`` ones."""
    grid = np.unique(np.round(np.geomspace(1, total, points)).astype(int))
    return np.unique(np.concatenate([[0], grid, np.asarray(extra, int)]))


@dataclass
class History:
    """What one training run recorded at its recording steps."""

    steps: np.ndarray                    # (T,)
    clean: np.ndarray                    # (n,) clean mask
    margins: np.ndarray                  # (T, n) ỹ_i·f_i
    test_accuracy: np.ndarray            # (T,) against the true labels
    gamma_max: np.ndarray                # (T,) max_{j,r} γ_{j,r}
    rho_max: np.ndarray                  # (T, n) max_{j,r} ρ_{j,r,i}
    extras: dict = field(default_factory=dict)

    def at(self, step: int) -> int:
        """Index of a recording step (it must have been recorded)."""
        hits = np.flatnonzero(self.steps == step)
        if not len(hits):
            raise KeyError(f"step {step} was not recorded")
        return int(hits[0])

    def accuracy(self, subset: str = "all") -> np.ndarray:
        """Training accuracy against the observed labels on ``all``, ``clean`` or ``noisy``."""
        mask = {"all": np.ones_like(self.clean), "clean": self.clean, "noisy": ~self.clean}[subset]
        if not mask.any():
            return np.full(len(self.steps), np.nan)
        return (self.margins[:, mask] > 0).mean(axis=1)

    def losses(self, index: int) -> np.ndarray:
        return logistic_loss(self.margins[index])


def train(data: SignalNoiseData, test: SignalNoiseData | None, W0: np.ndarray, eta: float,
          record: np.ndarray, reference_every: bool = False, keep_test: bool = False) -> History:
    """Run :class:`CoefficientGD` to ``record[-1]`` steps, recording at the steps ``record``
    (test accuracy NaN when ``test`` is None).

    With ``reference_every`` the weight-space reference :func:`gd_step` runs alongside, and at
    every recording step the projection of its weights is compared with the recursion's
    coefficients (``extras["coef_rel_err"]``, ``extras["span_residual"]``). With ``keep_test``
    it keeps which test points are classified right at every recording step
    (``extras["test_right"]``, shape (T, n_test)), for paired comparisons between two times.
    """
    gd = CoefficientGD(W0, data, eta)
    tester = TestSet(gd, W0, test) if test is not None else None
    W = W0.copy()
    rec = {"margins": [], "test": [], "pos": [], "neg": [], "gmax": [], "rmax": [], "err": [],
           "resid": [], "right": []}
    targets = set(int(s) for s in record)
    for t in range(int(record[-1]) + 1):
        if t in targets:
            rec["margins"].append(gd.margins())
            acc = tester.class_accuracy() if tester else (np.nan,) * 3
            if keep_test:
                rec["right"].append(test.y * tester.output() > 0)
            for key, v in zip(("test", "pos", "neg"), acc):
                rec[key].append(v)
            rec["gmax"].append(gd.coef.gamma.max())
            rec["rmax"].append(gd.coef.rho.max(axis=(0, 1)))
            if reference_every and t > 0:
                proj, resid = project(W, W0, data.mu, data.xi)
                ref, rcs = gd.coef.stacked(), proj.stacked()
                rec["err"].append(np.abs(rcs - ref).max() / np.abs(ref).max())
                rec["resid"].append(resid)
        if t < record[-1]:
            gd.step()
            if reference_every:
                W = gd_step(W, data, eta)
    extras = {"test_acc_pos": np.array(rec["pos"]), "test_acc_neg": np.array(rec["neg"])}
    if keep_test:
        extras["test_right"] = np.array(rec["right"])
    if reference_every:
        extras |= {"coef_rel_err": np.array(rec["err"]), "span_residual": np.array(rec["resid"])}
    return History(steps=np.asarray(sorted(targets)), clean=data.clean,
                   margins=np.array(rec["margins"]), test_accuracy=np.array(rec["test"]),
                   gamma_max=np.array(rec["gmax"]), rho_max=np.array(rec["rmax"]), extras=extras)


def run_synthetic(tau: float, seed: int, *, base_seed: int, n: int, d: int, m: int, n_snr2: float,
                  sigma_xi: float, sigma0: float, eta: float, steps: int, n_test: int,
                  record_points: int, reference: bool = False, tau_neg: float | None = None,
                  keep_test: bool = False) -> dict:
    """One chapter run: draw data (flip rates τ₊ = ``tau`` and τ₋ = ``tau_neg``, which defaults
    to ``tau``), a test set and W⁽⁰⁾ from the stream (base_seed, seed), train, and return the
    :class:`History` and the run's T₁. The draws do not depend on the flip rates: runs with and
    without label noise share ξ, μ, W⁽⁰⁾ and the test set, and differ only in the flipped
    labels (for the same uniform draws, a larger rate flips a superset of the samples)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng([base_seed, seed])
    mu_norm = mu_norm_for(n_snr2, n, d, sigma_xi)
    data = make_data(n, d, mu_norm, rng, sigma_xi=sigma_xi, tau_pos=tau,
                     tau_neg=tau if tau_neg is None else tau_neg)
    test = make_data(n_test, d, mu_norm, rng, sigma_xi=sigma_xi, mu=data.mu) if n_test else None
    W0 = init_weights(m, d, sigma0, rng)
    t1 = int(round(t1_prediction(n, m, eta, sigma_xi, d)))
    # The products are small (2m × n by n × n): one BLAS thread is fastest, and a busy
    # machine makes spinning BLAS threads very slow.
    with threadpool_limits(limits=1):
        history = train(data, test, W0, eta, log_steps(steps, record_points, extra=(t1,)),
                        reference_every=reference, keep_test=keep_test)
    return {"history": history, "t1": t1, "mu_norm": mu_norm}


def train_to_loss(data: SignalNoiseData, test: SignalNoiseData, W0: np.ndarray, eta: float,
                  target_loss: float, max_steps: int, record_points: int = 30,
                  check_every: int = 50) -> dict:
    """Run :class:`CoefficientGD` until the mean training loss is at most ``target_loss``
    (checked every ``check_every`` steps and at the recording steps) or ``max_steps`` is reached.

    Returns the recording steps (log-spaced up to ``max_steps``, cut where training stopped,
    plus the last step), the training loss, the test error against the true labels and the
    training accuracy on the clean and on the noisy samples at each, and at the last step the
    number of test errors, ``steps`` run and whether the target was ``reached``."""
    gd = CoefficientGD(W0, data, eta)
    tester = TestSet(gd, W0, test)
    grid = set(int(s) for s in log_steps(max_steps, record_points))
    clean = data.clean
    rec: dict[str, list] = {"steps": [], "loss": [], "test_error": [], "clean_fit": [], "noisy_fit": []}
    t, errors, loss = 0, 0, float("inf")
    while True:
        if t % check_every == 0 or t in grid or t >= max_steps:
            margins = gd.margins()
            loss = float(logistic_loss(margins).mean())
            done = loss <= target_loss or t >= max_steps
            if t in grid or done:
                errors = int(np.sum(test.y * tester.output() <= 0))
                fit = margins > 0
                for key, v in (("steps", t), ("loss", loss), ("test_error", errors / test.n),
                               ("clean_fit", fit[clean].mean() if clean.any() else np.nan),
                               ("noisy_fit", fit[~clean].mean() if (~clean).any() else np.nan)):
                    rec[key].append(v)
            if done:
                break
        gd.step()
        t += 1
    out = {k: np.asarray(v, float) for k, v in rec.items()}
    return out | {"steps": out["steps"].astype(int), "errors": errors, "n_test": test.n,
                  "steps_run": t, "reached": bool(loss <= target_loss), "final_loss": loss}


def run_to_loss(tau: float, rng: np.random.Generator, *, n: int, d: int, m: int, n_snr2: float,
                sigma_xi: float, sigma0: float, eta: float, target_loss: float, max_steps: int,
                n_test: int, record_points: int = 30) -> dict:
    """One run of :func:`train_to_loss` on data (symmetric flips at rate ``tau``), a test set and
    W⁽⁰⁾ drawn from ``rng``, in that order; adds the run's predicted T₁."""
    from threadpoolctl import threadpool_limits

    mu_norm = mu_norm_for(n_snr2, n, d, sigma_xi)
    data = make_data(n, d, mu_norm, rng, sigma_xi=sigma_xi, tau_pos=tau, tau_neg=tau)
    test = make_data(n_test, d, mu_norm, rng, sigma_xi=sigma_xi, mu=data.mu)
    W0 = init_weights(m, d, sigma0, rng)
    with threadpool_limits(limits=1):
        out = train_to_loss(data, test, W0, eta, target_loss, max_steps, record_points)
    return out | {"t1": t1_prediction(n, m, eta, sigma_xi, d), "n_noisy": int((~data.clean).sum())}


def benign_exponent(n_snr2: float, n: int, d: int) -> float:
    """n‖μ‖⁴/(σ_ξ⁴d) = (n·SNR²)²·d/n: Kou et al. (2023) put this model's overfitting on the
    benign side (clean test error at most exp(−Ω(n‖μ‖⁴/(σ_ξ⁴d)))) when it is large."""
    return n_snr2**2 * d / n


# --------------------------------------------------------------------------- tests on counts


def p_rate_at_least(errors: int, trials: int, rate: float) -> float:
    """p-value of "every network's error rate is ≥ ``rate``" given ``errors`` of ``trials``
    pooled test predictions: P(Binomial(trials, rate) ≤ errors). A sum of independent
    binomials with rates ≥ ``rate`` is stochastically larger than Binomial(trials, rate), so
    rejecting when this is below α has false-alarm rate at most α."""
    from scipy.stats import binom

    return float(binom.cdf(errors, trials, rate))


def log10_p_rate_at_least(errors: int, trials: int, rate: float) -> float:
    """log₁₀ of :func:`p_rate_at_least`, for p-values below the smallest float."""
    from scipy.special import logsumexp
    from scipy.stats import binom

    return float(logsumexp(binom.logpmf(np.arange(errors + 1), trials, rate)) / math.log(10.0))


def p_rate_at_most(errors: int, trials: int, rate: float) -> float:
    """p-value of "the error rate is ≤ ``rate``": P(Binomial(trials, rate) ≥ errors)."""
    from scipy.stats import binom

    return float(binom.sf(errors - 1, trials, rate)) if errors > 0 else 1.0


def p_rise(worse: int, better: int) -> float:
    """Exact one-sided McNemar test on paired predictions of the same test points at two times:
    ``worse`` turned from right to wrong, ``better`` from wrong to right. Under "no rise" a
    changed point is at least as likely to have improved, so P(Binomial(worse + better, ½) ≥
    worse) bounds the false-alarm rate."""
    from scipy.stats import binom

    k = worse + better
    return float(binom.sf(worse - 1, k, 0.5)) if worse > 0 else 1.0


def smallest_detectable_rise(better: int, trials: int, alpha: float) -> float:
    """The smallest rise of the error rate, (worse − better)/trials, that :func:`p_rise` declares
    at level ``alpha`` when ``better`` points improved: the least ``worse`` with p < α."""
    worse = 1
    while p_rise(worse, better) >= alpha:
        worse += 1
    return (worse - better) / trials


# --------------------------------------------------------------------------- stages and uses


def detect_stages(h: History, fit: float = 0.98, memorised: float = 0.5) -> tuple[int | None, int | None]:
    """(start of Stage I, start of Stage II) as recording steps: the first step at which at
    least ``fit`` of the clean samples are fitted, and the first step after it at which at
    least ``memorised`` of the noisy samples are fitted to their wrong labels (None if never)."""
    clean, noisy = h.accuracy("clean"), h.accuracy("noisy")
    start = np.flatnonzero(clean >= fit)
    if not len(start):
        return None, None
    later = np.flatnonzero((np.arange(len(h.steps)) >= start[0]) & (noisy >= memorised))
    return int(h.steps[start[0]]), (int(h.steps[later[0]]) if len(later) else None)


def select_small_loss(losses: np.ndarray, threshold: float = LOG2) -> np.ndarray:
    """Sample selection: keep the samples whose loss is at most ``threshold`` (log 2 ⇔ ỹf ≥ 0)."""
    return losses <= threshold


def precision_recall(selected: np.ndarray, clean: np.ndarray) -> tuple[float, float]:
    """Precision (selected that are clean) and recall (clean that are selected)."""
    tp = float(np.sum(selected & clean))
    return tp / max(int(selected.sum()), 1), tp / max(int(clean.sum()), 1)


def stage_one_appears(h: History, fit: float = 0.98, ignored: float = 0.15) -> bool:
    """A clean Stage I: some recorded step with ≥ ``fit`` of the clean samples fitted while at
    most ``ignored`` of the noisy samples are fitted to their wrong labels."""
    return bool(np.any((h.accuracy("clean") >= fit) & (h.accuracy("noisy") <= ignored)))


# --------------------------------------------------------------------------- real data


@dataclass(frozen=True)
class DigitsTask:
    """Two classes of scikit-learn's bundled 8×8 digits as a ±1 problem with noisy labels."""

    x_train: np.ndarray   # (n, 1, 8, 8), pixel values scaled to [0, 1]
    y_train: np.ndarray   # (n,) true labels ±1
    y_obs: np.ndarray     # (n,) observed labels ±1 (symmetric flips)
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def clean(self) -> np.ndarray:
        return self.y_obs == self.y_train


def digits_task(classes: tuple[int, int], tau: float, test_fraction: float,
                rng: np.random.Generator) -> DigitsTask:
    """Digits ``classes[0]`` (label −1) and ``classes[1]`` (label +1); every training label is
    flipped independently with probability ``tau``; the test labels are kept clean."""
    from sklearn.datasets import load_digits

    if not 0.0 <= tau < 0.5:
        raise ValueError(f"tau must lie in [0, 1/2), got {tau}")
    digits = load_digits()
    keep = np.isin(digits.target, classes)
    x = (digits.images[keep] / 16.0)[:, None].astype(np.float32)
    y = np.where(digits.target[keep] == classes[1], 1.0, -1.0)
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    flip = rng.random(len(train)) < tau
    return DigitsTask(x_train=x[train], y_train=y[train], y_obs=np.where(flip, -y[train], y[train]),
                      x_test=x[test], y_test=y[test])


def small_cnn(width: int = 16):
    """Two 3×3 convolutions, a 2×2 max-pool and a two-layer head with one output (f(x))."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(2 * width * 16, 4 * width), nn.ReLU(), nn.Linear(4 * width, 1))


def train_digits(task: DigitsTask, epochs: int, lr: float, batch: int, seed: int,
                 width: int = 16) -> dict[str, np.ndarray]:
    """SGD (momentum 0.9, learning rate ``lr`` decayed to 0 on a cosine over the epochs) on the
    logistic loss of the observed labels; after every epoch the
    accuracy on the clean and on the flipped training samples (against their observed labels),
    and on the test set (true labels). Runs on one thread: a network this small gains nothing
    from more, and on a busy machine loses a lot."""
    with one_thread():
        return _train_digits(task, epochs, lr, batch, seed, width)


def _train_digits(task: DigitsTask, epochs: int, lr: float, batch: int, seed: int,
                  width: int) -> dict[str, np.ndarray]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = small_cnn(width)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    x = torch.as_tensor(task.x_train, dtype=torch.float32)
    y = torch.as_tensor(task.y_obs, dtype=torch.float32)
    xt = torch.as_tensor(task.x_test, dtype=torch.float32)
    clean = task.clean

    def accuracies():
        with torch.no_grad():
            fit = (y * net(x).squeeze(1) > 0).numpy()
            test = (torch.as_tensor(task.y_test) * net(xt).squeeze(1) > 0).numpy()
        return fit[clean].mean(), fit[~clean].mean() if (~clean).any() else np.nan, test.mean()

    out = {"epoch": [0], "clean": [], "noisy": [], "test": []}
    for key, v in zip(("clean", "noisy", "test"), accuracies()):
        out[key].append(v)
    for epoch in range(1, epochs + 1):
        for idx in torch.randperm(len(y), generator=gen).split(batch):
            opt.zero_grad()
            torch.nn.functional.softplus(-y[idx] * net(x[idx]).squeeze(1)).mean().backward()
            opt.step()
        schedule.step()
        out["epoch"].append(epoch)
        for key, v in zip(("clean", "noisy", "test"), accuracies()):
            out[key].append(v)
    return {k: np.asarray(v, float) for k, v in out.items()}
