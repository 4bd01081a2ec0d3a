"""Small numerical helpers shared by several chapters: power-law fits and a stable softmax."""

from __future__ import annotations

import math

import numpy as np


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` over the points where both are finite
    and positive (NaN when fewer than two remain)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """``exp(z) / Σ exp(z)`` along ``axis``, shifted by the maximum for stability."""
    z = np.asarray(logits, float)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
