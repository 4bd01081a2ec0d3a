"""The kernel-machine identity ℓ(w_T, z) = ℓ(w_0, z) − (1/n) Σ_i K_T(z, z_i), gradient descent's
Taylor expansion of its gap, and the generalisation bounds: the reconstructed LPK bound beside
the static (NTK at initialisation) one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lib.lpk.data import Split
from lib.lpk.flow import Trajectory
from lib.lpk.network import losses, tangent_gram, tangent_sq_norms


def kernel_machine(traj: Trajectory, split: Split, beta: float = 10.0) -> dict[str, np.ndarray]:
    """Both sides of ℓ(w_T, z) = ℓ(w_0, z) − (1/n) Σ_i K_T(z, z_i) on the test points."""
    if traj.K_test is None:
        raise ValueError("run gradient_flow(..., kernels=True) to get the test × train kernel")
    l0 = losses(traj.params0, split.X_test, split.y_test, beta)
    lT = losses(traj.params, split.X_test, split.y_test, beta)
    machine = l0 - traj.K_test.mean(dim=1)
    return {"network": lT.numpy(), "machine": machine.numpy(), "initial": l0.numpy()}


def identity_error(km: dict[str, np.ndarray]) -> float:
    """max_z |network − machine| divided by max_z |ℓ(w_0, z) − ℓ(w_T, z)| (the size of the change
    the kernel machine has to account for)."""
    err = np.abs(km["network"] - km["machine"]).max()
    return float(err / np.abs(km["initial"] - km["network"]).max())


def taylor_report(traj: Trajectory, km: dict[str, np.ndarray]) -> dict:
    """Gradient descent's gap between network and kernel machine against its Taylor expansion
    (a run of :func:`gradient_flow` with ``taylor_order`` and ``remainder_nodes``), per truncation
    t = 1..q (t = 1: the gap itself; t = 2: less the second-order term; t = 3: less the second-
    and third-order terms):

    - ``residual[t]``: max_z |gap − Σ_{2 ≤ j ≤ t} S_j| / max_z |gap|;
    - ``position[t]``: max_z |residual − c| / w, with c and w the centre and half-width of the
      Lagrange interval for the order-(t+1) remainder at z (≤ 1: inside at every test point);
      ``position_coarse[t]`` the same from every other grid node;
    - ``position_without[t]`` (t ≥ 2): the position had the order-t term been left out."""
    gap = km["network"] - km["machine"]
    e = traj.extras
    if "remainder_lo" not in e:
        raise ValueError("run gradient_flow(..., taylor_order=q, remainder_nodes=G) first")
    S = {j: e["taylor"][j - 2] for j in range(2, e["taylor"].shape[0] + 2)}
    out = {key: {} for key in ("residual", "position", "position_coarse", "position_without")}

    def position(r, lo, hi):
        return float(np.max(np.abs(r - (lo + hi) / 2) / ((hi - lo) / 2)))

    res = gap.copy()
    for t in range(1, len(S) + 2):
        if t >= 2:
            res = res - S[t]
            out["position_without"][t] = position(res + S[t], e["remainder_lo"][t - 1],
                                                  e["remainder_hi"][t - 1])
        out["residual"][t] = float(np.abs(res).max() / np.abs(gap).max())
        out["position"][t] = position(res, e["remainder_lo"][t - 1], e["remainder_hi"][t - 1])
        out["position_coarse"][t] = position(res, e["remainder_lo_coarse"][t - 1],
                                             e["remainder_hi_coarse"][t - 1])
    return out


def confidence_term(n: int, delta: float = 0.01, loss_range: float = 1.0) -> float:
    """3 M √(log(2/δ) / (2n)): the concentration term of a Rademacher bound for a loss in [0, M]."""
    return 3.0 * loss_range * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def violation_ceiling(gap, confidence) -> float:
    """The largest amount by which a bound "complexity term + confidence term" could fall below the
    gap in any of the runs, whatever its complexity term (≥ 0): max over runs of gap − confidence,
    and 0 when the confidence term alone is at least every gap (no run could show the bound
    below its gap)."""
    slack = np.asarray(gap, float) - np.asarray(confidence, float)
    return float(max(slack.max(), 0.0)) if slack.size else 0.0


def lpk_complexity(sum_K: float, trace_K: float, n: int) -> float:
    """2 R̂: twice the Rademacher complexity of {ℓ(w_0,·) − h : ‖h‖_{H_K} ≤ √(1ᵀK1)/n},
    i.e. (2/n²) √(1ᵀK1 · Tr K)."""
    return 2.0 * math.sqrt(max(sum_K, 0.0) * trace_K) / n ** 2


def static_complexity(traj: Trajectory, split: Split, beta: float = 10.0) -> float:
    """The same RKHS-norm × trace shape with the tangent kernel frozen at initialisation (NTK):
    2 ‖w_T − w_0‖ √(Tr Θ_0) / n (the logistic loss is 1-Lipschitz in f)."""
    dw2 = sum(float(((traj.params[k] - traj.params0[k]) ** 2).sum()) for k in traj.params)
    tr0 = float(tangent_sq_norms(traj.params0, split.X, beta).sum())
    return 2.0 * math.sqrt(dw2 * tr0) / split.n


def arora_complexity(traj: Trajectory, split: Split, beta: float = 10.0) -> float:
    """Arora et al. (ICML 2019)'s data-dependent complexity √(2 yᵀ H⁻¹ y / n), which the paper says
    its bound recovers, with H the network's tangent-kernel Gram matrix on the training inputs at
    initialisation (standing in for their infinite-width H^∞) and y the training labels (±1).
    Solved by Cholesky in float64, with the smallest jitter that makes H positive definite."""
    H = tangent_gram(traj.params0, split.X, split.X, beta).double()
    y = split.y.double()
    eye = torch.eye(H.shape[0], dtype=H.dtype)
    scale = float(H.diagonal().mean())
    for jitter in (0.0, 1e-12, 1e-10, 1e-8, 1e-6):
        L, info = torch.linalg.cholesky_ex(H + jitter * scale * eye)
        if int(info) == 0:
            break
    else:
        raise np.linalg.LinAlgError("the tangent Gram matrix at initialisation is not positive definite")
    quad = float((torch.cholesky_solve(y[:, None], L)[:, 0] * y).sum())
    return math.sqrt(2.0 * quad / split.n)


@dataclass
class BoundReport:
    """One run's gap and bounds (every entry a float)."""

    train_loss: float           # L_S(w_T), logistic loss capped at M
    test_loss: float            # L_test(w_T), capped at M, against the split's y_test
    gap: float                  # test − train, capped loss (what the bound covers)
    gap_raw: float              # the same with the uncapped logistic loss
    gap_clean: float            # test − train, capped, against clean test labels (= gap without label noise)
    loss_drop: float            # L_S(w_0) − L_S(w_T) (uncapped: the loss gradient flow descends)
    sum_K_over_n2: float        # 1ᵀK1 / n²
    trace_K: float
    lpk_term: float
    static_term: float
    arora_term: float           # √(2yᵀH⁻¹y/n), Arora et al. (2019), H the NTK Gram at w_0
    confidence: float
    loss_cap: float             # M

    @property
    def lpk_bound(self) -> float:
        return self.lpk_term + self.confidence

    @property
    def static_bound(self) -> float:
        return self.static_term + self.confidence

    @property
    def arora_bound(self) -> float:
        return self.arora_term + self.confidence

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "lpk_bound": self.lpk_bound, "static_bound": self.static_bound,
                "arora_bound": self.arora_bound}


def bound_report(traj: Trajectory, split: Split, loss_cap: float = 3.0, delta: float = 0.01,
                 beta: float = 10.0) -> BoundReport:
    """The gap L_test(w_T) − L_S(w_T) beside the reconstructed LPK bound and the static bound.

    The theorem needs a loss in [0, M]; the logistic loss is unbounded, so the gap is measured in
    the capped loss min(ℓ, M). Capping is 1-Lipschitz, so by the contraction lemma the same
    complexity terms bound the capped class; the confidence term is 3M√(log(2/δ)/(2n)). The gap
    is measured against ``split.y_test``: for a split from :meth:`~lib.lpk.data.Split.with_noisy_test`,
    the noisy labels of the distribution the training set is drawn from, which is what the bound
    covers; ``gap_clean`` uses the clean labels."""
    if loss_cap <= 0:
        raise ValueError(f"loss_cap must be positive, got {loss_cap}")
    lS = losses(traj.params, split.X, split.y, beta)
    lT = losses(traj.params, split.X_test, split.y_test, beta)
    cS, cT = lS.clamp(max=loss_cap), lT.clamp(max=loss_cap)
    clean = split.y_test if split.y_test_clean is None else split.y_test_clean
    cC = losses(traj.params, split.X_test, clean, beta).clamp(max=loss_cap)
    n = split.n
    return BoundReport(
        train_loss=float(cS.mean()), test_loss=float(cT.mean()), gap=float(cT.mean() - cS.mean()),
        gap_raw=float(lT.mean() - lS.mean()), gap_clean=float(cC.mean() - cS.mean()),
        loss_drop=float(traj.train_loss[0] - traj.train_loss[-1]),
        sum_K_over_n2=float(traj.sum_K[-1]) / n ** 2, trace_K=float(traj.trace_K[-1]),
        lpk_term=lpk_complexity(float(traj.sum_K[-1]), float(traj.trace_K[-1]), n),
        static_term=static_complexity(traj, split, beta), arora_term=arora_complexity(traj, split, beta),
        confidence=confidence_term(n, delta, loss_cap), loss_cap=loss_cap)


def chen2023_bound(K_SS: np.ndarray, sum_K_train: np.ndarray, n_train: int, loss_S: np.ndarray,
                   train_loss: float, delta: float = 0.01) -> dict:
    """The computable bound of the 2023 predecessor (Chen, Huang, Wang, Loh, Srivastava, Nguyen, Weng,
    NeurIPS 2023, Corollary 1), exactly as its public code (``cal_bound.py``) computes it.

    The loss class is {ℓ(w_T(S′), ·)}: the networks that gradient flow from one fixed w_0 reaches on
    training sets S′; its Rademacher complexity is taken on one fixed sample S of size N, and the
    supremum over S′ is replaced by a maximum over k sampled training sets S′_1..S′_k (S′_1 = S).
    Inputs, one row per S′_j: ``K_SS[j]`` = K_T(S, S; S′_j) (N × N), ``sum_K_train[j]`` =
    1ᵀK_T(S′_j, S′_j; S′_j)1 (training sets of size ``n_train``), ``loss_S[j]`` = the kernel
    machine's loss ℓ(w_0, z) − (1/n) Σ_i K_T(z, z′_i; S′_j) at every z in S; ``train_loss`` is the
    training loss of the network trained on S. With B = max_j √(1ᵀK1)/n_train,

        U₁ = B √(max_j Tr K_SS[j] + Σ_{a≠b} (max_j K_SS[j]_ab − min_j K_SS[j]_ab)/2) / N,
        U₂ = max_{j<l} ‖loss_S[j] − loss_S[l]‖₁ / N,

    and the bound on the population loss is train_loss + 2 min(U₁, U₂) + 3√(log(2/δ)/(2N)) (the
    confidence term of a loss with values in [0, 1], as the code has it)."""
    K_SS, loss_S = np.asarray(K_SS, dtype=float), np.asarray(loss_S, dtype=float)
    k, N = loss_S.shape
    if K_SS.shape != (k, N, N) or len(sum_K_train) != k or k < 2:
        raise ValueError("need k ≥ 2 training sets, K_SS of shape (k, N, N) and one loss row per set")
    B = float(np.sqrt(np.max(sum_K_train))) / n_train
    trace = float(np.max(np.trace(K_SS, axis1=1, axis2=2)))
    half = (K_SS.max(axis=0) - K_SS.min(axis=0)) / 2
    spread = float(half.sum() - np.trace(half))
    u1 = B * math.sqrt(trace + spread) / N
    u2 = max(float(np.abs(loss_S[j] - loss_S[l]).sum()) for j in range(k) for l in range(j + 1, k)) / N
    conf = confidence_term(N, delta, 1.0)
    return {"U1": u1, "U2": u2, "B": B, "trace": trace, "spread": spread, "confidence": conf,
            "complexity": 2 * min(u1, u2), "bound": float(train_loss) + 2 * min(u1, u2) + conf}


def chen2023_u2_floor(loss_S: np.ndarray) -> float:
    """A lower bound on the 2023 bound's U₂ that needs no second training set to be unlike S:
    with S′_1 = S, row 0 of ``loss_S`` is the trained network's loss on its own training points,
    so U₂ ≥ ‖loss_S[j] − loss_S[0]‖₁/N ≥ mean(loss_S[j]) − mean(loss_S[0]) for every j, the loss on S
    of a network trained on another sample less the training loss: about the gap itself. The bound
    then exceeds the test loss by at least 2·floor + confidence − gap whatever the data."""
    loss_S = np.asarray(loss_S, dtype=float)
    means = loss_S.mean(axis=1)
    return float(np.max(means[1:] - means[0]))


def lpk_bound_over_time(traj: Trajectory, split: Split) -> np.ndarray:
    """The LPK complexity term (2/n²)√(1ᵀK_t1 · Tr K_t) at every recorded time t (the confidence
    term, constant in t, is added separately)."""
    return np.array([lpk_complexity(s, t, split.n) for s, t in zip(traj.sum_K, traj.trace_K)])
