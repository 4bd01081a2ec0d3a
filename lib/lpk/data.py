"""The two binary tasks: digits 1 vs 7 and a Gaussian mixture, inputs on the unit sphere, with
the label noise of the 2023 LPK code."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from lib.lpk.network import DTYPE
from lib.seeding import stream


@dataclass
class Split:
    """A binary task: inputs on the unit sphere, labels in {−1, +1}; training labels may be noisy."""

    X: torch.Tensor          # (n, d) training inputs
    y: torch.Tensor          # (n,) training labels as trained on (after label noise)
    X_test: torch.Tensor     # (n_test, d)
    y_test: torch.Tensor     # (n_test,) clean labels
    flipped: int = 0         # how many training labels the noise flipped
    y_test_noisy: torch.Tensor | None = None  # (n_test,) test labels with the training labels' noise
    y_test_clean: torch.Tensor | None = None  # set by with_noisy_test: the clean labels it replaced

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def with_noisy_test(self) -> Split:
        """The same split measured on the distribution its training set is a sample of: ``y_test``
        becomes the noisy test labels (as in the 2023 code, which adds the noise to its test set
        too), and the clean ones move to ``y_test_clean``."""
        if self.y_test_noisy is None or self.y_test_clean is not None:
            raise ValueError("with_noisy_test needs noisy test labels and a split not yet switched")
        return replace(self, y_test=self.y_test_noisy, y_test_clean=self.y_test)


def _unit_rows(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _flip(y: np.ndarray, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Label noise as the 2023 LPK code applies it (``functions/dataset.py``): a fraction ``noise``
    of the training labels (⌊n·noise⌋ of them, chosen at random) is replaced by labels drawn
    uniformly from {−1, +1}, so about half of those change and the expected flip rate is
    noise/2 (noise = 1: every label random). Returns the labels and how many changed."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"label noise must lie in [0, 1], got {noise}")
    k = int(y.shape[0] * noise)
    where = rng.choice(y.shape[0], size=k, replace=False)
    out = y.copy()
    out[where] = rng.choice([-1.0, 1.0], size=k)
    return out, int(np.sum(out != y))


def digits_1v7(n: int, noise: float = 0.0, *, root: int, key: tuple = ()) -> Split:
    """scikit-learn's bundled 8×8 digits, class 1 (y = +1) against class 7 (y = −1).

    Inputs are centred by the mean of the 1/7 images and scaled to unit norm. ``n`` images drawn at
    random form the training set; the other 1/7 images are the test set. The split, then the label
    noise, are drawn from sub-stream ``("digits-1v7", *key)`` of chapter seed ``root``, so the same
    ``root`` and ``key`` give the same images at every noise level. ``y_test_noisy`` gives the test
    images the same label noise (drawn after the training labels'): the distribution the
    training set is a sample of."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, (1, 7))
    X = digits.data[keep].astype(float)
    y = np.where(digits.target[keep] == 1, 1.0, -1.0)
    if not 2 <= n < len(y) - 10:
        raise ValueError(f"n must lie in [2, {len(y) - 11}] for digits 1 vs 7, got {n}")
    X = _unit_rows(X - X.mean(axis=0))
    rng = stream(root, "digits-1v7", *key)
    order = rng.permutation(len(y))
    tr, te = order[:n], order[n:]
    y_tr, flipped = _flip(y[tr], noise, rng)
    y_te_noisy, _ = _flip(y[te], noise, rng)
    t = lambda a: torch.as_tensor(a, dtype=DTYPE)  # noqa: E731
    return Split(t(X[tr]), t(y_tr), t(X[te]), t(y[te]), flipped, t(y_te_noisy))


def gaussian_mixture(n: int, d: int = 20, noise: float = 0.0, n_test: int = 2000,
                     separation: float = 1.5, *, root: int, key: tuple = ()) -> Split:
    """Synthetic task: x = y·μ + ξ projected to the unit sphere, y = ±1 with equal probability,
    μ = separation · e_1 / √d and ξ ~ N(0, I_d / d) (so ‖ξ‖ ≈ 1 and, before the projection, the
    Bayes error is Φ(−separation)). The test set is a fresh sample of ``n_test`` points, with clean
    labels ``y_test`` and, drawn last, labels ``y_test_noisy`` with the training labels' noise.
    Everything is drawn from sub-stream ``("gaussian-mixture", *key)`` of chapter seed ``root``."""
    rng = stream(root, "gaussian-mixture", *key)
    mu = np.zeros(d)
    mu[0] = separation / math.sqrt(d)

    def draw(k):
        yy = rng.choice([-1.0, 1.0], size=k)
        return _unit_rows(yy[:, None] * mu + rng.standard_normal((k, d)) / math.sqrt(d)), yy

    X, y = draw(n)
    X_te, y_te = draw(n_test)
    y, flipped = _flip(y, noise, rng)
    y_te_noisy, _ = _flip(y_te, noise, rng)
    t = lambda a: torch.as_tensor(a, dtype=DTYPE)  # noqa: E731
    return Split(t(X), t(y), t(X_te), t(y_te), flipped, t(y_te_noisy))
