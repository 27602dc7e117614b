"""The ``braze`` command line.

``braze`` (or ``braze demo``) compiles a small NumPy layer on every
available target, checks it against NumPy and prints its graph.
``braze explain MODULE:FUNCTION --shape x=4096,1024:float32 ...`` prints what
braze decides for a function; ``braze targets`` lists the targets with
device details; ``braze kernels`` the registered composite kernels;
``braze cache info|clear`` the compile caches.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _layer(x, w, b):
    h = np.tanh(x @ w + b)
    return h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)


def demo(args) -> int:
    import braze
    from braze.targets import available

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, 256), dtype=np.float32)
    w = rng.standard_normal((256, 256), dtype=np.float32) / 16
    b = rng.standard_normal(256, dtype=np.float32)
    expected = _layer(x, w, b)
    print("braze demo: layer(x, w, b) = tanh(x @ w + b) / rms(...)")
    print(f"  x {x.shape} {x.dtype}, w {w.shape}, b {b.shape}\n")
    status = 0
    for name, target in available().items():
        if not target.is_available():
            print(f"  {name:8s} unavailable")
            continue
        f = braze.compile(_layer, target=name)
        t0 = time.perf_counter()
        got = f(x, w, b)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            f(x, w, b)
        per_call = (time.perf_counter() - t0) / args.repeat
        ok = got.dtype == expected.dtype and np.allclose(got, expected, rtol=1e-5, atol=1e-6)
        status |= not ok
        print(f"  {name:8s} {'matches NumPy' if ok else 'MISMATCH'}; first call {first * 1e3:.1f} ms, "
              f"then {per_call * 1e3:.3f} ms a call")
    print("\ngraph:")
    print(braze.compile(_layer, target="generic").lower(x, w, b).graph)
    return status


def _cpu_details() -> str:
    import os
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE" if flags else "unknown"
    return f"{model}, {os.cpu_count()} logical CPUs, widest SIMD: {simd}"


def targets(args) -> int:
    from braze.targets import available

    for name, target in available().items():
        state = "available" if target.is_available() else "unavailable"
        print(f"{name:8s} {state:12s} {target.describe()}")
    print(f"{'':8s} {'':12s} CPU: {_cpu_details()}")
    return 0


def _parse_shape(spec: str):
    """``x=4096,1024:float32`` -> ("x", (4096, 1024), "float32")."""
    import braze

    try:
        name, rest = spec.split("=", 1)
        dims, _, dtype = rest.partition(":")
        shape = tuple(int(d) for d in dims.split(",") if d.strip()) if dims.strip() else ()
        return name.strip(), shape, np.dtype(dtype or "float64")
    except (ValueError, TypeError) as exc:
        raise braze.BrazeError(
            f"--shape {spec!r}: expected NAME=D0,D1,...:DTYPE (e.g. x=4096,1024:float32), {exc}"
        ) from None


def _load_function(ref: str):
    import importlib
    import importlib.util
    import os

    import braze

    if ":" not in ref:
        raise braze.BrazeError(f"{ref!r}: expected MODULE:FUNCTION or path/to/file.py:FUNCTION")
    module_ref, func = ref.rsplit(":", 1)
    if module_ref.endswith(".py") or os.path.sep in module_ref:
        spec = importlib.util.spec_from_file_location("braze_explain_target", module_ref)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_ref)
    try:
        return getattr(module, func)
    except AttributeError:
        raise braze.BrazeError(f"{module_ref} has no function {func!r}") from None


def explain(args) -> int:
    import braze

    fn = _load_function(args.function)
    rng = np.random.default_rng(0)
    kwargs = {}
    for spec in args.shape or []:
        name, shape, dtype = _parse_shape(spec)
        value = rng.standard_normal(shape)
        kwargs[name] = value.astype(dtype) if dtype.kind in "fc" else (value * 10).astype(dtype)
    print(braze.explain(braze.compile(fn, target=args.target), **kwargs))
    return 0


def kernels(args) -> int:
    from braze import registry
    from braze.composite import defined
    from braze.targets import available

    available()  # instantiating the targets registers their library kernels
    names = sorted(set(defined()) | set(registry.all_kernels()))
    for name in names:
        entries = registry.kernels(name)
        print(f"{name}: {len(defined(name).get(name, []))} definition(s)")
        if not entries:
            print("    no registered kernels: the body is inlined and fused")
        for e in sorted(entries, key=lambda e: (e.target, -e.priority, -e.seq)):
            extras = ", ".join(x for x, v in (("when", e.when), ("backward", e.backward), ("abstract", e.abstract)) if v)
            print(f"    {e.target:7s} priority {e.priority:3d}  {e.label}  ({e.location}){'  ' + extras if extras else ''}")
    return 0


def cache(args) -> int:
    import braze

    if args.action == "clear":
        braze.clear_cache()
        print("cleared the in-memory traces and the kernel cache")
        return 0
    info = braze.cache_info()
    kernels = info.pop("cpu_kernels")
    for k, v in info.items():
        print(f"{k:20s} {v}")
    for k, v in kernels.items():
        print(f"{k:20s} {v}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="braze", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("demo", help="compile a NumPy layer, check it, print its graph (default)")
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=20)
    sub.add_parser("targets", help="list targets, their availability and device details")
    p = sub.add_parser("explain", help="print the graph, kernel choices, fused kernels and source of a function")
    p.add_argument("function", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1:DTYPE",
                   help="an argument's shape and dtype, e.g. x=4096,1024:float32 (repeat per argument)")
    p.add_argument("--target", default="auto")
    sub.add_parser("kernels", help="list composite ops and their registered kernels per target")
    p = sub.add_parser("bench", help="the standard workloads against NumPy and installed peers")
    p.add_argument("--target", default="cpu")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one size per workload (the default)")
    size.add_argument("--full", action="store_true", help="every size")
    size.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test of the command)")
    p.add_argument("--suite", choices=["workloads", "programs"], default="workloads",
                   help="workloads: single kernels (default); programs: whole programs (bench/PROGRAMS.md)")
    p.add_argument("--programs", help="--suite programs: comma-separated subset of the programs")
    p.add_argument("--rounds", type=int, default=1,
                   help="--suite programs: run every implementation this many times, round-robin, and keep "
                        "each program's best median (a noisy host's drift between minutes)")
    p.add_argument("--peers", help="comma-separated subset of numexpr,numba,jax,torch (default: all installed); "
                                   "--suite programs: of numba,torch,jax")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--plot", metavar="FILE.png", help="roofline and speedup charts (needs matplotlib)")
    p = sub.add_parser("cache", help="show or clear braze's compile caches")
    p.add_argument("action", choices=["info", "clear"])
    args = parser.parse_args(argv)
    if args.command in (None, "demo"):
        if args.command is None:
            args = parser.parse_args(["demo"] + list(argv or []))
        return demo(args)
    import braze

    try:
        if args.command == "bench" and args.suite == "programs":
            from .suite.run import main as suite_main

            return suite_main(args)
        if args.command == "bench":
            from .bench import main as bench_main

            return bench_main(args)
        return {"targets": targets, "explain": explain, "kernels": kernels, "cache": cache}[args.command](args)
    except braze.BrazeError as exc:
        print(f"braze {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
