"""Every test, the way CI runs them: ``python tests/run.py [PYTEST ARGS...]``.

Two pytest processes side by side: the main suite (``python -m pytest``, with
any arguments given here) and the cuda target's suite on numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``: the
variable must be set before numba is imported, hence a process of its own).
Most of either is single-threaded (numba compiling, the simulator's Python
threads), so on two cores the pair takes about as long as the longer one
rather than the sum. The simulator's output is kept in a file and printed
after the main suite's, so the two never interleave; the exit status is
non-zero when either failed."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    with tempfile.TemporaryFile("w+") as log:
        sim = subprocess.Popen([sys.executable, "-m", "pytest", "tests/cuda"], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            main_rc = subprocess.call([sys.executable, "-m", "pytest", *argv], cwd=ROOT)
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
