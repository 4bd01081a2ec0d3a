"""Map a function over a parameter grid × seeds, locally (joblib) or on a Dask cluster.

    records = sweep(run_one, {"n": [100, 200], "noise": [0.0, 0.2]}, seeds=range(5))

``run_one(**point, seed=seed)`` must return a dict (or anything JSON-able); each record is
``{**point, "seed": seed, **result}`` (a non-dict result goes under ``"result"``). The order
of the records is the grid order × seeds, whatever executes them, so results are identical
locally and on a cluster. The cluster is used when ``scheduler`` (an address such as
``tcp://127.0.0.1:8786``) or the ``COMPANION_SCHEDULER`` environment variable is given;
``COMPANION_JOBS=N`` (or ``jobs``) runs the points in N local processes instead (sweep
parallelism, inside one chapter; ``companion run --jobs`` runs whole chapters in parallel).

Resume: under the runner (``companion run``, whose :class:`lib.run.RunContext` names the points
folder and the run key), every finished point is kept on disk in
``_build/points/`` and a rerun of the same chapter with the same parameters reuses it, so a
killed ``paper`` run continues where it stopped. A point's key hashes the function (its code,
constants, closure and defaults), the point and seed, the chapter's resolved parameters, the
pinned environment and the contents of every ``lib/`` and ``kernels/`` source file loaded in
the process; a function whose closure cannot be hashed is simply not cached.

Profiling (``companion profile``, whose run context names a file in ``profiling``): every point
is computed (no kept points are read), and each sweep appends one JSON line to that file: the
function, the points computed and their wall time, and once per function the matmul FLOPs and
the number of torch operators of its first point (counted by torch's ``FlopCounterMode`` and
:func:`op_counter` in one extra run) with that point's uncounted time.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from lib import run

#: A user's Dask scheduler for sweeps run outside `companion run --scheduler` (plain papermill).
SCHEDULER_ENV = "COMPANION_SCHEDULER"


@contextlib.contextmanager
def one_thread():
    """Run the body on one PyTorch thread, restoring the caller's count afterwards. Small models
    run fastest so, and a sweep point that trains under it computes the same bits in the chapter
    (which has several threads) as in a worker process (which has one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def grid_points(grid: Mapping[str, Sequence] | Iterable[Mapping]) -> list[dict]:
    """A dict of lists becomes its Cartesian product; a list of dicts is taken as it is."""
    if isinstance(grid, Mapping):
        keys = list(grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    return [dict(p) for p in grid]


def _call(fn: Callable, point: dict, seed: int) -> dict:
    result = fn(**point, seed=seed)
    return {**point, "seed": seed, **(result if isinstance(result, dict) else {"result": result})}


def _function_digest(fn: Callable) -> bytes | None:
    """What ``fn`` computes, as bytes: code and constants (recursively), defaults, closure values
    and partial arguments. None when something in it cannot be pickled."""
    import functools

    try:
        if isinstance(fn, functools.partial):
            inner = _function_digest(fn.func)
            return None if inner is None else inner + pickle.dumps((fn.args, sorted(fn.keywords.items())))
        code = getattr(fn, "__code__", None)
        if code is None:  # a callable object: its class and state
            return pickle.dumps(fn)

        def code_bytes(c):
            consts = [code_bytes(k) if hasattr(k, "co_code") else k for k in c.co_consts]
            return pickle.dumps((c.co_code, consts, c.co_names, c.co_varnames))

        closure = [cell.cell_contents for cell in (fn.__closure__ or ())]
        return pickle.dumps((fn.__module__, fn.__qualname__, code_bytes(code), fn.__defaults__,
                             fn.__kwdefaults__, closure))
    except Exception:  # unpicklable closure or defaults: do not cache
        return None


def _loaded_sources_digest() -> str:
    h = hashlib.sha256()
    for f in run.loaded_sources():
        h.update(f.encode() + b"\0" + Path(f).read_bytes())
    return h.hexdigest()


class PointStore:
    """Finished sweep points on disk (one pickle per point, written atomically)."""

    def __init__(self, root: Path, fn: Callable, run_key: str = ""):
        digest = _function_digest(fn)
        self.enabled = digest is not None
        h = hashlib.sha256((digest or b"") + run_key.encode() + _loaded_sources_digest().encode())
        self.dir = Path(root) / f"{getattr(fn, '__name__', 'fn')}-{h.hexdigest()[:20]}"

    def _path(self, point: dict, seed: int) -> Path:
        key = hashlib.sha256(pickle.dumps((sorted(point.items()), seed))).hexdigest()[:24]
        return self.dir / f"{key}.pkl"

    def get(self, point: dict, seed: int):
        path = self._path(point, seed)
        if not self.enabled or not path.exists():
            return None
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError):
            return None

    def put(self, point: dict, seed: int, record: dict) -> None:
        if not self.enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(point, seed)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(pickle.dumps(record))
        os.replace(tmp, path)


def sweep(fn: Callable, grid, seeds: Iterable[int] = (0,), *, jobs: int | None = None,
          scheduler: str | None = None, progress: bool | None = None, desc: str | None = None,
          resume: bool = True) -> list[dict]:
    """Evaluate ``fn`` at every grid point and seed; see the module docstring. ``progress``
    (a tqdm bar) defaults to on in a terminal and off inside a notebook run by papermill, which
    shows its own per-cell progress and would otherwise store every tick in the page.
    ``resume=False`` never reads or writes the on-disk points."""
    if progress is None:
        progress = sys.stderr.isatty()
    tasks = [(p, int(s)) for p in grid_points(grid) for s in seeds]
    context = run.current() or run.RunContext()
    resume = resume and not context.profiling  # a profile times every point
    store = PointStore(Path(context.points), fn, context.run_key) if resume and context.points else None
    done: dict[int, dict] = {}
    if store is not None:
        done = {i: r for i, (p, s) in enumerate(tasks) if (r := store.get(p, s)) is not None}
    todo = [i for i in range(len(tasks)) if i not in done]

    def finished(i: int, record: dict) -> None:
        done[i] = record
        if store is not None:
            store.put(*tasks[i], record)

    scheduler = scheduler or context.scheduler or os.environ.get(SCHEDULER_ENV) or None
    jobs = jobs if jobs is not None else int(os.environ.get("COMPANION_JOBS", "1"))
    started, first_s = time.perf_counter(), None
    if scheduler and todo:
        from distributed import Client, as_completed

        with Client(scheduler) as client:
            futures = {client.submit(_call, fn, *tasks[i], pure=False): i for i in todo}
            for fut in as_completed(futures):
                finished(futures[fut], fut.result())
    elif jobs == 1 or len(todo) <= 1:
        from tqdm import tqdm

        for i in tqdm(todo, desc=desc or getattr(fn, "__name__", "sweep"), disable=not progress, leave=False):
            t = time.perf_counter()
            finished(i, _call(fn, *tasks[i]))
            first_s = time.perf_counter() - t if first_s is None else first_s
    elif todo:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=jobs, return_as="generator")(delayed(_call)(fn, *tasks[i]) for i in todo)
        for i, record in zip(todo, results):
            finished(i, record)
    if context.profiling and todo:
        _profile(context.profiling, fn, tasks[todo[0]], len(todo), time.perf_counter() - started, first_s)
    return [done[i] for i in range(len(tasks))]


_PROBED: set[str] = set()  # functions whose FLOPs this process has counted


def op_counter():
    """A torch dispatch mode that counts the operators dispatched under it (forward, backward and
    optimiser alike, after autograd: each is one trip through PyTorch's per-operator overhead)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    return Counter()


def _profile(path: str, fn: Callable, task: tuple, points: int, seconds: float, first_s: float | None) -> None:
    """Append this sweep's line to the profile (see the module docstring). The FLOP probe runs
    only where torch is loaded; ``first_s`` is None when the points ran elsewhere, and the
    first point is then timed here too."""
    inner = getattr(fn, "func", fn)  # a functools.partial's function
    name = f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', type(inner).__name__)}"
    line = {"function": name, "points": points, "seconds": round(seconds, 4)}
    if name not in _PROBED and "torch" in sys.modules:
        _PROBED.add(name)
        from torch.utils.flop_counter import FlopCounterMode

        extra = time.perf_counter()
        if first_s is None:
            t = time.perf_counter()
            _call(fn, *task)
            first_s = time.perf_counter() - t
        ops = op_counter()
        with FlopCounterMode(display=False) as counter, ops:
            _call(fn, *task)
        line["probe"] = {"flops": int(counter.get_total_flops()), "ops": ops.count, "seconds": round(first_s, 4),
                         "overhead_s": round(time.perf_counter() - extra, 4)}  # the extra runs' time
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
