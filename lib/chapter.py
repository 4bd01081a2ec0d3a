"""The few lines every chapter notebook starts and ends with.

    ch = Chapter("01-induction-head", globals())   # first cell after `parameters`
    ...
    ch.claims.close(...)                             # record checks
    ch.figure(fig, "ood-heatmap")                    # figures/ood-heatmap.{png,svg}; glued as fig-ood-heatmap
    ch.claims.table()                                # show the claims table
    ch.save(metrics={...})                           # results.json
    ch.provenance()                                  # commit, environment, parameters, runtime

``Chapter`` reads the parameters from the notebook namespace (the literals defined by the
``parameters`` cell and papermill's injected cell), applies the house plot style, seeds
numpy's and torch's global generators from ``seed`` (through :mod:`lib.seeding`) and sets torch's thread count.

Under plain papermill or Jupyter it first applies the checks `companion run` applies: every
declared parameter's type, constraint and rules (:mod:`lib.parameters`), the profile the values
must carry, and the output rule (:mod:`lib.outputs`) for ``out_dir``. The run then writes into
a temporary folder beside ``out_dir``, and :meth:`Chapter.save` puts the finished result in
place, so a run that fails leaves ``out_dir`` as it was.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
from pathlib import Path

from lib import plotting, run, seeding
from lib.claims import Claims
from lib.outputs import CommitError, UnsafeOutput, check_output, commit, left_in_place, mark, staging_folder
from lib.provenance import Stopwatch, summary

PROFILES = ("quick", "default", "paper")

_LITERAL = (int, float, str, bool, list, tuple, dict, type(None))
_IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}


def notebook_parameters(namespace: dict) -> dict:
    """The literal-valued public names of a namespace: a chapter's parameters when called
    right after its parameters cell."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in _IPYTHON_NAMES and isinstance(v, _LITERAL)}


#: The folder of the chapter notebooks (the default ``out_dir`` is relative to it).
CHAPTER_DIR = Path(__file__).resolve().parents[1] / "book" / "chapters"


class RunRefused(ValueError):
    """A chapter run refused before any work (a bad value, an output folder it may not use):
    one line where the notebook is read, not a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of the traceback
        return [f"{type(self).__name__}: {self}"]


def declared_parameters(slug: str) -> dict:
    """The parameters the chapter's notebook declares (lib.parameters), or {} without one."""
    from lib.parameters import parameters_of

    path = CHAPTER_DIR / f"{slug}.ipynb"
    return parameters_of(path) if path.is_file() else {}


def check_parameters(declared: dict, values: dict) -> None:
    """The values of the declared parameters, checked as `companion run` checks them (types,
    constraints, the rules between parameters); RunRefused with one line if one is bad."""
    from lib.parameters import UsageError, check_rules

    try:
        checked = {name: declared[name].check(values[name]) for name in declared if name in values}
        check_rules(declared, {**{n: p.default for n, p in declared.items()}, **checked})
    except UsageError as exc:
        raise RunRefused(str(exc)) from None


def resolve_out_dir(out_dir: str | None, slug: str, default: str | None = None) -> Path:
    """Where a chapter writes: an absolute ``out_dir`` as given, a relative one from the working
    folder (papermill's ``cwd``; Jupyter's is the notebook's folder), the notebook's own default
    (``../../_build/runs/jupyter/<slug>``) in the repository's ``_build`` wherever the run
    starts, and without the parameter the repository's ``_build/runs/jupyter/<slug>``. ``""``
    is refused: it names the current folder."""
    if out_dir is None:
        return CHAPTER_DIR.parents[1] / "_build" / "runs" / "jupyter" / slug
    if not isinstance(out_dir, str) or not out_dir.strip():
        raise RunRefused(f"out_dir {out_dir!r} names no folder (an empty path is the current folder): give a new one")
    path = Path(out_dir).expanduser()
    if path.is_absolute():
        return path
    if default is not None and out_dir == default:
        return (CHAPTER_DIR / path).resolve()
    return Path.cwd() / path


def run_profile(slug: str, parameters: dict) -> str:
    """The profile this run really is: the runner's, or under plain papermill the ``profile``
    parameter (``companion params CH --profile P`` writes it), whose values the run must carry
    (papermill does not apply them), else ``default``. ``parameters`` loses its ``profile``
    entry."""
    given = parameters.pop("profile", None)
    if (context := run.current()) is not None:
        return context.profile
    if given is None:
        given = "default"
    if given not in PROFILES:
        raise RunRefused(f"profile {given!r}: expected one of {', '.join(PROFILES)}")
    import yaml

    table_path = CHAPTER_DIR.parent / "params" / f"{given}.yaml"
    table = (yaml.safe_load(table_path.read_text()) or {}) if table_path.is_file() else {}
    for name, value in (table.get(slug) or {}).items():
        if parameters.get(name) != value:
            raise RunRefused(f"profile {given!r} sets {name} to {value!r}, this run has {parameters.get(name)!r}: "
                             f"plain papermill does not apply a profile; run `companion params {slug[:2]} "
                             f"--profile {given} > p.yaml` and pass `-f p.yaml`")
    return given


class Chapter:
    def __init__(self, slug: str, namespace: dict):
        self.slug = slug
        self.parameters = notebook_parameters(namespace)
        self.runner = run.current() is not None  # the runner checked the values and out_dir
        declared = {} if self.runner else declared_parameters(slug)
        if not self.runner:  # plain papermill or Jupyter: the checks of `companion run`
            check_parameters(declared, self.parameters)
        self.profile = run_profile(slug, self.parameters)
        if "seed" not in self.parameters or not isinstance(self.parameters["seed"], int):
            raise ValueError("a chapter's parameters cell must define an integer `seed`")
        self.seed = self.parameters["seed"]
        self._final = None  # plain papermill or Jupyter: where save() puts the finished result
        if self.runner:
            self.out_dir = Path(self.parameters.get("out_dir") or ".").resolve()
        else:  # the output rule of `companion run --out`; the result goes in place at save()
            default = declared["out_dir"].default if "out_dir" in declared else None
            final = resolve_out_dir(self.parameters.get("out_dir"), slug, default)
            try:
                self._final = check_output(final, slug, root=CHAPTER_DIR.parents[1])
            except UnsafeOutput as exc:
                raise RunRefused(str(exc)) from None
            self.out_dir = staging_folder(self._final)
            if self.out_dir.exists():
                shutil.rmtree(self.out_dir)  # this process's name: an earlier failure in this kernel
            mark(self.out_dir)
            # a run that fails before save() leaves nothing half-done, in out_dir or beside it
            self._discard = functools.partial(shutil.rmtree, self.out_dir, True)
            atexit.register(self._discard)
        self.claims = Claims(slug, self.profile)
        self.stopwatch = Stopwatch()
        plotting.use_style()
        self._seed_globals()

    def _seed_globals(self) -> None:
        import numpy as np

        # Plain scalar reprs ("0.93", not "np.float64(0.93)"): printed numbers read better, and
        # myst-nb's glue formats the text repr of a glued value.
        np.set_printoptions(legacy="1.25")
        seeding.seed_globals(self.seed)
        try:
            import torch
        except ImportError:
            return
        threads = run.current().threads if self.runner else 0
        if threads > 0:
            torch.set_num_threads(threads)

    def rng(self, *key):
        """An independent numpy Generator for the sub-stream ``key`` of this chapter's seed
        (:func:`lib.seeding.stream`): name what is drawn, e.g. ``ch.rng("bootstrap", 2)``."""
        return seeding.stream(self.seed, *key)

    def savefig(self, fig, name: str) -> None:
        """Save ``fig`` under ``out_dir/figures/`` (PNG and SVG); the cell still shows it inline."""
        plotting.save(fig, self.out_dir, name)

    def figure(self, fig, name: str) -> None:
        """Save ``fig`` (PNG and SVG) and glue it as ``fig-<name>`` for a captioned, numbered
        figure in the text; the code cell itself shows nothing. In the markdown::

            ```{glue:figure} fig-<name>
            :name: fig-<name>
            :alt: What the figure shows, in words.

            The caption.
            ```

        and cite it with ``{numref}`fig-<name>```."""
        import matplotlib.pyplot as plt
        from myst_nb import glue

        plotting.save(fig, self.out_dir, name)
        glue(f"fig-{name}", fig, display=False)
        plt.close(fig)

    def save(self, metrics: dict | None = None) -> Path:
        """Write results.json (lib.results): chapter, profile, parameters, claims, metrics, and
        outside the runner (which writes the full provenance) what provenance the notebook knows."""
        path = self.claims.save(self.out_dir, metrics, self.parameters,
                                None if self.runner else self._provenance_outside_runner())
        if self._final is not None:  # plain papermill or Jupyter: the finished result goes in place
            try:
                left = commit(self.out_dir, self._final, self.slug, CHAPTER_DIR.parents[1])
            except CommitError as exc:
                atexit.unregister(self._discard)  # the finished result is kept where the message says
                raise RunRefused(str(exc)) from None
            self.out_dir, self._final = self._final, None
            path = self.out_dir / path.name
            if left:
                print(left_in_place(self.out_dir, left))
        failed = [c.id for c in self.claims.failed]
        if failed:  # the runner reports these too; say it where the notebook is read
            print(f"claims that do NOT hold: {', '.join(failed)}")
        return path

    def _provenance_outside_runner(self) -> dict:
        from datetime import UTC, datetime

        from lib.provenance import ROOT, environment, git_commit

        env = environment()
        deps = [os.path.relpath(f, ROOT) for f in run.loaded_sources()]
        started = datetime.now(UTC).timestamp() - self.stopwatch.elapsed
        return {"git": git_commit(), "cache_key": None, "python": env["python"], "torch": env.get("torch"),
                "numpy": env["numpy"], "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
                "runtime_s": round(self.stopwatch.elapsed, 2), "threads": env["threads"], "deps": deps,
                "unknown": ["cache_key"], "executor": "papermill or Jupyter, outside `companion run`"}

    def provenance(self):
        return summary(self.parameters, self.stopwatch)
