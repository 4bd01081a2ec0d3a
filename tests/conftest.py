"""Shared fixtures: a throw-away project for CLI tests, and the built default book."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BIN = Path(sys.executable).parent


def companion(*args: str, root: Path = ROOT, timeout: float = 3600, env: dict | None = None,
              **kw) -> subprocess.CompletedProcess:
    """Run the `companion` CLI as a user would, against the project at ``root``."""
    full_env = {**os.environ, "COMPANION_ROOT": str(root), **(env or {})}
    if root != ROOT:  # the temporary project's lib/ shadows the installed one
        full_env["PYTHONPATH"] = os.pathsep.join([str(root), full_env.get("PYTHONPATH", "")])
    return subprocess.run([str(BIN / "companion"), *args], cwd=root, env=full_env, text=True,
                          capture_output=True, timeout=timeout, **kw)


#: What makes a test an integration test: fixtures that run the CLI or the book, and calls that
#: start another process, a kernel or a cluster.
INTEGRATION_FIXTURES = {"project", "default_book"}
INTEGRATION_CALLS = ("companion(", "papermill(", "subprocess.", "execute_notebook(", "LocalCluster(",
                     "Client(", "_scheduler(", "build_html(", "run_chapter(", "sync_playwright(")


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a process (directly, or through a fixture or helper named
    above) as ``integration``, so ``make test-fast`` (``-m "not slow and not browser and not
    integration"``) is the unit tier: in-process, no kernel, no cluster, no build."""
    for item in items:
        if item.get_closest_marker("integration"):
            continue
        try:
            source = inspect.getsource(item.function)
        except (OSError, TypeError):
            source = ""
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())) or \
                any(call in source for call in INTEGRATION_CALLS):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Unit tests use small tensors: one PyTorch thread is faster and immune to other jobs on
    shared cores. (Chapters run in their own kernels with the runner's thread count.)"""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal project: a copy of lib/ plus one fixture chapter and its profiles."""
    root = tmp_path / "project"
    shutil.copytree(ROOT / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(FIXTURES / "fixture_paper.py", root / "lib" / "fixture_paper.py")
    (root / "lib" / "unrelated_paper.py").write_text("X = 1\n")
    (root / "book" / "chapters").mkdir(parents=True)
    (root / "book" / "params").mkdir()
    shutil.copyfile(FIXTURES / "99-fixture.ipynb", root / "book" / "chapters" / "99-fixture.ipynb")
    (root / "book" / "params" / "quick.yaml").write_text("99-fixture: {n: 4}\n")
    (root / "book" / "params" / "default.yaml").write_text("99-fixture: {}\n")
    (root / "book" / "params" / "paper.yaml").write_text("99-fixture: {n: 64}\n")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copyfile(ROOT / name, root / name)
    return root


@pytest.fixture(scope="session")
def default_book() -> subprocess.CompletedProcess:
    """`companion build` at the default profile: runs what is stale (two chapters at a time, one
    core each: most chapters train small models one Python step at a time, so two share the
    machine better than one uses both cores), builds _build/html."""
    out = companion("build", "--profile", "default", "--jobs", "2", timeout=3600)
    print(out.stdout[-3000:])
    return out
