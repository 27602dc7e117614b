"""The program corpus on the cuda target (simulator-sized: each program's
small size), against NumPy running the same source, results and in-place
effects."""
import copy
import os
import sys

import numpy as np
import pytest

import braze

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import heat, lenet, ml, more, polybench, science  # noqa: E402
from test_programs import _leaves, assert_same  # noqa: E402

EXAMPLES = {name: ex for mod in (polybench, lenet, heat, science, ml, more) for name, ex in mod.EXAMPLES.items()}


SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
NEEDS_A_GPU = {"lenet"}  # its convolution kernels take about 380 s in the simulator
# sqrt(|a|^2 + |b|^2 - 2 a.b) at a == b: the device matmul adds in another order
# than BLAS (as another BLAS would), and the sqrt of the cancelled difference,
# 1e-16 instead of 0, is 1e-8
ABSOLUTE = {"pairwise_distances": 1e-7}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_program_on_cuda_matches_numpy(name):
    if SIMULATED and name in NEEDS_A_GPU:
        pytest.skip("needs a real GPU: about 380 s in numba's CUDA simulator")
    fn, make, static, small, _ = EXAMPLES[name]
    args = make(small)
    theirs, ours = copy.deepcopy(args), copy.deepcopy(args)
    want = fn(*theirs, **static)
    got = braze.compile(fn, target="cuda", static_argnames=tuple(static))(*ours, **static)
    rtol = 1e-4 if any(np.asarray(leaf).dtype == np.float32 for leaf in _leaves(args)) else 1e-9
    assert_same(got, want, rtol, ABSOLUTE.get(name))
    assert_same(ours, theirs, rtol)


def test_gpt2_forward_on_cuda_matches_numpy():
    from programs import gpt2

    p = gpt2.params(n_layer=1, n_embd=16, n_head=2, n_ctx=8)
    inputs = np.arange(8) % 97
    want = gpt2.gpt2(inputs, p["wte"], p["wpe"], p["blocks"], p["ln_f"], n_head=p["n_head"])
    f = braze.compile(gpt2.gpt2, target="cuda", static_argnames=("n_head",))
    got = f(inputs, p["wte"], p["wpe"], p["blocks"], p["ln_f"], n_head=p["n_head"])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
