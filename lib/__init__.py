"""Thin, tested library behind the companion book.

Three layers, which import only downwards (``tests/test_architecture.py`` checks it):

- **Paper code**, one module or package per paper (table below): theory formulas, data
  generators, models, experiments. A paper's code never imports the pipeline or another paper's
  code, only the shared pieces.
- **Shared pieces** used by the notebooks and the paper code: :mod:`lib.chapter` (the lines every
  notebook starts and ends with), :mod:`lib.claims` (theorem-versus-simulation claims and
  results.json's claims), :mod:`lib.results` (results.json's one reader and writer), :mod:`lib.run`
  (the run context the runner hands a chapter), :mod:`lib.outputs` (where a run may write),
  :mod:`lib.plotting` (house style, figures, numbers in prose), :mod:`lib.stats` (intervals,
  tests over seeds, fits), :mod:`lib.seeding` (every random draw: the chapter seed and a named
  stream), :mod:`lib.sweep` (grid × seeds, local or on Dask), :mod:`lib.provenance` (commit and
  environment), and the building blocks of more than one model: :mod:`lib.llama` (the decoder
  blocks chapters 02 and 10 share) and :mod:`lib.pcfg` (chapter 10's grammars).
- **The pipeline**, :mod:`lib.pipeline` (chapter discovery, papermill runner and cache, seed
  sweeps, book build, the ``companion`` CLI): it runs notebooks and never imports paper code.

======  ==================================  ======================================  ==========================
chapter slug                                lib                                     tests
======  ==================================  ======================================  ==========================
01      induction-head                      ``lib.induction``                       ``test_induction.py``
02      sliding-window-recurrences          ``lib.phalanx``, ``kernels.swr``,       ``test_phalanx.py``,
                                            ``kernels.swa``                         ``test_swr*.py``
03      npiv-mean-field                     ``lib.npiv``                            ``test_npiv.py``
04      curriculum-post-training            ``lib.curriculum``                      ``test_curriculum.py``
05      exploration-tree-markov-chains      ``lib.tmc``                             ``test_tmc.py``
06      loss-path-kernel                    ``lib.lpk``                             ``test_lpk.py``
07      label-noise-feature-learning        ``lib.label_noise``                     ``test_label_noise.py``
08      direct-density-ratio-optimization   ``lib.ddro``                            ``test_ddro.py``
09      effective-state-size                ``lib.ess``                             ``test_ess.py``
10      metadata-conditioning               ``lib.metadata``, ``lib.pcfg``          ``test_pcfg.py``
======  ==================================  ======================================  ==========================
"""
