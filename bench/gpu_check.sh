#!/usr/bin/env bash
# The cuda target on a real NVIDIA GPU, in one command (for a session lent a
# GPU machine, or anyone with one): the environment, the cuda test suite on the
# hardware, the GPU benchmark against PyTorch eager and CuPy, and the dispatch
# cost. Every stage has its own time limit so a hang in one still leaves the
# others' output; logs go to $OUT (or ./gpu-check-out).
#
#   bash bench/gpu_check.sh            # uses the python3 on PATH, installs braze into it (no network needed)
#
# It installs nothing from the network: numba-cuda, numpy, pytest,
# pytest-benchmark, pytest-xdist, torch and cupy must be there already (they
# are on the workplace's GPU image).
set -u
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 BRAZE_TEST_CUDA=1 BRAZE_CACHE_DIR=/tmp/braze-gpu-cache
PY=${PYTHON:-python3}
stage() { echo; echo "=== $1 ($(date +%T))"; }

# numba-cuda 0.2x registers an overload for np.row_stack, which NumPy 2.5
# removed: on an image pairing the two, give NumPy the alias back (vstack is
# what row_stack was) before numba-cuda is imported. Nothing of braze's.
SHIM=$(mktemp -d)
printf '%s\n' 'import numpy' 'if not hasattr(numpy, "row_stack"):' '    numpy.row_stack = numpy.vstack' \
    > "$SHIM/sitecustomize.py"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"

stage environment
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
$PY - <<'EOF'
import numpy, numba
from numba import cuda
print("numpy", numpy.__version__, "numba", numba.__version__)
try:
    import numba_cuda; print("numba-cuda", numba_cuda.__version__)
except Exception as e:
    print("numba-cuda version unknown:", e)
print("cuda available:", cuda.is_available())
d = cuda.get_current_device(); print("device:", d.name, "cc", d.compute_capability)
for name in ("torch", "cupy"):
    try:
        m = __import__(name); print(name, m.__version__)
    except Exception as e:
        print(name, "missing:", e)
EOF

stage "install braze (no deps, no index)"
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -3

stage "tests/cuda on the GPU"
timeout "${CUDA_TESTS_S:-300}" $PY -m pytest tests/cuda -q -n "${XDIST:-8}" -p no:cacheprovider \
    --timeout=150 -o addopts="" -rfE 2>&1 | tee "$OUT/cuda_tests.log" | tail -80
echo "tests/cuda exit: ${PIPESTATUS[0]}"

stage "dispatch: 8 float32 elements, device arrays in and out"
timeout 60 $PY - <<'EOF' 2>&1 | tee "$OUT/dispatch.log"
import time, numpy as np, braze
from numba import cuda
f = braze.compile(lambda x, y: np.tanh(x) * y + 1.0, target="cuda")
x = cuda.to_device(np.arange(8, dtype=np.float32)); y = cuda.to_device(np.ones(8, np.float32))
f(x, y); cuda.synchronize()
ts = []
for _ in range(2000):
    t0 = time.perf_counter(); r = f(x, y); cuda.synchronize(); ts.append(time.perf_counter() - t0)
print(f"dispatch median {np.median(ts) * 1e6:.1f} us, p10 {np.percentile(ts, 10) * 1e6:.1f} us")
np.testing.assert_allclose(r.copy_to_host(), np.tanh(np.arange(8, dtype=np.float32)) + 1.0, rtol=1e-6)
EOF

stage "bench/test_cuda.py: braze vs PyTorch eager vs CuPy"
timeout "${CUDA_BENCH_S:-200}" $PY -m pytest bench/test_cuda.py -q -s -p no:cacheprovider -o addopts="" \
    --benchmark-disable-gc 2>&1 | tee "$OUT/cuda_bench.log" | grep -E "GB/s|passed|failed|Error|error" | head -60
echo "bench exit: ${PIPESTATUS[0]}"
stage done
