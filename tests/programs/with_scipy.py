"""Programs with a SciPy call in the middle of the NumPy work, written the way
their authors would: braze runs the SciPy call as a graph break between
compiled regions."""
import numpy as np
import scipy.linalg
import scipy.ndimage
import scipy.special
from scipy.linalg import lapack


def implicit_vertical_mixing(temp, kappa, dz, dt):
    """An ocean model's implicit vertical diffusion: coefficients from stencils,
    one tridiagonal solve per water column (LAPACK's dgtsv), then a flux."""
    nz = temp.shape[-1]
    a = np.zeros_like(temp)
    b = np.ones_like(temp)
    c = np.zeros_like(temp)
    a[:, 1:] = -dt * kappa[:, :-1] / (dz[1:] * dz[:-1])
    c[:, :-1] = -dt * kappa[:, :-1] / (dz[:-1] * dz[:-1])
    b[:, :] = 1 - a - c
    out = np.empty_like(temp)
    for i in range(temp.shape[0]):
        _, _, _, x, info = lapack.dgtsv(a[i, 1:], b[i], c[i, :-1], temp[i])
        out[i] = x
    flux = kappa[:, :-1] * (out[:, 1:] - out[:, :-1]) / dz[:-1]
    return out, flux.sum(axis=-1) / nz


def logistic_layer(x, w, b):
    z = x @ w + b
    p = scipy.special.expit(z)
    return p * (1 - p), scipy.special.logsumexp(z, axis=1)


def logistic_fit(X, y, steps):
    """Gradient descent on a logistic regression, SciPy's sigmoid in the loop."""
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        p = scipy.special.expit(X @ w)
        w = w - 0.5 * X.T @ (p - y) / len(y)
    return w, scipy.special.expit(X @ w).mean()


def smoothed_edges(img, sigma):
    blurred = scipy.ndimage.gaussian_filter(img, sigma)
    gx = blurred[1:-1, 2:] - blurred[1:-1, :-2]
    gy = blurred[2:, 1:-1] - blurred[:-2, 1:-1]
    return np.hypot(gx, gy) / (np.abs(blurred[1:-1, 1:-1]).max() + 1e-12)


def whitened_solve(A, b):
    L = scipy.linalg.cholesky(A, lower=True)
    y = scipy.linalg.solve_triangular(L, b, lower=True)
    return np.sqrt(np.sum(y * y)), y / np.linalg.norm(y)


def _rng():
    return np.random.default_rng(5)


def _column(n):
    rng = _rng()
    return (rng.random((n, 12)) * 10, 1e-3 + rng.random((n, 12)) * 1e-2, np.linspace(1.0, 2.0, 12), 60.0)


def _spd(n):
    m = _rng().standard_normal((n, n))
    return m @ m.T + n * np.eye(n), np.arange(n, dtype=float)


EXAMPLES = {
    "implicit_vertical_mixing": (implicit_vertical_mixing, _column, {}, 4, 2000),
    "logistic_layer": (logistic_layer, lambda n: (_rng().standard_normal((n, 8)), _rng().standard_normal((8, 3)),
                                                  _rng().standard_normal(3)), {}, 10, 100_000),
    "logistic_fit": (logistic_fit, lambda n: (_rng().standard_normal((n, 4)), (_rng().random(n) > 0.5) * 1.0),
                     {"steps": 25}, 40, 100_000),
    "smoothed_edges": (smoothed_edges, lambda n: (_rng().random((n, n)), 1.5), {}, 16, 1000),
    "whitened_solve": (whitened_solve, _spd, {}, 6, 500),
}
