"""Side-by-side benchmark of SWR against the alternatives (``companion bench swr``).

Every implementation gets the same inputs in the same process, at each sequence length, in up
to three passes: ``fwd`` (forward), ``bwd`` (backward alone, after one untimed forward) and
``fwd+bwd``:

* ``swr``             — :func:`kernels.swr.swr` with ``impl="auto"`` (the compiled kernel on CPU)
* ``scan-compiled``   — the full recurrence as a compiled sequential scan
  (:func:`kernels.swr.scan`, ``impl="compiled"``): one O(L·D) pass per head, vectorised across
  channels, heads on all cores — the baseline a CPU user would pick, built like the SWR kernel
  (same threads, same vector rows), so the two differ only in the recurrence they evaluate
* ``swr-chunked``     — the block two-pass algorithm in PyTorch ops
* ``scan-torch-loop`` — the full recurrence as a Python loop over time of PyTorch ops (one
  small operation per token: it measures Python and dispatch overhead, not the recurrence)
* ``scan-parallel``   — the full recurrence as a log-space parallel scan: with ``A = cumsum log a``,
  ``y_i = Σ_j e^{A_i − A_j} x_j`` split into positive and negative parts of ``x`` and evaluated
  with ``logcumsumexp`` (stable, O(L) work, O(log L) depth)
* ``swa-blocked``     — sliding-window attention with the *same* jagged window as SWR
  (:func:`kernels.swa.swa_blocked`, O(L·2ℓ·D), no L×L matrix)
* ``attention-full``  — PyTorch SDPA with a causal mask (:func:`kernels.swa.attention_full`,
  O(L²·D))

and, on request (:data:`EXTRA_IMPLS`), ``swr-loops`` and ``scan-compiled-loops``: the same two
compiled kernels with their channel loops left to numba instead of one vector operation per
token row (:data:`kernels.swr.compiled.VECTOR_ROWS`), to measure what the vector rows bring.

Reported per measurement: the median of ``repeats`` timings, tokens/s, and an *effective*
bandwidth: the bytes each method must touch at least once divided by the time. Forward: inputs
read and output written (``a, x → y`` for recurrences, ``q, k, v → o`` for attention); backward:
the output's gradient and the inputs (or the output) read, the inputs' gradients written
(``a, x, dy → da, dx``; ``q, k, v, do → dq, dk, dv``); ``fwd+bwd``: the sum.

**The roof** is the machine's memory bandwidth as STREAM measures it: the triad
``a = b + s·c`` on three float32 arrays far larger than the caches (:class:`Roof`), compiled,
with the run's threads, counting two reads and one write per element. The compiled kernels'
timings (:data:`STREAMING`) are each paired with a triad run just before them, and
``fraction_of_roof`` is the median over repeats of (effective bandwidth / that triad's
bandwidth): a machine that slows down or speeds up between runs (other jobs, frequency) moves
both numbers of a pair together, so their ratio stays put where either alone would not. The
other methods, bound by arithmetic or overhead rather than memory, are set against the median
of all triad runs. ``ratio_to_swr`` is each time divided by ``swr``'s at the same length and pass.

Every method runs with PyTorch's thread count (all cores unless ``threads`` says otherwise;
the compiled kernels and the triad follow it too). :func:`decode_throughput` times the
token-by-token decoder (:class:`kernels.swr.SWRState`) in tokens/s, to set beside the
full-sequence kernel's.

The package, by job: :mod:`.timing` (the alternatives, the timings and the table),
:mod:`.roofline` (the STREAM triad), :mod:`.summary` (the numbers read off the table),
:mod:`.plotting` (the figure) and :mod:`.cli` (``companion bench swr``). It lives outside
``kernels/``: nothing in ``kernels/`` or in a chapter's sweep imports it.
"""

from lib.swr_bench.plotting import plot
from lib.swr_bench.roofline import Roof, copy_bandwidth
from lib.swr_bench.summary import common_length, loglog_slope, speed_phrase, summary, table
from lib.swr_bench.timing import (EXTRA_IMPLS, IMPLS, PASSES, STREAMING, decode_throughput, measure, run,
                                  scan_parallel, scan_torch_loop)

__all__ = ["EXTRA_IMPLS", "IMPLS", "PASSES", "STREAMING", "Roof", "common_length", "copy_bandwidth",
           "decode_throughput", "loglog_slope", "measure", "plot", "run", "scan_parallel", "scan_torch_loop",
           "speed_phrase", "summary", "table"]
