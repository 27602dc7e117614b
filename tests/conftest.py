"""Test-session setup: one kernel cache directory shared by the whole run.

Generated kernels are cached on disk under ``BRAZE_CACHE_DIR``; pointing
every test at the same directory (the repo's ignored ``.braze-test-cache``
unless the caller set one) means each kernel compiles once per machine, and
a re-run of the suite loads them from disk.
"""
import os
import pathlib

# Every compiled call in the suite checks that each result's dtype and shape
# equal the graph's output aval (braze.api.CHECK_RESULTS).
os.environ.setdefault("BRAZE_CHECK_RESULTS", "1")

# Compiled calls run compiled code from the first call (tiered first calls, which run
# NumPy until the kernels are built, have their own tests: test_tiered.py).
os.environ.setdefault("BRAZE_TIERED", "0")

os.environ.setdefault(
    "BRAZE_CACHE_DIR", str(pathlib.Path(__file__).resolve().parents[1] / ".braze-test-cache")
)


import pytest  # noqa: E402

# The cuda target's tests run in their own pytest process, on numba's CUDA
# simulator (NUMBA_ENABLE_CUDASIM=1 must be set before numba is imported) or,
# with BRAZE_TEST_CUDA=1, on a real GPU: `python -m pytest tests/cuda`.
if not (os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or os.environ.get("BRAZE_TEST_CUDA") == "1"):
    collect_ignore = ["cuda"]


@pytest.fixture
def restore_registry():
    """Kernels registered during a test are unregistered after it."""
    from braze import registry

    before = {n: list(e) for n, e in registry.all_kernels().items()}
    yield
    for name, entries in registry.all_kernels().items():
        for e in entries:
            if e not in before.get(name, []):
                registry.unregister(e)
