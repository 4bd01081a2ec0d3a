"""The streaming loops of :mod:`kernels.swr.compiled`, compiled by numba: the SWR operator's forward
and backward and the full scan's, each over a range of heads and channels (the threads' unit of
work, :mod:`kernels.swr.compiled.threads`). They are the path for every width and the
benchmark's reference for the vector rows."""

from __future__ import annotations

import numba
import numpy as np


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
