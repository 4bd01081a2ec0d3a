"""Sweeps: grid × seeds, identical locally, with joblib, and on a real Dask LocalCluster."""

import pytest
import numpy as np

from lib.sweep import grid_points, sweep


def noisy_square(x, scale, seed):
    rng = np.random.default_rng(seed)
    return {"y": float(scale * x**2 + rng.standard_normal())}


GRID = {"x": [1, 2, 3], "scale": [0.5, 2.0]}


def test_grid_points_is_the_product_in_order():
    assert grid_points(GRID)[:3] == [{"x": 1, "scale": 0.5}, {"x": 1, "scale": 2.0}, {"x": 2, "scale": 0.5}]
    assert grid_points([{"a": 1}]) == [{"a": 1}]


def test_local_and_joblib_agree():
    local = sweep(noisy_square, GRID, seeds=range(3), progress=False)
    assert len(local) == 18 and local[0] == {"x": 1, "scale": 0.5, "seed": 0, **noisy_square(1, 0.5, 0)}
    assert sweep(noisy_square, GRID, seeds=range(3), jobs=2) == local


def test_dask_local_cluster_gives_identical_results():
    from distributed import LocalCluster

    local = sweep(noisy_square, GRID, seeds=range(3), progress=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        remote = sweep(noisy_square, GRID, seeds=range(3), scheduler=cluster.scheduler_address)
    assert remote == local


def test_one_thread_pins_torch_and_restores_the_callers_count():
    import torch

    from lib.sweep import one_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("the count comes back even when the body fails")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def worker_environment():
    import os
    return {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}


def test_local_cluster_workers_keep_glibcs_adaptive_malloc():
    """`--scheduler local` workers get Dask's one-thread settings but not its
    MALLOC_TRIM_THRESHOLD_, which made the chapters' training loops three times slower."""
    import os
    from distributed import Client
    from lib.pipeline.runner import _scheduler

    with _scheduler("local:1"), Client(os.environ["COMPANION_SCHEDULER"]) as client:
        env = client.submit(worker_environment, pure=False).result()
    assert env == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}
