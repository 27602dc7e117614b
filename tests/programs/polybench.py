"""Polybench-style kernels, written as in the NumPy ports people share: loops
over columns and time steps, slice assignment into preallocated arrays."""
import numpy as np


def covariance(data):
    n, m = data.shape
    mean = np.mean(data, axis=0)
    data = data - mean
    cov = np.zeros((m, m), dtype=data.dtype)
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = data[:, i] @ data[:, i:m] / (n - 1.0)
    return cov


def jacobi_1d(A, B, tsteps):
    for t in range(1, tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


def jacobi_2d(A, B, tsteps):
    for t in range(1, tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def conv2d(image, weights):
    """A 'valid' 2-d convolution written as a loop over output pixels."""
    kh, kw = weights.shape
    h, w = image.shape[0] - kh + 1, image.shape[1] - kw + 1
    out = np.empty((h, w), dtype=image.dtype)
    for i in range(h):
        for j in range(w):
            out[i, j] = np.sum(image[i:i + kh, j:j + kw] * weights)
    return out


def trace_of_tanh(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    return trace


def _rng():
    return np.random.default_rng(42)


def _jacobi_args(n):
    rng = _rng()
    return (rng.random(n), rng.random(n))


def _jacobi2d_args(n):
    rng = _rng()
    return (rng.random((n, n)), rng.random((n, n)))


# name -> (function, make arguments (size -> tuple), static keywords, small size, bench size)
EXAMPLES = {
    "covariance": (covariance, lambda n: (_rng().random((2 * n, n)),), {}, 12, 200),
    "jacobi_1d": (jacobi_1d, _jacobi_args, {"tsteps": 20}, 30, 400_000),
    "jacobi_2d": (jacobi_2d, _jacobi2d_args, {"tsteps": 10}, 12, 500),
    "conv2d": (conv2d, lambda n: (_rng().random((n, n)), _rng().random((3, 3))), {}, 8, 40),
    "trace_of_tanh": (trace_of_tanh, lambda n: (_rng().random((n, n)),), {}, 20, 2_000),
}
