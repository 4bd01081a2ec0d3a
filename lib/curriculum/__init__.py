"""Curriculum post-training on autoregressive reasoning trees (Bu et al., arXiv:2511.07372).

The chapter's model, in eight modules (this package re-exports what the chapter and tests use):

* **The reasoning tree** (``tree``).  An input of ``d`` tokens; a chain of ``k`` steps; step
  ``ℓ`` picks an input position ``i_ℓ`` (one of ``d`` children) and updates the state
  ``z_ℓ = a·z_{ℓ-1} + x_{i_ℓ} (mod p)``.  Parity is ``p = 2, a = 1``; ``p > 2`` with ``a ≠ 1``
  is a Countdown-like arithmetic chain.  With ``blocked=True`` step ``ℓ`` reads its own block of
  ``d`` tokens (input shape ``(k, d)``), which makes the target path the only correct path.
  Oracles: terminal (is the final answer right?) and family (is the depth-ℓ prefix answer right?).
* **The policy** (``policy``, ``transformer``).  The paper's transformer attends by position
  only, so its law over paths is a softmax over the ``d`` candidates at each depth, independent
  across depths: logits ``θ ∈ R^{k×d}``, zero (uniform) at the start.
  :class:`PositionalTransformer` is the paper's restricted transformer; with orthonormal
  position embeddings its gradient steps move the attention scores exactly as the tabular
  logits move (tested).
* **RL.**  REINFORCE with outcome rewards; the one-large-step protocol that measures sample
  complexity (``n*``), both literally and through an exact sufficient-statistic sampler, for
  one stage and for a whole curriculum whose stages start from the policy the previous stage
  produced (``one_step``); the iterative trainer for the direct route and the two curricula
  (``training``).
* **Sweeps** (``experiments``).  The heavy loops as point functions for :func:`lib.sweep.sweep`,
  each point with its own generator (:func:`stream` of the chapter seed and the point).
* **Decisions** (``decisions``).  The chapter's test levels (one weighted Bonferroni split), the
  slope claims, the exact binomial and skew-aware tests of the test-time procedures, and the
  medians its tables show.
* **Theory.**  Base success probability, reward-hacking rate, the success probability of the
  one-step estimator (Poissonised), its ``n*`` and the signal-to-noise exponents, and the exact
  expected costs of rejection sampling at test time (best-of-n and layer-wise accept/reject,
  ``test_time``).

Routes: ``"direct"`` (terminal oracle on the whole chain), ``"depth"`` (depth-increasing
curriculum, family oracle on the prefix of the current depth) and ``"hint"`` (hint-decreasing
curriculum: the first ``k-ℓ`` steps are given, the terminal oracle judges the rest).
"""

from lib.curriculum.one_step import (LEARNED, curriculum_fast, curriculum_literal,
                                     curriculum_theory, gradient_snr_sample, gradient_snr_theory, n_grid,
                                     n_star, n_star_asymptotic,
                                     n_star_theory, onestep_fast, onestep_literal, onestep_theory,
                                     sampler_check, slope_fit, slope_half_width, stage_setup, two_proportion_p,
                                     two_proportion_z)
from lib.curriculum.decisions import (binomial_lower_p, binomial_two_sided_p, binomial_upper_p, calls_z,
                                      chapter_levels, inference_checks, log_growth_rate, median_finite,
                                      median_samples_to_solve, median_solved_at, no_hacking, proportion_z,
                                      route_label, slope_claim, solved_medians)
from lib.curriculum.experiments import (ORACLE_Q, PAPER_CELLS, batch_sweep, best_of_n_vs_ltar, freeze_compare,
                                        n_star_point,
                                        onestep_count, oracle_tree, sampler_cell, snr_point, solve_point, stack_runs,
                                        stream,
                                        sweep_n_star, train_point)
from lib.curriculum.policy import greedy, reinforce_gradient, sample_paths
from lib.curriculum.inference import (best_of_n, ltar, mean_test_z, rejection_cost,
                                      test_time_theory, verification_length)
from lib.curriculum.training import (fisher_detectable, fisher_greater_p, fisher_power, hacking_fraction,
                                     judged_correct_probability, martingale_p, samples_to_solve,
                                     solve_rate_ceiling, solve_time, test_accuracy, train)
from lib.curriculum.transformer import PositionalTransformer, compare_transformer
from lib.curriculum.tree import (ROUTES, ReasoningTree, base_success, correct_paths, mod_chain,
                                 parity)
from lib.stats import loglog_slope

__all__ = ["binomial_lower_p", "binomial_two_sided_p", "binomial_upper_p", "calls_z", "chapter_levels",
           "inference_checks", "log_growth_rate", "median_finite", "median_samples_to_solve", "median_solved_at",
           "no_hacking",
           "proportion_z", "route_label", "slope_claim", "solved_medians",
           "LEARNED", "ORACLE_Q", "PAPER_CELLS", "ROUTES", "batch_sweep", "solve_rate_ceiling", "fisher_detectable",
           "freeze_compare",
           "PositionalTransformer", "ReasoningTree", "base_success",
           "best_of_n", "best_of_n_vs_ltar", "fisher_greater_p", "fisher_power", "compare_transformer",
           "correct_paths", "curriculum_fast", "gradient_snr_sample", "gradient_snr_theory",
           "curriculum_literal", "curriculum_theory", "greedy", "hacking_fraction",
           "judged_correct_probability", "loglog_slope", "ltar", "martingale_p", "mean_test_z", "mod_chain", "n_grid",
           "n_star", "n_star_point", "onestep_count", "oracle_tree",
           "n_star_asymptotic", "n_star_theory", "onestep_fast", "onestep_literal",
           "onestep_theory", "parity", "reinforce_gradient", "rejection_cost", "sample_paths", "snr_point",
           "sampler_cell", "sampler_check", "samples_to_solve", "slope_fit", "slope_half_width",
           "solve_point", "solve_time", "stack_runs", "stage_setup", "stream",
           "sweep_n_star", "test_accuracy", "test_time_theory", "train", "train_point",
           "two_proportion_p", "two_proportion_z", "verification_length"]
