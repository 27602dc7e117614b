"""NumPy-semantics cases shared by the differential suites (``tests/test_views_aliases.py``
on generic and cpu, ``tests/cuda/test_cuda_views_aliases.py`` on the simulator).

NumPy is the oracle: each case runs the same function on copies of the same
arguments with NumPy and with braze, and compares the results *and* the
arguments afterwards (writes through views and aliases must reach them), as
well as dtype, shape, NumPy scalar versus 0-d array, ``flags.writeable``,
contiguity, and whether a result shares memory with an argument.
"""
from __future__ import annotations

import warnings

import numpy as np

import braze

# ---------------------------------------------------------------- comparison


def describe(value, args) -> tuple:
    """What must match between NumPy's result and braze's (values aside)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(describe(v, args) for v in value))
    if isinstance(value, np.ndarray):
        shares = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray) and np.shares_memory(value, a))
        flags = value.flags
        return ("ndarray", value.dtype, value.shape, flags.writeable, flags.c_contiguous, flags.f_contiguous, shares)
    return (type(value).__name__, np.asarray(value).dtype)


def same_values(got, want) -> bool:
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(same_values(g, w) for g, w in zip(got, want))
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return False
    if w.dtype.kind == "f":
        return np.allclose(g, w, rtol=1e-12, atol=0, equal_nan=True)
    return np.array_equal(g, w)


def run_both(fn, make_args, target):
    """(NumPy's (result, args after), braze's (result, args after)); an exception stands for a result."""
    out = []
    for runner in (fn, braze.compile(fn, target=target)):
        args = make_args()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                result = runner(*args)
            except Exception as exc:
                result = exc
        out.append((result, args))
    return out


def check(fn, make_args, target):
    (want, want_args), (got, got_args) = run_both(fn, make_args, target)
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"NumPy raised {want!r}, braze returned {got!r}"
        assert isinstance(got, braze.BrazeError) or isinstance(got, type(want)), f"{got!r} for NumPy's {want!r}"
        return
    if isinstance(got, Exception):
        raise AssertionError(f"NumPy returned {want!r}, braze raised {got!r}") from got
    assert same_values(got, want), f"result {got!r} != NumPy's {want!r}"
    assert describe(got, got_args) == describe(want, want_args), (
        f"result {describe(got, got_args)} != NumPy's {describe(want, want_args)}")
    for k, (g, w) in enumerate(zip(got_args, want_args)):
        assert same_values(g, w), f"argument {k} after the call: {g!r} != NumPy's {w!r}"


# ---------------------------------------------------------------- views written through

def _arr():
    return (np.arange(6.0).reshape(2, 3),)


VIEW_FUNCTIONS = {
    "T": lambda a: a.T,
    "transpose": lambda a: a.transpose(),
    "np.transpose": lambda a: np.transpose(a, (1, 0)),
    "swapaxes": lambda a: np.swapaxes(a, 0, 1),
    "moveaxis": lambda a: np.moveaxis(a, 0, 1),
    "reshape": lambda a: a.reshape(3, 2),
    "reshape_F": lambda a: a.reshape(3, 2, order="F"),
    "ravel": lambda a: a.ravel(),
    "ravel_F_copy": lambda a: a.ravel("F"),
    "T_ravel_copy": lambda a: a.T.ravel(),
    "flatten_copy": lambda a: a.flatten(),
    "squeeze": lambda a: a[:1].squeeze(),
    "expand_dims": lambda a: np.expand_dims(a, 0),
    "view": lambda a: a.view(),
    "real": lambda a: a.real,
    "basic_slice": lambda a: a[1:],
    "column": lambda a: a[:, 1],
    "ellipsis": lambda a: a[..., 1:],
    "newaxis": lambda a: a[None],
    "negative_step": lambda a: a[::-1, ::-2],
    "atleast_2d": lambda a: np.atleast_2d(a),
    "atleast_3d": lambda a: np.atleast_3d(a),
    "split_piece": lambda a: np.split(a, 3, axis=1)[1],
    "array_split_piece": lambda a: np.array_split(a, 2, axis=1)[1],
    "hsplit_piece": lambda a: np.hsplit(a, 3)[2],
    "view_of_view": lambda a: a.T[1:].reshape(-1),
    "copy": lambda a: a.copy(),
    "fancy_copy": lambda a: a[[1, 0]],
    "broadcast_to": lambda a: np.broadcast_to(a, (2, 2, 3)),
    "diagonal": lambda a: np.diagonal(a),
}


def write_through(view_fn):
    def f(a):
        v = view_fn(a)
        v[(0,) * v.ndim] = 9.0
        v[(-1,) * v.ndim] += 1.0
        return a.sum(), v
    return f


def read_after_base_write(view_fn):
    def f(a):
        v = view_fn(a)
        a[0, 0] = -5.0
        a *= 2.0
        return v * 1.0
    return f


# ---------------------------------------------------------------- aliasing arguments


def _double_and_add(x, y):
    x *= 2.0
    return x + y


def _assign_from(x, y):
    x[...] = y * 3.0 + x
    return x.sum() + y.sum()


def _is(x, y):
    return x is y


def _stencil_step(u, un):
    un[1:-1] = u[1:-1] + 0.25 * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return un


def _out_alias(x, y):
    np.add(x, y, out=x)
    return x


ALIAS_FUNCTIONS = {"double_and_add": _double_and_add, "assign_from": _assign_from, "is": _is,
                   "stencil_step": _stencil_step, "out_alias": _out_alias}

ALIAS_PATTERNS = {
    "same_array": lambda a: (a, a),
    "overlapping": lambda a: (a[1:], a[:-1]),
    "shifted_by_two": lambda a: (a[2:], a[:-2]),
    "interleaved_disjoint": lambda a: (a[::2], a[1::2]),
    "reversed": lambda a: (a, a[::-1]),
    "view_and_base": lambda a: (a[:4], a[2:6]),
    "reshaped_base": lambda a: (a.reshape(2, 3)[0], a[:3]),
}


def alias_args(pattern):
    def make():
        a = np.arange(6.0)
        return ALIAS_PATTERNS[pattern](a)
    return make


# ---------------------------------------------------------------- dtype= on reductions and scans

DTYPE_REDUCTIONS = {
    "sum": lambda a, dt: a.sum(dtype=dt),
    "sum_axis": lambda a, dt: np.sum(a, axis=0, dtype=dt),
    "prod": lambda a, dt: a.prod(dtype=dt),
    "mean": lambda a, dt: a.mean(dtype=dt),
    "std": lambda a, dt: np.std(a, dtype=dt),
    "var": lambda a, dt: a.var(axis=1, dtype=dt),
    "cumsum": lambda a, dt: np.cumsum(a, dtype=dt),
    "cumprod": lambda a, dt: a.cumprod(axis=1, dtype=dt),
    "add_reduce": lambda a, dt: np.add.reduce(a, dtype=dt),
    "multiply_reduce": lambda a, dt: np.multiply.reduce(a, axis=1, dtype=dt),
    "add_accumulate": lambda a, dt: np.add.accumulate(a, dtype=dt),
    "maximum_accumulate": lambda a, dt: np.maximum.accumulate(a, axis=1, dtype=dt),
    "minimum_accumulate": lambda a, dt: np.minimum.accumulate(a, dtype=dt),
}
DTYPE_INPUTS = {
    "int32": lambda: np.arange(1, 7, dtype=np.int32).reshape(2, 3) * 3,
    "bool": lambda: np.array([[True, False, True], [True, True, False]]),
    "int8": lambda: np.array([[100, 100, 100], [-100, 50, 7]], dtype=np.int8),
    "float32": lambda: np.linspace(-2, 3, 6, dtype=np.float32).reshape(2, 3),
}
DTYPES = (None, np.int32, np.int16, np.float32, np.float64)
