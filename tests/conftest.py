"""Shared fixtures: a throw-away project for CLI tests, and the built default book."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
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
#: start another process, a kernel or a cluster. Tests say their tier themselves
#: (``pytest.mark.integration`` on the test or as the module's ``pytestmark``);
#: ``tests/test_repo.py`` checks with these that none that starts a process leaves it out.
INTEGRATION_FIXTURES = {"project", "default_book"}
INTEGRATION_CALLS = ("companion(", "papermill(", "subprocess.", "execute_notebook(", "LocalCluster(",
                     "Client(", "scheduler_address(", "build_html(", "run_chapter(", "sync_playwright(")


def pytest_collection_modifyitems(config, items):
    """The tests that read the default book go last: its build runs in the background meanwhile
    (a stable sort: the order is otherwise kept). ``make test-fast`` (``-m "not slow and not
    browser and not integration"``) is the unit tier: in-process, no kernel, no cluster, no
    build."""
    items[:] = sorted(items, key=lambda item: "default_book" in getattr(item, "fixturenames", ()))


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
    return make_project(tmp_path / "project")


def make_project(root: Path) -> Path:
    """The `project` fixture's project, made at ``root`` (for fixtures of a wider scope)."""
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


#: The default book's build: `companion build` at the default profile runs what is stale (two
#: chapters at a time, one core each: most chapters train small models one Python step at a time,
#: so two share the machine better than one uses both cores) and builds _build/html.
DEFAULT_BOOK = ("build", "--profile", "default", "--jobs", "2")
#: How much lower the default book's build runs than the rest of the suite (``nice``).
BOOK_NICENESS = 10
#: When the background build started, and how long it and the wait for it took (seconds).
BOOK_TIMES: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    """Say how the background build of the default book went against the rest of the suite."""
    if "built_s" in BOOK_TIMES:
        terminalreporter.write_line(f"default book: built in {BOOK_TIMES['built_s']:.0f} s from the start of the "
                                    f"session; the tests that read it waited {BOOK_TIMES['waited_s']:.0f} s for it")


@pytest.fixture(autouse=True, scope="session")
def _default_book_build(request, tmp_path_factory):
    """Start the default book's build in the background when the session starts, if a selected
    test reads it. The tests that read it run last (``pytest_collection_modifyitems``), so the
    rest of the suite, one process at a time, shares the cores with the build instead of waiting
    for it. A session that ends early (``-x``, Ctrl-C) stops the build."""
    if not any("default_book" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield None
        return
    logs = tmp_path_factory.mktemp("default-book")
    with (logs / "stdout").open("w+") as out, (logs / "stderr").open("w+") as err:
        # At a lower priority: the rest of the suite (one process at a time) keeps a core, the build
        # takes what is left and both cores once the tests that read it are all that remain. At
        # equal priority the build's two processes take two thirds of two cores, and once it is
        # done the rest of the suite runs on one core while the other idles.
        BOOK_TIMES["started"] = time.monotonic()
        proc = subprocess.Popen([str(BIN / "companion"), *DEFAULT_BOOK], cwd=ROOT, text=True, stdout=out,
                                stderr=err, env={**os.environ, "COMPANION_ROOT": str(ROOT)},
                                start_new_session=True, preexec_fn=lambda: os.nice(BOOK_NICENESS))
        try:
            yield proc, out, err
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=120)


@pytest.fixture(scope="session")
def default_book(_default_book_build) -> subprocess.CompletedProcess:
    """The default book's build (started when the session began), once it has finished."""
    if _default_book_build is None:  # not foreseen at collection: build now
        out = companion(*DEFAULT_BOOK, timeout=3600)
    else:
        proc, stdout, stderr = _default_book_build
        waited = time.monotonic()
        proc.wait(timeout=3600)
        BOOK_TIMES["waited_s"] = time.monotonic() - waited
        BOOK_TIMES["built_s"] = time.monotonic() - BOOK_TIMES["started"]
        stdout.seek(0)
        stderr.seek(0)
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout.read(), stderr.read())
    print(out.stdout[-3000:])
    return out


#: The safety tests' marker: a file the user owns, planted before a run and checked after it.
MINE = b"the user's own bytes\n"


def plant(path: Path) -> Path:
    """A file the user owns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MINE)
    return path


def still_there(path: Path) -> bool:
    return path.is_file() and path.read_bytes() == MINE
