"""`companion profile` (lib/pipeline/profile.py) and the sweep's side of it (lib.sweep under a run
context with ``profiling`` set)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from conftest import companion
from lib import profiling as profiling_module
from lib import run, sweep
from lib.pipeline import profile

CALLS: list[tuple] = []


def matmul_point(n: int, seed: int) -> dict:
    """One n × n matmul: 2n³ FLOPs."""
    import torch

    CALLS.append((n, seed))
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g)
    return {"trace": float((a @ a).trace())}


@pytest.fixture
def profiling(tmp_path, monkeypatch):
    """A run context like `companion profile`'s: kept points in tmp/points, lines to tmp/sweeps.jsonl."""
    lines = tmp_path / "sweeps.jsonl"
    context = run.RunContext(points=str(tmp_path / "points"), run_key="k", profiling=str(lines))
    monkeypatch.setenv(run.ENV, json.dumps(asdict(context)))
    monkeypatch.setattr(profiling_module, "_PROBED", set())
    CALLS.clear()
    return lines


def test_a_profiled_sweep_appends_its_time_and_one_points_matmul_flops(profiling):
    records = sweep.sweep(matmul_point, {"n": [8, 16]}, seeds=[0, 1])
    assert [r["n"] for r in records] == [8, 8, 16, 16]
    [line] = [json.loads(ln) for ln in profiling.read_text().splitlines()]
    assert line["function"] == f"{__name__}.matmul_point" and line["points"] == 4
    assert line["probe"]["flops"] == 2 * 8 ** 3  # the first point, counted exactly
    assert line["probe"]["ops"] >= 3  # randn, mm, trace (and whatever torch adds), all counted
    assert 0 < line["probe"]["seconds"] <= line["seconds"] and line["probe"]["overhead_s"] > 0
    assert len(CALLS) == 5  # four points and one counted rerun of the first
    sweep.sweep(matmul_point, {"n": [32]}, seeds=[0])  # the same function again: no second probe
    second = json.loads(profiling.read_text().splitlines()[1])
    assert second["points"] == 1 and "probe" not in second


def test_a_profiled_sweep_computes_every_point_where_a_plain_run_resumes(profiling, monkeypatch):
    sweep.sweep(matmul_point, {"n": [8]}, seeds=[0, 1])
    calls = len(CALLS)
    sweep.sweep(matmul_point, {"n": [8]}, seeds=[0, 1])
    assert len(CALLS) == calls + 2  # profiling: nothing read from (or written to) the points
    context = run.RunContext(points=str(profiling.parent / "points"), run_key="k")
    monkeypatch.setenv(run.ENV, json.dumps({**asdict(context), "profiling": None}))
    sweep.sweep(matmul_point, {"n": [8]}, seeds=[0, 1])
    sweep.sweep(matmul_point, {"n": [8]}, seeds=[0, 1])
    assert len(CALLS) == calls + 4  # the plain run keeps its points, its rerun reads them
    assert len(profiling.read_text().splitlines()) == 2  # and appends nothing


def test_sweep_table_sums_per_function_and_rates_the_probe_against_the_peaks():
    lines = [{"function": "m.f", "points": 3, "seconds": 2.0, "probe": {"flops": 4e9, "ops": 10, "seconds": 0.5}},
             {"function": "m.g", "points": 1, "seconds": 9.0, "probe": {"flops": 0, "ops": 0, "seconds": 9.0}},
             {"function": "m.f", "points": 2, "seconds": 1.0}]
    g, f = profile.sweep_table(lines, peak=16e9, peak_1=10e9, op_s=1e-6)
    assert (f["function"], f["sweeps"], f["points"], f["seconds"]) == ("m.f", 2, 5, 3.0)
    assert f["flops_per_s"] == 8e9 and f["of_peak"] == 0.5 and f["of_peak_1_thread"] == 0.8
    assert f["ops"] == 10 and f["overhead_share"] == 0.0 and f["bound"] == "matmul"
    assert g["function"] == "m.g" and g["flops_per_s"] is None and g["of_peak"] is None  # numpy: no rate
    assert g["bound"] == "numpy / compiled"


@pytest.mark.parametrize("flops, ops, bound", [
    (3e9, 10, "matmul"),  # 3 GFLOP in 1 s on a 5 GFLOP/s thread: 60 % of its peak
    (1e9, 600_000, "per-op overhead"),  # 600 000 operators × 1 µs = 0.6 of the second
    (1e9, 400_000, "non-matmul work"),  # 0.4 of it: most of the time is the operators' own work
])
def test_a_function_below_the_matmul_peak_is_bound_by_overhead_where_its_operators_fill_its_time(flops, ops, bound):
    line = {"function": "m.f", "points": 1, "seconds": 1.0, "probe": {"flops": flops, "ops": ops, "seconds": 1.0}}
    [row] = profile.sweep_table([line], peak=10e9, peak_1=5e9, op_s=1e-6)
    assert row["bound"] == bound and row["overhead_share"] == pytest.approx(ops * 1e-6, abs=1e-4)


def test_the_per_operator_cost_is_microseconds():
    costs = profile.op_cost(repeats=2, steps=20)
    assert len(costs) == 2 and all(1e-8 < c < 1e-3 for c in costs)  # PyTorch: ~1–10 µs per operator


def test_cell_times_come_from_papermills_metadata(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": ["# t"], "metadata": {}},
                    {"cell_type": "code", "source": ["# a comment\n", "x = train()\n"],
                     "metadata": {"papermill": {"duration": 2.5}}},
                    {"cell_type": "code", "source": ["y = 1"], "metadata": {}}]}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    assert profile.cell_times(tmp_path / "nb.ipynb") == [{"cell": 1, "code": "x = train()", "seconds": 2.5}]


def test_the_matmul_peak_is_a_rate_per_repeat():
    assert len(profile.matmul_peak(1, n=64, repeats=2, dtype="float64")) == 2
    rates = profile.matmul_peak(1, n=64, repeats=3)
    assert len(rates) == 3 and all(r > 1e6 for r in rates)  # 2·64³ FLOPs each, in well under 0.5 s


@pytest.mark.integration
def test_profile_runs_the_chapter_into_build_profile_only(project):
    out = companion("profile", "99", "-p", "points", "3", root=project)
    assert out.returncode == 0, out.stderr
    folder = project / "_build" / "profile" / "default" / "99-fixture"
    doc = json.loads((folder / "profile.json").read_text())
    assert doc["chapter"] == "99-fixture" and doc["overrides"] == {"points": "3"}
    [row] = doc["sweeps"]
    assert row["function"] == "lib.fixture_paper.slow_point" and row["points"] == 3 and row["sweeps"] == 1
    assert row["flops_per_s"] is None  # numpy: no torch FLOPs to rate
    codes = {c["code"]: c["seconds"] for c in doc["cells"]}
    assert codes["import time"] > 0 and "seed = 0" in codes  # the chapter's cell, papermill's parameters
    assert doc["peak"]["flops_per_s"] > 0 and "lib.fixture_paper.slow_point" in out.stdout
    assert (folder / "run" / "results.json").is_file()
    assert sorted(p.name for p in (project / "_build").iterdir()) == ["profile"]  # no runs/, no points/
    again = companion("profile", "99", "-p", "points", "3", root=project)
    assert again.returncode == 0 and " ran (" in again.stdout  # forced: a cached run has no timings


@pytest.mark.parametrize("args, says", [
    (["profile", "nosuch"], "no chapter 'nosuch'"),
    (["profile", "99", "-p", "points", "1000"], "points"),
    (["profile", "99", "-p", "nosuch", "1"], "nosuch"),
    (["profile", "99", "--profile", "huge"], "huge"),
    (["profile", "99", "99"], "unrecognized"),
])
@pytest.mark.integration
def test_bad_input_is_one_line_and_exit_64(project, args, says):
    out = companion(*args, root=project)
    assert out.returncode == 64 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (project / "_build" / "profile").exists()


def test_an_operator_floor_above_the_points_time_reads_as_above_100_percent():
    from lib.pipeline.profile import _ops_share

    assert _ops_share(1.21) == ">100" and _ops_share(0.5) == "50.0" and _ops_share(1.0) == "100.0"
    assert _ops_share(None) == "-"
