"""Profiling of sweeps for `companion profile` (lib/pipeline/profile.py): the operator counter and
the FLOP probe. Kept apart from :mod:`lib.sweep` so that a chapter's numbers never import it:
:func:`lib.sweep.sweep` imports this module only when its run context is profiling, and it is a
presentation module (``lib.digests.PRESENTATION``): editing it leaves every record current.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

_PROBED: set[str] = set()  # functions whose FLOPs this process has counted


def op_counter():
    """A torch dispatch mode that counts the operators dispatched under it (forward, backward and
    optimiser alike, after autograd: each is one trip through PyTorch's per-operator overhead)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    return Counter()


def profile_sweep(path: str, fn: Callable, task: tuple, points: int, seconds: float, first_s: float | None) -> None:
    """Append this sweep's line to the profile (see :mod:`lib.sweep`'s docstring). The FLOP probe runs
    only where torch is loaded; ``first_s`` is None when the points ran elsewhere, and the
    first point is then timed here too."""
    inner = getattr(fn, "func", fn)  # a functools.partial's function
    name = f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', type(inner).__name__)}"
    line = {"function": name, "points": points, "seconds": round(seconds, 4)}
    if name not in _PROBED and "torch" in sys.modules:
        _PROBED.add(name)
        from torch.utils.flop_counter import FlopCounterMode

        extra = time.perf_counter()
        if first_s is None:
            t = time.perf_counter()
            fn(**task[0], seed=task[1])
            first_s = time.perf_counter() - t
        ops = op_counter()
        with FlopCounterMode(display=False) as counter, ops:
            fn(**task[0], seed=task[1])
        line["probe"] = {"flops": int(counter.get_total_flops()), "ops": ops.count, "seconds": round(first_s, 4),
                         "overhead_s": round(time.perf_counter() - extra, 4)}  # the extra runs' time
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
