"""``braze bench``: the standard workloads on this machine, against NumPy and peers.

Runs every workload of ``braze.workloads`` (checked for correctness first)
with NumPy, braze and whichever peers are installed (numexpr,
``numba.njit(parallel=True)`` on the same source, ``jax.jit``,
``torch.compile``), next to a STREAM-style triad measured in the same run,
and prints a table per workload. ``--json``, ``--markdown`` and ``--plot``
(a roofline and a speedup chart; needs matplotlib) write the results.
"""
from __future__ import annotations

import json
import sys
import time

from . import workloads as W

# Arithmetic per element (flops, with exp/tanh counted as 10), for the roofline.
FLOPS_PER_ELEMENT = {"A": 14, "B": 15, "C": 9, "D": 20, "F": 13, "G": 17}
TINY = {"A": [(4096,)], "B": [(64, 128)], "C": [(64, 128)], "D": [(4096,)], "F": [(64, 128)], "G": [(64, 128)]}


def _progress(i: int, n: int, label: str) -> None:
    width = 24
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label:<48.48s}")
    sys.stderr.flush()


def run(target: str = "cpu", full: bool = False, peers=None, tiny: bool = False,
        dtypes=("float32", "float64"), min_time: float = 0.2) -> dict:
    """Measure every workload; returns {"triad_gbps", "results", "peers"}."""
    status = W.available_peers()
    peers = tuple(p for p in (peers or status) if p in status)
    cases = []
    for key, w in W.WORKLOADS.items():
        shapes = TINY[key] if tiny else (w.shapes_full if full else w.shapes_quick)
        for shape in shapes:
            for dtype in dtypes:
                cases.append((w, shape, dtype))
    _progress(0, len(cases) + 1, "STREAM triad")
    triad = W.triad_gbps(n=200_000 if tiny else 20_000_000)
    results = []
    for i, (w, shape, dtype) in enumerate(cases, 1):
        _progress(i, len(cases) + 1, f"{w.name} {'x'.join(map(str, shape))} {dtype}")
        results += W.measure(w, shape, dtype, target, peers, min_time=0.02 if tiny else min_time)
    _progress(len(cases) + 1, len(cases) + 1, "done")
    sys.stderr.write("\n")
    return {"triad_gbps": triad, "results": results,
            "peers": {p: (status[p] or "installed") for p in status}}


def tables(report: dict) -> str:
    out = [f"STREAM triad (float64, numba parallel): {report['triad_gbps']:.1f} GB/s",
           "peers: " + ", ".join(f"{p} ({why})" for p, why in report["peers"].items()), ""]
    by_workload: dict[str, list] = {}
    for r in report["results"]:
        by_workload.setdefault(r.workload, []).append(r)
    for key, rows in by_workload.items():
        out.append(f"== {W.WORKLOADS[key].name} ==")
        out.append(W.format_table(rows, report["triad_gbps"]))
        out.append("")
    return "\n".join(out)


def markdown(report: dict) -> str:
    lines = [f"STREAM triad: {report['triad_gbps']:.1f} GB/s", "",
             "| workload | shape | dtype | impl | median ms | vs NumPy | GB/s | % triad | first call s | kernels |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        shape = "x".join(map(str, r.shape))
        if r.skipped:
            lines.append(f"| {W.WORKLOADS[r.workload].name} | {shape} | {r.dtype} | {r.impl} | skipped: {r.skipped} | | | | | |")
        else:
            lines.append(f"| {W.WORKLOADS[r.workload].name} | {shape} | {r.dtype} | {r.impl} | {r.median_s * 1e3:.3f} | "
                         f"{r.speedup:.2f}x | {r.gbps:.1f} | {100 * r.gbps / report['triad_gbps']:.0f}% | "
                         f"{r.first_call_s:.3f} | {r.extra.get('kernels', '')} |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: str) -> None:
    """Roofline (arithmetic intensity against achieved GB/s, with the triad
    line) and speedup-over-NumPy bars, side by side, as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("braze bench --plot needs matplotlib: pip install 'braze[plot]' (or matplotlib)") from None
    ok = [r for r in report["results"] if not r.skipped]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    impls = sorted({r.impl for r in ok})
    for impl in impls:
        rows = [r for r in ok if r.impl == impl]
        xs = [FLOPS_PER_ELEMENT[r.workload] / (8 if r.dtype == "float64" else 4) / 2 for r in rows]
        ax1.scatter(xs, [r.gbps for r in rows], label=impl, s=30)
    ax1.axhline(report["triad_gbps"], color="k", linestyle="--", label=f"triad {report['triad_gbps']:.1f} GB/s")
    ax1.set_xscale("log")
    ax1.set_xlabel("arithmetic intensity (flop per byte moved)")
    ax1.set_ylabel("achieved GB/s")
    ax1.set_title("roofline: memory traffic achieved")
    ax1.legend(fontsize=8)
    labels = sorted({(r.workload, "x".join(map(str, r.shape)), r.dtype) for r in ok})
    width = 0.8 / max(len(impls), 1)
    for k, impl in enumerate(impls):
        vals = []
        for wl, shape, dtype in labels:
            match = [r.speedup for r in ok if r.impl == impl and (r.workload, "x".join(map(str, r.shape)), r.dtype) == (wl, shape, dtype)]
            vals.append(match[0] if match else 0)
        ax2.bar([i + k * width for i in range(len(labels))], vals, width, label=impl)
    ax2.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax2.set_xticklabels([f"{wl} {shape}\n{dtype[:1]}{dtype[-2:]}" for wl, shape, dtype in labels], fontsize=7, rotation=45)
    ax2.set_ylabel("speedup over NumPy")
    ax2.set_yscale("log")
    ax2.set_title("speedup over NumPy (same run)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(args) -> int:
    t0 = time.perf_counter()
    peers = args.peers.split(",") if args.peers else None
    report = run(args.target, full=args.full, peers=peers, tiny=args.tiny)
    print(tables(report))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"triad_gbps": report["triad_gbps"], "peers": report["peers"],
                       "results": [r.__dict__ for r in report["results"]]}, f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report))
    if args.plot:
        plot(report, args.plot)
    return 0
