"""Shared fixtures: a throw-away project for CLI tests, and the built default book."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
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
INTEGRATION_FIXTURES = {"project", "built_book"}
INTEGRATION_CALLS = ("companion(", "papermill(", "subprocess.", "execute_notebook(", "LocalCluster(",
                     "Client(", "scheduler_address(", "build_html(", "run_chapter(", "sync_playwright(")


def pytest_addoption(parser):
    parser.addoption("--book", default="quick", choices=("quick", "default", "paper"),
                     help="the profile of the book that the book tests build and read: quick under `make test`, "
                          "default under `make test-book`")


def pytest_collection_modifyitems(config, items):
    """The tests that read the built book are marked ``book`` (``make test-book`` selects them) and
    go last (a stable sort: the order is otherwise kept), when the chapter runs they reuse are done.
    ``make test-fast`` (``-m "not slow and not browser and not integration"``) is the unit tier:
    in-process, no kernel, no cluster, no build."""
    for item in items:
        if "built_book" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.book)
    items[:] = sorted(items, key=lambda item: "built_book" in getattr(item, "fixturenames", ()))


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


@dataclass(frozen=True)
class BuiltBook:
    """The book the session built: its profile (``--book``) and the build's completed process."""
    profile: str
    build: subprocess.CompletedProcess

    def results(self, slug: str) -> dict:
        """A chapter's results.json in this book."""
        return run_results(self.profile, slug)

    def notebook(self, slug: str) -> dict:
        """A chapter's executed notebook in this book."""
        return json.loads((ROOT / "_build" / "runs" / self.profile / slug / f"{slug}.ipynb").read_text())


def run_results(profile: str, slug: str) -> dict:
    """A chapter's results.json from its last run at ``profile`` in this checkout."""
    return json.loads((ROOT / "_build" / "runs" / profile / slug / "results.json").read_text())


#: Where the processes that built the book say how long it took (seconds), one line each: under
#: pytest-xdist the build runs in a worker, and only the controlling process writes the summary.
BOOK_TIMES = ROOT / "_build" / ".test-book-times"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controlling process (or no xdist)
        BOOK_TIMES.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter, config):
    """Say how long each process's `companion build` took (the first builds; the others find the
    book up to date)."""
    if BOOK_TIMES.exists():
        times = ", ".join(f"{float(t):.0f} s" for t in BOOK_TIMES.read_text().split())
        terminalreporter.write_line(f"{config.getoption('--book')} book: built in {times}")


@contextlib.contextmanager
def book_lock():
    """One `companion build` of the project at a time across pytest-xdist's processes: each process
    that reads the book builds it (the second finds every run cached and the book up to date), and
    two builds at once would share _build/stage."""
    lock = ROOT / "_build" / ".test-book.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def built_book(request) -> BuiltBook:
    """The book built at the session's profile (``--book``), once per test process (under a lock):
    `companion build`, two chapters at a time, reusing every chapter run already cached (under
    `make test`, the quick runs that ``test_book`` made). It runs what is stale and builds
    _build/html."""
    profile = request.config.getoption("--book")
    with book_lock():
        started = time.monotonic()
        out = companion("build", "--profile", profile, "--jobs", "2", timeout=3600)
        with BOOK_TIMES.open("a") as f:
            f.write(f"{time.monotonic() - started:.1f}\n")
    print(out.stdout[-3000:])
    return BuiltBook(profile, out)


#: The safety tests' marker: a file the user owns, planted before a run and checked after it.
MINE = b"the user's own bytes\n"


def plant(path: Path) -> Path:
    """A file the user owns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MINE)
    return path


def still_there(path: Path) -> bool:
    return path.is_file() and path.read_bytes() == MINE
