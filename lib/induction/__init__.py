"""Chapter 01 — From shortcut to induction head (Kawata et al., arXiv:2512.18634).

- :mod:`.data`: the trigger–output task (Definition 1), length distributions, the OOD test.
- :mod:`.one_layer`: the one-layer transformer of eq. (2.1) and Algorithm 1.
- :mod:`.compiled`: Algorithm 1's sparse gradient sums, compiled (numba).
- :mod:`.theory`: the max-sum ratio, Lemma 7's W_KQ (leading and next order), Proposition 8.
- :mod:`.threshold`: Theorems 5–6 in the population limit: the exact OOD decision of Lemma 7's
  matrix with hard attention, and the threshold statistic over every window.
- :mod:`.realistic`: the 3-layer transformer of the paper's Fig. 4, trained with AdamW.
- :mod:`.experiments`: the grids the chapter sweeps (one cell = train, then test).
- :mod:`.analysis`: the tables and decision rules the chapter reads off the sweeps.
- :mod:`.figures`: the chapter's own figure types (``W_KQ`` and grid heatmaps).
"""

from lib.induction.data import LengthDist, sample_ood, sample_sequences, sample_train
from lib.induction.one_layer import Embedding, evaluate, train_two_step
from lib.induction.theory import (lemma7_ratio, lemma7_w_kq, max_sum_ratio, measured_ratio,
                                  optimal_distribution_closed_form, optimal_distribution_lp)

__all__ = ["LengthDist", "sample_ood", "sample_sequences", "sample_train", "Embedding",
           "evaluate", "train_two_step", "lemma7_ratio", "lemma7_w_kq", "max_sum_ratio",
           "measured_ratio", "optimal_distribution_closed_form", "optimal_distribution_lp"]
