"""Chapter 06 — the loss path kernel (LPK) of gradient flow and the generalisation bound built on it.

Chen, Wang, Huang, Han, Suzuki, Mazumdar, *Generalization Bound of Gradient Flow through Training
Trajectory and Data-dependent Kernel*, NeurIPS 2025, arXiv:2506.11357.

A two-layer Softplus network with NTK scaling is trained on the logistic loss
ℓ(w, z) = log(1 + exp(−y f(w, x))) by gradient flow dw/dt = −∇L_S(w), L_S = (1/n) Σ_i ℓ(w, z_i).
Along the trajectory we accumulate the loss path kernel

    K_T(z, z') = ∫_0^T ⟨∇_w ℓ(w_t, z), ∇_w ℓ(w_t, z')⟩ dt,

for which d/dt ℓ(w_t, z) = −(1/n) Σ_i ⟨∇ℓ(w_t, z), ∇ℓ(w_t, z_i)⟩ gives the exact kernel-machine
identity ℓ(w_T, z) = ℓ(w_0, z) − (1/n) Σ_i K_T(z, z_i).

- :mod:`.data`: digits 1 vs 7 and the Gaussian mixture, with label noise.
- :mod:`.network`: the network, its loss, per-sample gradients and line derivatives (closed form
  beside the torch.func reference).
- :mod:`.flow`: gradient flow (RK4) and gradient descent (Euler) with the kernels accumulated.
- :mod:`.batch`: RK4 gradient flow of several same-shaped runs at once, with the LPK of probe points.
- :mod:`.bounds`: the kernel-machine identity, the Taylor report, the LPK and static bounds, and
  the 2023 predecessor's computable bound.
- :mod:`.ranks`: Kendall and Spearman rank correlations, the exact within-level Kendall test.
- :mod:`.experiments`: one sweep point (:func:`run`), the chapter's grids (:func:`run_sweeps`) and
  the step-size study of the identity (:func:`step_convergence`).
- :mod:`.summary`: the sweeps' runs as the chapter's tables and numbers (each run once, values per
  level, the rank statistics and their power, the bound over the gap against n).
- :mod:`.bench`: the gradient flow's earlier implementation beside the current one, timed
  (``python -m lib.lpk.bench``).
"""

from lib.lpk.batch import gradient_flow_batch
from lib.lpk.bounds import (arora_complexity, bound_report, chen2023_bound, chen2023_u2_floor, confidence_term,
                            identity_error, kernel_machine, lpk_bound_over_time, lpk_complexity, taylor_report,
                            violation_ceiling)
from lib.lpk.data import digits_1v7, gaussian_mixture
from lib.lpk.experiments import run, run_sweeps, step_convergence
from lib.lpk.flow import Trajectory, brute_force_lpk, gradient_flow
from lib.lpk.network import (DTYPE, directional_derivatives, directional_derivatives_torch_func, features_gram, forward,
                             full_gradient, gradient_and_tangent, init_params, logistic_slope, loss_grad_gram,
                             losses, per_sample_grads, per_sample_sq_norms, slopes_and_features, tangent_sq_norms)
from lib.lpk.ranks import (kendall_detectable, kendall_power, kendall_s, kendall_s_null, kendall_tau, kendall_test,
                           one_sided_z, partial_kendall, sign_test, sign_test_detectable, spearman_rho,
                           stratified_kendall)
from lib.lpk.summary import (bound_above_gap_text, bound_over_gap_by_n, by_n_summary, detectable_taus,
                             geometric_means, median_positive_ratio, rank_statistics, unique_runs, values_by_level)

__all__ = ["gradient_flow_batch", "chen2023_bound", "chen2023_u2_floor", "gradient_and_tangent", "bound_report",
           "confidence_term",
           "identity_error", "kernel_machine", "lpk_bound_over_time",
           "lpk_complexity", "taylor_report", "digits_1v7", "gaussian_mixture", "run", "run_sweeps",
           "Trajectory", "brute_force_lpk", "gradient_flow", "DTYPE", "directional_derivatives",
           "directional_derivatives_torch_func", "forward", "full_gradient", "init_params", "logistic_slope",
           "loss_grad_gram", "losses", "per_sample_grads", "tangent_sq_norms", "features_gram",
           "per_sample_sq_norms", "slopes_and_features", "kendall_s", "kendall_s_null",
           "kendall_tau", "partial_kendall", "spearman_rho", "stratified_kendall", "kendall_test", "sign_test",
           "arora_complexity", "violation_ceiling", "one_sided_z", "kendall_power", "kendall_detectable",
           "sign_test_detectable", "step_convergence", "bound_above_gap_text", "bound_over_gap_by_n",
           "by_n_summary", "geometric_means", "median_positive_ratio", "unique_runs", "values_by_level",
           "rank_statistics", "detectable_taus"]
