"""Compiled kernels used by the book (sliding-window recurrences: :mod:`kernels.swr`).

``kernels/swr/`` follows flash-linear-attention's one-folder-per-operator layout: ``naive.py``
(the readable reference the tests compare against), ``chunk.py`` (block two-pass in PyTorch,
hand-written backward), ``compiled/`` (the CPU fast path: a numba streaming loop, forward and
adjoint), ``triton_b2p.py`` (fused B2P for GPUs) and ``decode.py`` (token-by-token state).
Their benchmark (``companion bench swr``) lives outside the kernels, in :mod:`lib.swr_bench`.
The attention references it compares against (sliding-window attention over SWR's window, full
causal attention) live beside the SWR reference in ``kernels/swa.py``.
"""
