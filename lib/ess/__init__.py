"""Effective state-size (chapter 09): spectra of Hankel blocks, mixer operators, tasks, models."""
