"""The ``braze`` command line.

``braze`` (or ``braze demo``) compiles a small NumPy layer on every
available target, checks it against NumPy and prints its graph;
``braze targets`` lists the targets.
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


def targets(args) -> int:
    from braze.targets import available

    for name, target in available().items():
        state = "available" if target.is_available() else "unavailable"
        print(f"{name:8s} {state:12s} {target.describe()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="braze", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("demo", help="compile a NumPy layer, check it, print its graph (default)")
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=20)
    sub.add_parser("targets", help="list targets and their availability")
    args = parser.parse_args(argv)
    if args.command in (None, "demo"):
        if args.command is None:
            args = parser.parse_args(["demo"] + list(argv or []))
        return demo(args)
    return {"targets": targets}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
