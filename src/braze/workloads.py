"""Benchmark workloads, shared by ``bench/`` (pytest-benchmark) and the runner.

Each workload is plain NumPy source plus what the peers need to run the
same computation: a numexpr string where it is expressible, and JAX and
PyTorch versions (their array namespaces differ from NumPy's). ``bytes`` is
the memory traffic the ideal kernel makes (inputs read once, outputs
written once), which turns a time into GB/s.

The runner (``measure``) checks every implementation against NumPy first,
then times it: median of repeated calls after warm-up, in the same process
as a STREAM-style triad that gives the machine's bandwidth ceiling.
"""
from __future__ import annotations

import importlib
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from braze.autodiff import value_and_grad


# ---------------------------------------------------------------- NumPy sources

def expexp(a, b, c, d):
    return a * b + c * np.exp(-d)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, gamma, beta):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def xent_loss(x, labels):
    """Mean softmax cross-entropy with integer labels (what ``G`` differentiates)."""
    from braze.kernels import nn

    return nn.softmax_cross_entropy(x, labels)


def xent_value_and_grad(x, labels):
    """Hand-derived NumPy forward+backward of ``xent_loss``: (loss, dloss/dx)."""
    n = x.shape[0]
    rows = np.arange(n)
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=-1, keepdims=True)
    loss = (np.log(s[:, 0]) + m[:, 0] - x[rows, labels]).mean()
    e /= s
    e[rows, labels] -= 1
    e *= x.dtype.type(1.0 / n)
    return loss, e


# ---------------------------------------------------------------- peers' versions

def _jax_versions():
    import jax
    import jax.numpy as jnp

    return {
        "A": lambda a, b, c, d: a * b + c * jnp.exp(-d),
        "B": lambda x: jnp.exp(x - x.max(-1, keepdims=True)) / jnp.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True),
        "C": lambda x, g, b: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b,
        "D": lambda x: 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))),
        "F": lambda x: (x.max(-1, keepdims=True) + jnp.log(jnp.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)))[..., 0],
        "G": jax.value_and_grad(
            lambda x, labels: -jnp.take_along_axis(jax.nn.log_softmax(x), labels[:, None], axis=1).mean()),
    }


def _torch_versions():
    import torch

    def sm(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def ln(x, g, b):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * g + b

    def lse(x):
        m = x.amax(-1, keepdim=True)
        return (m + torch.log(torch.exp(x - m).sum(-1, keepdim=True)))[..., 0]

    def xent(x, labels):
        x = x.requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(x, labels)
        return loss, torch.autograd.grad(loss, x)[0]

    return {
        "A": lambda a, b, c, d: a * b + c * torch.exp(-d),
        "B": sm, "C": ln, "G": xent,
        "D": lambda x: 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))),
        "F": lse,
    }


@dataclass
class Workload:
    key: str
    name: str
    fn: Callable
    make: Callable                  # (shape, dtype, rng) -> tuple of arrays
    shapes_quick: list
    shapes_full: list
    nbytes: Callable                # (args, out) -> bytes moved
    numexpr: str | None = None
    notes: str = ""
    braze_fn: Callable | None = None  # what braze compiles, when not ``fn`` (a gradient of it)


def _elementwise_inputs(n):
    def make(shape, dtype, rng):
        return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(n))

    return make


def _ln_inputs(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(dtype)
    return x, rng.standard_normal(shape[-1]).astype(dtype), rng.standard_normal(shape[-1]).astype(dtype)


def _io_bytes(args, out):
    return sum(a.nbytes for a in args) + sum(np.asarray(o).nbytes for o in _leaves(out))


def _leaves(out):
    return out if isinstance(out, tuple) else (out,)


def _to_numpy(out, convert):
    return tuple(convert(o) for o in out) if isinstance(out, tuple) else convert(out)


def _xent_inputs(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype), rng.integers(0, shape[-1], shape[0])


WORKLOADS = {
    "A": Workload("A", "a*b + c*exp(-d)", expexp, _elementwise_inputs(4), [(10**6,)], [(10**6,), (10**7,)],
                  _io_bytes, "a*b + c*exp(-d)"),
    "B": Workload("B", "row softmax", softmax, _elementwise_inputs(1), [(4096, 1024)],
                  [(4096, 1024), (64, 65536), (1000000, 16)], _io_bytes),
    "C": Workload("C", "layer norm", layer_norm, _ln_inputs, [(8192, 1024)], [(8192, 1024)], _io_bytes),
    "D": Workload("D", "tanh-GELU", gelu, _elementwise_inputs(1), [(10**7,)], [(10**7,)], _io_bytes,
                  "0.5*x*(1.0+tanh(0.7978845608028654*(x+0.044715*x**3)))"),
    "F": Workload("F", "logsumexp (last axis)", logsumexp, _elementwise_inputs(1), [(4096, 4096)],
                  [(4096, 4096)], _io_bytes),
    "G": Workload("G", "xent fwd+bwd", xent_value_and_grad, _xent_inputs, [(4096, 1024)], [(8192, 1024)],
                  _io_bytes, notes="softmax cross-entropy, integer labels: loss and its gradient",
                  braze_fn=value_and_grad(xent_loss)),
}


# ---------------------------------------------------------------- implementations

def available_peers() -> dict[str, str | None]:
    """Peer name -> None if importable, else why not."""
    out = {}
    for name, module in (("numexpr", "numexpr"), ("numba", "numba"), ("jax", "jax"), ("torch", "torch")):
        try:
            importlib.import_module(module)
            out[name] = None
        except Exception as exc:  # ImportError, or a broken install
            out[name] = f"not installed ({type(exc).__name__})"
    return out


def implementations(w: Workload, target: str, peers=("numexpr", "numba", "jax", "torch")):
    """name -> (callable taking NumPy arrays and returning NumPy-comparable output, or None, why)."""
    import braze

    impls = {"numpy": (w.fn, None), f"braze[{target}]": (braze.compile(w.braze_fn or w.fn, target=target), None)}
    status = available_peers()
    for peer in peers:
        if status.get(peer):
            impls[peer] = (None, status[peer])
            continue
        try:
            impls[peer] = (_peer(peer, w), None)
        except _NotExpressible as exc:
            impls[peer] = (None, str(exc))
    return impls


class _NotExpressible(Exception):
    pass


def _peer(peer: str, w: Workload):
    if peer == "numexpr":
        if w.numexpr is None:
            raise _NotExpressible("not expressible (reductions)")
        import numexpr

        names = {"A": "abcd", "D": "x"}[w.key]
        expr = w.numexpr
        return lambda *args: numexpr.evaluate(expr, local_dict=dict(zip(names, args)))
    if peer == "numba":
        import numba

        jitted = numba.njit(parallel=True, fastmath=True)(w.fn)

        def run(*args):
            return jitted(*args)

        return run
    if peer == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        f = jax.jit(_jax_versions()[w.key])
        return lambda *args: _to_numpy(jax.block_until_ready(f(*args)), np.asarray)
    if peer == "torch":
        import torch

        f = torch.compile(_torch_versions()[w.key])
        return lambda *args: _to_numpy(f(*[torch.from_numpy(a) for a in args]), lambda t: t.detach().numpy())
    raise ValueError(peer)


# ---------------------------------------------------------------- measuring

def triad_gbps(n: int = 20_000_000, repeat: int = 10) -> float:
    """STREAM triad ``a = b + s*c`` (float64) with a parallel numba kernel: the
    machine's attainable bandwidth, in GB/s, counting 3 arrays of traffic."""
    import numba

    @numba.njit(parallel=True, fastmath=True)
    def triad(a, b, c, s):
        for i in numba.prange(a.shape[0]):
            a[i] = b[i] + s * c[i]

    a, b, c = np.empty(n), np.random.rand(n), np.random.rand(n)
    triad(a, b, c, 3.0)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        triad(a, b, c, 3.0)
        times.append(time.perf_counter() - t0)
    return 3 * n * 8 / min(times) / 1e9


def time_call(fn, args, min_time=0.2, max_repeat=50) -> tuple[float, int]:
    """(median seconds, repeats) after one warm-up call."""
    fn(*args)
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < max_repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


@dataclass
class Result:
    workload: str
    shape: tuple
    dtype: str
    impl: str
    median_s: float | None = None
    gbps: float | None = None
    speedup: float | None = None
    first_call_s: float | None = None
    skipped: str | None = None
    extra: dict = field(default_factory=dict)


def check_close(got, want, dtype) -> None:
    rtol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-9
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want), f"{len(got)} results, expected {len(want)}"
    for g, v in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), v, rtol=rtol, atol=rtol)


def _why(exc: Exception) -> str:
    """One line saying why a peer could not run a workload."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if type(exc).__name__ == "TypingError":  # numba: name the call it has no implementation for
        calls = re.findall(r">>> (\S+?)\(", text)
        if calls:
            return f"numba cannot compile this NumPy source (no {calls[0]} with these arguments)"
    return f"{type(exc).__name__}: {(text.strip().splitlines() or [''])[0][:80]}"


def measure(w: Workload, shape, dtype, target="cpu", peers=("numexpr", "numba", "jax", "torch"),
            min_time=0.2) -> list[Result]:
    rng = np.random.default_rng(0)
    args = w.make(shape, np.dtype(dtype), rng)
    want = w.fn(*args)
    nbytes = w.nbytes(args, want)
    results = []
    base = None
    for name, (fn, why) in implementations(w, target, peers).items():
        r = Result(w.key, tuple(shape), np.dtype(dtype).name, name)
        if fn is None:
            r.skipped = why
            results.append(r)
            continue
        try:
            if name.startswith("braze"):
                from braze.targets import cpu_cache

                before = cpu_cache.info()
            t0 = time.perf_counter()
            got = fn(*args)
            r.first_call_s = time.perf_counter() - t0
            check_close(got, want, dtype)
            if name.startswith("braze"):
                after = cpu_cache.info()
                compiled = after["numba_compiles"] - before["numba_compiles"]
                loaded = after["numba_disk_hits"] - before["numba_disk_hits"]
                r.extra["kernels"] = ("compiled" if compiled else "disk cache" if loaded else "in memory")
                cpu_cache.wait_background()  # time the tiered-up (parallel) kernel
            r.median_s, _ = time_call(fn, args, min_time)
        except Exception as exc:  # a peer that cannot compile this source, or disagrees
            r.skipped = _why(exc)
            results.append(r)
            continue
        r.gbps = nbytes / r.median_s / 1e9
        if name == "numpy":
            base = r.median_s
        results.append(r)
    for r in results:
        if r.median_s and base:
            r.speedup = base / r.median_s
    return results


def format_table(results: list[Result], triad: float) -> str:
    lines = [f"{'workload':24s} {'shape':>14s} {'dtype':8s} {'impl':14s} {'median':>10s} {'vs numpy':>9s} "
             f"{'GB/s':>7s} {'% triad':>8s} {'1st call':>9s}  kernels"]
    for r in results:
        name = WORKLOADS[r.workload].name if r.workload in WORKLOADS else r.workload
        shape = "x".join(map(str, r.shape))
        if r.skipped:
            lines.append(f"{name:24s} {shape:>14s} {r.dtype:8s} {r.impl:14s} skipped: {r.skipped}")
            continue
        lines.append(
            f"{name:24s} {shape:>14s} {r.dtype:8s} {r.impl:14s} {r.median_s * 1e3:8.3f}ms "
            f"{r.speedup:8.2f}x {r.gbps:7.1f} {100 * r.gbps / triad:7.0f}% {r.first_call_s:8.3f}s"
            f"  {r.extra.get('kernels', '')}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m braze.workloads [--full] [--json FILE] [KEY ...]``: the table."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m braze.workloads")
    parser.add_argument("keys", nargs="*", default=sorted(WORKLOADS))
    parser.add_argument("--full", action="store_true", help="every size (default: the quick sizes)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--peers", default="numexpr,numba,jax,torch",
                        help="comma-separated peers to measure (torch's spinning threads and "
                             "compile workers disturb whatever runs after them: give each its own process)")
    args = parser.parse_args(argv)
    peers = tuple(p for p in args.peers.split(",") if p)
    triad = triad_gbps()
    print(f"STREAM triad (float64, numba parallel): {triad:.1f} GB/s", flush=True)
    results = []
    for key in args.keys:
        w = WORKLOADS[key]
        for shape in (w.shapes_full if args.full else w.shapes_quick):
            for dtype in ("float32", "float64"):
                rows = measure(w, shape, dtype, args.target, peers)
                results += rows
                print(format_table(rows, triad).split("\n", 1)[1], flush=True)
    print()
    print(format_table(results, triad))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"triad_gbps": triad, "results": [r.__dict__ for r in results]}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
