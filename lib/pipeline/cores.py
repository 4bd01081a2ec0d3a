"""Where a run's work goes: the thread count of the kernels a run starts, and the Dask cluster its
sweeps may use (``--scheduler local[:N]`` or an address)."""

from __future__ import annotations

import contextlib
import os
import re

from lib.pipeline.chapters import UsageError
from lib.run import THREADS_ENV

THREAD_VARS = (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMBA_NUM_THREADS")


def set_threads(threads: int) -> None:
    """Thread count for the kernels started from now on (torch, BLAS, OpenMP, numba)."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)


WORKER_ENVIRON = "distributed.nanny.pre-spawn-environ"


def worker_environ() -> dict:
    """The environment Dask's nanny gives a worker process, less ``MALLOC_TRIM_THRESHOLD_``.
    Setting that variable at all turns off glibc's adaptive mmap threshold, so every tensor
    above 128 KiB is mapped and unmapped afresh; the chapters' training loops, which allocate
    such tensors at every step, then run about three times slower in a worker than in the
    notebook (measured on chapter 03's λ sweep: 16 against 5.5 ms per step). Workers started by
    hand get the same change from ``config/dask/workers.yaml``; the runner does not read that
    file, because an installed package (or a copy of the chapters and ``lib``) does not have it."""
    import dask

    return {k: v for k, v in dask.config.get(WORKER_ENVIRON, {}).items()
            if k != "MALLOC_TRIM_THRESHOLD_"}


_ADDRESS = re.compile(r"(?:(?:tcp|tls)://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})")


def _local_workers(scheduler: str) -> int | None:
    """N of ``local`` / ``local:N`` (None for an address); UsageError for a bad N."""
    if not (scheduler == "local" or scheduler.startswith("local:")):
        return None
    try:
        workers = int(scheduler.partition(":")[2] or os.cpu_count() or 1)
        if not 1 <= workers <= 1024:
            raise ValueError
    except ValueError:
        raise UsageError(f"--scheduler {scheduler}: expected local or local:N with N from 1 to 1024") from None
    return workers


def check_scheduler(scheduler: str | None, timeout: float = 5.0) -> None:
    """Refuse, before any kernel starts, a --scheduler that is neither ``local[:N]`` nor the
    address of a scheduler that answers (a TCP connection within ``timeout`` seconds)."""
    import socket

    if not scheduler or _local_workers(scheduler) is not None:
        return
    m = _ADDRESS.fullmatch(scheduler)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise UsageError(f"--scheduler {scheduler}: expected local, local:N or an address like tcp://host:8786")
    host = m.group(1).strip("[]")
    try:
        socket.create_connection((host, int(m.group(2))), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"--scheduler {scheduler}: no scheduler answers there "
                         f"({exc.strerror or type(exc).__name__})") from None


@contextlib.contextmanager
def scheduler_address(scheduler: str | None):
    """The Dask scheduler address the chapters' sweeps go to: an address as given, or for
    ``local[:N]`` that of a LocalCluster of N worker processes (default: one per core) started
    for this run; None without a scheduler."""
    workers = _local_workers(scheduler) if scheduler else None
    if workers is None:
        yield scheduler or None
        return
    import dask
    from distributed import LocalCluster

    # one thread per worker: the count exported for the chapters' kernels (which the workers
    # would inherit, and which beats Dask's own setting) would oversubscribe the cores
    with dask.config.set({WORKER_ENVIRON: worker_environ()}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None, env={var: "1" for var in THREAD_VARS}) as cluster:
        print(f"started a local Dask cluster with {workers} workers at {cluster.scheduler_address}", flush=True)
        yield cluster.scheduler_address
