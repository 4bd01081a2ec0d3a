"""The run context: what `companion run` tells the chapter it runs, defined once.

Before it starts a chapter's kernel, the runner exports one :class:`RunContext` (JSON in
``$COMPANION_RUN``, which the kernel inherits); the chapter (:mod:`lib.chapter`), its claims
(:mod:`lib.claims`) and its sweeps (:mod:`lib.sweep`) read it back with :func:`current`. Under
plain papermill or Jupyter there is none: the profile is ``default`` (or what the notebook's
``profile`` says, see :func:`lib.chapter.run_profile`), sweeps keep no points and run where
``COMPANION_SCHEDULER`` / ``COMPANION_JOBS`` say, and the chapter checks its own output folder.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ENV = "COMPANION_RUN"
#: Set by `companion profile` (lib/pipeline/profile.py) in its own process, so that the run
#: context the runner builds there carries :attr:`RunContext.profiling`.
PROFILING_ENV = "COMPANION_PROFILING"

#: The project's source folders: the runner's cache key hashes the files of these a chapter
#: imported, and a sweep point's key the files its function's module imported.
SOURCE_DIRS = ("lib", "kernels")
_ROOT = Path(__file__).resolve().parents[1]


#: Source files a result of this process depends on that it did not import itself: what the
#: sweeps' workers (joblib processes, Dask workers) imported, and the static import closure of
#: every sweep function (lib.sweep notes both with :func:`note_sources`).
_NOTED: set[str] = set()


#: The sweep functions this process ran (``module.qualname``), for a record's canary (lib.sweep).
SWEEPS: set[str] = set()


def run_summary(root: str | os.PathLike | None = None) -> dict:
    """What the runner's last hidden cell writes: the run's source files and sweep functions."""
    return {"deps": loaded_sources(root), "sweeps": sorted(SWEEPS)}


def note_sources(paths) -> None:
    """Add files (absolute paths) to what :func:`loaded_sources` reports for this process."""
    _NOTED.update(os.path.realpath(p) for p in paths)


def loaded_sources(root: str | os.PathLike | None = None, noted: bool = True) -> list[str]:
    """The real paths of the source files under ``root``'s :data:`SOURCE_DIRS` that this process
    has imported, with (``noted``) those its sweeps' workers imported and its sweep functions'
    import closures (:func:`note_sources`), sorted: what a run's (or a sweep point's) result can
    depend on. ``root`` is the project this ``lib`` belongs to unless given."""
    roots = [os.path.realpath(Path(root or _ROOT) / d) + os.sep for d in SOURCE_DIRS]
    files = {os.path.realpath(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    if noted:
        files |= _NOTED
    return sorted(f for f in files if f.startswith(tuple(roots)))


#: The thread count a user asks for (``COMPANION_THREADS``; 0 or unset: the runner decides).
THREADS_ENV = "COMPANION_THREADS"


def requested_threads() -> int:
    """``$COMPANION_THREADS`` as a number (0 when unset): the one place it is read. The runner
    turns it into the run context's ``threads``, which is what a chapter reads."""
    try:
        return max(0, int(os.environ.get(THREADS_ENV) or 0))
    except ValueError:
        return 0


@dataclass(frozen=True)
class RunContext:
    profile: str = "default"
    #: where finished sweep points are kept, so a rerun with the same parameters resumes
    points: str | None = None
    #: what else a sweep point's key covers: the notebook, its resolved parameters, the environment
    run_key: str = ""
    #: the Dask scheduler the chapter's sweeps go to (None: in this process)
    scheduler: str | None = None
    #: threads for the chapter's kernels (torch, BLAS, numba); 0 leaves the libraries' default
    threads: int = 0
    #: `companion profile`: the JSON-lines file each sweep appends its timing and FLOP count to
    #: (lib.sweep); None: not profiling. Taken from ``$COMPANION_PROFILING`` when not given.
    profiling: str | None = field(default_factory=lambda: os.environ.get(PROFILING_ENV) or None)
    #: `companion run --force` and `companion verify`: every sweep point is computed, none is
    #: read from the points folder (finished points are still kept there)
    force: bool = False

    def export(self) -> None:
        """Make this the context of the kernels started from now on."""
        os.environ[ENV] = json.dumps(asdict(self))


def current() -> RunContext | None:
    """The context the runner exported, or None outside `companion run`."""
    text = os.environ.get(ENV)
    return RunContext(**json.loads(text)) if text else None
