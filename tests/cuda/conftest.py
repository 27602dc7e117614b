"""The cuda target's tests: run with ``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``
(numba's CUDA simulator; the variable must be set before numba is imported,
hence a pytest process of their own), or ``BRAZE_TEST_CUDA=1 python -m pytest
tests/cuda`` on a machine with a GPU. Shapes are tiny: the simulator runs a
Python thread per GPU thread."""
import os
import warnings

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def pytest_collection_modifyitems(config, items):
    from numba import cuda

    if not cuda.is_available():
        skip = pytest.mark.skip(reason="no CUDA GPU here and NUMBA_ENABLE_CUDASIM is not 1")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _quiet_simulator():
    """The simulator evaluates kernels with NumPy scalars, which warn on overflow
    and invalid values where a GPU silently gives inf and NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
