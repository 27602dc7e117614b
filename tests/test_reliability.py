"""Reliability under load: many threads at once, kernel registration while
others compile, several processes sharing one fresh cache directory, memory
over 20,000 calls, and the bounded (LRU) trace cache."""
import gc
import logging
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

import braze
from braze import registry
from braze.targets import cpu_cache

from _compare import assert_same

REPO = pathlib.Path(__file__).resolve().parents[1]


def _run_threads(fn, n, timeout=120):
    """Run fn(i) in n threads started together; re-raise the first error; fail on a hang."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait(timeout=timeout)
            fn(i)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"
    if errors:
        raise errors[0]


def mixed(x, w):
    h = np.tanh(x @ w)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) + x.mean()


def test_eight_threads_with_a_mix_of_shapes_trace_each_shape_once():
    rng = np.random.default_rng(0)
    shapes = [(3, 5), (7, 5), (1, 5), (0, 5)]  # batch sizes: one trace each (kernels take sizes as arguments)
    w = rng.standard_normal((5, 6)).astype(np.float32)
    inputs = {s: rng.standard_normal(s).astype(np.float32) for s in shapes}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of the empty batch is NaN
        expected = {s: mixed(inputs[s], w) for s in shapes}
    f = braze.compile(mixed, target="cpu")

    def work(i):
        for k in range(40):
            s = shapes[(i + k) % len(shapes)]
            assert_same(f(inputs[s], w), expected[s], rtol=2e-6)

    _run_threads(work, 8)
    info = f.cache_info()
    assert info.misses == len(shapes), info.reasons  # each shape traced and lowered once
    assert info.hits == 8 * 40 - len(shapes)


def test_registration_while_other_threads_compile_and_call():
    """One thread registers and removes kernels for a composite while seven
    compile and call functions using it: every result is right (either the
    body or the kernel, which agree), nothing deadlocks, and the registry ends
    as it began."""
    name = "tests.reliability.scale"
    comp = braze.composite(name)(lambda x: x * 3.0)
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    stop = threading.Event()

    def kernel(x):
        return x + x + x  # the same values as the body

    def register_loop():
        while not stop.is_set():
            registry.register_kernel(name, "cpu", kernel, priority=1)
            for e in registry.kernels(name, "cpu"):
                registry.unregister(e)

    def work(i):
        if i == 0:
            register_loop()
            return
        try:
            for k in range(15):
                f = braze.compile(lambda x, k=k: comp(x) + float(k), target="cpu")
                assert_same(f(x), x * 3.0 + float(k))
                assert_same(f(x[:, :2]), x[:, :2] * 3.0 + float(k))
        finally:
            if i == 1:
                stop.set()

    _run_threads(work, 8)
    assert registry.kernels(name) == []


_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, braze
    from braze.targets import cpu_cache

    def a(x):
        return np.tanh(x) * 2.0 + x.sum(axis=-1, keepdims=True)

    def b(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    x = np.linspace(-2, 2, 24).reshape(4, 6)
    ok = bool(np.allclose(braze.compile(a, target="cpu")(x), a(x))
              and np.allclose(braze.compile(b, target="cpu")(x), b(x)))
    cpu_cache.wait_background()
    print(json.dumps({"ok": ok, **{k: v for k, v in cpu_cache.info().items() if k != "dir"}}))
""")


def _spawn(cache):
    env = dict(os.environ, BRAZE_CACHE_DIR=str(cache), NUMBA_CACHE_DIR=str(cache / "numba"))
    return subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_four_processes_share_one_fresh_cache_and_a_fifth_compiles_nothing(tmp_path):
    import json

    cache = tmp_path / "cache"
    procs = [_spawn(cache) for _ in range(4)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in reports)
    assert all(r["corrupt_rebuilt"] == 0 for r in reports), reports
    fifth = _spawn(cache)
    out, err = fifth.communicate(timeout=300)
    assert fifth.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ok"] and report["numba_compiles"] == 0 and report["modules_written"] == 0, report
    assert report["numba_disk_hits"] > 0 and report["corrupt_rebuilt"] == 0


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc for RSS")
@pytest.mark.parametrize("path", ["fast", "pytree"])
def test_cache_hit_calls_do_not_grow_memory(path):
    """20,000 calls under tracemalloc (which slows each call ~10x): a leak of one
    small object a call would be a megabyte."""
    x = np.ones((4, 3), np.float32)
    if path == "fast":  # positional arrays: the fast path
        f = braze.compile(lambda x: np.tanh(x) * 2.0, target="cpu")

        def call():
            return f(x)
    else:  # a pytree and a keyword: the general path
        f = braze.compile(lambda p, *, scale: p["a"] * scale + p["b"], target="cpu", static_argnames="scale")
        tree = {"a": x, "b": x}

        def call():
            return f(tree, scale=2.0)
    for _ in range(2000):
        call()
    gc.collect()
    tracemalloc.start()
    start_traced = tracemalloc.get_traced_memory()[0]
    start_rss = _rss_bytes()
    for _ in range(20_000):
        call()
    gc.collect()
    grown_traced = tracemalloc.get_traced_memory()[0] - start_traced
    tracemalloc.stop()
    grown_rss = _rss_bytes() - start_rss
    assert grown_traced < 64 * 1024, f"Python allocations grew {grown_traced} bytes over 20,000 calls"
    assert grown_rss < 8 * 1024 * 1024, f"RSS grew {grown_rss} bytes over 20,000 calls"
    assert f.cache_info().misses == 1


def test_retracing_for_many_static_values_is_bounded_and_logged(caplog):
    f = braze.compile(lambda x, k: x * k, target="generic", static_argnums=1, cache_size=64)
    x = np.ones(3)
    with caplog.at_level(logging.INFO, logger="braze.compile"):
        for k in range(1000):
            assert_same(f(x, k), x * k)
    info = f.cache_info()
    assert info.size == 64 and info.misses == 1000 and info.evictions == 1000 - 64
    evictions = [r for r in caplog.records if "evicted the least recently used trace" in r.getMessage()]
    assert len(evictions) == 1000 - 64
    assert len(info.reasons) <= 100
    # least recently used: a value used again just now survives the next evictions
    f(x, 999)
    f(x, 5000)
    assert_same(f(x, 999), x * 999)
    assert f.cache_info().misses == 1001


def test_cache_size_must_be_a_positive_integer():
    for bad in (0, -1, 2.5, "10", True):
        with pytest.raises(braze.BrazeError, match="cache_size must be a positive integer"):
            braze.compile(lambda x: x, cache_size=bad)


def test_vjp_pairs_are_bounded_too():
    f = braze.compile(lambda x, k: np.sum(np.tanh(x) * k), target="generic", static_argnums=1, cache_size=4)
    x = np.linspace(-1, 1, 5)
    for k in range(10):
        out, back = f.vjp(x, float(k))
        (g, _) = back(1.0)
        np.testing.assert_allclose(g, k * (1 - np.tanh(x) ** 2))
    assert len(f._pairs.entries) <= 4
