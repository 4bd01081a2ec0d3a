"""The real-data experiment: two classes of scikit-learn's digits, symmetric label noise, a small
CNN trained by SGD."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lib.seeding import seed_torch, torch_generator
from lib.sweep import one_thread


@dataclass(frozen=True)
class DigitsTask:
    """Two classes of scikit-learn's bundled 8×8 digits as a ±1 problem with noisy labels."""

    x_train: np.ndarray   # (n, 1, 8, 8), pixel values scaled to [0, 1]
    y_train: np.ndarray   # (n,) true labels ±1
    y_obs: np.ndarray     # (n,) observed labels ±1 (symmetric flips)
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def clean(self) -> np.ndarray:
        return self.y_obs == self.y_train


def digits_task(classes: tuple[int, int], tau: float, test_fraction: float,
                rng: np.random.Generator) -> DigitsTask:
    """Digits ``classes[0]`` (label −1) and ``classes[1]`` (label +1); every training label is
    flipped independently with probability ``tau``; the test labels are kept clean."""
    from sklearn.datasets import load_digits

    if not 0.0 <= tau < 0.5:
        raise ValueError(f"tau must lie in [0, 1/2), got {tau}")
    digits = load_digits()
    keep = np.isin(digits.target, classes)
    x = (digits.images[keep] / 16.0)[:, None].astype(np.float32)
    y = np.where(digits.target[keep] == classes[1], 1.0, -1.0)
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    flip = rng.random(len(train)) < tau
    return DigitsTask(x_train=x[train], y_train=y[train], y_obs=np.where(flip, -y[train], y[train]),
                      x_test=x[test], y_test=y[test])


def small_cnn(width: int = 16):
    """Two 3×3 convolutions, a 2×2 max-pool and a two-layer head with one output (f(x))."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(2 * width * 16, 4 * width), nn.ReLU(), nn.Linear(4 * width, 1))


def train_digits(task: DigitsTask, epochs: int, lr: float, batch: int, seed: int,
                 width: int = 16, *, root: int) -> dict[str, np.ndarray]:
    """SGD (momentum 0.9, learning rate ``lr`` decayed to 0 on a cosine over the epochs) on the
    logistic loss of the observed labels; after every epoch the
    accuracy on the clean and on the flipped training samples (against their observed labels),
    and on the test set (true labels). The initialisation and the batch order come from the
    sub-streams ``("digits-init", seed)`` and ``("digits-batches", seed)`` of chapter seed ``root``
    (``seed`` is the replicate index). Runs on one thread: a network this small gains nothing
    from more, and on a busy machine loses a lot."""
    with one_thread():
        return _train_digits(task, epochs, lr, batch, seed, width, root)


def _train_digits(task: DigitsTask, epochs: int, lr: float, batch: int, seed: int,
                  width: int, root: int) -> dict[str, np.ndarray]:
    import torch

    gen = torch_generator(root, "digits-batches", seed)
    seed_torch(root, "digits-init", seed)
    net = small_cnn(width)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    x = torch.as_tensor(task.x_train, dtype=torch.float32)
    y = torch.as_tensor(task.y_obs, dtype=torch.float32)
    xt = torch.as_tensor(task.x_test, dtype=torch.float32)
    clean = task.clean

    def accuracies():
        with torch.no_grad():
            fit = (y * net(x).squeeze(1) > 0).numpy()
            test = (torch.as_tensor(task.y_test) * net(xt).squeeze(1) > 0).numpy()
        return fit[clean].mean(), fit[~clean].mean() if (~clean).any() else np.nan, test.mean()

    out = {"epoch": [0], "clean": [], "noisy": [], "test": []}
    for key, v in zip(("clean", "noisy", "test"), accuracies()):
        out[key].append(v)
    for epoch in range(1, epochs + 1):
        for idx in torch.randperm(len(y), generator=gen).split(batch):
            opt.zero_grad()
            torch.nn.functional.softplus(-y[idx] * net(x[idx]).squeeze(1)).mean().backward()
            opt.step()
        schedule.step()
        out["epoch"].append(epoch)
        for key, v in zip(("clean", "noisy", "test"), accuracies()):
            out[key].append(v)
    return {k: np.asarray(v, float) for k, v in out.items()}
