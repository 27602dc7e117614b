"""Every test, the way CI runs them: ``python tests/run.py [PYTEST ARGS...]``.

Two pytest processes side by side: the main suite (``python -m pytest``, with
any arguments given here) and the cuda target's suite on numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``: the
variable must be set before numba is imported, hence a process of its own).
Most of either is single-threaded (numba compiling, the simulator's Python
threads), so the main suite itself runs on every core too (pytest-xdist,
``-n <cores> --dist loadfile``: each test file in one worker, in its order),
unless the arguments choose (``-n 0`` runs it in one process). On two cores
the whole takes about half the sum of the two suites' times (it took the sum
of the main suite's and its start-up: 30 minutes). The simulator's output is
kept in a file and printed after the main suite's, so the two never
interleave; the exit status is non-zero when either failed."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _workers(argv: list[str]) -> list[str]:
    """xdist's options for the main suite, or none where the caller gave ``-n``
    or the plugin is not installed."""
    if any(a == "-n" or a.startswith(("-n", "--numprocesses", "--dist")) for a in argv):
        return []
    try:
        import xdist  # noqa: F401
    except ImportError:
        return []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return ["-n", str(max(cores, 1)), "--dist", "loadfile"] if cores > 1 else []


def main(argv: list[str]) -> int:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    with tempfile.TemporaryFile("w+") as log:
        sim = subprocess.Popen([sys.executable, "-m", "pytest", "tests/cuda"], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            main_rc = subprocess.call([sys.executable, "-m", "pytest", *_workers(argv), *argv], cwd=ROOT)
            sim_rc = sim.wait()
        except KeyboardInterrupt:
            return 130
        finally:
            if sim.poll() is None:  # interrupted: take the simulator run down with us
                sim.kill()
                sim.wait()
        log.seek(0)
        print("\n==== the cuda target on numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1 "
              "python -m pytest tests/cuda) ====", flush=True)
        sys.stdout.write(log.read())
    print(f"\nmain suite: {'passed' if main_rc == 0 else f'FAILED (exit {main_rc})'}; "
          f"cuda simulator suite: {'passed' if sim_rc == 0 else f'FAILED (exit {sim_rc})'}", flush=True)
    return main_rc or sim_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
