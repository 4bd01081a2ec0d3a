"""The chapter's figure types that the shared :mod:`lib.plotting` does not cover: a ``W_KQ``
heatmap with its feature blocks marked, an ``(ℓ_min, ℓ_max)`` grid heatmap, and the OOD grid's
panels built from it. (Nothing here imports :mod:`lib.plotting`: only the notebook's façades
may, see :mod:`lib.digests`.)"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from lib.induction import experiments as E
from lib.induction.one_layer import Embedding

BLOCK_NAMES = {"position": "$p$", "token": "$e_{z_t}$", "previous": "$e_{z_{t-1}}$"}


def wkq_heatmap(ax, w, emb: Embedding, title: str, n_pos_shown: int | None = None):
    """``W_KQ`` (rows: key features, columns: query features) scaled to its largest absolute
    entry, with the position / token / previous-token blocks marked. ``n_pos_shown`` crops the
    position block to its first positions so small blocks stay visible."""
    w = np.asarray(w, dtype=float)
    L, N = emb.n_pos, emb.n_vocab
    keep = n_pos_shown or L
    idx = np.r_[0:keep, L:L + 2 * N]
    w = w[np.ix_(idx, idx)]
    w = w / np.abs(w).max()
    im = ax.imshow(w, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    edges = [keep, keep + N]
    for e in edges:
        ax.axhline(e - 0.5, color="black", linewidth=0.8)
        ax.axvline(e - 0.5, color="black", linewidth=0.8)
    centres = [keep / 2, keep + N / 2, keep + 1.5 * N]
    ax.set_xticks(centres, list(BLOCK_NAMES.values()))
    ax.set_yticks(centres, list(BLOCK_NAMES.values()))
    ax.set_xlabel("query feature ($x_T$)")
    ax.set_ylabel("key feature ($x_t$)")
    ax.set_title(title)
    ax.grid(False)
    return im


def grid_array(records: list[dict], key: str, l_lo: int, l_hi: int) -> np.ndarray:
    """Mean of ``key`` per ``(ℓ_min, ℓ_max)`` cell as an array indexed
    ``[ℓ_min − l_lo, ℓ_max − l_lo]`` (NaN where no cell)."""
    size = l_hi - l_lo + 1
    total = np.zeros((size, size))
    count = np.zeros((size, size))
    for r in records:
        i, j = r["l_min"] - l_lo, r["l_max"] - l_lo
        total[i, j] += r[key]
        count[i, j] += 1
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def grid_heatmap(ax, values: np.ndarray, l_lo: int, title: str, vmin=0.0, vmax=1.0,
                 cmap="viridis", contour: np.ndarray | None = None,
                 level: float | None = None):
    """Heatmap over ``(ℓ_max, ℓ_min)``; optionally the contour ``contour = level``."""
    size = values.shape[0]
    extent = (l_lo - 0.5, l_lo + size - 0.5, l_lo - 0.5, l_lo + size - 0.5)
    im = ax.imshow(values, origin="lower", extent=extent, vmin=vmin, vmax=vmax, cmap=cmap,
                   interpolation="nearest")
    if contour is not None and level is not None:
        grid_contour(ax, contour, l_lo, level)
    ax.set_xlabel(r"$\ell_{\max}$")
    ax.set_ylabel(r"$\ell_{\min}$")
    ax.set_title(title)
    ax.grid(False)
    return im


def grid_contour(ax, values: np.ndarray, l_lo: int, level: float, **kw):
    """The contour ``values = level`` over a grid indexed ``[ℓ_min − l_lo, ℓ_max − l_lo]``."""
    if not np.nanmin(values) < level < np.nanmax(values):
        return None  # the level lies outside this grid
    grid = np.arange(l_lo, l_lo + values.shape[0])
    style = {"colors": kw.pop("color", "black"), "linestyles": kw.pop("linestyle", "--"),
             "linewidths": kw.pop("linewidth", 1.6), **kw}
    return ax.contour(grid, grid, values, levels=[level], **style)


def log_axis(axis, ticks):
    """A log-scaled axis labelled with plain numbers at ``ticks`` (no crowded minor labels)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    axis.axes.set_xscale("log") if axis.axis_name == "x" else axis.axes.set_yscale("log")
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def ood_heatmaps(cells, transition: dict, pooled: dict, panel_trg: list, l_lo: int, l_hi: int):
    """OOD accuracy over the (ℓ_min, ℓ_max) grid, one panel per trigger count in ``panel_trg``,
    with the pooled fit's contour N_trg·R = c and the panel's own fit R = R*."""
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(len(panel_trg), 1, figsize=(5.4, 4.4 * len(panel_trg)),
                             layout="constrained", squeeze=False)
    for ax, n_trg in zip(axes[:, 0], panel_trg):
        values = grid_array(cells[cells.n_trg == n_trg].to_dict("records"), "accuracy", l_lo, l_hi)
        nr = E.ratio_grid(n_trg, l_lo, l_hi)
        im = grid_heatmap(ax, values, l_lo, rf"OOD accuracy, $N_{{\mathrm{{trg}}}}={n_trg}$",
                          contour=nr, level=pooled["r_star"])
        grid_contour(ax, nr, l_lo, n_trg * transition[n_trg]["r_star"], color="white", linestyle=":")
        ax.set_facecolor("0.85")
        ax.legend(handles=[Line2D([], [], color="black", linestyle="--",
                                  label=r"one constant: $N_{\mathrm{trg}}R = c$ (pooled fit)"),
                           Line2D([], [], color="white", linestyle=":",
                                  label=r"this panel's fit: $R = R^*$")],
                  loc="upper left", facecolor="0.6", framealpha=1.0, frameon=True, fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.85, label="OOD accuracy (mean over seeds)")
    return fig

