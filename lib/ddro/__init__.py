"""Chapter 08 — Direct density ratio optimisation (DDRO): alignment without a preference model.

Higuchi & Suzuki, *Direct Density Ratio Optimization: A Statistically Consistent Approach to
Aligning Large Language Models*, ICML 2025, arXiv:2505.07558.

- :mod:`.preferences`: preference structures over K outputs, the target p₊, paired and unpaired
  data.
- :mod:`.categorical`: the density-ratio loss (the chapter's reconstruction) and its exact
  categorical minimiser, DPO, the Bradley–Terry plug-in of p₊ and a KTO-style baseline,
  population limits, the delta-method constant of E TV ≈ C/√N.
- :mod:`.neural`: a tiny autoregressive GRU policy over short token sequences and its batched
  fine-tuning to convergence.
- :mod:`.experiments`: the chapter's studies, one sweep point at a time.
- :mod:`.analysis`: the rate claims' statistics (slope band, bias-floor rival, rate tolerance) and the
  studies' summaries.
"""

from lib.ddro.categorical import (bt_misfit, bt_plugin_limit, bt_plugin_target, bt_plugin_tv_constant,
                                  bt_projection, bt_scores, ddro_loss, ddro_tv_constant, empirical_winners_tv_constant,
                                  fit_bt_plugin, fit_ddro_categorical, fit_dpo_categorical,
                                  fit_kto_categorical,
                                  population_limits)
from lib.ddro.analysis import (band_ratio, fit_effort, floor_slope, gru_rate, largest_n_summary, margin_test,
                               met_median, predicted_tv, rate_constant, rate_study, rate_tolerance, slope_fit,
                               t_quantile, upper_bound)
from lib.ddro.experiments import (MISSPECIFIED_ALPHA, categorical_point, categorical_study, neural_adam_batch,
                                  neural_batch)
from lib.ddro.neural import (AdamFits, GRUPolicy, adam_population, all_sequences, batched_loss, categorical_optimum,
                             ddro_step, dpo_step, fit_population, gru_weights, sequence_preference, sequence_setup,
                             train_population, tree_log_probs)
from lib.ddro.preferences import (Preference, bradley_terry, cyclic, expected_pairs, paired_target, sample_pairs,
                                  sample_unpaired, structures, tv, unpaired_target)
from lib.stats import loglog_slope

__all__ = ["Preference", "bradley_terry", "cyclic", "structures", "paired_target", "unpaired_target", "tv",
           "sample_pairs", "expected_pairs", "sample_unpaired", "ddro_loss", "fit_ddro_categorical",
           "fit_dpo_categorical", "fit_kto_categorical", "bt_scores", "bt_plugin_target", "fit_bt_plugin",
           "bt_projection", "bt_plugin_limit", "bt_plugin_tv_constant", "ddro_tv_constant",
           "empirical_winners_tv_constant",
           "bt_misfit", "population_limits", "all_sequences", "sequence_preference", "GRUPolicy", "ddro_step",
           "dpo_step", "fit_population", "gru_weights", "tree_log_probs", "batched_loss", "categorical_optimum",
           "train_population", "sequence_setup", "categorical_point", "categorical_study", "neural_batch",
           "loglog_slope", "slope_fit", "floor_slope", "rate_tolerance", "upper_bound", "margin_test",
           "MISSPECIFIED_ALPHA", "AdamFits", "adam_population", "neural_adam_batch", "t_quantile", "predicted_tv",
           "rate_study", "band_ratio", "largest_n_summary", "gru_rate", "fit_effort", "met_median", "rate_constant"]
