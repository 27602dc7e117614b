"""Kernels compiled on every core (targets/cpu_workers.py): a dry run of the
compiled program lists the kernels and argument types its first run will
compile; worker processes compile them into numba's disk cache while this
process compiles others, and the first run then loads them. Whatever a worker
does, results are NumPy's, and a worker that fails only costs time."""
import numpy as np
import pytest

import braze
from braze.targets import cpu_cache, cpu_workers


def program(x, w):
    """Four kernels of distinct sources: two row reductions, an elementwise
    chain, a reduction to a scalar."""
    h = np.tanh(x @ w)
    h = h - h.max(axis=1, keepdims=True)
    p = np.exp(h) / np.exp(h).sum(axis=1, keepdims=True)
    y = np.sqrt(p * 3.0 + 1.0) - 0.5
    return y, (y * y).sum()


def _args():
    r = np.random.default_rng(3)
    return r.standard_normal((96, 40)), r.standard_normal((40, 24))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Tiered compiles into an empty cache, one worker; the pool stopped after."""
    monkeypatch.setenv("BRAZE_TIERED", "1")
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BRAZE_COMPILE_WORKERS", "1")
    cpu_cache.wait_background()
    before = dict(cpu_workers.STATS, hits=_cache_hits())
    yield before
    cpu_cache.wait_background()
    cpu_workers.shutdown()


def _check(f):
    x, w = _args()
    first = f(x, w)  # (NumPy, while the kernels build)
    cpu_cache.wait_background()
    got = f(x, w)
    want = program(x, w)
    for g in (first, got):
        np.testing.assert_allclose(g[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(g[1], want[1], rtol=1e-12)


def test_workers_compile_kernels_this_process_then_loads(fresh):
    f = braze.compile(program, target="cpu")
    _check(f)
    stats = cpu_workers.STATS
    assert stats["in workers"] > fresh["in workers"], stats
    assert stats["failed in workers"] == fresh["failed in workers"], stats
    # the kernels the worker compiled were loaded here from numba's disk cache
    assert _cache_hits() > fresh["hits"]


def _cache_hits() -> int:
    return sum(sum(fn.stats.cache_hits.values()) for fn in list(cpu_cache._loaded.values()))


def test_a_failing_worker_leaves_the_kernels_to_this_process(fresh, monkeypatch):
    def broken(self, job):
        raise EOFError("the compile worker closed its pipe")

    monkeypatch.setattr(cpu_workers._Worker, "compile", broken)
    f = braze.compile(program, target="cpu")
    _check(f)
    assert cpu_workers.STATS["failed in workers"] > fresh["failed in workers"]


def test_the_dry_run_notes_kernels_and_calls_none(monkeypatch, tmp_path):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    f = braze.compile(lambda a: np.tanh(a) * 2.0 + np.exp(a).sum(), target="cpu")
    x = np.linspace(-1, 1, 50)
    built = f._programs.entries
    f.lower(x)  # (built, not run)
    (entry,) = built.values()
    jobs = cpu_cache.dry_run(lambda: entry.executable.run([x]))
    assert jobs and all(name.startswith("kernel") for _, name, _ in jobs)
    sigs = [sig for _, _, sig in jobs]
    assert all(any(str(t).startswith("array(float64") for t in sig) for sig in sigs)
    for source, name, _ in jobs:  # noted, never compiled
        assert not cpu_cache.load(source, name).signatures


def test_the_dry_run_warns_of_nothing_its_garbage_computes():
    """Kernels' outputs are left unwritten in a dry run, so NumPy steps after
    them see garbage (NaN, zeros): their floating-point warnings are not the
    user's."""
    import warnings

    def garbage():
        return np.log(np.array([-1.0, 0.0])) @ np.array([np.inf, 0.0])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_cache.dry_run(garbage) == []
    with pytest.warns(RuntimeWarning):  # (outside it, NumPy warns as usual)
        garbage()


def test_workers_are_off_when_asked(monkeypatch):
    monkeypatch.setenv("BRAZE_COMPILE_WORKERS", "0")
    assert cpu_workers.wanted() == 0
    monkeypatch.setenv("BRAZE_COMPILE_WORKERS", "3")
    assert cpu_workers.wanted() == 3


def test_a_worker_compiles_a_job_and_reports_errors(monkeypatch, tmp_path):
    """The protocol itself: a job compiled into the disk cache, a bad one answered with its error."""
    import numba

    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    source = ("import numpy as np\nfrom numba import njit\n\n\n"
              "@njit(cache=True)\ndef kernel_serial(a, o):\n    o[:] = a * 2.0\n")
    path, modname = cpu_cache.module_path(source)
    (worker,) = cpu_workers._workers(1)
    try:
        arr = numba.typeof(np.ones(3))
        assert worker.compile((path, modname, "kernel_serial", (arr, arr))) is None
        assert cpu_cache.compiled_before(source, "kernel_serial")
        failed = worker.compile((path, modname, "kernel_serial", (numba.types.unicode_type, arr)))
        assert failed and "Typing" in failed or "typing" in failed.lower()
    finally:
        cpu_workers.shutdown()


def test_a_worker_that_takes_too_long_is_stopped(monkeypatch, tmp_path):
    import numba

    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_workers, "JOB_TIMEOUT", 0.01)  # (starting alone takes longer)
    source = ("import numpy as np\nfrom numba import njit\n\n\n"
              "@njit(cache=True)\ndef kernel_serial(a, o):\n    o[:] = a + 1.0\n")
    path, modname = cpu_cache.module_path(source)
    (worker,) = cpu_workers._workers(1)
    arr = numba.typeof(np.ones(3))
    try:
        with pytest.raises(EOFError, match="took more than"):
            worker.compile((path, modname, "kernel_serial", (arr, arr)))
        worker.proc.wait(timeout=10)
        assert not worker.alive()
    finally:
        cpu_workers.shutdown()


def long_program(x):
    """More steps than cpu_workers.PRESTART_STEPS: its lowering starts the workers."""
    for k in range(cpu_workers.PRESTART_STEPS):
        x = np.sort(x * 1.5 + k)  # (a sort per step: one extern each, nothing fuses them away)
    return x


def test_workers_start_early_only_for_a_program_not_built_before(monkeypatch, tmp_path):
    """Workers warming up take cores from a program that already runs compiled:
    a program some process built before (its kernels in the disk cache) does
    not start them while it lowers."""
    monkeypatch.setenv("BRAZE_TIERED", "1")
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BRAZE_COMPILE_WORKERS", "1")
    started = []
    monkeypatch.setattr(cpu_workers, "prestart", lambda: started.append(1))
    x = np.linspace(0.0, 1.0, 33)
    cpu_cache.wait_background()
    f = braze.compile(long_program, target="cpu")
    f(x)
    assert started == [1]
    cpu_cache.wait_background()
    np.testing.assert_array_equal(f(x), long_program(x))
    assert any(name.startswith("braze_p_") for name in __import__("os").listdir(tmp_path))
    started.clear()
    g = braze.compile(long_program, target="cpu")  # (a new function object: lowered again, as in a new process)
    g(x)
    cpu_cache.wait_background()
    assert started == []
    np.testing.assert_array_equal(g(x), long_program(x))
    other = np.linspace(0.0, 1.0, 34)  # (another shape: another program, not built before)
    g(other)
    cpu_cache.wait_background()
    assert started == [1]


def test_workers_run_at_the_lowest_priority(monkeypatch):
    import os
    import time

    (worker,) = cpu_workers._workers(1)
    try:
        deadline = time.monotonic() + 60
        while os.getpriority(os.PRIO_PROCESS, worker.proc.pid) < cpu_workers.WORKER_NICE:
            assert time.monotonic() < deadline and worker.alive()
            time.sleep(0.05)
    finally:
        cpu_workers.shutdown()


def test_a_worker_loads_kernels_without_braze_s_package_init(monkeypatch, tmp_path):
    """A worker stands in for the braze packages (their __init__ imports the
    tracer and every target, half its start): a kernel module still imports
    cpu_runtime through them, and the tracer is never imported."""
    import numba

    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    seen = tmp_path / "seen.txt"
    source = ("import sys\nimport numpy as np\nfrom numba import njit\n"
              "from braze.targets import cpu_runtime as rt\n"
              f"open({str(seen)!r}, 'w').write(' '.join(sorted(m for m in sys.modules if m.startswith('braze'))))\n\n\n"
              "@njit(cache=True)\ndef kernel_serial(a, o):\n    o[0] = rt.radd(a[0], a[1])\n")
    path, modname = cpu_cache.module_path(source)
    (worker,) = cpu_workers._workers(1)
    try:
        arr = numba.typeof(np.ones(3))
        assert worker.compile((path, modname, "kernel_serial", (arr, arr))) is None
    finally:
        cpu_workers.shutdown()
    modules = seen.read_text().split()
    assert "braze.targets.cpu_runtime" in modules and "braze.api" not in modules and "braze.tracing" not in modules
    assert cpu_cache.compiled_before(source, "kernel_serial")
