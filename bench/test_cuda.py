"""The cuda target at GPU sizes: braze against PyTorch eager and CuPy on the
same GPU, in GB/s against the device-to-device copy bandwidth measured in
the same run.

Run on a machine with an NVIDIA GPU: ``python -m pytest bench/test_cuda.py``.
Inputs live on the device (numba device arrays), so nothing crosses PCIe;
each timing is the median of CUDA-event-timed repetitions after a warm-up
(which compiles). Skipped, with the reason, where there is no GPU (the
simulator is not a GPU: its timings mean nothing).
"""
import os

import numpy as np
import pytest

import braze

REPS = int(os.environ.get("BRAZE_CUDA_BENCH_REPS", "20"))


def _gpu_missing() -> str | None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1: the simulator is not a GPU"
    try:
        from numba import cuda
    except ImportError:
        return "numba-cuda is not installed (pip install 'braze[cuda]')"
    return None if cuda.is_available() else "no CUDA GPU on this machine"


MISSING = _gpu_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def _time(fn, *args) -> float:
    """Median seconds of ``fn(*args)`` over REPS, timed with CUDA events."""
    from numba import cuda

    fn(*args)
    cuda.synchronize()
    times = []
    for _ in range(REPS):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn(*args)
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


@pytest.fixture(scope="session")
def copy_gbps():
    """Device-to-device copy of 1 GiB: bytes read + written per second."""
    from numba import cuda

    n = (1 << 30) // 4
    a = cuda.device_array(n, np.float32)
    b = cuda.device_array(n, np.float32)
    seconds = _time(lambda: b.copy_to_device(a))
    return 2 * n * 4 / seconds / 1e9


def chain(a, b, c, d):
    return a * b + c * np.exp(-d)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, g, b):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


WORKLOADS = {
    "chain 1e8": (chain, lambda rng: [rng.standard_normal(10**8, dtype=np.float32) for _ in range(4)],
                  lambda args: 5 * 4 * 10**8),
    "softmax 65536x1024": (softmax, lambda rng: [rng.standard_normal((65536, 1024), dtype=np.float32)],
                           lambda args: 2 * 4 * 65536 * 1024),
    "layer norm 65536x1024": (layer_norm, lambda rng: [rng.standard_normal((65536, 1024), dtype=np.float32),
                                                       rng.standard_normal(1024, dtype=np.float32),
                                                       rng.standard_normal(1024, dtype=np.float32)],
                              lambda args: 2 * 4 * 65536 * 1024),
}


def _torch(key):
    import torch

    fns = {
        "chain 1e8": lambda a, b, c, d: a * b + c * torch.exp(-d),
        "softmax 65536x1024": lambda x: torch.softmax(x, dim=-1),
        "layer norm 65536x1024": lambda x, g, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5),
    }
    return fns[key], lambda args: [torch.as_tensor(a, device="cuda") for a in args]


def _cupy(key):
    import cupy as cp

    fns = {
        "chain 1e8": lambda a, b, c, d: a * b + c * cp.exp(-d),
        "softmax 65536x1024": lambda x: (lambda e: e / e.sum(axis=-1, keepdims=True))(
            cp.exp(x - x.max(axis=-1, keepdims=True))),
        "layer norm 65536x1024": lambda x, g, b: (lambda m: (x - m) / cp.sqrt(((x - m) ** 2).mean(
            axis=-1, keepdims=True) + 1e-5) * g + b)(x.mean(axis=-1, keepdims=True)),
    }
    return fns[key], lambda args: [cp.asarray(a) for a in args]


@pytest.mark.parametrize("impl", ["braze", "torch", "cupy"])
@pytest.mark.parametrize("key", list(WORKLOADS))
def test_cuda_workload(benchmark, copy_gbps, key, impl):
    from numba import cuda

    fn, make, nbytes = WORKLOADS[key]
    host = make(np.random.default_rng(0))
    want = fn(*host)
    if impl == "braze":
        run, args = braze.compile(fn, target="cuda"), [cuda.to_device(a) for a in host]
        got = run(*args).copy_to_host()
    else:
        try:
            run, convert = (_torch if impl == "torch" else _cupy)(key)
        except ImportError:
            pytest.skip(f"{impl} is not installed")
        args = convert(host)
        got = run(*args)
        got = got.cpu().numpy() if impl == "torch" else got.get()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    seconds = _time(run, *args)
    gbps = nbytes(host) / seconds / 1e9
    benchmark.group = key
    benchmark.extra_info.update({"ms": round(seconds * 1e3, 3), "GB/s": round(gbps, 1),
                                 "% copy": round(100 * gbps / copy_gbps, 1),
                                 "copy GB/s": round(copy_gbps, 1)})
    benchmark.pedantic(lambda: None, rounds=1)
    print(f"\n{key:24s} {impl:6s} {seconds * 1e3:8.3f} ms {gbps:7.1f} GB/s "
          f"({100 * gbps / copy_gbps:.0f}% of the {copy_gbps:.0f} GB/s copy)")
