"""**Vector rows.** Each token touches one row of ``W = d1 − d0`` contiguous channels per array.
numba vectorises the channel loops but re-checks, for every token, that the arrays do not
overlap, which costs more than the token's arithmetic (measured at L = 65 536, 16×16 float32:
the loop kernels ran at about 0.7 of the memory roof). Where the row is a whole number of
16-byte lanes and at most :data:`VECTOR_MAX_BYTES` (:func:`vector_width_ok`), the kernels
instead do each row as one LLVM vector operation (intrinsics :func:`_fwd_row`, :func:`_bwd_row`),
with ``W`` a compile-time constant (:func:`_vector_kernels`), the block-local state kept in the
block's carrier row and every buffer on a 64-byte boundary (:func:`aligned_empty`); the loops
stay as the path for other widths and as the benchmark's reference (``vector=False``).
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

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
