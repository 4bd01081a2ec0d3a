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


@pytest.mark.integration
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
    import torch
    return {"MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads()}


@pytest.mark.integration
def test_local_cluster_workers_run_one_thread_and_keep_glibcs_adaptive_malloc(monkeypatch):
    """`--scheduler local` workers run one thread each, although the runner exports the
    chapters' thread count (which a worker would inherit, oversubscribing the cores), and do
    not get Dask's MALLOC_TRIM_THRESHOLD_: each made the chapters' training loops several times
    slower on a worker than in the notebook."""
    from distributed import Client
    from lib.pipeline.cores import THREAD_VARS, scheduler_address

    for var in THREAD_VARS:  # what the runner exports for a chapter on two cores
        monkeypatch.setenv(var, "2")
    monkeypatch.delenv("COMPANION_SCHEDULER", raising=False)
    # a nanny writes its variables into its parent's environment too: undo the other tests'
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with scheduler_address("local:1") as address, Client(address) as client:
        env = client.submit(worker_environment, pure=False).result()
    assert env == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1", "torch": 1}
