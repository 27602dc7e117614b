"""Where a cuda call's host time goes, on a real GPU: the per-call cost of a
one-kernel program on 8 elements (device arrays in and out), and of the
softmax cross-entropy forward + backward (workload G), each timed and then
profiled with cProfile (the top entries by own time and by cumulative time).

    python bench/cuda_dispatch.py          # on a machine with an NVIDIA GPU

A call whose GPU work takes less than its host work is bound by this path:
the kernels wait for their launches.
"""
import cProfile
import io
import pstats
import time

import numpy as np

import braze
from braze import workloads as W


def _median_us(fn, reps):
    from numba import cuda

    fn()
    cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e6


def _profile(label, fn, reps, top=28):
    from numba import cuda

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(reps):
        fn()
    cuda.synchronize()
    prof.disable()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
        print(f"--- {label}: {reps} calls, by {key}")
        print("\n".join(s.getvalue().splitlines()[6:]))


def main():
    from numba import cuda

    f = braze.compile(lambda x, y: np.tanh(x) * y + 1.0, target="cuda")
    x = cuda.to_device(np.arange(8, dtype=np.float32))
    y = cuda.to_device(np.ones(8, np.float32))
    print(f"one kernel, 8 elements, device in/out: {_median_us(lambda: f(x, y), 500):.1f} us a call")
    k = cuda.jit("void(float32[::1], float32[::1], float32[::1])")(_axpy)
    o = cuda.device_array(8, np.float32)
    print(f"bare numba.cuda launch of a 3-array kernel: {_median_us(lambda: k[1, 32](x, y, o), 500):.1f} us")
    _profile("one kernel, 8 elements", lambda: f(x, y), 300)

    w = W.WORKLOADS["G"]
    host = w.make((65536, 1024), np.dtype(np.float32), np.random.default_rng(0))
    g = braze.compile(w.braze_fn, target="cuda")
    dev = [cuda.to_device(a) for a in host]
    print(f"xent fwd+bwd 65536x1024: {_median_us(lambda: g(*dev), 20):.1f} us a call (synchronized)")
    _profile("xent fwd+bwd", lambda: g(*dev), 20)
    print(g.lower(*host).plan)


def _axpy(x, y, o):
    i = 0
    if i < x.shape[0]:
        o[i] = x[i] * y[i]


if __name__ == "__main__":
    main()
