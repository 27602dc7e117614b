"""Measure where parallel kernels start to beat serial ones (PARALLEL_MIN).

    python bench/threshold.py

compiles the serial and parallel variants of two generated kernels (an
elementwise chain with exp, and a row softmax) and times both across work
sizes; prints the table and the smallest size from which the parallel
variant is faster at every larger size. The value in
targets/cpu_codegen.PARALLEL_MIN comes from this script's output.
"""
import time

import numpy as np

import braze
from braze.targets import cpu_cache


def kernels_for(fn, args):
    f = braze.compile(fn, target="cpu")
    f(*args)
    src = f.lower(*args).source
    body = src[src.index("import math"):]
    return cpu_cache.load(body, "kernel_serial"), cpu_cache.load(body, "kernel")


def median_time(fn, reps=200):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def sweep(name, make_args, fn, call):
    rows = []
    for n in [2 ** k for k in range(8, 23, 1)]:
        args = make_args(n)
        serial, parallel = kernels_for(fn, args)
        ts = median_time(lambda: call(serial, args, n))
        tp = median_time(lambda: call(parallel, args, n))
        rows.append((n, ts, tp))
        print(f"{name:8s} n={n:>8d}  serial {ts * 1e6:9.1f} us  parallel {tp * 1e6:9.1f} us  {'parallel' if tp < ts else 'serial'}")
    crossover = next((n for i, (n, ts, tp) in enumerate(rows) if all(p < s for _, s, p in rows[i:])), None)
    print(f"{name}: parallel wins from {crossover} elements on")
    return crossover


def main():
    rng = np.random.default_rng(0)

    def ew_args(n):
        return tuple(rng.random(n).astype(np.float32) for _ in range(4))

    def ew_call(k, args, n):
        k(args[0], args[1], args[3], args[2], np.empty(n, np.float32), n)

    a = sweep("exp", ew_args, lambda a, b, c, d: a * b + c * np.exp(-d), ew_call)

    def sm_args(n):
        return (rng.standard_normal((max(n // 256, 1), 256)).astype(np.float32),)

    def sm_call(k, args, n):
        x = args[0]
        k(x, np.empty(x.size, np.float32), x.shape[0], x.shape[1])

    b = sweep("softmax", sm_args, lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True), sm_call)
    print(f"suggested PARALLEL_MIN: {max(a or 0, b or 0)}")


if __name__ == "__main__":
    main()
