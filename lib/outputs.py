"""Where a chapter run may write: the one rule shared by the CLI and by plain papermill.

A run writes a folder holding the executed notebook ``<slug>.ipynb``, ``figures/`` (PNG and SVG),
``results.json`` and a marker file, :data:`MARKER`. It writes only into a folder that is new,
empty, or one a run of the same chapter wrote (it carries the marker and nothing but that
layout; inside the book's own ``_build/`` the layout alone suffices, for runs made before the
marker). Anything else is refused before any work starts: a file, a folder holding anything a
run did not write, the current folder, the repository, the home folder, or a folder above any
of them.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Written into every output folder a run creates: what lets a later run replace it.
MARKER = ".companion-run"
_FIGURE_SUFFIXES = (".png", ".svg")


class UnsafeOutput(ValueError):
    """An output folder the tool may not write into (the message is one line)."""


def foreign_entries(folder: Path, slug: str) -> list[str]:
    """The entries of ``folder`` that a run of chapter ``slug`` does not write."""
    ours = {MARKER, "results.json", f"{slug}.ipynb"}
    foreign = []
    for entry in sorted(folder.iterdir()):
        if entry.name in ours and entry.is_file() and not entry.is_symlink():
            continue
        if entry.name == "figures" and entry.is_dir() and not entry.is_symlink() and all(
                f.is_file() and f.suffix in _FIGURE_SUFFIXES for f in entry.iterdir()):
            continue
        foreign.append(entry.name)
    return foreign


def _protected(path: Path, root: Path | None) -> str | None:
    """Why ``path`` (resolved) may never be a run's output folder, or None."""
    places = [(Path.cwd().resolve(), "the current folder"), (Path.home().resolve(), "the home folder")]
    if root is not None:
        places.insert(0, (Path(root).resolve(), "the repository"))
    for place, name in places:
        if path == place:
            return f"is {name}"
    for place, name in places:
        if place.is_relative_to(path):
            return f"is a folder above {name}"
    return None


def check_output(path: str | os.PathLike, slug: str, root: Path | None = None) -> Path:
    """``path`` resolved, if a run of ``slug`` may write there; else :class:`UnsafeOutput` with
    one line naming the path and why."""
    text = os.fspath(path)
    if not text.strip():
        raise UnsafeOutput("output folder: an empty path names the current folder; give a new folder")
    out = Path(text).expanduser().resolve()
    if why := _protected(out, root):
        raise UnsafeOutput(f"output folder {out} {why}: give a new folder")
    if out.exists() and not out.is_dir():
        raise UnsafeOutput(f"output folder {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        foreign = foreign_entries(out, slug)
        # a run's folder carries the marker; inside the book's own _build/ the layout suffices
        # (runs made before the marker existed)
        legacy = root is not None and out.is_relative_to(Path(root).resolve() / "_build")
        if not foreign and not (out / MARKER).is_file() and not legacy:
            raise UnsafeOutput(f"output folder {out} was not written by a companion run (no {MARKER}): "
                               "give a new or empty folder")
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise UnsafeOutput(f"output folder {out} holds files a run of {slug} did not write "
                               f"({shown}): give a new or empty folder")
    return out


def mark(folder: Path) -> None:
    """Create ``folder`` (if needed) and mark it as a run's output."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("written by a companion run; a later run of the same chapter may replace "
                                 "this folder\n")
