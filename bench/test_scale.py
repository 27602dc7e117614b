"""Compile time at scale: programs of 1,000 to 100,000 traced ops, as Python
loops unroll into, each stage timed separately in a fresh process with an
empty kernel cache (cold), then the steady-state call against NumPy.

Run ``python -m pytest bench/test_scale.py --benchmark-only -s`` (``-s``
prints the table). Each row's ``extra_info`` holds trace, passes, fuse,
codegen and numba (the first call, less a steady call's time: what the
first call spent compiling, not running) seconds, seconds per 1,000 traced ops (what
the loop ran) and per 1,000 graph nodes (after interning), the compile time
after tracing (what a loop of 10x the trips should cost at most 1.5x of), the
number of kernels and of distinct kernel sources (each compiled once).
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

PROGRAMS = {
    # an elementwise chain: n ops, two different steps alternating
    "chain": """
        def fn(x):
            for i in range(N // 2):
                x = np.tanh(x) * 0.9 if i % 2 else x * 1.0001 + 0.5
            return x
        args = (rng.random(4096),)
    """,
    # the 10k-iteration trace loop: a scalar per iteration (3 ops each)
    "trace_loop": """
        def fn(a):
            trace = 0.0
            for i in range(N // 3):
                trace += np.tanh(a[i % a.shape[0], i % a.shape[0]])
            return trace
        args = (rng.random((512, 512)),)
    """,
    # a loop over rows accumulating a vector (4 ops each: view, tanh, multiply, add)
    "row_loop": """
        def fn(a):
            out = np.zeros(a.shape[1])
            for i in range(N // 4):
                out = out + np.tanh(a[i % a.shape[0]]) * 0.5
            return out
        args = (rng.random((256, 4096)),)
    """,
    # a loop over output pixels (5 ops each: window, multiply, sum, reshape, update): re-rolled
    "pixel_loop": """
        def fn(image, w):
            out = np.zeros((image.shape[0] - 2, image.shape[1] - 2))
            for p in range(N // 5):
                i, j = divmod(p, out.shape[1])
                out[i, j] = np.sum(image[i:i + 3, j:j + 3] * w)
            return out
        args = (rng.random((N // 5 // 250 + 3, 252)), rng.random((3, 3)))
    """,
}

SIZES = (1_000, 10_000, 100_000)

SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    t0 = time.perf_counter()
    import braze
    t_import = time.perf_counter() - t0
    N = int(sys.argv[1])
    rng = np.random.default_rng(0)
    exec(sys.argv[2])
    f = braze.compile(fn, target="cpu")
    lowered = f.lower(*args)
    t0 = time.perf_counter()
    got = f(*args)
    first = time.perf_counter() - t0
    n_ops = len([n for n in lowered.ir.nodes if n.op not in ("input", "const", "capture")])
    want = fn(*args)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    def best(g, k=5):
        ts = []
        for _ in range(k):
            t0 = time.perf_counter(); g(*args); ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]
    print(json.dumps({"ops": n_ops, "import": t_import, **lowered.times, "numba (first call)": first,
                      **lowered.counts, "braze call": best(f), "numpy call": best(fn)}))
""")


def _measure(program: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, BRAZE_CACHE_DIR=cache, BRAZE_TIERED="0")  # numba's time is measured on the first call
        out = subprocess.run([sys.executable, "-c", SCRIPT, str(n), textwrap.dedent(PROGRAMS[program])],
                             env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise AssertionError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_compile_time_at_scale(benchmark, program, n):
    benchmark.group = f"compile at scale: {program}"
    row = benchmark.pedantic(_measure, args=(program, n), rounds=1, iterations=1)
    # the first call compiles and then runs the program once: its run (a steady call's time) is not compiling
    row["numba (first call, less a call)"] = max(row["numba (first call)"] - row["braze call"], 0.0)
    compile_s = row["trace"] + row["passes"] + row["lower"] + row["numba (first call, less a call)"]
    row["traced ops"] = n  # (what the Python loop ran; "ops" is the graph's, after interning)
    row["compile s per 1000 traced ops"] = 1000 * compile_s / n
    row["compile s per 1000 ops"] = 1000 * compile_s / row["ops"]
    row["compile s after trace"] = compile_s - row["trace"]
    row["speedup vs numpy"] = row["numpy call"] / row["braze call"]
    benchmark.extra_info.update({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
    print(f"\n{program} n={n}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in row.items()))
