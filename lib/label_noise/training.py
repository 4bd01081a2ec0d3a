"""Training runs: :class:`~lib.label_noise.model.CoefficientGD` for a fixed number of steps with
log-spaced recording (:func:`train`, :func:`run_synthetic`), or until the training loss reaches a
target (:func:`train_to_loss`, :func:`run_to_loss`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lib.label_noise.data import SignalNoiseData, make_data, make_reuse_test, mu_norm_for
from lib.label_noise.model import CoefficientGD, TestSet, gd_step, init_weights, logistic_loss, project
from lib.label_noise.theory import t1_prediction
from lib.seeding import stream


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

    def mean_rho_max(self, subset: str = "noisy") -> np.ndarray:
        """Per recording step, the mean over the ``clean`` or ``noisy`` samples of max_{j,r} ρ_{j,r,i}
        (NaN when the subset is empty)."""
        mask = {"clean": self.clean, "noisy": ~self.clean}[subset]
        if not mask.any():
            return np.full(len(self.steps), np.nan)
        return self.rho_max[:, mask].mean(axis=1)

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


def run_synthetic(tau: float, seed: int, *, root: int, experiment: str, n: int, d: int, m: int, n_snr2: float,
                  sigma_xi: float, sigma0: float, eta: float, steps: int, n_test: int,
                  record_points: int, reference: bool = False, tau_neg: float | None = None,
                  keep_test: bool = False) -> dict:
    """One chapter run: draw data (flip rates τ₊ = ``tau`` and τ₋ = ``tau_neg``, which defaults
    to ``tau``), a test set and W⁽⁰⁾ from sub-stream ``(experiment, seed)`` of chapter seed
    ``root`` (``seed`` is the replicate index), train, and return the :class:`History` and the
    run's T₁. The draws do not depend on the flip rates: runs of one experiment with and without
    label noise share ξ, μ, W⁽⁰⁾ and the test set, and differ only in the flipped labels (for the
    same uniform draws, a larger rate flips a superset of the samples)."""
    from threadpoolctl import threadpool_limits

    rng = stream(root, experiment, seed)
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
                  check_every: int = 50, reuse: SignalNoiseData | None = None,
                  reuse_source: np.ndarray | None = None) -> dict:
    """Run :class:`CoefficientGD` until the mean training loss is at most ``target_loss``
    (checked every ``check_every`` steps and at the recording steps) or ``max_steps`` is reached.

    Returns the recording steps (log-spaced up to ``max_steps``, cut where training stopped,
    plus the last step), the training loss, the test error against the true labels and the
    training accuracy on the clean and on the noisy samples at each, and at the last step the
    number of test errors, ``steps`` run and whether the target was ``reached``.

    With ``reuse`` (a second test set, the paper's: :func:`~lib.label_noise.data.make_reuse_test`)
    and ``reuse_source`` (the training index of each of its points' noise vector) it also records
    that set's error against the true labels at each recording step (``reuse_error``) and, at the
    last step, its number of errors (``reuse_errors``, of ``n_reuse``) and the errors and points
    among those whose noise vector is a noisy training sample's (``reuse_noisy_errors``,
    ``reuse_noisy_n``)."""
    gd = CoefficientGD(W0, data, eta)
    tester = TestSet(gd, W0, test)
    reuser = TestSet(gd, W0, reuse) if reuse is not None else None
    grid = set(int(s) for s in log_steps(max_steps, record_points))
    clean = data.clean
    rec: dict[str, list] = {"steps": [], "loss": [], "test_error": [], "clean_fit": [], "noisy_fit": []}
    if reuser is not None:
        rec["reuse_error"] = []
    t, errors, loss, reuse_wrong = 0, 0, float("inf"), None
    while True:
        if t % check_every == 0 or t in grid or t >= max_steps:
            margins = gd.margins()
            loss = float(logistic_loss(margins).mean())
            done = loss <= target_loss or t >= max_steps
            if t in grid or done:
                errors = int(np.sum(test.y * tester.output() <= 0))
                if reuser is not None:
                    reuse_wrong = reuse.y * reuser.output() <= 0
                    rec["reuse_error"].append(float(reuse_wrong.mean()))
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
    out |= {"steps": out["steps"].astype(int), "errors": errors, "n_test": test.n,
            "steps_run": t, "reached": bool(loss <= target_loss), "final_loss": loss}
    if reuser is not None:
        from_noisy = ~clean[np.asarray(reuse_source)]
        out |= {"reuse_errors": int(reuse_wrong.sum()), "n_reuse": reuse.n,
                "reuse_noisy_errors": int(reuse_wrong[from_noisy].sum()), "reuse_noisy_n": int(from_noisy.sum())}
    return out


def init_event(W0: np.ndarray, data: SignalNoiseData) -> bool:
    """Whether every training sample has, at initialisation, a filter of its observed class that
    its noise activates (some r with ⟨w⁽⁰⁾_{ỹ_i,r}, ξ_i⟩ > 0). A sample without one can grow no
    noise coefficient of its own class: a noisy one is then fitted only by pulling the signal
    coefficient down. The analysis assumes an initialisation on which this holds."""
    pre = W0.reshape(-1, W0.shape[-1]) @ data.xi.T                       # (2m, n)
    pre = pre.reshape(W0.shape[:2] + (data.n,))
    own = np.where(data.y_obs > 0, 0, 1)                                 # index of j = ỹ_i
    return bool(np.all((pre[own, :, np.arange(data.n)] > 0).any(axis=1)))


def run_to_loss(tau: float, rng: np.random.Generator, *, n: int, d: int, m: int, n_snr2: float,
                sigma_xi: float, sigma0: float, eta: float, target_loss: float, max_steps: int,
                n_test: int, record_points: int = 30, n_reuse: int = 0, sigma_zeta: float = 0.0) -> dict:
    """One run of :func:`train_to_loss` on data (symmetric flips at rate ``tau``), a test set and
    W⁽⁰⁾ drawn from ``rng``, in that order, and then, with ``n_reuse`` > 0, a second test set of
    the paper's kind (:func:`~lib.label_noise.data.make_reuse_test`, fresh noise of standard
    deviation ``sigma_zeta``); adds the run's predicted T₁, its number of noisy samples and
    whether its initialisation is in :func:`init_event`. The draws do not depend on ``tau``: runs
    with and without label noise share everything but the flipped labels."""
    from threadpoolctl import threadpool_limits

    mu_norm = mu_norm_for(n_snr2, n, d, sigma_xi)
    data = make_data(n, d, mu_norm, rng, sigma_xi=sigma_xi, tau_pos=tau, tau_neg=tau)
    test = make_data(n_test, d, mu_norm, rng, sigma_xi=sigma_xi, mu=data.mu)
    W0 = init_weights(m, d, sigma0, rng)
    reuse, source = make_reuse_test(data, n_reuse, rng, sigma_zeta=sigma_zeta) if n_reuse else (None, None)
    with threadpool_limits(limits=1):
        out = train_to_loss(data, test, W0, eta, target_loss, max_steps, record_points,
                            reuse=reuse, reuse_source=source)
    return out | {"t1": t1_prediction(n, m, eta, sigma_xi, d), "n_noisy": int((~data.clean).sum()),
                  "init_event": init_event(W0, data), "flip_rates": flip_rates(data)}


def flip_rates(data: SignalNoiseData) -> tuple[float, float]:
    """The flip shares a training set realised: (τ̂₊, τ̂₋), the share of class +1 and of class −1
    samples whose observed label is flipped (0 for a class with no samples)."""
    pos = data.y > 0
    return tuple(float(np.mean(~data.clean[mask])) if mask.any() else 0.0 for mask in (pos, ~pos))
