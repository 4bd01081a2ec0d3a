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
pinned environment and the digests (:mod:`lib.digests`) of the function's static import closure:
the ``lib/`` and ``kernels/`` files its module imports, inside functions too, known before it
first runs. A function whose closure cannot be hashed is simply not cached. ``--force`` (the run
context's ``force``, also set by ``companion verify``) computes every point and reads none.

Dependencies: the files of each sweep function's import closure, and the ``lib/`` and
``kernels/`` files each worker (joblib process, Dask worker) had imported when it finished a
point, are added to the run's own (:func:`lib.run.note_sources`), so the runner's depfile lists
a module that only a worker imports; a kept point brings the files of the process that computed
it.

Profiling (``companion profile``, whose run context names a file in ``profiling``): every point
is computed (no kept points are read), and each sweep appends one JSON line to that file: the
function, the points computed and their wall time, and once per function the matmul FLOPs and
the number of torch operators of its first point (counted by torch's ``FlopCounterMode`` and
:func:`lib.profiling.op_counter` in one extra run) with that point's uncounted time; that code
lives in :mod:`lib.profiling`, imported only when profiling.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from lib import digests, run

#: A user's Dask scheduler for sweeps run outside `companion run --scheduler` (plain papermill).
SCHEDULER_ENV = "COMPANION_SCHEDULER"


def cores() -> int:
    """The cores the runner gives this chapter (the run context's threads; 1 outside a run): the
    number of processes a chapter may run its sweep points in (``sweep(..., jobs=cores())``)."""
    context = run.current()
    return max(1, context.threads) if context and context.threads else 1


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


def _call_away(fn: Callable, point: dict, seed: int) -> tuple[dict, list[str]]:
    """``_call`` in a worker process (joblib, Dask): the record and the ``lib``/``kernels`` files
    the worker has imported, which the chapter's kernel may never import itself."""
    record = _call(fn, point, seed)
    return record, _imported_here()


_LOADED: tuple[int, list[str]] = (-1, [])


def _imported_here() -> list[str]:
    """``run.loaded_sources(noted=False)``, recomputed only when a module was imported since."""
    global _LOADED
    if _LOADED[0] != len(sys.modules):
        _LOADED = (len(sys.modules), run.loaded_sources(noted=False))
    return _LOADED[1]


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


def _source_files(fn: Callable) -> list[str]:
    """The real paths of the ``lib``/``kernels`` files a point of ``fn`` can depend on before it
    first runs: the static import closure (lib.digests) of its module and of the modules of the
    functions and objects a ``functools.partial`` binds, and, for a function defined in the
    notebook, every source file the kernel has loaded."""
    inner, bound = fn, []
    while hasattr(inner, "func"):
        bound += [*getattr(inner, "args", ()), *getattr(inner, "keywords", {}).values()]
        inner = inner.func
    files = digests.function_files(inner)
    for value in bound:
        module = sys.modules.get(getattr(value, "__module__", None) or getattr(type(value), "__module__", ""))
        files += [Path(module.__file__)] if getattr(module, "__file__", None) else []
    root = Path(run.__file__).resolve().parents[1]
    closure = [str(root / rel) for rel in digests.import_closure(files, root)]
    if not digests.function_files(inner):  # defined in the notebook: what the kernel imported
        closure += run.loaded_sources(noted=False)
    return sorted(set(closure))


def function_name(fn: Callable) -> str:
    """``module.qualname`` of a sweep function (of a ``functools.partial``'s function)."""
    inner = fn
    while hasattr(inner, "func"):
        inner = inner.func
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', type(inner).__name__)}"


class PointStore:
    """Finished sweep points on disk (one pickle per point, written atomically), each with the
    source files the process that computed it had imported."""

    def __init__(self, root: Path, fn: Callable, run_key: str = "", sources: list[str] | None = None):
        digest = _function_digest(fn)
        self.enabled = digest is not None
        here = Path(run.__file__).resolve().parents[1]
        rels = [os.path.relpath(f, here) for f in (sources if sources is not None else _source_files(fn))]
        h = hashlib.sha256((digest or b"") + run_key.encode() + digests.closure_digest(rels, here).encode())
        self.dir = Path(root) / f"{getattr(fn, '__name__', 'fn')}-{h.hexdigest()[:20]}"

    def _path(self, point: dict, seed: int) -> Path:
        key = hashlib.sha256(pickle.dumps((sorted(point.items()), seed))).hexdigest()[:24]
        return self.dir / f"{key}.pkl"

    def get(self, point: dict, seed: int) -> tuple[dict, list[str]] | None:
        """The kept point's record and the files its process had imported, or None."""
        path = self._path(point, seed)
        if not self.enabled or not path.exists():
            return None
        try:
            kept = pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError):
            return None
        if not (isinstance(kept, dict) and {"record", "sources"} <= set(kept)):
            return None  # a point kept before the files were kept with it
        return kept["record"], kept["sources"]

    def put(self, point: dict, seed: int, record: dict, sources: list[str] = ()) -> None:
        if not self.enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(point, seed)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(pickle.dumps({"record": record, "sources": list(sources)}))
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
    # What a point's result can depend on, known before the function first runs; the run's deps.
    sources = _source_files(fn)
    run.note_sources(sources)
    run.SWEEPS.add(function_name(fn))
    resume = resume and not context.profiling  # a profile times every point
    store = PointStore(Path(context.points), fn, context.run_key, sources) if resume and context.points else None
    done: dict[int, dict] = {}
    if store is not None and not context.force:  # --force and verify compute every point
        for i, (p, s) in enumerate(tasks):
            if (kept := store.get(p, s)) is not None:
                done[i] = kept[0]
                run.note_sources(kept[1])
    todo = [i for i in range(len(tasks)) if i not in done]

    def finished(i: int, record: dict, imported: list[str] | None = None) -> None:
        done[i] = record
        if imported is not None:  # computed in a worker: what it imported is the run's too
            run.note_sources(imported)
        if store is not None:
            store.put(*tasks[i], record, imported if imported is not None else _imported_here())

    scheduler = scheduler or context.scheduler or os.environ.get(SCHEDULER_ENV) or None
    jobs = jobs if jobs is not None else int(os.environ.get("COMPANION_JOBS", "1"))
    started, first_s = time.perf_counter(), None
    if scheduler and todo:
        from distributed import Client, as_completed

        with Client(scheduler) as client:
            futures = {client.submit(_call_away, fn, *tasks[i], pure=False): i for i in todo}
            for fut in as_completed(futures):
                finished(futures[fut], *fut.result())
    elif jobs == 1 or len(todo) <= 1:
        from tqdm import tqdm

        for i in tqdm(todo, desc=desc or getattr(fn, "__name__", "sweep"), disable=not progress, leave=False):
            t = time.perf_counter()
            finished(i, _call(fn, *tasks[i]))
            first_s = time.perf_counter() - t if first_s is None else first_s
    elif todo:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=jobs, return_as="generator")(delayed(_call_away)(fn, *tasks[i]) for i in todo)
        for i, (record, imported) in zip(todo, results):
            finished(i, record, imported)
    if context.profiling and todo:
        from lib import profiling

        profiling.profile_sweep(context.profiling, fn, tasks[todo[0]], len(todo), time.perf_counter() - started,
                                first_s)
    return [done[i] for i in range(len(tasks))]
