"""How accurate are float sums: NumPy's pairwise summation against braze's
vectorized blocks (256 elements, the partials added in float64; float64
sums Neumaier-compensated), on 1e6 to 1e8 elements.

The reference is the exact sum (``math.fsum`` of the float64 values). A
sum's rounding error scales with the sum of magnitudes, not with the result
(a cancelling sum has a tiny result and the same error budget), so the
error is reported relative to ``sum(|x|)``, in thousandths of the dtype's
epsilon, averaged over several random arrays (one array says little: the
errors of both methods are random walks). The last column is the rounding
of the exact sum to the dtype alone: no method can do better than it.

Run: ``python bench/sum_accuracy.py`` (about two minutes);
``--quick`` for 1e6 and 1e7 only.
"""
from __future__ import annotations

import math
import sys

import numpy as np

import braze

CASES = {
    "uniform [0, 1)": lambda rng, n: rng.random(n),
    "normal (cancelling)": lambda rng, n: rng.standard_normal(n),
    "magnitudes 1e-3..1e3, mixed signs": lambda rng, n: np.exp(rng.uniform(-7, 7, n)) * rng.choice([-1.0, 1.0], n),
}


def main(sizes=(10**6, 10**7, 10**8)) -> None:
    full = braze.compile(lambda x: x.sum(), target="cpu")
    rows = braze.compile(lambda x: x.sum(axis=-1), target="cpu")
    rng = np.random.default_rng(0)
    print("Mean |error| / (eps * sum|x|) x 1000 over the trials (lower is better):\n")
    print("| dtype | n | data | trials | NumPy (pairwise) | braze full sum | braze row sum | exact, rounded |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype in (np.float32, np.float64):
        eps = float(np.finfo(dtype).eps)
        for n in sizes:
            trials = {10**6: 40, 10**7: 10}.get(n, 3)
            for name, make in CASES.items():
                errors = []
                for _ in range(trials):
                    x = make(rng, n).astype(dtype)
                    exact = math.fsum(x.astype(np.float64))
                    scale = float(np.abs(x).astype(np.float64).sum()) * eps / 1e3
                    values = (np.sum(x), full(x), rows(x.reshape(1, -1))[0], dtype(exact))
                    errors.append([abs(float(v) - exact) / scale for v in values])
                mean = np.mean(errors, axis=0)
                print(f"| {np.dtype(dtype).name} | {n:.0e} | {name} | {trials} | "
                      + " | ".join(f"{e:.3f}" for e in mean) + " |")


if __name__ == "__main__":
    main((10**6, 10**7) if "--quick" in sys.argv else (10**6, 10**7, 10**8))
