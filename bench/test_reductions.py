"""Argmax / argmin and reductions over the leading axis: braze against NumPy
and a hand-written ``numba.njit(parallel=True)`` loop (the peer's exact
version: no fastmath, NumPy's first-NaN rule), GB/s against the triad of
the same run.

    python -m pytest bench/test_reductions.py --benchmark-only

What it shows: the whole-array argmax reduces in 256 lanes, the row argmin
compares only and reads a row with a NaN again, the column reductions keep
one accumulator per column (cpu_codegen's ``_lanes_loop``, ``_nan_rerun``,
``_columns_body``).
"""
import numpy as np
import pytest

import braze
from braze.targets import cpu_cache

numba = pytest.importorskip("numba")
prange = numba.prange


@numba.njit(parallel=True, cache=True)
def _argmax_numba(x):
    n = x.size
    chunks = 64
    step = (n + chunks - 1) // chunks
    best_i = np.zeros(chunks, np.int64)
    best_v = np.full(chunks, -np.inf)
    for c in prange(chunks):
        lo, hi = c * step, min(n, (c + 1) * step)
        bi, bv = lo, -np.inf
        for i in range(lo, hi):
            v = x[i]
            if v != v:  # the first NaN wins
                bi, bv = i, v
                break
            if v > bv:
                bi, bv = i, v
        best_i[c], best_v[c] = bi, bv
    out, ov = best_i[0], best_v[0]
    for c in range(1, chunks):
        if ov != ov:
            break
        if best_v[c] != best_v[c] or best_v[c] > ov:
            out, ov = best_i[c], best_v[c]
    return out


@numba.njit(parallel=True, cache=True)
def _row_argmin_numba(d):
    n, k = d.shape
    out = np.empty(n, np.int64)
    for i in prange(n):
        b, bv = 0, np.inf
        for j in range(k):
            v = d[i, j]
            if v != v:
                b = j
                break
            if v < bv:
                b, bv = j, v
        out[i] = b
    return out


@numba.njit(parallel=True, cache=True)
def _abs_colmax_numba(x):
    n, k = x.shape
    chunks = 16
    step = (n + chunks - 1) // chunks
    part = np.full((chunks, k), -np.inf)
    for c in prange(chunks):
        for i in range(c * step, min(n, (c + 1) * step)):
            for j in range(k):
                v = abs(x[i, j])
                if v > part[c, j] or v != v:
                    part[c, j] = v
    out = np.full(k, -np.inf)
    for c in range(chunks):
        for j in range(k):
            if part[c, j] > out[j] or part[c, j] != part[c, j]:
                out[j] = part[c, j]
    return out


def _data():
    r = np.random.default_rng(0)
    return {"x": r.standard_normal(10_000_000), "d": r.standard_normal((1_000_000, 8)),
            "X": r.standard_normal((1_000_000, 16))}


CASES = {
    "x.argmax() 1e7": (lambda a: a["x"].argmax(), "x", lambda x: x.argmax(), _argmax_numba),
    "d.argmin(1) (1e6, 8)": (lambda a: a["d"].argmin(1), "d", lambda d: d.argmin(1), _row_argmin_numba),
    "abs(X).max(0) (1e6, 16)": (lambda a: np.abs(a["X"]).max(0), "X", lambda X: np.abs(X).max(0),
                                _abs_colmax_numba),
}


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.mark.parametrize("impl", ["numpy", "braze", "numba"])
@pytest.mark.parametrize("case", list(CASES))
def test_reduction(benchmark, data, triad_gbps, case, impl):
    benchmark.group = f"reductions: {case}"
    _, key, fn, by_hand = CASES[case]
    arg = data[key]
    run = {"numpy": fn, "braze": braze.compile(fn, target="cpu"), "numba": by_hand}[impl]
    np.testing.assert_array_equal(run(arg), fn(arg))  # validated before it is timed
    cpu_cache.wait_background()
    benchmark(run, arg)
    gbps = arg.nbytes / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update({"GB/s": round(gbps, 1), "% triad": round(100 * gbps / triad_gbps)})
