"""The braze.nn library on the cpu target: registered kernel vs fused body vs
NumPy, in one run. A kernel stays registered only if it beats the fused body
by 1.2x here (see kernels/nn_cpu.py)."""
import numpy as np
import pytest

import braze
from braze import registry
from braze.kernels import nn

RNG = np.random.default_rng(0)
N, C = 8192, 1024

CASES = {
    "softmax": (nn.softmax, lambda dt: (RNG.standard_normal((4096, 1024)).astype(dt),)),
    "log_softmax": (nn.log_softmax, lambda dt: (RNG.standard_normal((4096, 1024)).astype(dt),)),
    "logsumexp": (nn.logsumexp, lambda dt: (RNG.standard_normal((4096, 1024)).astype(dt),)),
    "layer_norm": (nn.layer_norm, lambda dt: tuple(RNG.standard_normal(s).astype(dt) for s in ((N, C), (C,), (C,)))),
    "rms_norm": (nn.rms_norm, lambda dt: tuple(RNG.standard_normal(s).astype(dt) for s in ((N, C), (C,)))),
    "gelu": (nn.gelu, lambda dt: (RNG.standard_normal(10**7).astype(dt),)),
    "sigmoid": (nn.sigmoid, lambda dt: (RNG.standard_normal(10**7).astype(dt),)),
    "silu": (nn.silu, lambda dt: (RNG.standard_normal(10**7).astype(dt),)),
    "softmax_cross_entropy": (nn.softmax_cross_entropy,
                              lambda dt: (RNG.standard_normal((N, C)).astype(dt), RNG.integers(0, C, N))),
    "attention": (nn.attention, lambda dt: tuple(RNG.standard_normal((8, 512, 64)).astype(dt) for _ in range(3))),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("impl", ["numpy", "fused body", "registered kernel"])
def test_library_op(benchmark, name, dtype, impl):
    op, make = CASES[name]
    args = make(np.dtype(dtype))
    benchmark.group = f"braze.nn.{name} {dtype}"
    if impl == "numpy":
        fn = op.fn
    else:
        compiled = braze.compile(op, target="cpu")
        has_kernel = bool(registry.kernels(op.name, "cpu"))
        if impl == "registered kernel" and not has_kernel:
            pytest.skip(f"no cpu kernel is registered for {op.name} (the fused body is as fast)")
        if impl == "fused body":
            def fn(*a):
                with braze.disable_kernels(op.name, "cpu"):
                    return compiled(*a)
        else:
            fn = compiled
        from braze.targets import cpu_cache

        fn(*args)
        cpu_cache.wait_background()
    want = op.fn(*args)
    np.testing.assert_allclose(np.asarray(fn(*args)), want, rtol=1e-3 if dtype == "float32" else 1e-9, atol=1e-5)
    benchmark(fn, *args)
