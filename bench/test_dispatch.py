"""Per-call overhead on tiny inputs (workload A at 8 elements), and compile time."""
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import braze
from braze import workloads as W

ARGS = tuple(np.random.default_rng(0).random(8).astype(np.float32) for _ in range(4))


@pytest.mark.parametrize("impl", ["numpy", "braze", "numba", "jax", "torch"])
def test_dispatch_8_elements(benchmark, impl):
    benchmark.group = "dispatch: workload A, 8 float32"
    if impl == "numpy":
        fn = W.expexp
    elif impl == "braze":
        fn = braze.compile(W.expexp, target="cpu")
    else:
        status = W.available_peers()
        if status.get(impl):
            pytest.skip(f"{impl} {status[impl]}")
        fn = W._peer(impl, W.WORKLOADS["A"])
    fn(*ARGS)
    benchmark(fn, *ARGS)


def _step(u, dt, *, c=0.5):
    return u * dt + c


@pytest.mark.parametrize("how", ["arrays", "python float", "numpy scalar", "keyword", "default"])
@pytest.mark.parametrize("impl", ["numpy", "braze"])
def test_call_with_numbers_and_keywords(benchmark, impl, how):
    """A time step's call, ``step(u, dt, c=...)``: flat arguments of every kind
    take the compiled function's fast path (binding the signature cost 44-50 us)."""
    benchmark.group = f"dispatch: a call with {how}"
    u = ARGS[0].astype(np.float64)
    args, kwargs = {"arrays": ((u, u + 1), {"c": u + 2}), "python float": ((u, 0.1), {}),
                    "numpy scalar": ((u, np.float64(0.1)), {}), "keyword": ((u,), {"dt": 0.1, "c": 0.25}),
                    "default": ((u, 0.1), {})}[how]
    fn = braze.compile(_step, target="cpu") if impl == "braze" else _step
    fn(*args, **kwargs)
    benchmark(fn, *args, **kwargs)


def _many_kernels(x):
    """1,000 small kernels: each iteration's max is a reduction the next
    iteration's elementwise step waits for."""
    for _ in range(500):
        x = x * 0.5 + x.max()
    return x


@pytest.mark.parametrize("impl", ["numpy", "braze"])
def test_per_kernel_overhead(benchmark, impl):
    """A program of many kernels on 8 float64 values: the time per kernel is the
    cost of the call path (views, buffers, the numba call) between kernels."""
    benchmark.group = "dispatch: a program of many small kernels"
    x = np.random.default_rng(1).random(8)
    fn = _many_kernels
    if impl == "braze":
        fn = braze.compile(_many_kernels, target="cpu")
        fn(x)
        from braze.targets import cpu_cache

        cpu_cache.wait_background()
        counts = fn.lower(x).counts
        benchmark.extra_info.update(counts)
    fn(x)
    benchmark(fn, x)
    per = benchmark.stats.stats.median / (counts["kernels"] if impl == "braze" else 1000) * 1e6
    benchmark.extra_info["us per kernel" if impl == "braze" else "us per NumPy op"] = round(per, 3)
    print(f"\n{impl}: {benchmark.stats.stats.median * 1e3:.3f} ms, {per:.2f} us per "
          f"{'kernel' if impl == 'braze' else 'NumPy op'}")


COMPILE = textwrap.dedent("""
    import time, numpy as np
    t0 = time.perf_counter()
    import braze
    from braze import workloads as W
    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    f = braze.compile(W.softmax, target="cpu")
    t1 = time.perf_counter()
    f(x)
    print(time.perf_counter() - t1, t1 - t0)
""")


def _first_call(cache_dir, tiered="1"):
    env = dict(os.environ, BRAZE_CACHE_DIR=cache_dir, BRAZE_TIERED=tiered)
    out = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, check=True)
    first, imports = map(float, out.stdout.split())
    return first, imports


@pytest.mark.parametrize("tiered", ["1", "0"])
def test_compile_softmax_cold_and_warm(benchmark, tiered):
    """First call of a compiled softmax (4096x1024 f32) in a fresh process: with an
    empty cache directory (cold) and with the cache the cold run filled (warm).
    Tiered (the default): the first call runs NumPy while kernels build in the
    background; BRAZE_TIERED=0: the first call waits for them."""
    benchmark.group = "first call: softmax 4096x1024 float32"
    with tempfile.TemporaryDirectory() as d:
        cold, imports = _first_call(d, tiered)
        warm = min(_first_call(d, tiered)[0] for _ in range(3))
    benchmark.extra_info.update({"tiered": tiered == "1", "cold first call s": round(cold, 3),
                                 "warm first call s": round(warm, 3), "import braze s": round(imports, 3)})
    benchmark.pedantic(lambda: None, rounds=1)
    print(f"\nsoftmax first call (BRAZE_TIERED={tiered}): cold {cold:.3f} s, warm {warm:.3f} s "
          f"(import {imports:.3f} s)")


# ---------------------------------------------------------------- the aliasing guard
# Every call of a compiled function checks that its array arguments do not share
# memory (one memory owner per argument: braze.calling.distinct_owners); a call
# whose arguments do share memory takes the slower, exact path. Measured alone
# and as part of a whole call with 1 and 8 arguments.

def _args(n):
    return [np.random.default_rng(k).random(8) for k in range(n)]


@pytest.mark.parametrize("nargs", [1, 8])
def test_alias_guard_alone(benchmark, nargs):
    from braze.calling import distinct_owners

    benchmark.group = "aliasing guard (distinct_owners)"
    args = _args(nargs)
    benchmark(distinct_owners, args)


def _sum_of(*xs):
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


@pytest.mark.parametrize("nargs", [1, 8])
def test_call_overhead_with_alias_guard(benchmark, nargs):
    benchmark.group = "dispatch: sum of n arguments, 8 float64 each"
    f = braze.compile(_sum_of, target="cpu")
    args = _args(nargs)
    f(*args)
    benchmark(f, *args)
