"""Where a result came from: commit, environment, threads, timing."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_commit(root: Path = ROOT) -> str:
    """The checked-out commit, with ``-dirty`` when the working tree has changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               text=True, capture_output=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment() -> dict:
    """Versions of the interpreter and the numerical stack, and the thread count."""
    import numpy

    env = {"python": platform.python_version(), "numpy": numpy.__version__,
           "platform": platform.platform(terse=True)}
    if "torch" in sys.modules or _importable("torch"):
        import torch

        env["torch"] = torch.__version__
        env["threads"] = torch.get_num_threads()
    else:
        env["threads"] = os.cpu_count()
    return env


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


class Stopwatch:
    """Started when the chapter starts; ``elapsed`` in seconds."""

    def __init__(self):
        self.t0 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def summary(parameters: dict, stopwatch: Stopwatch | None = None):
    """A small table for the end of a chapter: commit, environment, parameters, runtime."""
    import pandas as pd

    import json

    rows = {"commit": git_commit(), **{k: str(v) for k, v in environment().items()}}
    if stopwatch is not None:
        rows["runtime (s, this kernel)"] = f"{stopwatch.elapsed:.1f}"
    rows.update({f"parameter {k}": v if isinstance(v, str) else json.dumps(v)
                 for k, v in parameters.items() if k != "out_dir"})
    table = pd.DataFrame({"value": rows})
    table.index.name = "provenance"
    return table
