"""Host calls and ops the cpu target runs faster than NumPy, with NumPy's results.

A call braze has no rule for is a graph break (``HostCall``): the program
runs it as NumPy would. Where the cpu target knows an exact, faster way to
compute the same NumPy function on the arguments it is given, its program
calls that instead (``faster``); on any other arguments it calls NumPy. The
``generic`` target always calls NumPy (it needs no compiler).

``np.unique`` of integers or booleans (``axis=None``) whose range is at most a
few times their number (keys, labels, categories: the group-by idiom
``uniq, inverse = np.unique(keys, return_inverse=True)``) is a tally: one pass
counts each value (and notes its first position), one pass over the range
ranks the values present, one pass maps each element to its rank. NumPy sorts
(n log n); the tally is linear, and its results are NumPy's exactly: the
values present in ascending order, the first index of each, the inverse (in
NumPy's shape for it), and the counts, all ``intp``.

Ops: ``scatter_add`` (``np.add.at``, ``np.bincount``, a gather's gradient) of
rows by one index array, values of the array's dtype, is a compiled loop
adding each row where its index says, in the index's order: NumPy's order,
so NumPy's sums bit for bit (``np.add.at`` is 1.5-2x slower on a million
indices). An index out of range sends the call to NumPy, which raises its
``IndexError``.
"""
from __future__ import annotations

import copy

import numpy as np
from numba import njit

from braze.core import NUMPY_IMPL

# the tally's table is as long as the range of the values: at most this many times their number (plus a little)
SPAN_PER_ELEMENT = 4
SPAN_EXTRA = 1 << 16
# below this many elements NumPy's sort is as fast as anything (and needs no compiled helper)
UNIQUE_MIN = 1 << 14

# NumPy >= 2 gives ``return_inverse`` the input's shape for axis=None (2.0.1+), older ones a flat array
_INVERSE_SHAPED = np.unique(np.zeros((2, 2), np.int8), return_inverse=True)[1].shape == (2, 2)


@njit(cache=True, nogil=True, error_model="numpy")
def _tally(flat, lo, span, want_first):
    """(count of each value lo + k, its first position (or -1), rank among those present, how many present)."""
    counts = np.zeros(span, np.intp)
    first = np.full(span if want_first else 0, -1, np.intp)
    for i in range(flat.size):
        k = np.intp(flat[i] - lo)
        if want_first and counts[k] == 0:
            first[k] = i
        counts[k] += 1
    rank = np.empty(span, np.intp)
    r = 0
    for k in range(span):
        rank[k] = r
        if counts[k]:
            r += 1
    return counts, first, rank, r


@njit(cache=True, nogil=True, error_model="numpy")
def _ranks(flat, lo, rank):
    inverse = np.empty(flat.size, np.intp)
    for i in range(flat.size):
        inverse[i] = rank[np.intp(flat[i] - lo)]
    return inverse


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, **kwargs):
    """``np.unique``, by a tally where that is exact and faster (see the module docstring)."""
    a = ar if type(ar) is np.ndarray else None
    if (a is None or axis is not None or a.dtype.kind not in "iub" or a.size < UNIQUE_MIN
            or kwargs.get("sorted", True) is not True or set(kwargs) - {"equal_nan", "sorted"}):
        return np.unique(ar, return_index=return_index, return_inverse=return_inverse,
                         return_counts=return_counts, axis=axis, **kwargs)
    flat = a.reshape(-1)  # (a copy only if it is not contiguous)
    if flat.dtype == np.bool_:
        flat = flat.view(np.uint8)
    lo, hi = flat.min(), flat.max()
    span = int(hi) - int(lo) + 1
    if span > SPAN_PER_ELEMENT * flat.size + SPAN_EXTRA:
        return np.unique(ar, return_index=return_index, return_inverse=return_inverse,
                         return_counts=return_counts, axis=axis, **kwargs)
    counts, first, rank, _ = _tally(flat, lo, span, return_index)
    present = np.flatnonzero(counts)
    # (an offset past the dtype's range, 200 as int8, wraps, and adding lo wraps it back: each is lo + offset <= hi)
    values = (present.astype(flat.dtype) + lo).astype(a.dtype)
    out = [values]
    if return_index:
        out.append(first[present])
    if return_inverse:
        inverse = _ranks(flat, lo, rank)
        out.append(inverse.reshape(a.shape) if _INVERSE_SHAPED else inverse)
    if return_counts:
        out.append(counts[present])
    return out[0] if len(out) == 1 else tuple(out)


@njit(inline="always")
def _row(k, n):
    """The row index ``k`` names (NumPy's: a negative one counts from the end), or -1 if there is none."""
    if k < 0:
        k += n
    return k if 0 <= k < n else -1


@njit(cache=True, nogil=True, error_model="numpy")
def _add_elements(out, idx, v):
    """``out[idx[i]] += v[i]`` for each i in order; -1, or the first i whose index is out of range."""
    for i in range(idx.shape[0]):
        k = _row(idx[i], out.shape[0])
        if k < 0:
            return i
        out[k] += v[i]
    return -1


@njit(cache=True, nogil=True, error_model="numpy")
def _add_rows(out, idx, v):
    """``_add_elements`` for rows of several elements (2-d ``out`` and ``v``): the
    indices checked first (a row's adds are the loop, not a check per row)."""
    n = out.shape[0]
    for i in range(idx.shape[0]):
        if _row(idx[i], n) < 0:
            return i
    for i in range(idx.shape[0]):
        k = _row(idx[i], n)
        for j in range(out.shape[1]):  # (not out[k] += v[i]: numba makes a temporary row)
            out[k, j] += v[i, j]
    return -1


# the dtypes the compiled loop adds (as NumPy: integers wrap, floats round once per add)
_ADDED = frozenset(np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                         "float32", "float64"))
# below this many indices np.add.at is as fast (and needs no compiled helper)
SCATTER_MIN = 1 << 12


def scatter_add(x, v, *idx, axes):
    """The ``scatter_add`` op: NumPy's ``np.add.at`` on a copy of ``x``, by a compiled loop where it is the same."""
    i = idx[0] if len(idx) == 1 else None
    if (len(idx) != 1 or axes != (0,) or type(x) is not np.ndarray or type(i) is not np.ndarray or i.ndim != 1
            or i.dtype.kind != "i" or x.dtype not in _ADDED or np.dtype(getattr(v, "dtype", None)) != x.dtype
            or i.size < SCATTER_MIN or x.size == 0):
        return NUMPY_IMPL["scatter_add"](x, v, *idx, axes=axes)
    out = np.array(x, copy=True)
    values = np.broadcast_to(v, (i.size,) + x.shape[1:])
    if x.ndim == 1:
        bad = _add_elements(out, i, values)
    else:
        rows = out.reshape(out.shape[0], -1)
        bad = _add_rows(rows, i, values.reshape(i.size, rows.shape[1]))
    if bad >= 0:
        return NUMPY_IMPL["scatter_add"](x, v, *idx, axes=axes)  # (NumPy's IndexError)
    return out


FASTER = {np.unique: unique}
OPS = {"scatter_add": scatter_add}


def impl(op: str):
    """The function the cpu target runs for an op outside its kernels."""
    return OPS.get(op) or NUMPY_IMPL[op]


def faster(kw: dict) -> dict:
    """A ``host_call`` step's parameters, calling the faster exact function for
    its NumPy function where there is one."""
    call = kw.get("call")
    fast = FASTER.get(getattr(call, "fn", None))
    if fast is None:
        return kw
    twin = copy.copy(call)
    twin.fn = fast
    return {**kw, "call": twin}
