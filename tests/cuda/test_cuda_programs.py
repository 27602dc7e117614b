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
from programs import heat, lenet, ml, polybench, science  # noqa: E402
from test_programs import _leaves, assert_same  # noqa: E402

EXAMPLES = {name: ex for mod in (polybench, lenet, heat, science, ml) for name, ex in mod.EXAMPLES.items()}


SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
NEEDS_A_GPU = {"lenet"}  # its convolution kernels take about 380 s in the simulator


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
    assert_same(got, want, rtol)
    assert_same(ours, theirs, rtol)
