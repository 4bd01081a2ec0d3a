"""A Sphinx extension that keeps ``jupyter-book build`` from producing a book without results.

The chapters are executed by papermill (``companion run``), never by Jupyter Book, and
``companion build`` stages the executed notebooks into ``_build/stage`` before it calls Jupyter
Book there. A plain ``jupyter-book build .`` (or of one chapter) would read the committed,
output-free notebooks and publish pages without figures or numbers, so outside the stage this
extension stops the build with one line that says what to run instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Written by :func:`lib.pipeline.book.stage` at the root of the staged sources.
STAGE_MARKER = ".companion-stage"

MESSAGE = ("error: the chapters of this book are executed by papermill, not by Jupyter Book; "
           "build it with `make book` (or `companion build [--profile P]`), which runs what is "
           "stale and builds the executed book into _build/html")


def _staged(srcdir: Path) -> bool:
    return any((d / STAGE_MARKER).exists() for d in (srcdir, *srcdir.parents))


def _check(app, config) -> None:
    if not _staged(Path(app.srcdir)):
        print(MESSAGE, file=sys.stderr, flush=True)
        raise SystemExit(2)


def setup(app):
    app.connect("config-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
