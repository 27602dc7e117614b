"""The cost of a graph break: a program whose middle step braze does not trace
(``np.partition``), against the sum of its parts measured in the same run:
braze running the region before it as a compiled function, plus NumPy
running that step followed by braze running the region after it. The issue's bar: the whole
within 10% of the parts.

``python -m pytest bench/test_graph_breaks.py --benchmark-only -s``
"""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import braze  # noqa: E402

N = 1 << 20
K = N // 10


def before(x):
    return np.tanh(x * 1.5) * np.exp(-x * x) + 0.25


def middle(y):
    return np.partition(y, K)  # no braze rule: a graph break


def after(z):
    return np.sqrt(np.abs(z)) * 2.0 - z ** 2


def whole(x):
    return after(middle(before(x)))


def _median(fn, *args, rounds=25):
    fn(*args)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).standard_normal(N)


def test_one_break_costs_one_region_boundary(benchmark, data):
    x = data
    f_whole = braze.compile(whole, target="cpu")
    f_before, f_after = braze.compile(before, target="cpu"), braze.compile(after, target="cpu")
    np.testing.assert_allclose(f_whole(x), whole(x), rtol=1e-9, atol=1e-13)  # (exp, tanh: braze's, 4 ulp)
    y = f_before(x)
    z = middle(y)
    f_after(z)
    from braze.targets import cpu_cache

    cpu_cache.wait_background()  # parallel kernels compiled (tiering) before anything is timed
    # the second region reads what the break just wrote, as in the whole program
    # (timed on one array reused, it reads from a warm cache: 0.19 ms against 0.30)
    parts = _median(f_before, x) + _median(lambda y: f_after(middle(y)), y)
    total = _median(f_whole, x)
    numpy_whole = _median(whole, x)
    benchmark.extra_info.update({"whole s": round(total, 6), "parts s": round(parts, 6),
                                 "whole / parts": round(total / parts, 3), "numpy s": round(numpy_whole, 6)})
    print(f"\none break: whole {total * 1e3:.2f} ms, parts {parts * 1e3:.2f} ms (ratio {total / parts:.3f}), "
          f"NumPy {numpy_whole * 1e3:.2f} ms")
    benchmark.pedantic(f_whole, args=(x,), rounds=5, iterations=1)


# ---- boolean-mask selection: count-then-fill kernels (issue 16, part 2)

M = 4_000_000


def select_one(x):
    return x[x > 0.5]


def select_two(x, y):
    m = (x > 0.2) & (y < 0.7)
    return x[m], y[m] * 2.0


def select_exp(x, y):
    return np.exp(y)[(x > 0.5) & (y < 0.9)]


SELECTIONS = {  # program; the break path's region: the mask and the arrays it selects from
    "x[x > 0.5]": (select_one, lambda x: (x > 0.5, x)),
    "x[m], y[m] * 2 (m over x and y)": (select_two, lambda x, y: ((x > 0.2) & (y < 0.7), x, y * 2.0)),
    "np.exp(y)[m]": (select_exp, lambda x, y: ((x > 0.5) & (y < 0.9), np.exp(y))),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_mask_selection_count_then_fill(benchmark, name):
    """A boolean-mask selection on cpu, fused with the mask's producers, against
    NumPy and against the break-based path measured in the same run (the mask
    and the values computed by braze, the positions found by NumPy's
    ``flatnonzero``, then gathers): the issue's choice is the faster of the two."""
    fn, region = SELECTIONS[name]
    rng = np.random.default_rng(1)
    args = (rng.random(M),) if fn is select_one else (rng.random(M), rng.random(M))
    f = braze.compile(fn, target="cpu")
    r = braze.compile(region, target="cpu")
    got, want = f(*args), fn(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=4e-16, atol=0)  # (exp: braze's, within an ulp)

    def break_path(*a):
        mask, *values = r(*a)
        picked = np.flatnonzero(mask)
        return tuple(v.take(picked) for v in values)

    break_path(*args)
    from braze.targets import cpu_cache

    cpu_cache.wait_background()
    fused, broken, numpy = _median(f, *args), _median(break_path, *args), _median(fn, *args)
    benchmark.extra_info.update({"braze s": round(fused, 6), "break path s": round(broken, 6),
                                 "numpy s": round(numpy, 6)})
    print(f"\n{name}, {M:,} f64: count-then-fill {fused * 1e3:.2f} ms, break path {broken * 1e3:.2f} ms "
          f"({broken / fused:.2f}x), NumPy {numpy * 1e3:.2f} ms ({numpy / fused:.2f}x)")
    benchmark.pedantic(f, args=args, rounds=5, iterations=1)


# ---- selections whose length nothing reads: new data, another count, the same program

def masked_statistics(x, w):
    keep = x > 0
    return x[keep].sum(), np.mean(x[keep]), (x[keep] * w[keep]).sum()


def mandelbrot_steps(cr, ci):
    from programs.classic import mandelbrot  # (the corpus's, by masked updates)

    return mandelbrot(cr, ci, 20)


def _statistics_inputs(k):
    rng = np.random.default_rng(k)
    return rng.standard_normal(100_000), rng.random(100_000)


def _grid_inputs(k):
    x, y = np.linspace(-2 + 0.01 * k, 1, 300), np.linspace(-1.5, 1.5, 300)
    return tuple(np.meshgrid(x, y))


NEW_DATA = {"masked statistics, 100k": (masked_statistics, _statistics_inputs),
            "Mandelbrot by masked updates, 300x300, 20 steps": (mandelbrot_steps, _grid_inputs)}


@pytest.mark.parametrize("name", sorted(NEW_DATA))
def test_new_data_each_call_runs_the_traced_program(benchmark, name):
    """Each call on new data (another count at every selection): braze against
    NumPy over the same 12 inputs, after the first. A program that read a
    selection's length would trace again per call (and run as NumPy after
    ``MAX_RESPECIALIZATIONS``); these read none, so one trace serves them all."""
    import warnings

    fn, make = NEW_DATA[name]
    inputs = [make(k) for k in range(13)]
    f = braze.compile(fn, target="cpu")
    from braze.targets import cpu_cache

    f(*inputs[0])
    cpu_cache.wait_background()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)

        def each(g):
            t0 = time.perf_counter()
            for args in inputs[1:]:
                g(*args)
            return (time.perf_counter() - t0) / (len(inputs) - 1)

        braze_s = float(np.median([each(f) for _ in range(5)]))
        numpy_s = float(np.median([each(fn) for _ in range(5)]))
        for args in inputs[1:3]:
            got, want = f(*args), fn(*args)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                np.testing.assert_allclose(g, w, rtol=1e-12)
    traces = len(f.cache_info().reasons)
    assert traces == 1, f.cache_info().reasons
    benchmark.extra_info.update({"braze s": round(braze_s, 6), "numpy s": round(numpy_s, 6), "traces": traces})
    print(f"\n{name}, new data each call: braze {braze_s * 1e3:.2f} ms, NumPy {numpy_s * 1e3:.2f} ms "
          f"({numpy_s / braze_s:.2f}x), {traces} trace")
    benchmark.pedantic(f, args=inputs[1], rounds=5, iterations=1)
