"""The program corpus (``tests/programs``) at benchmark sizes: braze's cpu
target against NumPy running the same source, measured in the same run, and
each program's first call (trace, compile, run) in this process.

``python -m pytest bench/test_programs.py --benchmark-only`` (``-s`` prints
a line per program with the first-call time and the kernel counts)."""
import copy
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import braze  # noqa: E402
from braze.targets import cpu_cache  # noqa: E402
from programs import classic, everyday, field, heat, lenet, ml, more, polybench, science, sims, with_scipy  # noqa: E402

EXAMPLES = {name: ex for mod in (polybench, lenet, heat, science, ml, more, everyday, sims, field, classic, with_scipy)
            for name, ex in mod.EXAMPLES.items()}


@pytest.mark.parametrize("impl", ["numpy", "braze"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_program(benchmark, name, impl, monkeypatch):
    monkeypatch.setenv("BRAZE_TIERED", "1")  # the first call as users get it: NumPy while kernels build
    fn, make, static, _, size = EXAMPLES[name]
    args = make(size)
    benchmark.group = f"program {name} (size {size})"
    if impl == "braze":
        f = braze.compile(fn, target="cpu", static_argnames=tuple(static))
        t0 = time.perf_counter()
        f(*copy.deepcopy(args), **static)
        first = time.perf_counter() - t0
        cpu_cache.wait_background()  # steady state: the compiled program, not the NumPy first calls
        try:
            counts = f.lower(*args, **static).counts
        except braze.UnsupportedOpError as exc:  # (a complex argument: the calls run as NumPy)
            counts = {"runs as NumPy": str(exc).split(";")[0]}
        benchmark.extra_info.update({"first call s": round(first, 3), **counts})
        print(f"\n{name}: first call {first:.2f} s, {counts}")
    else:
        f = fn
    # programs that update their arguments get fresh copies each round (copy not timed)
    benchmark.pedantic(lambda *a: f(*a, **static), setup=lambda: (copy.deepcopy(args), {}),
                       rounds=15, warmup_rounds=1)


@pytest.mark.parametrize("impl", ["numpy", "braze"])
@pytest.mark.parametrize("n_layer", [2, 12])
def test_gpt2_forward(benchmark, n_layer, impl, monkeypatch, tmp_path):
    """The GPT-2 forward pass of the corpus, float32, n_embd 256, n_ctx 128;
    braze's first call and the time until it runs compiled, cold: in a fresh
    process (bench/gpt2_cold.py) with an empty kernel cache, every kernel
    compiled, on every core. (In this process numba keeps what an earlier
    test compiled: a second model here was warm.)"""
    import json
    import subprocess

    from programs import gpt2

    p = gpt2.params(n_layer=n_layer, n_embd=256, n_ctx=128)
    args = (np.arange(128) % 97, p["wte"], p["wpe"], p["blocks"], p["ln_f"])
    benchmark.group = f"gpt2 forward, {n_layer} layers"
    monkeypatch.setenv("BRAZE_TIERED", "1")
    fn = gpt2.gpt2
    if impl == "braze":
        cpu_cache.wait_background()
        monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
        script = os.path.join(os.path.dirname(__file__), "gpt2_cold.py")
        done = subprocess.run([sys.executable, script, str(n_layer)], capture_output=True, text=True,
                              env=dict(os.environ), timeout=600, check=True)
        cold = json.loads(done.stdout.strip().splitlines()[-1])
        benchmark.extra_info.update(cold)
        fn = braze.compile(gpt2.gpt2, target="cpu", static_argnames=("n_head",))
        fn(*args, n_head=p["n_head"])  # (from the disk cache the cold process filled)
        cpu_cache.wait_background()
        print(f"\ngpt2 {n_layer} layers: first call {cold['first call s']} s, compiled after "
              f"{cold['compiled after s']} s (cold, a fresh process), "
              f"{ {k: cold[k] for k in ('steps', 'kernels', 'distinct kernels')} }")
    benchmark.pedantic(fn, args=args, kwargs={"n_head": p["n_head"]}, rounds=7, warmup_rounds=1)
