"""The chapters spread over a Dask cluster with identical results (issue: paper scale).

Each compared chapter's `quick` run through the CLI is compared with a run of the same chapter on a
cluster. The local run is the book's own (`_build/runs/quick/<slug>/`, which `test_book` makes
first and this test reuses from the cache, or makes itself); the cluster run executes in a
throw-away copy of the project (its own `_build/`, with an empty sweep point store, so every
sweep point is computed again, on the cluster) with `--scheduler local:2`. The claims (id,
holds, theory, value) and the metrics of the two results.json must be equal; wall-clock
measurements (a chapter's `metrics["timings"]`) are the only thing allowed to differ.

That the cluster ran the chapter's work is observed from outside the runner: a Dask worker
preload (set through Dask's own configuration variable, inherited by the workers the CLI starts)
logs every task a worker finishes, and the test counts the sweep tasks in that log. It must be
at least one, and exactly the number of points the cluster run wrote to the emptied store (each
finished point is stored once, so no point was computed anywhere else).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, companion

from lib.pipeline.chapters import Book

#: The chapters compared: one for each way a sweep point draws and computes — torch models whose
#: initialisation draws from the global generator (10; 02's language models draw the same way),
#: torch generators inside one batched mean-field run (03), numpy streams over many small points
#: (05). Every chapter draws only through lib.seeding (tests/test_seeding.py) and `test_book`
#: checks each quick run's stream roots, so the other seven would repeat these; each compared
#: chapter costs about half a CPU-minute of every `make test`.
CLUSTER_CHAPTERS = ("03", "05", "10")
CHAPTERS = [c.slug for c in Book(ROOT).chapters() if c.slug[:2] in CLUSTER_CHAPTERS]
pytestmark = [pytest.mark.slow, pytest.mark.integration]

#: Wall-clock measurements differ between any two runs; a chapter keeps them under this metric.
TIMINGS = "timings"

PRELOAD = '''
"""Dask worker preload (test only): log the key of every task this worker finishes."""
import os

from distributed.diagnostics.plugin import WorkerPlugin


class TaskLog(WorkerPlugin):
    def setup(self, worker):
        self.address = worker.address

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory":
            with open(os.environ["COMPANION_TEST_TASK_LOG"], "a") as f:
                f.write(f"{self.address} {key}\\n")


async def dask_setup(worker):
    await worker.plugin_add(TaskLog(), name="companion-test-task-log")
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of what a chapter run reads: lib/, kernels/, the chapters, their profiles and the
    pinned environment files. Numba's on-disk cache of the compiled kernels comes along (copied
    with the sources' modification times, which its index checks), so the cluster run does not
    compile them again; the point store is what this test empties."""
    root = tmp_path_factory.mktemp("cluster") / "project"
    ignore = shutil.ignore_patterns("*.pyc", ".ipynb_checkpoints")
    for d in ("lib", "kernels", "book/chapters", "book/params"):
        shutil.copytree(ROOT / d, root / d, ignore=ignore)
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copyfile(ROOT / name, root / name)
    (root / "task_log_preload.py").write_text(textwrap.dedent(PRELOAD))
    return root


def _sweep_tasks(log: Path) -> list[str]:
    """Keys of the sweep point tasks (lib.sweep submits ``_call_away``: the point and what the
    worker imported for it) the workers finished."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split(maxsplit=1)[1] for line in lines if line.split(maxsplit=1)[1].startswith("_call_away-")]


def _stored_points(root: Path, slug: str) -> int:
    return sum(1 for _ in (root / "_build" / "points" / slug).rglob("*.pkl"))


def _comparable(doc: dict) -> tuple[list, dict]:
    claims = [{k: c.get(k) for k in ("id", "kind", "holds", "theory", "simulation")} for c in doc["claims"]]
    metrics = {k: v for k, v in doc["metrics"].items() if k != TIMINGS}
    return claims, metrics


@pytest.mark.parametrize("slug", CHAPTERS)
def test_chapter_gives_identical_results_locally_and_on_a_local_cluster(project, tmp_path, slug):
    local = companion("run", slug, "--profile", "quick", timeout=900)  # the book's own run, cached
    assert local.returncode == 0, f"{slug} local:\n{local.stdout[-3000:]}\n{local.stderr[-3000:]}"

    shutil.rmtree(project / "_build" / "points" / slug, ignore_errors=True)  # every point runs again
    log = tmp_path / "tasks.log"
    env = {"DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(project / "task_log_preload.py")]),
           "COMPANION_TEST_TASK_LOG": str(log)}
    remote = companion("run", slug, "--profile", "quick", "--force", "--out", str(tmp_path / "cluster"),
                       "--scheduler", "local:2", root=project, env=env, timeout=900)
    assert remote.returncode == 0, f"{slug} on the cluster:\n{remote.stdout[-3000:]}\n{remote.stderr[-3000:]}"
    assert "local Dask cluster with 2 workers" in remote.stdout

    tasks = _sweep_tasks(log)
    print(f"{slug}: {len(tasks)} sweep tasks ran on the cluster")
    assert tasks, f"{slug}: no sweep point ran on the cluster (its heavy loops do not go through lib.sweep)"
    assert len(tasks) == _stored_points(project, slug), \
        f"{slug}: {len(tasks)} tasks on the cluster, {_stored_points(project, slug)} points stored"

    a = json.loads((ROOT / "_build" / "runs" / "quick" / slug / "results.json").read_text())
    b = json.loads((tmp_path / "cluster" / "results.json").read_text())
    claims_a, metrics_a = _comparable(a)
    claims_b, metrics_b = _comparable(b)
    assert claims_a == claims_b, f"{slug}: claims differ between the local and the cluster run"
    assert metrics_a == metrics_b, f"{slug}: metrics differ between the local and the cluster run " \
        f"({sorted(k for k in metrics_a if metrics_a[k] != metrics_b.get(k))})"
