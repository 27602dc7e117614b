"""braze blocks against plain Dask (NumPy blocks), in one run on this machine:
softmax rows and the elementwise chain over arrays larger than one worker's
memory limit, on a LocalCluster of 1 and of 2 worker processes.

    python -m pytest bench/test_dask.py -s -p no:cacheprovider

Prints GB/s (bytes read + written over the median wall time) per case, and
against the STREAM triad measured in the same run. Both columns include
generating the random inputs (dask.array.random) and the final sum."""
import statistics
import time

import numpy as np
import pytest

import braze

da = pytest.importorskip("dask.array", reason="the dask extra is not installed (pip install -e '.[dask]')")
distributed = pytest.importorskip("distributed")

ROWS, COLS, CHUNK_ROWS = 16_384, 4_096, 1_024   # 512 MiB of float64 per input, 32 MiB chunks
MEMORY_LIMIT = "1GiB"                            # per worker: less than the inputs and result


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def chain(a, b):
    return np.tanh(a) * b + np.sqrt(np.abs(a)) * 2.0


def _inputs(n):
    rs = da.random.RandomState(0)
    return [rs.standard_normal((ROWS, COLS), chunks=(CHUNK_ROWS, COLS)) for _ in range(n)]


def _timed(thunk, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        thunk()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@pytest.fixture(scope="module")
def triad():
    from braze.workloads import triad_gbps

    gbps = triad_gbps()
    print(f"\ntriad (numba, all threads, this process): {gbps:.1f} GB/s")
    return gbps


@pytest.mark.parametrize("workers", [1, 2])
def test_dask_blocks_braze_vs_numpy(workers, triad):
    cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, memory_limit=MEMORY_LIMIT)
    with distributed.Client(cluster):
        rows = []
        for name, fn, n_in in (("softmax", softmax, 1), ("chain", chain, 2)):
            args = _inputs(n_in)
            nbytes = (n_in + 1) * ROWS * COLS * 8
            compiled = braze.compile(fn, target="cpu")
            check = [a[:CHUNK_ROWS].compute() for a in args]
            np.testing.assert_allclose(compiled(*[da.from_array(c, chunks=(256, COLS)) for c in check]).compute(),
                                       fn(*check), rtol=1e-10)
            compiled(*args).sum().compute()  # workers compile (warm-up)
            t_braze = _timed(lambda: compiled(*args).sum().compute())
            t_dask = _timed(lambda: fn(*args).sum().compute())  # dask.array with NumPy blocks
            rows.append((name, t_dask, t_braze))
            print(f"\n{workers} worker(s) {name:8s} dask+numpy {t_dask:6.2f} s ({nbytes / t_dask / 1e9:5.2f} GB/s)  "
                  f"dask+braze {t_braze:6.2f} s ({nbytes / t_braze / 1e9:5.2f} GB/s, {nbytes / t_braze / 1e9 / triad:4.0%} of "
                  f"triad)  ratio {t_dask / t_braze:4.2f}x")
    cluster.close()
