"""The CPU fast path: SWR as a compiled streaming loop (numba), forward and backward, on all
cores; and the full recurrence as a compiled sequential scan built the same way
(:func:`scan_compiled`, the benchmark's CPU baseline).

On a CPU the cheapest exact form of the SWR operator is not the blocked two-pass algorithm
(O(L·ℓ·D) work, built for tensor cores) but the streaming two-state loop of the decoder
(O(L·D) work, one read of the input and one write of the output), vectorised across a head's
channels. Per head, ``h`` is the block-local state, ``c_prev`` the previous block's end state and
``r`` the product of ``a`` since the block start::

    h ← a_i·h + u_i;  r ← a_i·r;  y_i = h + r·c_prev;  at a block end: c_prev ← h, h ← 0, r ← 1

The forward also stores the block end states (``L/ℓ × D`` floats, the carriers ``c_t``) and
keeps its output ``y`` for the backward, which is one streaming pass right to left. With
``μ`` the adjoint restarted at every block end, ``P_i = a_{i+1}⋯a_{e−1}`` the product from ``i``
to the block's last position ``e−1``, ``g_{i−1} = a_s⋯a_{i−1}`` the prefix product from the
block start ``s`` and ``dc_t`` the adjoint of block ``t``'s carrier::

    μ_i  = dy_i + a_{i+1}·μ_{i+1}   (μ_{e−1} = dy_{e−1})
    du_i = λ_i = μ_i + P_i·dc_t,    dc_{t−1} = a_s·μ_s = Σ_{i∈t} g_i·dy_i
    da_i = Σ_d λ_i·h_{i−1} + g_{i−1}·Σ_d μ_i·c_{t−1}
         = Σ_d λ_i·z_{i−1} − g_{i−1}·P_i·κ_t,    κ_t = Σ_d dc_t·c_{t−1}

using ``h_{i−1} + g_{i−1}·c_{t−1} = y_{i−1}`` inside the block: ``z_{i−1} = y_{i−1}``, except
``z_{s−1} = c_{t−1}`` at the block start (where the local state ``h_{s−1}`` is zero). So the
backward reads ``a, dy, y`` and the carriers once and writes ``du, da`` once, with one reduction
over channels per position, and never recomputes the local states. The kernels are JIT-compiled
on first use and cached on disk (``cache=True``), once per dtype.

**Vector rows.** Each token touches one row of ``W = d1 − d0`` contiguous channels per array.
numba vectorises the channel loops but re-checks, for every token, that the arrays do not
overlap, which costs more than the token's arithmetic (measured at L = 65 536, 16×16 float32:
the loop kernels ran at about 0.7 of the memory roof). Where the row is a whole number of
16-byte lanes and at most :data:`VECTOR_MAX_BYTES` (:func:`vector_width_ok`), the kernels
instead do each row as one LLVM vector operation (intrinsics :func:`_fwd_row`, :func:`_bwd_row`),
with ``W`` a compile-time constant (:func:`_vector_kernels`), the block-local state kept in the
block's carrier row and every buffer on a 64-byte boundary (:func:`aligned_empty`); the loops
stay as the path for other widths and as the benchmark's reference (``vector=False``).

**Threads.** Heads are independent, and so are channels except through ``da``, which is a sum
over channels (``dg`` and the ``λ·h`` term are both linear in the channels, so ``da`` of a
channel group is a partial sum and the groups' partials add up). Each kernel therefore takes a
range of heads and a range of channels, and :func:`_parallel` runs one range per thread: the
``B·H`` heads split into contiguous ranges, or — when there are fewer heads than threads — the
channels split into groups of whole cache lines (so that no two threads write the same line;
with ``D·itemsize`` under two cache lines there is nothing to split and the call stays on one
thread). The threads are plain Python threads in a small pool, each calling the compiled kernel
with the GIL released (``nogil=True``): they sleep on a queue between calls instead of spinning,
so they neither compete with PyTorch's OpenMP workers nor depend on numba's process-wide
threading layer (of which only ``omp`` and ``workqueue`` are installed here: ``tbb`` is not, and
``workqueue`` cost ~0.2 ms per call). The thread count follows ``torch.get_num_threads()`` (the
runner and the benchmark set it), and calls with fewer than :data:`MIN_PARALLEL_WORK` elements
stay on the calling thread, where the hand-off (tens of µs) would cost more than it saves.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: Below this many elements (``B·H·L·D``) of ``u`` a call runs on one thread. Measured on the
#: book's 2-core machines (16 heads × 16 channels, float32): two threads cost 30–60 µs more per
#: call at L ≤ 1024 and only start to win between L = 4096 (1M elements, still in cache) and
#: L = 16384 (4M); on a loaded machine the second core is often busy and the crossover moves up.
MIN_PARALLEL_WORK = 1 << 22
CACHE_LINE = 64  # bytes


# -- one token's row of channels as one vector operation ----------------------------------------
# numba compiles the channel loops above into vector code, but re-checks on every token (every
# trip through a 16-channel loop) that the arrays involved do not overlap, and that check costs
# more than the token's arithmetic. The intrinsics below do one row of ``W`` channels (``W`` a
# compile-time constant) as LLVM vector operations on the rows' addresses, each row given as
# (array, offset into the flat array). The forward does the loops' operations in the loops'
# order, so its results are identical; the backward's channel sum is a fixed pairwise tree
# instead of the loop's reassociated sum (equal to rounding).
def _vector_ptr(context, builder, arrty, arr, offset, vty):
    data = cgutils.create_struct_proxy(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [offset]), vty.as_pointer())


def _splat(builder, value, vty):
    lanes = vty.count
    first = builder.insert_element(ir.Constant(vty, ir.Undefined), value,
                                   ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(first, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _tree_sum(builder, v, lanes):
    """Σ of the ``lanes`` elements of ``v``: halves added pairwise while the count is even, the
    rest left to right (a fixed order, independent of fast-math flags)."""
    while lanes > 1 and lanes % 2 == 0:
        half = lanes // 2
        low = ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half)))
        high = ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half, lanes)))
        v = builder.fadd(builder.shuffle_vector(v, v, low), builder.shuffle_vector(v, v, high))
        lanes = half
    total = builder.extract_element(v, ir.Constant(ir.IntType(32), 0))
    for k in range(1, lanes):
        total = builder.fadd(total, builder.extract_element(v, ir.Constant(ir.IntType(32), k)))
    return total


class _Rows:
    """Loads and stores of ``W``-element rows (``(array, offset)`` pairs) inside a codegen."""

    def __init__(self, context, builder, sig, args, width):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        dtype = sig.args[0].dtype
        self.vty = ir.VectorType(context.get_value_type(dtype), width)
        self.align = dtype.bitwidth // 8

    def ptr(self, k):  # row given by arguments k (array) and k + 1 (offset)
        return _vector_ptr(self.context, self.builder, self.sig.args[k], self.args[k],
                           self.args[k + 1], self.vty)

    def load(self, k):
        return self.builder.load(self.ptr(k), align=self.align)

    def store(self, value, k):
        self.builder.store(value, self.ptr(k), align=self.align)

    def splat(self, k):
        return _splat(self.builder, self.args[k], self.vty)


def _literal(width) -> int | None:
    return width.literal_value if isinstance(width, types.IntegerLiteral) else None


@intrinsic
def _fwd_row(typingctx, y, yo, u, uo, h, ho, c, co, ai, r, width):
    """``h ← ai·h + u``, ``y ← h + r·c``; with ``c`` ``None``: ``y ← h`` (the scan)."""
    W = _literal(width)
    if W is None:
        return None
    with_c = not isinstance(c, types.NoneType)

    def codegen(context, builder, sig, args):
        rows, b = _Rows(context, builder, sig, args, W), builder
        hv = b.fadd(b.fmul(rows.splat(8), rows.load(4)), rows.load(2))
        rows.store(hv, 4)
        out = b.fadd(hv, b.fmul(rows.splat(9), rows.load(6))) if with_c else hv
        rows.store(out, 0)
        return context.get_dummy_value()

    return types.void(y, yo, u, uo, h, ho, c, co, ai, r, width), codegen


@intrinsic
def _bwd_row(typingctx, du, duo, dy, dyo, mu, muo, dc, dco, z, zo, a_next, P, width):
    """``m = dy + a_next·mu``, ``mu ← m``, ``λ = m + P·dc`` (``dc`` ``None``: ``λ = m``),
    ``du ← λ``; returns ``Σ λ·z``."""
    W = _literal(width)
    if W is None:
        return None
    with_dc = not isinstance(dc, types.NoneType)

    def codegen(context, builder, sig, args):
        rows, b = _Rows(context, builder, sig, args, W), builder
        m = b.fadd(rows.load(2), b.fmul(rows.splat(10), rows.load(4)))
        rows.store(m, 4)
        lam = b.fadd(m, b.fmul(rows.splat(11), rows.load(6))) if with_dc else m
        rows.store(lam, 0)
        return _tree_sum(b, b.fmul(lam, rows.load(8)), W)

    return du.dtype(du, duo, dy, dyo, mu, muo, dc, dco, z, zo, a_next, P, width), codegen


@intrinsic
def _scale_row(typingctx, dst, do, src, so, s, width):
    """``dst ← s·src`` (a copy of a row of zeros clears ``dst``)."""
    W = _literal(width)
    if W is None:
        return None

    def codegen(context, builder, sig, args):
        rows = _Rows(context, builder, sig, args, W)
        rows.store(builder.fmul(rows.splat(4), rows.load(2)), 0)
        return context.get_dummy_value()

    return types.void(dst, do, src, so, s, width), codegen


@intrinsic
def _dot_row(typingctx, x, xo, z, zo, width):
    """``Σ x·z`` over one row."""
    W = _literal(width)
    if W is None:
        return None

    def codegen(context, builder, sig, args):
        rows = _Rows(context, builder, sig, args, W)
        return _tree_sum(builder, builder.fmul(rows.load(0), rows.load(2)), W)

    return x.dtype(x, xo, z, zo, width), codegen


#: Rows of at most this many bytes take the vector path (one to four 64-byte vectors);
#: wider channel ranges, and widths whose rows are not a whole number of 16-byte lanes,
#: take the loops.
VECTOR_MAX_BYTES = 256


def vector_width_ok(width: int, itemsize: int) -> bool:
    nbytes = width * itemsize
    return 0 < nbytes <= VECTOR_MAX_BYTES and nbytes % 16 == 0


@numba.njit(cache=True, nogil=True)
def _aligned_zeros(n, like):  # pragma: no cover - compiled
    """``n`` zeros of ``like``'s dtype starting on a 64-byte boundary. The kernels keep their
    per-channel state in such rows and load and store it once per token: numba's own arrays
    are 32-byte aligned, and a 64-byte row that straddles two cache lines turns every token's
    store-then-load of the state into a slow split access."""
    per = max(1, 64 // like.itemsize)
    buf = np.zeros(n + per, dtype=like.dtype)
    skip = ((-buf.ctypes.data) % 64) // like.itemsize
    return buf[skip:skip + n]


_vector_cache: dict[int, tuple] = {}
_vector_lock = threading.Lock()


def _vector_kernels(width: int) -> tuple:
    """The four kernels with each token's row of ``width`` channels (``d1 − d0``) done as one
    vector operation: ``(forward, backward, scan_forward, scan_backward)``, taking the loop
    kernels' arguments. ``width`` is a compile-time constant of the kernels (a closure
    variable: numba compiles and caches one set per width)."""
    with _vector_lock:
        if width not in _vector_cache:
            _vector_cache[width] = _make_vector_kernels(width)
        return _vector_cache[width]


def _make_vector_kernels(width: int) -> tuple:
    @numba.njit(cache=True, nogil=True)
    def forward(a, u, block, y, carry, h0, h1, d0, d1):  # pragma: no cover - compiled
        """:func:`_forward_kernel` by rows. The local state of block ``t`` lives in its
        carrier row ``carry[n, t]`` (so a block's end leaves its carrier in place), the
        previous block's carrier is read from the row before (zeros before block 0)."""
        length = u.shape[1]
        dim = u.shape[2]
        n_blocks = carry.shape[1]
        uf = u.reshape(u.size)
        yf = y.reshape(y.size)
        cf = carry.reshape(carry.size)
        one = np.ones(1, dtype=u.dtype)[0]
        zeros = _aligned_zeros(width, u)
        outside = 0
        for n in range(h0, h1):
            base = n * length * dim + d0
            for t in range(n_blocks):
                s = t * block
                e = min(s + block, length)
                ho = (n * n_blocks + t) * dim + d0
                _scale_row(cf, ho, zeros, 0, one, width)  # the block starts from zero
                r = one
                for i in range(s, e):
                    ai = a[n, i]
                    if not (ai > 0 and ai <= 1):
                        outside += 1
                    r = r * ai
                    off = base + i * dim
                    if t > 0:
                        _fwd_row(yf, off, uf, off, cf, ho, cf, ho - dim, ai, r, width)
                    else:
                        _fwd_row(yf, off, uf, off, cf, ho, zeros, 0, ai, r, width)
        return outside

    @numba.njit(cache=True, nogil=True)
    def backward(a, y, carry, dy, block, du, da, h0, h1, d0, d1):  # pragma: no cover
        """:func:`_backward_kernel` by rows."""
        length = y.shape[1]
        dim = y.shape[2]
        n_blocks = (length + block - 1) // block
        n_carry = carry.shape[1]
        yf = y.reshape(y.size)
        dyf = dy.reshape(dy.size)
        duf = du.reshape(du.size)
        cf = carry.reshape(carry.size)
        one = np.ones(1, dtype=y.dtype)[0]
        zero = one - one
        gbuf = np.empty(block + 1, dtype=y.dtype)  # gbuf[k] = a_s⋯a_{s+k−1} (gbuf[0] = 1)
        state = _aligned_zeros(3 * width, y)       # μ, dc (the carrier's adjoint), zeros
        mo, dco, zo = 0, width, 2 * width
        for n in range(h0, h1):
            _scale_row(state, dco, state, zo, one, width)  # the last carrier feeds nothing
            base = n * length * dim + d0
            for t in range(n_blocks - 1, -1, -1):
                s = t * block
                e = min(s + block, length)
                gbuf[0] = one
                for k in range(e - s):
                    gbuf[k + 1] = gbuf[k] * a[n, s + k]
                co = (n * n_carry + t - 1) * dim + d0  # the previous block's carrier
                kappa = _dot_row(state, dco, cf, co, width) if t > 0 else zero
                _scale_row(state, mo, state, zo, one, width)
                P = one
                a_next = one
                for i in range(e - 1, s, -1):
                    P = a_next * P
                    off = base + i * dim
                    acc = _bwd_row(duf, off, dyf, off, state, mo, state, dco, yf, off - dim,
                                   a_next, P, width)
                    da[n, i] = acc - gbuf[i - s] * P * kappa
                    a_next = a[n, i]
                P = a_next * P
                off = base + s * dim
                if t > 0:
                    acc = _bwd_row(duf, off, dyf, off, state, mo, state, dco, cf, co,
                                   a_next, P, width)
                else:
                    acc = _bwd_row(duf, off, dyf, off, state, mo, state, dco, state, zo,
                                   a_next, P, width)
                da[n, s] = acc - P * kappa
                _scale_row(state, dco, state, mo, a[n, s], width)  # dc_{t−1} = a_s·μ_s

    @numba.njit(cache=True, nogil=True)
    def scan_forward(a, u, y, h0, h1, d0, d1):  # pragma: no cover - compiled
        """:func:`_scan_forward_kernel` by rows."""
        length = u.shape[1]
        dim = u.shape[2]
        uf = u.reshape(u.size)
        yf = y.reshape(y.size)
        one = np.ones(1, dtype=u.dtype)[0]
        h = _aligned_zeros(2 * width, u)  # the state, zeros
        outside = 0
        for n in range(h0, h1):
            _scale_row(h, 0, h, width, one, width)
            base = n * length * dim + d0
            for i in range(length):
                ai = a[n, i]
                if not (ai > 0 and ai <= 1):
                    outside += 1
                off = base + i * dim
                _fwd_row(yf, off, uf, off, h, 0, None, 0, ai, ai, width)
        return outside

    @numba.njit(cache=True, nogil=True)
    def scan_backward(a, y, dy, du, da, h0, h1, d0, d1):  # pragma: no cover - compiled
        """:func:`_scan_backward_kernel` by rows."""
        length = y.shape[1]
        dim = y.shape[2]
        yf = y.reshape(y.size)
        dyf = dy.reshape(dy.size)
        duf = du.reshape(du.size)
        one = np.ones(1, dtype=y.dtype)[0]
        zero = one - one
        state = _aligned_zeros(2 * width, y)  # μ, zeros
        for n in range(h0, h1):
            _scale_row(state, 0, state, width, one, width)
            a_next = one
            base = n * length * dim + d0
            for i in range(length - 1, 0, -1):
                off = base + i * dim
                da[n, i] = _bwd_row(duf, off, dyf, off, state, 0, None, 0, yf, off - dim,
                                    a_next, one, width)
                a_next = a[n, i]
            _bwd_row(duf, base, dyf, base, state, 0, None, 0, state, width, a_next, one, width)
            da[n, 0] = zero  # y_{−1} = 0

    return forward, backward, scan_forward, scan_backward


@numba.njit(cache=True, nogil=True)
def _forward_kernel(a, u, block, y, carry, h0, h1, d0, d1):  # pragma: no cover - compiled
    """Heads ``h0:h1``, channels ``d0:d1``: writes ``y`` and the block end states ``carry``;
    returns how many ``a`` lie outside (0, 1]."""
    length = u.shape[1]
    width = d1 - d0
    one = np.ones(1, dtype=u.dtype)[0]
    outside = 0
    h = np.zeros(width, dtype=u.dtype)
    c_prev = np.zeros(width, dtype=u.dtype)
    for n in range(h0, h1):
        h[:] = 0
        c_prev[:] = 0
        r = one
        k = 0
        t = 0
        for i in range(length):
            ai = a[n, i]
            if not (ai > 0 and ai <= 1):
                outside += 1
            r = r * ai
            ui = u[n, i, d0:d1]
            yi = y[n, i, d0:d1]
            for d in range(width):
                hd = ai * h[d] + ui[d]
                h[d] = hd
                yi[d] = hd + r * c_prev[d]
            k += 1
            if k == block:
                carry[n, t, d0:d1] = h
                c_prev[:] = h
                h[:] = 0
                r = one
                k = 0
                t += 1
    return outside


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def _backward_kernel(a, y, carry, dy, block, du, da, h0, h1, d0, d1):  # pragma: no cover
    """Heads ``h0:h1``, channels ``d0:d1``: writes ``du`` and this channel range's part of
    ``da`` (the whole of it when ``d0:d1`` spans every channel). ``fastmath`` lets the
    channel sums be vectorised (reassociated); nothing else is approximated."""
    length = y.shape[1]
    width = d1 - d0
    n_blocks = (length + block - 1) // block
    one = np.ones(1, dtype=y.dtype)[0]
    zero = one - one
    gbuf = np.empty(block + 1, dtype=y.dtype)  # gbuf[k] = a_s⋯a_{s+k−1} (gbuf[0] = 1)
    mu = np.empty(width, dtype=y.dtype)
    dc = np.empty(width, dtype=y.dtype)        # adjoint of this block's carrier
    c_prev = np.empty(width, dtype=y.dtype)    # the previous block's carrier
    for n in range(h0, h1):
        dc[:] = 0  # the last block's carrier feeds nothing
        for t in range(n_blocks - 1, -1, -1):
            s = t * block
            e = min(s + block, length)
            gbuf[0] = one
            for k in range(e - s):
                gbuf[k + 1] = gbuf[k] * a[n, s + k]
            if t > 0:
                c_prev[:] = carry[n, t - 1, d0:d1]
            else:
                c_prev[:] = 0
            kappa = zero
            for d in range(width):
                kappa += dc[d] * c_prev[d]
            mu[:] = 0
            P = one
            a_next = one
            for i in range(e - 1, s - 1, -1):
                P = a_next * P
                dyi = dy[n, i, d0:d1]
                dui = du[n, i, d0:d1]
                z = y[n, i - 1, d0:d1] if i > s else c_prev
                acc = zero
                for d in range(width):
                    m = dyi[d] + a_next * mu[d]
                    mu[d] = m
                    lam = m + P * dc[d]
                    dui[d] = lam
                    acc += lam * z[d]
                da[n, i] = acc - gbuf[i - s] * P * kappa
                a_next = a[n, i]
            for d in range(width):
                dc[d] = a_next * mu[d]  # a_s·μ_s


@numba.njit(cache=True, nogil=True)
def _scan_forward_kernel(a, u, y, h0, h1, d0, d1):  # pragma: no cover - compiled
    """The full recurrence ``y_i = a_i·y_{i−1} + u_i`` from ``y_{−1} = 0``, heads ``h0:h1``,
    channels ``d0:d1``; returns how many ``a`` lie outside (0, 1]. The sequential scan a CPU
    user would write: one pass over the sequence, one state per channel, vectorised across
    channels, heads on separate threads."""
    length = u.shape[1]
    width = d1 - d0
    outside = 0
    h = np.zeros(width, dtype=u.dtype)
    for n in range(h0, h1):
        h[:] = 0
        for i in range(length):
            ai = a[n, i]
            if not (ai > 0 and ai <= 1):
                outside += 1
            ui = u[n, i, d0:d1]
            yi = y[n, i, d0:d1]
            for d in range(width):
                hd = ai * h[d] + ui[d]
                h[d] = hd
                yi[d] = hd
    return outside


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def _scan_backward_kernel(a, y, dy, du, da, h0, h1, d0, d1):  # pragma: no cover - compiled
    """The adjoint of :func:`_scan_forward_kernel`, right to left: ``μ_i = dy_i + a_{i+1}·μ_{i+1}``,
    ``du_i = μ_i``, ``da_i = Σ_d μ_i·y_{i−1}`` (``y_{−1} = 0``); this channel range's part of
    ``da``, as in :func:`_backward_kernel`."""
    length = y.shape[1]
    width = d1 - d0
    one = np.ones(1, dtype=y.dtype)[0]
    zero = one - one
    mu = np.empty(width, dtype=y.dtype)
    for n in range(h0, h1):
        mu[:] = 0
        a_next = one
        for i in range(length - 1, 0, -1):
            dyi = dy[n, i, d0:d1]
            dui = du[n, i, d0:d1]
            z = y[n, i - 1, d0:d1]
            acc = zero
            for d in range(width):
                m = dyi[d] + a_next * mu[d]
                mu[d] = m
                dui[d] = m
                acc += m * z[d]
            da[n, i] = acc
            a_next = a[n, i]
        dyi = dy[n, 0, d0:d1]
        dui = du[n, 0, d0:d1]
        for d in range(width):
            dui[d] = dyi[d] + a_next * mu[d]
        da[n, 0] = zero


# -- threads ----------------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] = (0, 0)  # (process id, workers): a forked child builds its own


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_key
    if _pool is None or _pool_key[0] != os.getpid() or _pool_key[1] < workers:
        if _pool is not None and _pool_key[0] == os.getpid():
            _pool.shutdown(wait=False)
        _pool = ThreadPoolExecutor(workers, thread_name_prefix="swr-compiled")
        _pool_key = (os.getpid(), workers)
    return _pool


def plan(n_heads: int, dim: int, itemsize: int, threads: int) -> list[tuple[int, int, int, int]]:
    """The ranges ``(h0, h1, d0, d1)`` one call is split into for ``threads`` threads:
    contiguous head ranges when there are at least as many heads as threads, otherwise channel
    groups of whole cache lines over all heads (one range when the channels fill less than two
    lines)."""
    if threads <= 1:
        return [(0, n_heads, 0, dim)]
    if n_heads >= threads:
        cuts = np.linspace(0, n_heads, threads + 1).round().astype(int)
        return [(int(s), int(e), 0, dim) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]
    per_line = max(1, CACHE_LINE // itemsize)
    lines = -(-dim // per_line)
    groups = min(threads, lines)
    cuts = [min(dim, per_line * round(g * lines / groups)) for g in range(groups + 1)]
    return [(0, n_heads, s, e) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]


def _threads_for(work: int, threads: int | None) -> int:
    if threads is not None:
        return max(1, int(threads))
    return torch.get_num_threads() if work >= MIN_PARALLEL_WORK else 1


def _parallel(kernel, ranges, args_for) -> list:
    """Run ``kernel(*args_for(j, ranges[j]))`` for every range ``j``: the last on this thread,
    the others in the pool; returns the results in order."""
    if len(ranges) == 1:
        return [kernel(*args_for(0, ranges[0]))]
    pool = _executor(len(ranges) - 1)
    futures = [pool.submit(kernel, *args_for(j, r)) for j, r in enumerate(ranges[:-1])]
    last = kernel(*args_for(len(ranges) - 1, ranges[-1]))
    return [f.result() for f in futures] + [last]


# -- output buffers ---------------------------------------------------------------------------
#: Outputs of at least this many bytes come from :func:`_empty`'s recycled buffers. glibc
#: serves smaller allocations from its heap, reusing freed memory, but maps larger ones (above
#: 32 MiB) afresh on every call, and the kernel's page faults and zero-filling of a fresh
#: mapping cost about as much as the SWR pass itself (measured at L = 65536, 16×16 channels:
#: 5.7 ms with a fresh output against 3.3 ms with a reused one).
RECYCLE_MIN_BYTES = 32 << 20
RECYCLE_MAX = 4  # buffers kept
_recycled: list[np.ndarray] = []
_recycle_lock = threading.Lock()


def aligned_empty(shape: tuple, dtype, align: int = CACHE_LINE) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on an ``align``-byte boundary (NumPy's large arrays
    start 16 bytes past a page boundary, so every 64-byte row of the kernels would straddle two
    cache lines)."""
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    raw = np.empty(n * dtype.itemsize + align, np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip:skip + n * dtype.itemsize].view(dtype).reshape(shape)


def _empty(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, reusing a large buffer that no tensor refers to any more.

    A buffer handed out here is wrapped by ``torch.from_numpy``, whose storage holds a
    reference to it for as long as any tensor or view of that storage lives; a buffer whose
    only references are this list's and this function's (``sys.getrefcount`` of 3: the list,
    the local name, the call's argument) is free. At most :data:`RECYCLE_MAX` buffers are kept, the least
    recently handed out dropped first, like a (tiny) caching allocator."""
    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize < RECYCLE_MIN_BYTES:
        return aligned_empty(shape, dtype)
    with _recycle_lock:
        for j in range(len(_recycled)):
            buf = _recycled[j]
            if buf.shape == tuple(shape) and buf.dtype == dtype and sys.getrefcount(buf) == 3:
                _recycled.append(_recycled.pop(j))
                return buf
        buf = aligned_empty(shape, dtype)
        _recycled.append(buf)
        del _recycled[:-RECYCLE_MAX]
        return buf


# -- autograd ---------------------------------------------------------------------------------
def _flat(a: torch.Tensor, u: torch.Tensor):
    B, H, L, D = u.shape
    a_np = a.detach().contiguous().reshape(B * H, L).numpy()
    u_np = u.detach().contiguous().reshape(B * H, L, D).numpy()
    return a_np, u_np


#: Whether the kernels do each token's row with the vector intrinsics (where the width allows,
#: :func:`vector_width_ok`) or with the channel loops; the benchmark times both.
VECTOR_ROWS = True


def _kernel(which: int, loop, use_vector: bool, itemsize: int):
    """A callable taking the loop kernel's arguments (the range last) that runs vector kernel
    ``which`` of :func:`_vector_kernels` on ranges whose width it takes and ``loop`` on the
    others."""
    def run(*args):
        width = args[-1] - args[-2]
        if use_vector and vector_width_ok(width, itemsize):
            return _vector_kernels(width)[which](*args)
        return loop(*args)
    return run


def _use_vector(vector: bool | None) -> bool:
    return VECTOR_ROWS if vector is None else bool(vector)


class SWRCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, block, threads, vector):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        carry = aligned_empty((B * H, -(-L // block), D), u_np.dtype)  # every block's end state
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        kernel = _kernel(0, _forward_kernel, vector, u_np.itemsize)
        outside = _parallel(kernel, ranges, lambda j, r: (a_np, u_np, block, y, carry, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out, torch.from_numpy(carry))
        ctx.block, ctx.threads, ctx.vector = block, threads, vector
        return out

    @staticmethod
    def backward(ctx, dy):
        a, y, carry = ctx.saved_tensors
        B, H, L, D = y.shape
        a_np, y_np = _flat(a, y)
        dy_np = dy.detach().contiguous().reshape(B * H, L, D).numpy()
        carry_np = carry.numpy()
        du = _empty(y_np.shape, y_np.dtype)
        ranges = plan(B * H, D, y_np.itemsize, _threads_for(y_np.size, ctx.threads))
        # head ranges write disjoint rows of one da; channel groups each write a partial da
        split_channels = ranges[0][3] - ranges[0][2] < D
        das = [np.empty_like(a_np) for _ in ranges] if split_channels else [np.empty_like(a_np)]
        kernel = _kernel(1, _backward_kernel, ctx.vector, y_np.itemsize)
        _parallel(kernel, ranges,
                  lambda j, r: (a_np, y_np, carry_np, dy_np, ctx.block, du,
                                das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None, None, None)


class ScanCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, u, threads, vector):
        B, H, L, D = u.shape
        a_np, u_np = _flat(a, u)
        y = _empty(u_np.shape, u_np.dtype)
        ranges = plan(B * H, D, u_np.itemsize, _threads_for(u_np.size, threads))
        kernel = _kernel(2, _scan_forward_kernel, vector, u_np.itemsize)
        outside = _parallel(kernel, ranges, lambda j, r: (a_np, u_np, y, *r))
        if sum(outside):
            raise ValueError("the coefficients a must lie in (0, 1]")
        out = torch.from_numpy(y).reshape(B, H, L, D)
        ctx.save_for_backward(a, out)
        ctx.threads, ctx.vector = threads, vector
        return out

    @staticmethod
    def backward(ctx, dy):
        a, y = ctx.saved_tensors
        B, H, L, D = y.shape
        a_np, y_np = _flat(a, y)
        dy_np = dy.detach().contiguous().reshape(B * H, L, D).numpy()
        du = _empty(y_np.shape, y_np.dtype)
        ranges = plan(B * H, D, y_np.itemsize, _threads_for(y_np.size, ctx.threads))
        split_channels = ranges[0][3] - ranges[0][2] < D
        das = [np.empty_like(a_np) for _ in ranges] if split_channels else [np.empty_like(a_np)]
        kernel = _kernel(3, _scan_backward_kernel, ctx.vector, y_np.itemsize)
        _parallel(kernel, ranges,
                  lambda j, r: (a_np, y_np, dy_np, du, das[j] if split_channels else das[0], *r))
        da = das[0] if len(das) == 1 else np.sum(das, axis=0)
        return (torch.from_numpy(da).reshape(B, H, L), torch.from_numpy(du).reshape(B, H, L, D),
                None, None)


def scan_compiled(a: torch.Tensor, u: torch.Tensor, *, threads: int | None = None,
                  vector: bool | None = None) -> torch.Tensor:
    """The full recurrence as a compiled sequential scan (CPU tensors, ``a`` cast to ``u``'s
    dtype), forward and backward: O(L·D) work, one read of the input and one write of the
    output, heads (or channel groups) on ``threads`` threads and token rows as vectors
    (``vector``) exactly as for :func:`swr_compiled`, so that the two differ only in the
    recurrence they evaluate."""
    if u.device.type != "cpu":
        raise ValueError("the compiled scan runs on CPU tensors only")
    return ScanCompiled.apply(a.to(u.dtype), u, threads, _use_vector(vector))


def swr_compiled(a: torch.Tensor, u: torch.Tensor, block: int, *,
                 threads: int | None = None, vector: bool | None = None) -> torch.Tensor:
    """Compiled streaming SWR (CPU tensors, ``a`` and ``u`` of the same float dtype).

    ``threads``: ``None`` (default) uses ``torch.get_num_threads()`` threads for calls of at
    least :data:`MIN_PARALLEL_WORK` elements and one below; an integer forces that many ranges
    (tests use it to exercise every split on any machine). ``vector``: each token's row of
    channels as one vector operation (the default, :data:`VECTOR_ROWS`) or as the channel
    loops (``False``; the benchmark's "before")."""
    if u.device.type != "cpu":
        raise ValueError("impl='compiled' runs on CPU tensors only")
    return SWRCompiled.apply(a.to(u.dtype), u, block, threads, _use_vector(vector))
