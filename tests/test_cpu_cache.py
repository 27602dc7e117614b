"""The cpu target's compile cache: shape-generic kernels, the disk cache across
processes, and corrupt entries."""
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import braze
from braze.targets import cpu_cache

ROOT = pathlib.Path(__file__).resolve().parents[1]


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def numba_compilations():
    """Machine-code compilations (not disk loads) of every loaded kernel so far."""
    total = 0
    for fn in list(cpu_cache._loaded.values()):
        total += len(fn.signatures) - sum(fn.stats.cache_hits.values())
    return total


def test_new_batch_sizes_reuse_the_compiled_kernel(tmp_path, monkeypatch):
    """(32,1024), (64,1024), (1000,1024): one trace each, and each kernel variant
    (serial; parallel, tiered up once the work is large enough) compiled by numba
    exactly once: no compilation for a new batch size."""
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_cache, "_loaded", {})  # as in a fresh process: nothing loaded yet
    monkeypatch.setattr(cpu_cache, "_modules", {})
    f = braze.compile(softmax, target="cpu")
    rng = np.random.default_rng(0)
    for rows in (32, 64, 1000, 64, 2000):
        x = rng.standard_normal((rows, 1024)).astype(np.float32)
        np.testing.assert_allclose(f(x), softmax(x), rtol=1e-5, atol=1e-7)
        cpu_cache.wait_background()
    mine = [fn for (_, name), fn in list(cpu_cache._loaded.items())
            if str(tmp_path) in fn.py_func.__code__.co_filename]
    assert sorted(fn.py_func.__name__ for fn in mine) == ["kernel", "kernel_serial"]
    assert all(len(fn.signatures) == 1 for fn in mine)  # one compilation per variant
    assert f.cache_info().misses == 4  # traced once per new shape


SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, braze
    from braze.targets import cpu_cache
    def layer(x, g):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g
    x = np.random.default_rng(0).standard_normal((300, 256)).astype(np.float32)
    y = braze.compile(layer, target="cpu")(x, np.ones(256, np.float32))
    ok = bool(np.allclose(y, layer(x, np.ones(256, np.float32)), rtol=1e-4, atol=1e-5))
    cpu_cache.wait_background()
    print(json.dumps(dict(cpu_cache.info(), ok=ok, scipy_installed="scipy" in sys.modules,
                          scipy_linalg="scipy.linalg" in sys.modules)))
""")


def run_process(cache_dir):
    env = dict(os.environ, BRAZE_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_everything_from_disk(tmp_path):
    first = run_process(tmp_path)
    assert first["ok"] and first["numba_compiles"] >= 1 and first["modules_written"] >= 1
    second = run_process(tmp_path)
    assert second["ok"]
    assert second["numba_compiles"] == 0, second
    assert second["numba_disk_hits"] >= 1
    assert second["modules_written"] == 0 and second["modules_reused"] == first["modules_written"]
    # numba's start-up asks whether BLAS is there by importing scipy.linalg (64 ms); braze's
    # kernels call no BLAS from numba, so loading them must not import it
    assert second["scipy_installed"] and not second["scipy_linalg"], second


def test_corrupt_entries_are_rebuilt_with_one_warning(tmp_path):
    run_process(tmp_path)
    modules = sorted(tmp_path.glob("braze_k_*.py"))
    for m in modules:
        m.write_text("this is not python (\n")
    for nbc in (tmp_path / "__pycache__").glob("*.nbc"):
        nbc.write_bytes(b"\0garbage")
    info = run_process(tmp_path)
    assert info["ok"] and info["corrupt_rebuilt"] == len(modules)
    assert run_process(tmp_path)["numba_compiles"] == 0  # and the rebuilt entry is good again


def test_truncated_module_in_this_process_warns_and_recovers(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    src = "import numpy as np\nfrom numba import njit\n@njit(cache=True)\ndef kernel(a):\n    return a + 1\n"
    key = cpu_cache.key_of(src)
    tmp_path.joinpath(f"braze_k_{key}.py").write_text("# braze kernel " + key + "\n" + src[:20])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = cpu_cache.load(src)
    assert fn(1) == 2
    assert any("rebuilt corrupt cache entry" in str(w.message) for w in caught)


def test_unwritable_cache_dir_falls_back_with_a_warning(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        target = "/proc/braze-cannot-write-here"  # root ignores permissions; /proc refuses files
    else:
        target = str(tmp_path / "ro")
        os.makedirs(target)
        os.chmod(target, 0o500)
    monkeypatch.setenv("BRAZE_CACHE_DIR", target)
    src = "from numba import njit\n@njit(cache=True)\ndef kernel(a):\n    return a * 3\n"
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache"):
        fn = cpu_cache.load(src)
    assert fn(2) == 6


def test_concurrent_processes_fill_one_fresh_cache(tmp_path):
    env = dict(os.environ, BRAZE_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert '"ok": true' in out
    assert run_process(tmp_path)["numba_compiles"] == 0


def test_cache_info_and_clear_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    f = braze.compile(lambda x: np.sqrt(x) + 1.0, target="cpu")
    f(np.ones(5))
    f(np.ones(5))
    info = braze.cache_info()
    assert info["hits"] >= 1 and info["misses"] >= 1 and info["traces"] >= 1
    assert info["cpu_kernels"]["dir"] == str(tmp_path) and info["cpu_kernels"]["modules_on_disk"] >= 1
    braze.clear_cache()
    assert f.cache_info().size == 0
    assert not list(tmp_path.glob("braze_k_*"))
    assert f(np.ones(5))[0] == 2.0  # and everything works again
