"""Every kernel the cuda target generates compiles for a real GPU.

The simulator (tests/cuda) runs kernels as Python, so it cannot catch code
that numba.cuda does not lower (a NumPy ufunc, an exception, a type that
does not unify). Here each generated kernel of the cuda test corpus is
compiled to PTX by numba.cuda and NVVM, with the argument types a launch
passes: no GPU needed, only the CUDA compiler wheels the ``cuda`` extra
installs. Runs in the main pytest process (not under the simulator).
"""
import os

import numpy as np
import pytest

import braze
from braze.fusion import Loop, fuse
from braze.passes import inline_composites, run_passes


def _nvvm_missing() -> str | None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "the CUDA simulator is on in this process (PTX needs the real compiler)"
    try:
        from numba import cuda
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
        cuda.compile_ptx(lambda a: None, "void(float32[::1])", cc=(8, 0))
    except Exception as exc:  # numba-cuda or the NVVM/NVRTC wheels not installed
        return f"numba-cuda with NVVM is not installed ({type(exc).__name__}: {exc}); pip install 'braze[cuda]'"
    return None


MISSING = _nvvm_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def _loops(fn, args):
    graph = braze.compile(fn, target="generic").lower(*args).ir
    graph, _ = run_passes(inline_composites(graph, {}))
    from braze.targets.cuda import _on_host

    return [s for s in fuse(graph).steps if isinstance(s, Loop) and not _on_host(s)]  # (host loops: NumPy)


def _corpus():
    from tests.cuda.test_cuda_target import CASES

    return CASES


@pytest.mark.parametrize("name", list(_corpus()))
def test_generated_kernels_compile_to_ptx(name):
    from braze.targets.cuda import compile_ptx, natural_layout

    fn, args = _corpus()[name]
    for loop in _loops(fn, args):  # (a program of externs only has none)
        ptx = compile_ptx(loop, natural_layout(loop))
        assert ".entry" in ptx and ".target sm_80" in ptx


@pytest.mark.parametrize("name", ["softmax f32", "row reductions", "full reductions", "views"])
def test_strided_variants_compile_to_ptx(name):
    from braze.targets.cuda import compile_ptx

    fn, args = _corpus()[name]
    for loop in _loops(fn, args):
        assert ".entry" in compile_ptx(loop, (False,) * len(loop.leaves), cc=(9, 0))


def test_row_kernel_ptx_uses_shared_memory_and_barriers():
    from braze.targets.cuda import compile_ptx, natural_layout

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    (loop,) = _loops(softmax, [np.ones((4, 64), np.float32)])
    ptx = compile_ptx(loop, natural_layout(loop))
    assert ".shared" in ptx and "bar.sync" in ptx and "shfl.sync.down" in ptx
    # float32 exp is libdevice's expf, inlined (its core is ex2.approx), not a call into a float64 exp
    assert "ex2.approx.ftz.f32" in ptx and "call" not in ptx


def test_copy_and_matmul_kernels_compile_to_ptx():
    from numba import cuda, types

    from braze.targets import cpu_cache, cuda_matmul
    from braze.targets.cuda_index import _TAKE_SOURCE
    from braze.targets.cuda_memory import _ASSIGN_SOURCE, _NDCOPY_SOURCE, _unravel

    i64 = types.int64
    for dt in (np.float32, np.float64):
        kernel = cuda_matmul._kernel(dt)
        arr = types.Array(types.float32 if dt == np.float32 else types.float64, 1, "C")
        sig = (arr, i64, i64, i64, i64, arr, i64, i64, i64, i64, arr, i64, i64, i64, i64)
        assert ".entry" in cuda.compile_ptx(kernel.py_func, sig, cc=(8, 0))[0]
    src = _NDCOPY_SOURCE.format(sizes="d0, d1", unravel=_unravel(2), index="i0, i1")
    arr, arr2 = types.Array(types.int16, 1, "C"), types.Array(types.int16, 2, "A")
    assert ".entry" in cuda.compile_ptx(cpu_cache.load(src).py_func, (arr2, arr, i64, i64, i64), cc=(8, 0))[0]
    src = _ASSIGN_SOURCE.format(ostrides="os0, os1, ", astrides="as0, as1, ", sizes="d0, d1", unravel=_unravel(2),
                                oterms=" + i0 * os0 + i1 * os1", aterms=" + i0 * as0 + i1 * as1")
    f64, b = types.Array(types.float64, 1, "C"), types.Array(types.boolean, 1, "C")
    sig = (f64, i64, i64, i64, b, i64, i64, i64, i64, i64, i64)  # a bool value stored into a float array
    assert ".entry" in cuda.compile_ptx(cpu_cache.load(src).py_func, sig, cc=(8, 0))[0]
    src = _TAKE_SOURCE.format(xstrides="xs0, xs1, ", istrides="is0, is1, ", sizes="d0, d1, dx", unravel=_unravel(2),
                              axis=1, iterms=" + i0 * is0 + i1 * is1", xterms=" + i0 * xs0")
    sig = (f64, f64, i64, i64, i64, types.Array(types.int64, 1, "C"), i64, i64, i64,
           types.Array(types.int32, 1, "C"), i64, i64, i64, i64)
    assert ".entry" in cuda.compile_ptx(cpu_cache.load(src).py_func, sig, cc=(8, 0))[0]


@pytest.mark.parametrize("name", ["softmax f32", "layer norm f64", "row reductions", "row reductions special"])
def test_split_row_kernels_compile_to_ptx(name):
    """Row loops also have a split variant (several blocks per row) for few, long rows."""
    from braze.targets.cuda import compile_ptx, natural_layout

    fn, args = _corpus()[name]
    for loop in _loops(fn, args):
        if loop.ninner and loop.outer:
            assert "def kernel(phase," in compile_ptx.__globals__["generate"](loop, natural_layout(loop), "split").source
            assert ".entry" in compile_ptx(loop, natural_layout(loop), skeleton="split")


@pytest.mark.parametrize("add", [False, True])
def test_gather_and_scatter_add_kernels_compile_to_ptx(add):
    from numba import cuda, types

    from braze.targets import cpu_cache
    from braze.targets.cuda_index import _index_kernel_source

    i64, f64 = types.int64, types.Array(types.float64, 1, "C")
    idx, bad = types.Array(types.int64, 1, "C"), types.Array(types.int32, 1, "C")
    src = _index_kernel_source(3, (0, 2), 1, (1, 1), 2, add)  # x[i, :, j]: two index arrays, apart
    head = [f64, i64, i64, i64, i64, f64, i64] if add else [f64, f64, i64, i64, i64, i64]
    sig = tuple(head + [idx, i64, i64, idx, i64, i64, bad, i64] + [i64] * 2 + [i64] * 3)
    ptx = cuda.compile_ptx(cpu_cache.load(src).py_func, sig, cc=(8, 0))[0]
    assert ".entry" in ptx and (("atom.global.add.f64" in ptx) if add else True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_are_never_fused_into_fma(dtype):
    """The numerics contract on the GPU: NVVM contracts a*b+c into an FMA by
    default; the cuda target's products are mul.rn, which it never fuses.
    (sqrt is IEEE, division IEEE: numba.cuda's defaults without fastmath.)"""
    from braze.targets.cuda import compile_ptx, natural_layout

    args = [np.full(16, k, dtype) for k in (1.0, 2.0, 3.0)]  # (three arrays: one passed thrice would alias)
    fn = lambda a, b, c: (a * b + c, a * a - c, np.square(b) + 1.0, np.deg2rad(a) + b)  # noqa: E731
    width = "f32" if dtype is np.float32 else "f64"
    loops = _loops(fn, args)
    assert loops
    for loop in loops:
        ptx = compile_ptx(loop, natural_layout(loop))
        assert f"mul.rn.{width}" in ptx
        assert "fma." not in ptx and "mad." not in ptx, [line for line in ptx.splitlines() if "fma." in line][:5]


NARROW_REDUCTIONS = {
    "sum": lambda x: x.sum(axis=-1), "prod int16": lambda x: x.prod(axis=-1, dtype=np.int16),
    "max": lambda x: x.max(axis=-1), "min": lambda x: x.min(axis=-1), "argmax": lambda x: x.argmax(axis=-1),
    "any": lambda x: (x > 1).any(axis=-1), "all": lambda x: (x > 1).all(axis=-1),
    "total": lambda x: x.max(), "count": lambda x: (x > 1).sum(axis=-1), "mean": lambda x: x.mean(axis=-1),
}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64, np.bool_])
@pytest.mark.parametrize("name", list(NARROW_REDUCTIONS))
def test_reductions_of_narrow_types_compile_to_ptx(name, dtype):
    """A warp shuffle moves 32- and 64-bit words only: partials of 8- and 16-bit
    ints and bools are widened for it (an int16 product failed to type on an
    H100; the simulator shuffles any value)."""
    from braze.targets.cuda import compile_ptx, natural_layout

    ptxs = [compile_ptx(loop, natural_layout(loop), skeleton=skeleton)
            for loop in _loops(NARROW_REDUCTIONS[name], [np.ones((4, 64), dtype)])
            for skeleton in ((None, "split") if loop.ninner and loop.outer else (None,))]
    assert all(".entry" in ptx for ptx in ptxs)
    assert any("shfl.sync.down" in ptx for ptx in ptxs)  # the reduction is a kernel, not NumPy's
