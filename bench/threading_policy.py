"""Which threading setup keeps programs that mix BLAS and generated kernels fast?

    python bench/threading_policy.py

Runs (5 fresh processes per setup, this machine is shared and noisy) an MLP step (two BLAS matmuls around a tanh-GELU kernel and a row
softmax kernel, float32, x 512x1024, W1 1024x1024, W2 1024x10) in a fresh
process per setup and prints the median time. The choice in
targets/cpu.py (OpenMP layer, OMP_WAIT_POLICY=PASSIVE unless set) comes from
this script's output.
"""
import os
import subprocess
import sys

SCRIPT = r"""
import time, numpy as np, braze
from braze.targets import cpu_cache
def mlp(x, w1, w2):
    h = x @ w1
    h = 0.5 * h * (1.0 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
    z = h @ w2
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
rng = np.random.default_rng(0)
x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((512, 1024), (1024, 1024), (1024, 10)))
f = braze.compile(mlp, target="cpu")
f(x, w1, w2); cpu_cache.wait_background()
ts = []
for _ in range(40):
    t0 = time.perf_counter(); f(x, w1, w2); ts.append(time.perf_counter() - t0)
import numba
print(f"{np.median(ts) * 1e3:.2f} {numba.threading_layer()}")
"""

SETUPS = {
    "omp, OMP_WAIT_POLICY=PASSIVE (braze default)": {},
    "omp, OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "omp, GOMP default spin (unset)": {"OMP_WAIT_POLICY": ""},
    "omp, GOMP_SPINCOUNT=100000": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "100000"},
    "omp, GOMP_SPINCOUNT=10000": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "10000"},
    "workqueue": {"NUMBA_THREADING_LAYER": "workqueue"},
}


def main(runs=5):
    import statistics

    for name, extra in SETUPS.items():
        times = []
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        for k, v in extra.items():
            if v:
                env[k] = v
        if extra.get("OMP_WAIT_POLICY") == "":
            env["BRAZE_KEEP_OMP_DEFAULT"] = "1"
        for _ in range(runs):
            out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
            if out.returncode:
                times = None
                print(f"{name:45s} failed: {out.stderr.strip().splitlines()[-1]}")
                break
            times.append(float(out.stdout.split()[0]))
        if times:
            print(f"{name:45s} median of {runs} processes {statistics.median(times):7.2f} ms  "
                  f"(each: {', '.join(f'{t:.1f}' for t in times)})", flush=True)


if __name__ == "__main__":
    main()
