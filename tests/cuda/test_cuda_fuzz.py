"""The differential fuzzer's cuda leg: random programs (tests/test_fuzz.py's
strategy) on the cuda target against NumPy, on the simulator. A handful of
examples by default (the simulator is slow); ``BRAZE_FUZZ_EXAMPLES=N`` runs N."""
import os

from hypothesis import example, given, settings

from tests import test_fuzz as fz

N = int(os.environ.get("BRAZE_FUZZ_EXAMPLES") or 25)


@settings(fz.FUZZ, max_examples=N)
@given(case=fz.programs())
def test_cuda_forward_matches_numpy(case):
    saved = fz.TARGETS
    fz.TARGETS = ("cuda",)
    try:
        fz.check_forward(case)
    finally:
        fz.TARGETS = saved


# the fuzzer's explicit example per op family, on cuda too
for _ex in fz.EXAMPLES:
    test_cuda_forward_matches_numpy = example(case=_ex)(test_cuda_forward_matches_numpy)
