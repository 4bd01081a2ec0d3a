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
"""

from __future__ import annotations

import os
from pathlib import Path

from lib import plotting, run, seeding
from lib.claims import Claims
from lib.outputs import check_output, mark
from lib.provenance import Stopwatch, summary

PROFILES = ("quick", "default", "paper")

_LITERAL = (int, float, str, bool, list, tuple, dict, type(None))
_IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}


def notebook_parameters(namespace: dict) -> dict:
    """The literal-valued public names of a namespace: a chapter's parameters when called
    right after its parameters cell."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in _IPYTHON_NAMES and isinstance(v, _LITERAL)}


#: The folder of the chapter notebooks: a relative ``out_dir`` is relative to it, wherever the
#: notebook is run from (Jupyter starts there; papermill starts wherever it is called).
CHAPTER_DIR = Path(__file__).resolve().parents[1] / "book" / "chapters"


def resolve_out_dir(out_dir: str | None, slug: str) -> Path:
    """Where a chapter writes: an absolute ``out_dir`` as given, a relative one under the chapter
    folder (the notebooks' default ``../../_build/runs/jupyter/<slug>`` is the repository's
    ``_build``), and without one the repository's ``_build/runs/jupyter/<slug>``."""
    if not out_dir:
        return CHAPTER_DIR.parents[1] / "_build" / "runs" / "jupyter" / slug
    path = Path(out_dir).expanduser()
    return path if path.is_absolute() else (CHAPTER_DIR / path).resolve()


def run_profile(slug: str, parameters: dict) -> str:
    """The profile this run really is: the runner's, or under plain papermill a ``profile``
    parameter (``-p profile quick``) whose values the run must carry (papermill does not apply
    them), else ``default``. ``parameters`` loses its ``profile`` entry."""
    given = parameters.pop("profile", None)
    if (context := run.current()) is not None:
        return context.profile
    if given is None:
        return "default"
    if given not in PROFILES:
        raise ValueError(f"profile {given!r}: expected one of {', '.join(PROFILES)}")
    import yaml

    table = yaml.safe_load((CHAPTER_DIR.parent / "params" / f"{given}.yaml").read_text()) or {}
    for name, value in (table.get(slug) or {}).items():
        if parameters.get(name) != value:
            raise ValueError(f"profile {given!r} sets {name} to {value!r}, this run has {parameters.get(name)!r}: "
                             f"plain papermill does not apply a profile; run `companion params {slug[:2]} "
                             f"--profile {given} > p.yaml` and pass `-f p.yaml`")
    return given


class Chapter:
    def __init__(self, slug: str, namespace: dict):
        self.slug = slug
        self.parameters = notebook_parameters(namespace)
        self.profile = run_profile(slug, self.parameters)
        if "seed" not in self.parameters or not isinstance(self.parameters["seed"], int):
            raise ValueError("a chapter's parameters cell must define an integer `seed`")
        self.seed = self.parameters["seed"]
        self.out_dir = resolve_out_dir(self.parameters.get("out_dir"), slug)
        self.runner = run.current() is not None  # the runner checked and marked out_dir
        if not self.runner:  # plain papermill or Jupyter: the same rule as `companion run --out`
            check_output(self.out_dir, slug, root=CHAPTER_DIR.parents[1])
            mark(self.out_dir)
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
