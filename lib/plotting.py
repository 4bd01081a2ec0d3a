"""House style for every figure: theory as black dashed lines, simulation as coloured
markers with 95% intervals over seeds, a colour-blind palette, opaque white backgrounds.

    from lib import plotting as P
    P.use_style()
    fig, ax = P.figure()
    P.theory(ax, x, y_theory)
    P.simulation(ax, x, samples, label="GD, 5 seeds")   # samples: (len(x), n_seeds)
    P.label(ax, "step $t$", r"loss $L(w_t)$")
    P.save(fig, out_dir, "loss")
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

#: Okabe–Ito, the colour-blind-safe qualitative palette (black is reserved for theory).
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
THEORY_STYLE = dict(color="black", linestyle="--", linewidth=1.6, zorder=3)

STYLE = {
    "figure.facecolor": "white", "axes.facecolor": "white", "savefig.facecolor": "white",
    "savefig.transparent": False, "figure.dpi": 110, "savefig.dpi": 150,
    "figure.figsize": (6.4, 4.0), "font.size": 10.5, "axes.titlesize": 11,
    "axes.labelsize": 10.5, "legend.fontsize": 9, "legend.frameon": False,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.25, "axes.prop_cycle": mpl.cycler(color=PALETTE),
    "image.cmap": "viridis", "savefig.bbox": "tight",
}


def use_style() -> None:
    """Apply the house style to matplotlib (call once at the top of a chapter)."""
    _register_bundled_fonts()
    mpl.rcParams.update(STYLE)


def _register_bundled_fonts() -> None:
    """Make sure matplotlib knows its own fonts. Its font list is cached per user and per version,
    not per installation, so a list written by another environment (one since deleted, say) can
    lack the bundled STIX and Computer Modern fonts; mathtext then falls back to DejaVu with a
    ``findfont`` warning in the chapter's output. Registering them again costs milliseconds."""
    from matplotlib import font_manager

    known = {Path(f.fname).name for f in font_manager.fontManager.ttflist}
    for path in sorted((Path(mpl.get_data_path()) / "fonts" / "ttf").glob("*.ttf")):
        if path.name not in known:
            font_manager.fontManager.addfont(str(path))


def figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.0, **kw):
    """A figure of ``nrows × ncols`` axes sized for the book's text width."""
    use_style()
    return plt.subplots(nrows, ncols, figsize=(width * (ncols if ncols > 1 else 1) ** 0.85,
                                               height * nrows ** 0.9), squeeze=True,
                        layout="constrained", **kw)


def theory(ax, x, y, label: str = "theory", **kw):
    """The theory line: black, dashed."""
    return ax.plot(x, y, label=label, **{**THEORY_STYLE, **kw})


def simulation(ax, x, samples, label: str = "simulation", color=None, marker=None,
               index: int = 0, connect: bool = False, **kw):
    """Simulated points with 95% intervals. ``samples`` is ``(len(x),)`` for single runs or
    ``(len(x), n_seeds)``; ``index`` picks the palette colour and marker."""
    from lib.stats import mean_ci  # imported when drawn: lib.stats brings scipy.stats (seconds per kernel)

    s = np.asarray(samples, dtype=float)
    mean, half = mean_ci(s, axis=-1) if s.ndim == 2 else (s, None)
    return ax.errorbar(x, mean, yerr=half, label=label,
                       color=color or PALETTE[index % len(PALETTE)],
                       marker=marker or MARKERS[index % len(MARKERS)],
                       linestyle="-" if connect else "none", linewidth=1.0, markersize=5,
                       capsize=2.5, elinewidth=1.0, zorder=4, **kw)


def band(ax, x, samples, label: str | None = None, index: int = 0, **kw):
    """A simulated curve over many x (e.g. training steps): mean line and 95% band over seeds."""
    from lib.stats import mean_ci

    mean, half = mean_ci(np.asarray(samples, dtype=float), axis=-1)
    color = kw.pop("color", PALETTE[index % len(PALETTE)])
    (line,) = ax.plot(x, mean, color=color, label=label, linewidth=1.5, **kw)
    ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, linewidth=0)
    return line


def label(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True):
    """Label both axes (with units or the text's symbols) and draw the legend if any."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend()


def save(fig, out_dir: str | os.PathLike, name: str) -> Path:
    """Save ``fig`` as ``out_dir/figures/name.png`` and, for print, ``name.svg`` beside it."""
    path = Path(out_dir) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})  # no date: same run, same bytes
    return path


# -- intervals that respect the quantity (computed in lib.stats) ---------------------------------
def interval_errorbar(ax, x, centre, low, high, label: str | None = None, index: int = 0, **kw):
    """Points with asymmetric intervals ``[low, high]`` (from :func:`wilson`, :func:`geometric_ci`
    or a bootstrap), in the simulation style."""
    centre = np.asarray(centre, dtype=float)
    # clamp at zero: a bound can cross the point by rounding (e.g. a Wilson bound at a count of 0)
    yerr = np.clip(np.vstack([centre - np.asarray(low, dtype=float), np.asarray(high, dtype=float) - centre]), 0, None)
    return ax.errorbar(x, centre, yerr=yerr, label=label, color=kw.pop("color", PALETTE[index % len(PALETTE)]),
                       marker=kw.pop("marker", MARKERS[index % len(MARKERS)]), linestyle="none",
                       markersize=5, capsize=2.5, elinewidth=1.0, zorder=4, **kw)


def geometric_points(ax, x, samples, label: str | None = None, index: int = 0, **kw):
    """Geometric means over seeds (last axis) with their 95% geometric intervals, for log axes."""
    from lib.stats import geometric_ci

    return interval_errorbar(ax, x, *geometric_ci(samples), label=label, index=index, **kw)


def geometric_band(ax, x, samples, label: str | None = None, index: int = 0, alpha: float = 0.15, **kw):
    """A positive curve over many x: geometric mean line and 95% geometric band over seeds."""
    from lib.stats import geometric_ci

    centre, low, high = geometric_ci(samples, axis=-1)
    color = kw.pop("color", PALETTE[index % len(PALETTE)])
    (line,) = ax.plot(x, centre, color=color, label=label, linewidth=1.5, **kw)
    ax.fill_between(x, low, high, color=color, alpha=alpha, linewidth=0)
    return line


def range_band(ax, x, samples, label: str | None = None, index: int = 0, axis: int = 1, **kw):
    """Mean (line) and the range (band) of ``samples`` over ``axis`` (seeds, channels): a band that
    stays inside the quantity's range (accuracies in [0, 1]). ``kw`` styles the line."""
    s = np.asarray(samples, dtype=float)
    color = kw.pop("color", PALETTE[index % len(PALETTE)])
    ax.fill_between(x, np.nanmin(s, axis=axis), np.nanmax(s, axis=axis), color=color, alpha=0.2, linewidth=0)
    (line,) = ax.plot(x, np.nanmean(s, axis=axis), color=color, label=label, **{"linewidth": 1.5, **kw})
    return line


def seed_lines(ax, x, samples, label: str | None = None, index: int = 0):
    """A quantity over training, ``samples`` shaped (len(x), seeds): every seed as a thin line,
    the mean as a thick one."""
    color = PALETTE[index % len(PALETTE)]
    ax.plot(x, samples, color=color, linewidth=0.6, alpha=0.35)
    return ax.plot(x, np.mean(samples, axis=-1), color=color, linewidth=1.8, label=label)[0]


# -- numbers in prose ----------------------------------------------------------------------------
def power_of_ten(x: float) -> str:
    """``x`` as "m × 10ⁿ" (or "10ⁿ" when m = 1), to two significant digits."""
    mant, exp = f"{x:.1e}".split("e")
    sup = str(int(exp)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"10{sup}" if mant == "1.0" else f"{mant} × 10{sup}"
