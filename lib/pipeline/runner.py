"""Execute a chapter with papermill: cache, atomic outputs, provenance.

A run writes ``<out>/``: the executed notebook ``<slug>.ipynb``, ``figures/``,
``results.json`` and a marker file holding the run's manifest (each file's digest). It writes
only where :func:`lib.outputs.check_output` allows (a new or empty folder, or one an earlier run
of the chapter wrote; checked before any work, with what the final move needs), executes in a
temporary sibling folder and is put into place by :func:`lib.outputs.commit` only when
complete, so a failed or killed run never leaves a half-written result, and a user's file in the
folder is never replaced. Two runs into one folder take turns (a lock beside it). A cached run
counts only while its folder still matches its manifest.

Whether a run is cached is :mod:`lib.pipeline.cache`; the cores and the Dask cluster a run's
sweeps use are :mod:`lib.pipeline.cores`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from lib import results
from lib.claims import failing
from lib.outputs import MARKER, CommitError, UnsafeOutput, check_output, commit, left_in_place, mark
from lib.pipeline.cache import (DEPFILE, _depfile_cell, _sha, cache_key, environment_fingerprint, is_fresh,
                                notebook_fingerprint, stored)
from lib.pipeline.chapters import Book, ChapterSource, UsageError
from lib.pipeline.cores import check_scheduler, scheduler_address, set_threads
from lib.run import RunContext, requested_threads
from lib.provenance import git_commit

KERNEL_LOG = ".kernel.log"

# Exit codes of `companion run` (docs/design.md).
OK, EXEC_FAILED, CLAIM_FAILED, USAGE = 0, 1, 2, 64


@dataclass
class RunResult:
    chapter: ChapterSource
    profile: str
    out_dir: Path
    status: str  # "cached", "ran" or "failed"
    exit_code: int
    runtime_s: float = 0.0
    results: dict = field(default_factory=dict)
    message: str = ""

    @property
    def failed_claims(self) -> list[dict]:
        return failing(self.results.get("claims", []))


def _exit_code(doc: dict) -> int:
    return CLAIM_FAILED if failing(doc.get("claims", [])) else OK


def _clean_stale_tmp(out_dir: Path) -> None:
    """Remove the temporary folders of killed runs into ``out_dir`` (only marked ones)."""
    for tmp in out_dir.parent.glob(f".tmp-{out_dir.name}-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if not (tmp / MARKER).is_file() or not pid.isdigit():
            continue
        if int(pid) == os.getpid() or not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def output_dir(book: Book, chapter: ChapterSource, profile: str, out: Path | str | None) -> Path:
    """Where a run of ``chapter`` writes: ``out`` or the book's run folder, if a run may write
    there (:func:`lib.outputs.check_output`); else UsageError with one line."""
    try:
        return check_output(book.run_dir(profile, chapter) if out is None else out, chapter.slug, book.root)
    except UnsafeOutput as exc:
        raise UsageError(f"--out: {exc}" if out is not None else str(exc)) from None


@contextlib.contextmanager
def exclusive(out_dir: Path):
    """Hold the lock of ``out_dir`` (a file beside it, removed afterwards): a second run into the
    same folder waits, says so, and then finds the first one's result in the cache."""
    lock = out_dir.parent / f".{out_dir.name}.lock"
    while True:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another run writing {out_dir}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # the holder before us may have removed the file we waited on
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _error_summary(exc: Exception) -> str:
    """The notebook's own error: exception name, value and the last lines of its traceback."""

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-15:])


def resolve(book: Book, chapter: ChapterSource, profile: str, overrides: dict[str, str]) -> dict:
    """The chapter's parameters for this profile and overrides, without ``out_dir`` and
    ``profile`` (where a run is written and its label are not part of what it computes: the
    runner sets them)."""
    if "out_dir" in overrides:
        raise UsageError("set the output directory with --out DIR, not -p out_dir")
    if "profile" in overrides:
        raise UsageError("set the profile with --profile P, not -p profile")
    params = chapter.resolve(book.profile(profile, chapter), overrides)
    params.pop("out_dir", None)
    params.pop("profile", None)
    if params.get("device", "cpu") != "cpu":
        _check_device(str(params["device"]))
    return params


@dataclass(frozen=True)
class RunRequest:
    """One chapter run as the command line asked for it, resolved and checked before any kernel
    starts: the parameters it computes with, the folder it writes, and whether a cached run may
    stand for it. Every command that runs chapters (run, build, seeds, verify, profile, record's
    canary) makes its runs with :func:`plan` and hands them to :func:`run`; nothing downstream
    resolves parameters or checks the folder again (but for the folder's second look under its lock)."""
    chapter: ChapterSource
    profile: str
    params: dict
    out_dir: Path
    force: bool = False


def plan(book: Book, chapter: ChapterSource, profile: str, overrides: dict | None = None,
         out: Path | str | None = None, force: bool = False) -> RunRequest:
    """Resolve and check one run: its parameters (the chapter's declared types, constraints and
    rules), its output folder (lib.outputs), and for a folder the user named, that its parent can
    be made and written. UsageError (one line, exit 64) otherwise."""
    params = resolve(book, chapter, profile, overrides or {})
    out_dir = output_dir(book, chapter, profile, out)
    if out is not None:
        _check_writable(out_dir, out)
    return RunRequest(chapter, profile, params, out_dir, force)


def plan_all(book: Book, chapters: list[ChapterSource], profile: str, overrides: dict | None = None,
             out: Path | str | None = None, force: bool = False) -> list[RunRequest]:
    """:func:`plan` for each chapter, all checked before any runs."""
    if out is not None and len(chapters) > 1:
        raise UsageError("--out takes one chapter at a time")
    return [plan(book, ch, profile, overrides, out, force) for ch in chapters]


def _check_writable(out_dir: Path, out: Path | str) -> None:
    import tempfile

    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir.parent):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc}: {exc.filename})") from None


def _check_device(device: str) -> None:
    """A chapter's ``device`` must exist on this machine before anything runs."""
    import torch

    try:
        dev = torch.device(device)
        ok = dev.type == "cpu" or (dev.type == "cuda" and torch.cuda.is_available()
                                   and (dev.index or 0) < torch.cuda.device_count()) \
            or (dev.type == "mps" and torch.backends.mps.is_available())
    except RuntimeError:
        ok = False
    if not ok:
        raise UsageError(f"parameter 'device': {device!r} is not available on this machine")


def _versions() -> dict:
    """The interpreter's and the numerical stack's versions (as lib.provenance.environment gives
    them in the kernel), read from the installed packages' metadata: importing torch only to read
    its version cost the runner's own process more CPU than a small chapter's whole kernel."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("numpy", "torch"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the kernel, once
    papermill has shut it down; not the workers of a Dask cluster, which outlive the run)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _kernel_manager():
    """The kernel manager papermill starts the chapter's kernel with: the kernel process's own
    log goes to ``.kernel.log`` in the run's temporary folder, not to the user's terminal. That
    log holds IPKernelApp's "running over TCP without encryption" warning (the kernel listens on
    127.0.0.1 only, and every message carries the run's HMAC signature) and, after a Ctrl-C, the
    traceback of a kernel torn down mid-cell. The notebook's own output and errors reach the
    runner through kernel messages, as before; a failed run keeps the log beside its notebook."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with open(Path(kw.get("cwd") or os.getcwd()) / KERNEL_LOG, "ab") as log:
                kw["stderr"] = log  # the kernel keeps its own copy of the descriptor
                return await super()._async_launch_kernel(kernel_cmd, **kw)

    return QuietKernelManager


def run_chapter(book: Book, request: RunRequest, progress: bool | dict = True,
                scheduler: str | None = None) -> RunResult:
    """Run one planned chapter run (or reuse a cached run); see the module docstring.
    ``scheduler`` is the Dask scheduler address its sweeps go to (None: in the kernel)."""
    ch, profile = request.chapter, request.profile
    request.out_dir.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(request.out_dir):
        out_dir = output_dir(book, ch, profile, request.out_dir)  # still ours after waiting for the lock?
        fresh, doc = is_fresh(book, ch, request.params, out_dir)
        if fresh and not request.force:
            return RunResult(ch, profile, out_dir, "cached", _exit_code(doc),
                             doc["provenance"].get("runtime_s", 0.0), doc)
        return _execute(book, ch, profile, request.params, out_dir, progress, scheduler, request.force)


def _execute(book: Book, chapter: ChapterSource, profile: str, params: dict, out_dir: Path,
             progress, scheduler: str | None, force: bool = False) -> RunResult:
    import papermill as pm

    _clean_stale_tmp(out_dir)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
    if (tmp / MARKER).is_file():
        shutil.rmtree(tmp)  # ours: this process's name, left by an earlier failure
    elif tmp.exists():
        raise UsageError(f"{tmp} is in the way of the run's temporary folder and was not made by a run")
    mark(tmp)
    source = json.loads(chapter.path.read_text())
    source["cells"].append(_depfile_cell(book.root))
    (tmp / ".input.ipynb").write_text(json.dumps(source))

    injected = {**params, "out_dir": str(tmp)} if "out_dir" in chapter.parameters else dict(params)
    if "profile" in chapter.parameters:
        injected["profile"] = profile
    started = datetime.now(UTC).isoformat(timespec="milliseconds")  # records compare file times with it
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    # What the kernel is told (lib.run): sweep points finished by this run are kept for a rerun
    # with the same parameters (resume), keyed by the notebook, its parameters and the environment.
    RunContext(profile=profile, points=str(book.build_dir / "points" / chapter.slug),
               run_key=_sha(notebook_fingerprint(chapter.path), json.dumps(params, sort_keys=True).encode(),
                            environment_fingerprint(book.root)),
               scheduler=scheduler, threads=requested_threads(),
               force=force).export()  # --force / verify: no kept sweep point is read
    try:
        pm.execute_notebook(str(tmp / ".input.ipynb"), str(tmp / f"{chapter.slug}.ipynb"),
                            parameters=injected, kernel_name="python3", cwd=str(tmp),
                            progress_bar=progress, log_output=False, kernel_manager_class=_kernel_manager())
        doc = stored(tmp)
        if doc is None:
            raise RuntimeError("the notebook finished without writing results.json "
                               "(its last cells must call ch.save())")
    except KeyboardInterrupt:  # Ctrl-C: nothing half-written is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # the notebook's failure, reported, never left as a result
        failed_nb = book.build_dir / "failed" / profile / f"{chapter.slug}.ipynb"
        failed_nb.parent.mkdir(parents=True, exist_ok=True)
        for name, kept in ((f"{chapter.slug}.ipynb", failed_nb), (KERNEL_LOG, failed_nb.with_suffix(".kernel.log"))):
            if (tmp / name).exists():
                shutil.copyfile(tmp / name, kept)
        shutil.rmtree(tmp, ignore_errors=True)
        msg = _error_summary(exc) + f"\n(executed notebook kept at {failed_nb})"
        return RunResult(chapter, profile, out_dir, "failed", EXEC_FAILED,
                         time.perf_counter() - t0, {}, msg)
    runtime = time.perf_counter() - t0

    summary = json.loads((tmp / DEPFILE).read_text())
    deps = sorted(os.path.relpath(d, book.root.resolve()) for d in summary["deps"])
    for scratch in (DEPFILE, ".input.ipynb", KERNEL_LOG):
        (tmp / scratch).unlink(missing_ok=True)
    env = _versions()
    doc.update(chapter=chapter.slug, profile=profile, parameters=params)
    doc["provenance"] = {"git": git_commit(book.root), "cache_key": cache_key(book, chapter, params, deps),
                         "python": env["python"], "torch": env.get("torch"), "numpy": env["numpy"],
                         "started": started, "runtime_s": round(runtime, 2),
                         "cpu_s": round(_cpu_seconds() - cpu0, 2),
                         "threads": requested_threads() or os.cpu_count(),
                         "deps": deps, "sweeps": summary["sweeps"]}
    results.write(tmp, doc)

    # Into place (lib.outputs.commit): a new folder is the finished one renamed; into an existing
    # folder only the files of the earlier run's manifest that still match are replaced, and
    # anything else is left and named. A result that cannot go in place is kept and said where.
    try:
        left = commit(tmp, out_dir, chapter.slug, book.root)
    except CommitError as exc:
        return RunResult(chapter, profile, out_dir, "failed", EXEC_FAILED, runtime, doc, str(exc))
    if left:
        print(left_in_place(out_dir, left), file=sys.stderr, flush=True)
    return RunResult(chapter, profile, out_dir, "ran", _exit_code(doc), runtime, doc)


def run(book: Book, requests: list[RunRequest], jobs: int = 1, scheduler: str | None = None,
        report=lambda result: None) -> list[RunResult]:
    """Run planned requests, ``jobs`` at a time with the cores split between them; ``report`` is
    called with each RunResult as it finishes. The scheduler is checked here, once, before any
    kernel starts."""
    check_scheduler(scheduler)
    jobs = max(1, min(jobs, len(requests)))
    # The cores are split between parallel chapters; COMPANION_THREADS, when set, wins.
    set_threads(requested_threads() or max(1, (os.cpu_count() or 1) // jobs))
    with scheduler_address(scheduler) as address:
        if jobs == 1:
            results = []
            for r in requests:
                results.append(run_chapter(book, r, progress={"desc": r.chapter.slug}, scheduler=address))
                report(results[-1])
            return results
        # Separate processes: papermill changes the working directory of the process it runs in.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_in_worker, str(book.root), r.chapter.slug, r.profile, r.params, str(r.out_dir),
                                   r.force, {"desc": r.chapter.slug, "position": i % jobs, "leave": False}, address)
                       for i, r in enumerate(requests)]
            for fut in as_completed(futures):
                report(fut.result())
            return [f.result() for f in futures]


def _run_in_worker(root: str, slug: str, profile: str, params: dict, out_dir: str, force: bool,
                   progress, scheduler: str | None) -> RunResult:
    """A planned request in a worker process: the parameters were resolved and checked by
    :func:`plan` before any worker started, so they are taken as they are."""
    book = Book(Path(root))
    return run_chapter(book, RunRequest(book.chapter(slug), profile, params, Path(out_dir), force), progress,
                       scheduler)
