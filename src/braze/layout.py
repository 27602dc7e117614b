"""Memory layout as NumPy would have it: element strides of traced values.

A traced array has no memory, but NumPy semantics depend on the memory its
value would have: ``reshape``/``ravel`` return a view only when no copy is
needed, and a write through a view reaches its base while a write through a
copy does not. Tracing therefore follows, for each value, the element
strides NumPy would give it (``None``: not modelled; such a value is never
written through a reshape of it, see ``braze.tracing``):

* arguments: their actual strides (part of the cache key when not C order);
* views (slices, transposes, reshapes that need no copy, broadcasts): the
  same arithmetic NumPy does;
* new arrays from ufuncs, reductions, ``astype`` and ``np.copy``: NumPy's
  ``order='K'`` rule (``k_order``: the operands' memory order, C order
  winning ties and conflicts); from ``ndarray.copy``, ``matmul`` and
  constructors: C order.
"""
from __future__ import annotations

import math

import numpy as np

Strides = tuple  # element strides, one per dimension (may be 0 or negative)


def c_strides(shape) -> Strides:
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def of_array(a) -> Strides | None:
    """Element strides of a NumPy array (None when a stride is not a whole
    number of elements, as in a view of a structured array)."""
    item = a.itemsize
    if item == 0 or any(s % item for s in a.strides):
        return None
    return tuple(s // item for s in a.strides)


def is_c_contiguous(shape, strides) -> bool:
    """NumPy's rule: dimensions of size 1 do not count; an empty array is contiguous."""
    if strides is None:
        return False
    if any(d == 0 for d in shape):
        return True
    step = 1
    for d, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if d != 1:
            if s != step:
                return False
            step *= d
    return True


def is_f_contiguous(shape, strides) -> bool:
    if strides is None:
        return False
    return is_c_contiguous(tuple(reversed(tuple(shape))), tuple(reversed(tuple(strides))))


def permuted(strides: Strides | None, perm) -> Strides | None:
    return None if strides is None else tuple(strides[p] for p in perm)


def sliced(strides: Strides | None, slices) -> Strides | None:
    """Strides after ``x[start:stop:step]`` per axis."""
    return None if strides is None else tuple(s * step for s, (_, _, step) in zip(strides, slices))


def broadcast(strides: Strides | None, shape, new_shape) -> Strides | None:
    """Strides of ``np.broadcast_to``: 0 on new and stretched dimensions."""
    if strides is None:
        return None
    lead = len(new_shape) - len(shape)
    out = [0] * lead
    for d, n, s in zip(shape, new_shape[lead:], strides):
        out.append(s if d == n else 0)
    return tuple(out)


def reshaped(shape, strides: Strides | None, new_shape) -> Strides | None:
    """The strides of ``x.reshape(new_shape)`` if NumPy returns a view, else
    None (NumPy copies). NumPy's ``_attempt_nocopy_reshape`` for C order."""
    shape, new_shape = tuple(shape), tuple(new_shape)
    if strides is None:
        return None
    size = math.prod(int(d) for d in shape)
    if size == 0 or is_c_contiguous(shape, strides):
        return c_strides(new_shape)
    # drop dimensions of size 1 (their strides do not matter)
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    odims = [d for d, _ in old]
    ostrides = [s for _, s in old]
    nd = len(new_shape)
    newstrides = [0] * nd
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < nd and oi < len(odims):
        np_, op_ = new_shape[ni], odims[oi]
        while np_ != op_:
            if np_ < op_:
                np_ *= new_shape[nj]
                nj += 1
            else:
                op_ *= odims[oj]
                oj += 1
        for ok in range(oi, oj - 1):  # the old axes being merged must be contiguous among themselves
            if ostrides[ok] != odims[ok + 1] * ostrides[ok + 1]:
                return None
        newstrides[nj - 1] = ostrides[oj - 1]
        for nk in range(nj - 1, ni, -1):
            newstrides[nk - 1] = newstrides[nk] * new_shape[nk]
        ni, nj = nj, nj + 1
        oi, oj = oj, oj + 1
    # trailing new dimensions (of size 1) take any stride
    last = newstrides[ni - 1] if ni >= 1 else 1
    for nk in range(ni, nd):
        newstrides[nk] = last
    return tuple(newstrides)


def k_order(shape, operands) -> Strides:
    """The strides NumPy gives a new array of ``shape`` computed from
    ``operands`` (their strides, broadcast to ``shape``; None entries are
    ignored) with ``order='K'``: ``npyiter_find_best_axis_ordering``, a stable
    insertion sort of the axes by stride magnitude in which C order wins
    ambiguities and conflicts between operands."""
    shape = tuple(shape)
    ndim = len(shape)
    ops = []
    for strides in operands:
        if strides is None:
            continue
        strides = tuple(strides)
        lead = ndim - len(strides)
        if lead < 0:
            continue
        full = (0,) * lead + strides
        # size-1 dimensions do not take part (the iterator zeroes their strides)
        ops.append(tuple(0 if shape[i] == 1 else full[i] for i in range(ndim)))
    if not ops:
        return c_strides(shape)
    # iterator axes are reversed array axes: perm[0] is the fastest varying
    perm = list(range(ndim))
    axis = lambda it: ndim - 1 - it  # noqa: E731
    for i0 in range(1, ndim):
        ipos = i0
        j0 = perm[i0]
        for i1 in range(i0 - 1, -1, -1):
            ambiguous, swap = True, False
            j1 = perm[i1]
            for op in ops:
                s0, s1 = op[axis(j0)], op[axis(j1)]
                if s0 != 0 and s1 != 0:
                    if abs(s1) <= abs(s0):
                        swap = False
                    elif ambiguous:
                        swap = True
                    ambiguous = False
            if not ambiguous:
                if swap:
                    ipos = i1
                else:
                    break
        if ipos != i0:
            perm[ipos + 1:i0 + 1] = perm[ipos:i0]
            perm[ipos] = j0
    out = [0] * ndim
    step = 1
    for it in perm:  # fastest first
        a = axis(it)
        out[a] = step
        step *= max(shape[a], 1)
    return tuple(out)


def laid_out(value: np.ndarray, strides: Strides, limit: int = 1 << 26):
    """A copy of ``value`` whose strides (in elements) are ``strides``, in a new
    buffer spanning the elements they reach; None when that span is over
    ``limit`` bytes (a column of a large matrix) or has no room (overlaps)."""
    shape = value.shape
    if value.size == 0 or len(strides) != len(shape):
        return None
    low = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0)
    high = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0)
    if (high - low + 1) * value.itemsize > max(limit, 4 * value.nbytes):
        return None
    if any(s == 0 for s, n in zip(strides, shape) if n > 1):
        return None  # (a broadcast layout: several indices are one element)
    buf = np.empty(high - low + 1, value.dtype)
    out = np.lib.stride_tricks.as_strided(buf[-low:], shape, tuple(s * value.itemsize for s in strides))
    out[...] = value
    return out


def describe(shape, strides) -> str:
    """'C', 'F', 'CF' or the strides, for cache keys and messages."""
    if strides is None:
        return "?"
    flags = ("C" if is_c_contiguous(shape, strides) else "") + ("F" if is_f_contiguous(shape, strides) else "")
    return flags or str(tuple(strides))
