"""Thin, tested library behind the companion book.

One module per paper (theory formulas, data generators, models) plus the shared
pieces every chapter uses: :mod:`lib.claims` (theorem-versus-simulation checks and
results.json), :mod:`lib.plotting` (house style), :mod:`lib.sweep` (grid × seeds, local
or on Dask), and the pipeline (:mod:`lib.chapters`, :mod:`lib.runner`, :mod:`lib.book`,
:mod:`lib.cli`).
"""
