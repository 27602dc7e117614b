"""Every numba.cuda kernel in ``braze.kernels.nn_cuda_kernels`` compiles to PTX
for real hardware (sm_80), without a GPU and without the simulator: this
catches what the simulator lets through (NumPy functions called in a kernel,
type unification, shared-memory declarations). The kernels' numbers are
checked in ``tests/cuda/test_nn_cuda.py``."""
import types

import pytest


@pytest.fixture
def compile_ptx(monkeypatch):
    """``numba.cuda.compile_ptx``, with the current device faked as an sm_80: a
    kernel calling a ``cuda.jit(device=True)`` function asks the current device
    for its compute capability while compiling that function."""
    numba = pytest.importorskip("numba")
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("NUMBA_ENABLE_CUDASIM is set: this process has the simulator, not numba.cuda's compiler")
    try:
        from numba import cuda
        from numba.cuda import dispatcher
        from numba.cuda.cudadrv import nvvm
    except ImportError as exc:
        pytest.skip(f"numba.cuda.compile_ptx is unavailable: {exc}")
    if not hasattr(cuda, "compile_ptx") or not hasattr(dispatcher, "get_current_device"):
        pytest.skip("this numba-cuda has no compile_ptx, or compiles device functions differently")
    if not nvvm.is_available():
        pytest.skip("NVVM (libnvvm, e.g. from the pip package nvidia-cuda-nvcc-cu12) is unavailable")
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: types.SimpleNamespace(compute_capability=(8, 0)))
    from braze.kernels import nn_cuda_kernels

    yield cuda.compile_ptx
    nn_cuda_kernels._reducers.cache_clear()  # their device functions were compiled for the fake device


def test_every_nn_cuda_kernel_compiles_to_ptx(compile_ptx):
    from braze.kernels import nn_cuda_kernels

    failed, compiled = [], 0
    for label, fn, signature in nn_cuda_kernels.ptx_signatures():
        try:
            ptx, _ = compile_ptx(fn, signature, cc=(8, 0))
        except Exception as exc:  # all failures at once, each with its kernel
            failed.append(f"{label}: {type(exc).__name__}: {str(exc)[:2000]}")
            continue
        assert ".entry" in ptx and "sm_80" in ptx
        compiled += 1
    assert not failed, "kernels that do not compile for sm_80:\n" + "\n".join(failed)
    assert compiled == len(nn_cuda_kernels._BUILDERS) * 2  # float32 and float64
