"""The build pipeline: chapter discovery and parameters (:mod:`~lib.pipeline.chapters`), papermill
execution with its cache (:mod:`~lib.pipeline.runner`), seed sweeps (:mod:`~lib.pipeline.seeds`),
the Jupyter Book build (:mod:`~lib.pipeline.book`) and the ``companion`` CLI
(:mod:`~lib.pipeline.cli`).

The pipeline never imports paper code, and paper code never imports the pipeline: a chapter
notebook meets the pipeline only through the notebook-facing helpers at ``lib/`` top level.
"""
