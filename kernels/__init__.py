"""Compiled kernels used by the book (sliding-window recurrences: :mod:`kernels.swr`)."""
