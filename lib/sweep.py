"""Map a function over a parameter grid × seeds, locally (joblib) or on a Dask cluster.

    records = sweep(run_one, {"n": [100, 200], "noise": [0.0, 0.2]}, seeds=range(5))

``run_one(**point, seed=seed)`` must return a dict (or anything JSON-able); each record is
``{**point, "seed": seed, **result}`` (a non-dict result goes under ``"result"``). The order
of the records is the grid order × seeds, whatever executes them, so results are identical
locally and on a cluster. The cluster is used when ``scheduler`` (an address such as
``tcp://127.0.0.1:8786``) or the ``COMPANION_SCHEDULER`` environment variable is given.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

SCHEDULER_ENV = "COMPANION_SCHEDULER"


def grid_points(grid: Mapping[str, Sequence] | Iterable[Mapping]) -> list[dict]:
    """A dict of lists becomes its Cartesian product; a list of dicts is taken as it is."""
    if isinstance(grid, Mapping):
        keys = list(grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    return [dict(p) for p in grid]


def _call(fn: Callable, point: dict, seed: int) -> dict:
    result = fn(**point, seed=seed)
    return {**point, "seed": seed, **(result if isinstance(result, dict) else {"result": result})}


def sweep(fn: Callable, grid, seeds: Iterable[int] = (0,), *, jobs: int | None = None,
          scheduler: str | None = None, progress: bool | None = None, desc: str | None = None) -> list[dict]:
    """Evaluate ``fn`` at every grid point and seed; see the module docstring. ``progress``
    (a tqdm bar) defaults to on in a terminal and off inside a notebook run by papermill, which
    shows its own per-cell progress and would otherwise store every tick in the page."""
    if progress is None:
        progress = sys.stderr.isatty()
    tasks = [(p, int(s)) for p in grid_points(grid) for s in seeds]
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if scheduler:
        from distributed import Client

        with Client(scheduler) as client:
            futures = client.map(lambda t: _call(fn, *t), tasks, pure=False)
            return client.gather(futures)
    jobs = jobs if jobs is not None else int(os.environ.get("COMPANION_JOBS", "1"))
    if jobs == 1:
        from tqdm import tqdm

        it = tqdm(tasks, desc=desc or getattr(fn, "__name__", "sweep"), disable=not progress,
                  leave=False)
        return [_call(fn, p, s) for p, s in it]
    from joblib import Parallel, delayed

    return Parallel(n_jobs=jobs)(delayed(_call)(fn, p, s) for p, s in tasks)
