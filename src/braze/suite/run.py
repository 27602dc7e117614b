"""``braze bench --suite programs``: whole programs against NumPy and peers.

Eight programs in the styles scientists and ML engineers write
(``braze.suite.programs``), each run as NumPy, braze ``cpu``, ``torch.compile``
of the same NumPy source, ``jax.jit`` of a mechanical ``jax.numpy`` port
(``braze.suite.jax_ports``) and a hand-written ``numba.njit`` loop version
(``braze.suite.numba_loops``). Every implementation is checked against NumPy
before it is timed. Each (threads, implementation) pair runs in its own
process, with the thread count set before anything is imported (torch's
spinning threads and compile workers would otherwise disturb what runs after
them); the STREAM triad is measured in each thread setting, so GB/s are read
against the machine's bandwidth in the same run. A further process profiles
braze's steps (``BRAZE_PROFILE=1``: kernels, BLAS, copies, NumPy ops, views,
dispatch). ``markdown`` writes the table and the profiles (bench/PROGRAMS.md).
"""
from __future__ import annotations

import copy
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

IMPLS = ("numpy", "braze", "numba", "torch", "jax")
THREAD_ENV = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _leaves(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def check(got, want, rtol: float) -> None:
    """``got`` equals NumPy's ``want`` to ``rtol`` (integers exactly), with
    NumPy's shapes and dtypes: an implementation that computes a float64
    program in float32 does half the work and is not the same program."""
    import numpy as np

    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want), f"{len(got)} results, NumPy returns {len(want)}"
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"shape {g.shape}, NumPy's {w.shape}"
        assert g.dtype == w.dtype, f"dtype {g.dtype}, NumPy's {w.dtype}"
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max(initial=0))))


def _callable(impl: str, prog):
    """(fn taking the NumPy arguments, convert-in) for one implementation."""
    if impl == "numpy":
        return prog.fn, None
    if impl == "braze":
        import braze

        return braze.compile(prog.fn, target="cpu", static_argnames=tuple(prog.static)), None
    if impl == "numba":
        from . import numba_loops

        return getattr(numba_loops, prog.name), None
    if impl == "torch":
        import torch

        return torch.compile(prog.fn), None
    if impl == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        from .jax_ports import ports

        port = ports()[prog.name]
        if isinstance(port, str):
            raise NotImplementedError(port)

        def run(*args, **kw):
            return jax.block_until_ready(port(*args, **kw))

        def to_device(args):
            return tuple(jax.device_put(a) if hasattr(a, "shape") else a for a in args)

        return run, to_device
    raise ValueError(impl)


def measure(impl: str, names, size: str = "full", min_time: float = 1.0, max_repeat: int = 30) -> dict:
    """Run in this process: {program: {"median_s", "first_s", "repeats"} or {"skipped"}}."""
    import numpy as np

    from .programs import PROGRAMS

    out = {}
    for name in names:
        prog = PROGRAMS[name]
        args = prog.make(prog.sizes[size])
        want = prog.fn(*copy.deepcopy(args), **prog.static)
        row: dict = {}
        try:
            fn, to_device = _callable(impl, prog)
            prep = (lambda a: to_device(copy.deepcopy(a))) if to_device else copy.deepcopy
            a = prep(args)
            t0 = time.perf_counter()
            got = fn(*a, **prog.static)
            row["first_s"] = time.perf_counter() - t0
            if impl == "braze":
                from braze.targets import cpu_cache

                cpu_cache.wait_background()  # time the compiled program, not the first calls
            check(got if not to_device else tuple(np.asarray(g) for g in _leaves(got)), want, prog.rtol)
            times = []
            start = time.perf_counter()
            while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < max_repeat):
                a = prep(args)  # (programs that update their arguments get fresh copies; not timed)
                t0 = time.perf_counter()
                fn(*a, **prog.static)
                times.append(time.perf_counter() - t0)
            row["median_s"] = statistics.median(times)
            row["repeats"] = len(times)
            row["bytes"] = prog.nbytes(args, want)
        except Exception as exc:  # a peer that cannot compile the source, or disagrees with NumPy
            text = str(exc).strip().splitlines()
            row = {"skipped": f"{type(exc).__name__}: {text[0][:160] if text else ''}"}
        out[name] = row
        sys.stderr.write(f"  {impl:6s} {name:22s} {row.get('median_s', 0) * 1e3:9.2f} ms  {row.get('skipped', '')}\n")
    return out


def profile(names, size: str = "full", calls: int = 10) -> dict:
    """braze's time per call by step kind, per program (run with BRAZE_PROFILE=1)."""
    import braze
    from braze.targets import cpu_cache, cpu_driver

    from .programs import PROGRAMS

    out = {}
    for name in names:
        prog = PROGRAMS[name]
        args = prog.make(prog.sizes[size])
        f = braze.compile(prog.fn, target="cpu", static_argnames=tuple(prog.static))
        before = len(cpu_driver.PROFILES)
        f(*copy.deepcopy(args), **prog.static)  # lowers the program(s): a profile each
        cpu_cache.wait_background()
        profiles = cpu_driver.PROFILES[before:]
        f(*copy.deepcopy(args), **prog.static)
        for prof in profiles:  # (the warm-up calls are not counted)
            prof.reset()
        for _ in range(calls):
            f(*copy.deepcopy(args), **prog.static)
        by_kind: dict = {}
        for prof in profiles:
            for kind, sec in prof.by_kind().items():
                by_kind[kind] = by_kind.get(kind, 0.0) + sec * prof.calls / calls
        lowered = f.lower(*args, **prog.static)
        out[name] = {"by_kind": by_kind, "steps": sum(len(p.kinds) for p in profiles), "counts": lowered.counts}
    return out


def triad_gbps() -> float:
    from braze.workloads import triad_gbps as triad

    return triad()


def _child(argv) -> int:
    """``python -m braze.suite child IMPL|profile THREADS SIZE OUT NAMES...``"""
    what, threads, size, out_path, *names = argv
    result: dict = {"threads": threads}
    if what == "profile":
        result["profile"] = profile(names, size)
    else:
        if what == "numpy":
            result["triad_gbps"] = triad_gbps()
        result["rows"] = measure(what, names, size)
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


def _env(threads: str, profile: bool = False) -> dict:
    env = dict(os.environ)
    if threads != "all":
        for k in THREAD_ENV:
            env[k] = threads
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            f"intra_op_parallelism_threads={threads}").strip()
    env["BRAZE_TIERED"] = "0" if profile else env.get("BRAZE_TIERED", "1")
    if profile:
        env["BRAZE_PROFILE"] = "1"
    return env


def available(impl: str) -> str | None:
    """None if ``impl`` can run here, else why not."""
    module = {"torch": "torch", "jax": "jax", "numba": "numba"}.get(impl)
    if module is None:
        return None
    import importlib.util

    return None if importlib.util.find_spec(module) else f"{module} is not installed"


def run(names=None, impls=IMPLS, threads=("1", "all"), size: str = "full", profile_too: bool = True,
        rounds: int = 1) -> dict:
    """Every (threads, implementation) in its own process, ``rounds`` times
    round-robin; a program's time is its best median over the rounds (this
    host's speed drifts by up to 2x between minutes: the best of rounds taken
    minutes apart compares implementations, not the moments they ran in).
    First-call times are the first round's (later rounds find kernels cached)."""
    from .programs import PROGRAMS

    names = list(names or PROGRAMS)
    report = {"programs": names, "size": size, "impls": list(impls), "threads": list(threads), "rounds": rounds,
              "rows": {}, "triad_gbps": {}, "unavailable": {}, "profile": {}}
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(t, i) for _ in range(rounds) for t in threads for i in impls]
        jobs += [("all", "profile")] if profile_too else []
        for t, impl in jobs:
            why = available(impl) if impl != "profile" else None
            if why:
                report["unavailable"][impl] = why
                continue
            sys.stderr.write(f"{impl} ({t} threads)\n")
            path = os.path.join(tmp, f"{impl}-{t}.json")
            cmd = [sys.executable, "-m", "braze.suite", "child", impl, t if t != "all" else "all", size, path, *names]
            proc = subprocess.run(cmd, env=_env(t, impl == "profile"))
            if proc.returncode or not os.path.exists(path):
                report["unavailable"][f"{impl} ({t} threads)"] = f"its process failed (exit {proc.returncode})"
                continue
            with open(path) as f:
                got = json.load(f)
            if impl == "profile":
                report["profile"] = got["profile"]
                continue
            merge(report, impl, t, got)
    return report


def merge(report: dict, impl: str, t: str, got: dict) -> None:
    """One process's rows into the report: a program's best median so far
    (with the first round's first-call time), the best triad."""
    if "triad_gbps" in got:
        report["triad_gbps"][t] = max(got["triad_gbps"], report["triad_gbps"].get(t, 0.0))
    for name, row in got["rows"].items():
        rows = report["rows"].setdefault(name, {}).setdefault(impl, {})
        old = rows.get(t)
        if old is None or "median_s" not in old:
            rows[t] = row
        elif row.get("median_s", float("inf")) < old["median_s"]:
            rows[t] = {**row, "first_s": old["first_s"]}


def _speedups(report: dict, impl: str, t: str) -> dict:
    out = {}
    for name, by_impl in report["rows"].items():
        base = by_impl.get("numpy", {}).get(t, {}).get("median_s")
        mine = by_impl.get(impl, {}).get(t, {}).get("median_s")
        if base and mine:
            out[name] = base / mine
    return out


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def markdown(report: dict, command: str) -> str:
    from .programs import PROGRAMS

    threads = report["threads"]
    lines = ["# Whole programs: braze against NumPy, torch.compile, jax.jit and hand-written numba", "",
             f"Produced by `{command}` (this file, in one run). Machine: {_machine()}.", "",
             "STREAM triad (float64, numba): " + ", ".join(
                 f"{v:.1f} GB/s with {t} thread{'s' if t != '1' else ''}" for t, v in report["triad_gbps"].items()),
             ""]
    if report["unavailable"]:
        lines += ["Not measured: " + "; ".join(f"{k} ({v})" for k, v in report["unavailable"].items()), ""]
    head = "| program | impl | " + " | ".join(f"{t} thr ms | x NumPy ({t})" for t in threads) + \
        " | GB/s (all) | % triad | first call s |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for name in report["programs"]:
        for impl in report["impls"]:
            rows = report["rows"].get(name, {}).get(impl)
            if not rows:
                continue
            cells = []
            for t in threads:
                r = rows.get(t, {})
                base = report["rows"][name].get("numpy", {}).get(t, {}).get("median_s")
                if "median_s" in r:
                    cells += [f"{r['median_s'] * 1e3:.2f}", f"{base / r['median_s']:.2f}x" if base else ""]
                else:
                    cells += [f"skipped: {r.get('skipped', 'not run')}", ""]
            last = rows.get("all", rows.get(threads[-1], {}))
            if "median_s" in last:
                gbps = last["bytes"] / last["median_s"] / 1e9
                triad = report["triad_gbps"].get("all") or 1.0
                cells += [f"{gbps:.1f}", f"{100 * gbps / triad:.0f}%", f"{last['first_s']:.2f}"]
            else:
                cells += ["", "", ""]
            lines.append(f"| {name} | {impl} | " + " | ".join(cells) + " |")
    lines += ["", "## Summary", ""]
    for t in threads:
        sp = _speedups(report, "braze", t)
        lines.append(f"- braze geomean over NumPy, {t} thread(s): **{geomean(sp.values()):.2f}x** "
                     f"({len(sp)} programs)")
    for peer in ("torch", "numba", "jax"):
        if peer not in report["impls"]:
            continue
        for t in threads:
            ahead, behind = [], []
            for name, by_impl in report["rows"].items():
                b = by_impl.get("braze", {}).get(t, {}).get("median_s")
                p = by_impl.get(peer, {}).get(t, {}).get("median_s")
                if b and p:
                    (ahead if b < p else behind).append(f"{name} ({p / b:.2f}x)")
            lines.append(f"- braze vs {peer}, {t} thread(s): ahead on {len(ahead)}, behind on {len(behind)}"
                         + (f" (behind: {', '.join(behind)})" if behind else ""))
    if report["profile"]:
        lines += ["", "## Where braze's time goes (all threads, ms per call, BRAZE_PROFILE=1)", ""]
        kinds = ["kernel", "BLAS/LAPACK", "copy", "NumPy op", "view", "dispatch and allocation"]
        lines += ["| program | steps | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 2)]
        for name, prof in report["profile"].items():
            by = prof["by_kind"]
            lines.append(f"| {name} | {prof['steps']} | " + " | ".join(f"{by.get(k, 0.0) * 1e3:.2f}" for k in kinds) + " |")
    lines += ["", "## The programs", ""]
    for name in report["programs"]:
        p = PROGRAMS[name]
        lines.append(f"- **{name}** (size {p.sizes[report['size']]}): {p.style}")
    return "\n".join(lines) + "\n"


def _machine() -> str:
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    except OSError:
        model = platform.processor()
    return f"{model}, {os.cpu_count()} logical cores, Python {platform.python_version()}"


def main(args) -> int:
    """The ``braze bench --suite programs`` command."""
    impls = tuple(i for i in (args.peers.split(",") if args.peers else IMPLS) if i)
    if "numpy" not in impls:
        impls = ("numpy",) + impls
    if "braze" not in impls:
        impls = impls[:1] + ("braze",) + impls[1:]
    size = "tiny" if args.tiny else "full"
    names = args.programs.split(",") if getattr(args, "programs", None) else None
    rounds = max(1, getattr(args, "rounds", 1) or 1)
    report = run(names, impls, threads=("1", "all"), size=size, profile_too=not args.tiny, rounds=rounds)
    command = ("braze bench --suite programs" + (f" --rounds {rounds}" if rounds > 1 else "")
               + (f" --markdown {args.markdown}" if args.markdown else ""))
    text = markdown(report, command)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0
