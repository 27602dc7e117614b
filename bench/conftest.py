"""Benchmark session setup: the bandwidth ceiling, measured once per run.

Run with ``pytest bench/ --benchmark-only`` (quick sizes) or with
``BRAZE_BENCH_FULL=1`` for every size the workloads define. Each row records
GB/s and the percentage of the STREAM-style triad measured in the same run
in ``extra_info`` (shown by ``--benchmark-json`` and ``--benchmark-compare``).
"""
import os

import pytest

# Benchmarks time steady state: every compiled call runs compiled code (the
# tiered first calls, which run NumPy until the kernels are built, are measured
# where a benchmark asks for them: test_programs.py, test_dispatch.py).
os.environ.setdefault("BRAZE_TIERED", "0")

from braze import workloads as W

FULL = os.environ.get("BRAZE_BENCH_FULL") == "1"


@pytest.fixture(scope="session")
def triad_gbps():
    return W.triad_gbps()
