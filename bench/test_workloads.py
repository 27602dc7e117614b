"""The standard workloads: braze against NumPy and its peers, in one run."""
import numpy as np
import pytest

from braze import workloads as W

from conftest import FULL

IMPLS = ["numpy", "braze", "numexpr", "numba", "jax", "torch"]
PEER_STATUS = W.available_peers()


def cases():
    for w in W.WORKLOADS.values():
        for shape in (w.shapes_full if FULL else w.shapes_quick):
            for dtype in ("float32", "float64"):
                for impl in IMPLS:
                    if impl == "numexpr" and w.numexpr is None:
                        continue  # reductions: numexpr cannot express them
                    yield pytest.param(w.key, shape, dtype, impl,
                                       id=f"{w.key}-{'x'.join(map(str, shape))}-{dtype}-{impl}")


@pytest.mark.parametrize("key,shape,dtype,impl", list(cases()))
def test_workload(benchmark, triad_gbps, key, shape, dtype, impl):
    if PEER_STATUS.get(impl):
        pytest.skip(f"{impl} {PEER_STATUS[impl]}")
    w = W.WORKLOADS[key]
    peers = () if impl in ("numpy", "braze") else (impl,)
    impls = W.implementations(w, "cpu", peers)
    name = f"braze[cpu]" if impl == "braze" else impl
    fn, why = impls[name]
    args = w.make(shape, np.dtype(dtype), np.random.default_rng(0))
    want = w.fn(*args)
    try:
        got = fn(*args)
    except Exception as exc:
        if impl == "numba":
            pytest.skip(f"numba cannot compile this NumPy source: {type(exc).__name__}")
        raise
    W.check_close(got, want, dtype)
    benchmark.group = f"{w.name} {'x'.join(map(str, shape))} {dtype}"
    benchmark(fn, *args)
    if benchmark.stats is None:  # --benchmark-disable: a correctness run
        return
    gbps = w.nbytes(args, want) / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update({"GB/s": round(gbps, 2), "% triad": round(100 * gbps / triad_gbps, 1),
                                 "triad GB/s": round(triad_gbps, 2)})


def test_triad(benchmark, triad_gbps):
    """The bandwidth ceiling itself, for the record."""
    benchmark.extra_info["triad GB/s"] = round(triad_gbps, 2)
    benchmark.pedantic(lambda: None, rounds=1)
