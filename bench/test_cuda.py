"""The cuda target on the standard workloads at GPU sizes: braze against
PyTorch eager and CuPy on the same GPU, in GB/s against the device-to-device
copy bandwidth measured in the same run.

Run on a machine with an NVIDIA GPU: ``python -m pytest bench/test_cuda.py -s``
(``-s`` prints one line per row). Inputs live on the device (numba device
arrays, torch tensors, CuPy arrays), so nothing crosses PCIe; each timing is
the median of ``BRAZE_CUDA_BENCH_REPS`` CUDA-event-timed calls after a
warm-up call (which compiles). braze allocates its device results per call
through numba (``cudaMalloc``); PyTorch and CuPy use caching allocators. Set
``NUMBA_CUDA_MEMORY_MANAGER=rmm.allocators.numba`` (RMM installed) to give
numba one too. Skipped, with the reason, where there is no GPU: the
simulator's timings mean nothing.
"""
import os

import numpy as np
import pytest

import braze
from braze import workloads as W

REPS = int(os.environ.get("BRAZE_CUDA_BENCH_REPS", "20"))

# GPU sizes: at least 10**8 elements for elementwise work, 65536 rows of 1024 for row kernels
SHAPES = {"A": (10**8,), "B": (65536, 1024), "C": (65536, 1024), "D": (10**8,), "F": (65536, 1024),
          "G": (65536, 1024)}


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


def _host(out):
    """Results as NumPy arrays, whatever array type they came in."""
    if isinstance(out, (tuple, list)):
        return tuple(_host(o) for o in out)
    if hasattr(out, "copy_to_host"):
        return out.copy_to_host()
    if hasattr(out, "get"):  # CuPy
        return out.get()
    if hasattr(out, "detach"):  # torch
        return out.detach().cpu().numpy()
    return np.asarray(out)


def _implementation(impl: str, w, host_args):
    """(callable, its device arguments) for one implementation of ``w``."""
    if impl == "braze":
        from numba import cuda

        return braze.compile(w.braze_fn or w.fn, target="cuda"), [cuda.to_device(a) for a in host_args]
    if impl == "torch":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("torch has no CUDA here")
        return W._torch_versions()[w.key], [torch.as_tensor(a, device="cuda") for a in host_args]
    import cupy as cp  # CuPy runs the NumPy source itself (NumPy dispatches to CuPy arrays)

    if w.key == "G":
        pytest.skip("CuPy has no autodiff")
    return w.fn, [cp.asarray(a) for a in host_args]


@pytest.mark.parametrize("impl", ["braze", "torch", "cupy"])
@pytest.mark.parametrize("key", list(SHAPES))
def test_cuda_workload(benchmark, copy_gbps, key, impl):
    w = W.WORKLOADS[key]
    host_args = w.make(SHAPES[key], np.dtype(np.float32), np.random.default_rng(0))
    try:
        run, args = _implementation(impl, w, host_args)
    except ImportError:
        pytest.skip(f"{impl} is not installed")
    want = w.fn(*host_args)
    W.check_close(_host(run(*args)), want, np.float32)
    seconds = _time(run, *args)
    gbps = w.nbytes(host_args, want) / seconds / 1e9
    benchmark.group = f"{w.name} {'x'.join(map(str, SHAPES[key]))} float32"
    benchmark.extra_info.update({"ms": round(seconds * 1e3, 3), "GB/s": round(gbps, 1),
                                 "% copy": round(100 * gbps / copy_gbps, 1), "copy GB/s": round(copy_gbps, 1)})
    benchmark.pedantic(lambda: None, rounds=1)
    print(f"\n{benchmark.group:36s} {impl:6s} {seconds * 1e3:8.3f} ms {gbps:7.1f} GB/s "
          f"({100 * gbps / copy_gbps:.0f}% of the {copy_gbps:.0f} GB/s copy)")
