"""Chapter 07 — label noise in feature learning: Han et al., "On the Role of Label Noise in the
Feature Learning Process" (ICML 2025, arXiv:2505.18909).

The setting (Section 3 of the paper): a sample is two patches, x = [y·μ, ξ], its observed label ỹ
the true label flipped with probability τ₊ or τ₋; a two-layer ReLU CNN with a fixed second layer is
trained by full-batch gradient descent on the logistic loss of ỹ·f.

- :mod:`.data`: the two-patch samples and their label flips.
- :mod:`.theory`: T₁, the Stage I growth rates, Theorem 4.2's bound, the heuristic phase boundary.
- :mod:`.model`: the network, weight-space GD (the reference) and the exact signal–noise
  coefficient recursions (the fast path).
- :mod:`.training`: the chapter's training runs and what they record.
- :mod:`.analysis`: exact tests on counts, stage detection, small-loss sample selection.
- :mod:`.digits`: the real-data experiment (two digits, symmetric label noise, a small CNN).
- :mod:`.experiments`: the sweep points of the Theorem 4.2 runs, the d/n sweep, the phase grid and
  the digits runs.
"""

from lib.label_noise.analysis import (bound_excess, detect_stages, log10_p_rate_at_least, no_rise, overtake_step,
                                      p_rate_at_least, p_rate_at_most, p_rates_at_least, p_rise, paired_changes,
                                      pooled_selection, precision_recall, per_run_reading, reuse_summary,
                                      rise_power, select_small_loss, smallest_detectable_rise, stack_runs,
                                      stage_one_appears, stage_one_best, sweep_convergence)
from lib.label_noise.data import make_data, make_reuse_test, mu_norm_for, snr
from lib.label_noise.digits import digits_task, train_digits
from lib.label_noise.experiments import digits_run, dim_point, phase_point
from lib.label_noise.model import (LOG2, CoefficientGD, J, TestSet, gd_step, init_weights, logistic_loss,
                                   loss_derivative, output, preactivations, project)
from lib.label_noise.theory import (benign_exponent, heuristic_boundary, noisy_label_error, stage_one_rates,
                                    stage_two_bound, t1_prediction)
from lib.label_noise.training import (History, flip_rates, init_event, log_steps, run_synthetic, run_to_loss, train,
                                      train_to_loss)

__all__ = ["bound_excess", "no_rise", "sweep_convergence",
           "detect_stages", "log10_p_rate_at_least", "p_rate_at_least", "p_rate_at_most", "p_rise",
           "precision_recall", "select_small_loss", "smallest_detectable_rise", "stage_one_appears", "overtake_step",
           "stack_runs", "make_data", "make_reuse_test", "init_event", "flip_rates", "p_rates_at_least",
           "per_run_reading", "paired_changes", "dim_point", "phase_point", "digits_run",
           "rise_power", "reuse_summary", "pooled_selection", "stage_one_best",
           "mu_norm_for", "snr", "digits_task", "train_digits", "LOG2", "CoefficientGD", "J", "TestSet",
           "gd_step", "init_weights", "logistic_loss", "loss_derivative", "output", "preactivations", "project",
           "benign_exponent", "heuristic_boundary", "noisy_label_error", "stage_one_rates", "stage_two_bound",
           "t1_prediction", "History", "log_steps", "run_synthetic", "run_to_loss", "train", "train_to_loss"]
