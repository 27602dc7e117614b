"""Hand-written ``cpu`` kernels for the ``braze.nn`` composites.

A kernel is registered here only where it beats the fused body by at least
1.2x in ``bench/test_library.py`` (same run, this machine); elsewhere the
generated kernel is as fast and none is registered:

* softmax, log_softmax, logsumexp, layer_norm, rms_norm: the body already
  fuses into one row kernel with one pass per reduction stage over each
  row while it is in cache (and softmax stores exp(x - max) instead of
  recomputing it); a single-pass "online" softmax or Welford layer norm
  trades those cheap in-cache passes for more arithmetic per element.
* gelu, sigmoid, silu: one elementwise loop with the vectorized exp/tanh.
* attention: two BLAS matmuls around a fused softmax row kernel.
* softmax_cross_entropy: the body becomes two kernels and a NumPy gather;
  ``xent_cpu`` does the row max, the sum of exponentials, the pick of the
  label's logit and the mean in one pass over each row (see the bench).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

import braze

from braze.targets import cpu_math as vm
from braze.targets import cpu_runtime as rt

_FLAGS = dict(fastmath={"reassoc", "contract", "nsz"}, error_model="numpy", cache=True, nogil=True)


def _xent_rows(exp):
    @njit(parallel=True, **_FLAGS)
    def rows(logits, labels, out, bad):
        n, c = logits.shape
        for i in prange(n):
            label = labels[i]
            if label < 0 or label >= c:
                bad[0] = 1
                out[i] = np.nan
                continue
            m = logits[i, 0]
            nan = False
            for j in range(c):
                v = logits[i, j]
                m = v if v > m else m
                nan = nan | (v != v)
            s = 0.0
            for j in range(c):
                s += exp(logits[i, j] - m)
            out[i] = (m + np.log(s)) - logits[i, label] if not nan else np.nan
        return out

    return rows


_rows_f32 = _xent_rows(vm.exp_f32)
_rows_f64 = _xent_rows(vm.exp_f64)


def _accepts(logits, labels):
    return (logits.ndim == 2 and labels.ndim == 1 and logits.shape[0] == labels.shape[0]
            and logits.shape[1] > 0 and logits.dtype in (np.float32, np.float64)
            and np.dtype(labels.dtype).kind in "iu")


@braze.register_kernel("braze.nn.softmax_cross_entropy", "cpu", priority=10, when=_accepts,
                       abstract=lambda logits, labels: ((), logits.dtype))
def xent_cpu(logits, labels):
    """Mean softmax cross-entropy of (N, C) logits and (N,) integer labels, one
    pass per row; a label outside [0, C) is an IndexError, as in NumPy."""
    rows = _rows_f32 if logits.dtype == np.float32 else _rows_f64
    out = np.empty(logits.shape[0], np.float64)
    bad = np.zeros(1, np.int8)
    rows(logits, labels, out, bad)
    if bad[0]:
        raise IndexError(f"a label is outside [0, {logits.shape[1]}) for logits of shape {logits.shape}")
    return logits.dtype.type(out.mean()) if out.size else logits.dtype.type(np.nan)


del rt
