"""Multi-task tree-structured Markov chains (TMC): chapter 05.

Bu, Huang, Han, Nitanda, Xue, Zhang, Wong, Suzuki (2025), "Consistency Is Not Always Correct:
Towards Understanding the Role of Exploration in Post-Training Reasoning", arXiv:2511.07368.

A reasoning chain is a walk ``x_0 → x_1 → … → x_{L-1}`` through ``L`` layers of states. Every
state has a few *high* (easy) children and the rest are *low* (hard) children. A task is a
(start, target) pair; a chain solves it only if it starts at the start and ends at the target.
The model of the chapter is a tabular softmax policy with one logit matrix per layer transition,
shared by all tasks, so post-training one task moves the other through the states they share.

Modules, in import order:

- :mod:`lib.tmc.tree` — the tree, its tasks, path tables, Rex, question instances, exact pass@K,
  and :class:`Setting` (what a trainer needs about one task);
- :mod:`lib.tmc.policy` — the tabular softmax policy: score function, chain sampling,
  pretraining, Monte-Carlo pass@K;
- :mod:`lib.tmc.methods` — the stochastic post-training methods (REINFORCE, RL-rej, RAFT, PPO,
  KL-GRPO);
- :mod:`lib.tmc.odes` — their expected updates, the mean-field recursion, the KL tilt;
- :mod:`lib.tmc.selection` — inference-time selection with a population reward;
- :mod:`lib.tmc.experiments` — seeded runs and their exact summaries, random trees, drawing;
- :mod:`lib.tmc.decisions` — the chapter's decision rule for its statistical claims, and the small
  statistics its tables show.

Everything the chapter and its tests use is re-exported here (``from lib import tmc as M``).
"""

from lib.tmc.decisions import (claim_rule, count_wins, crossing_p, geometric_midpoint, inference_coverages,
                               mean_z_test, median_or_nan, seed_stack, tested)
from lib.tmc.experiments import (detectable_shift, dprm_vs_orm_tree, draw_tree, hard_mass_crossover, hard_summary,
                                 kl_beta_run, mean_above_p, reward_weighted, sign_test_p, stream, train_run,
                                 trajectory, tree_squeeze)
from lib.tmc.methods import TRAINERS, post_train
from lib.tmc.odes import expected_update, kl_tilt, mean_field, path_weights
from lib.tmc.policy import pretrain, sample_chains, sampled_pass_at_k, score_sum, softmax, step
from lib.tmc.selection import (binomial_pvalues, dprm_h_transform, orm_best_of_n, prm_greedy, sample_dprm,
                               sample_orm_best_of_n, soft_best_of_n)
from lib.tmc.tree import (CLASS_NAMES, EASY, HARD, INVALID, LOW_WEIGHT, TMC, Matrices, Setting, Task,
                          classify, correct_sets, coverage, edge_probabilities, hard_instances,
                          paper_tmc, pass_at_k, pass_at_k_estimate, path_entropy, path_index,
                          path_probs, paths_from, random_tmc, rex, sample_instances)

__all__ = [
    "claim_rule", "count_wins", "crossing_p", "geometric_midpoint", "inference_coverages", "mean_z_test",
    "median_or_nan", "seed_stack", "tested",
    "CLASS_NAMES", "EASY", "HARD", "INVALID", "LOW_WEIGHT", "TMC", "TRAINERS", "Matrices", "Setting",
    "Task", "binomial_pvalues", "classify", "correct_sets", "coverage", "detectable_shift", "dprm_h_transform",
    "dprm_vs_orm_tree", "hard_mass_crossover", "reward_weighted",
    "draw_tree", "hard_summary", "kl_beta_run", "mean_above_p", "sign_test_p",
    "edge_probabilities", "expected_update", "hard_instances", "kl_tilt", "mean_field",
    "orm_best_of_n", "paper_tmc", "pass_at_k", "pass_at_k_estimate", "path_entropy", "path_index",
    "path_probs", "path_weights", "paths_from", "post_train", "pretrain", "prm_greedy", "random_tmc",
    "rex", "sample_chains", "sample_dprm", "sample_instances", "sample_orm_best_of_n",
    "sampled_pass_at_k", "score_sum", "soft_best_of_n", "softmax", "step", "stream", "train_run", "trajectory",
    "tree_squeeze",
]
