"""Everyday NumPy: recursive filters, the Thomas algorithm and a Lorenz integrator as Python loops,
a scalar accumulated element by element, ``+=`` into an overlapping view,
padding, ``searchsorted`` + ``bincount``, fancy-indexed log-likelihoods,
ranks by ``argsort`` twice, float32 image and batch-norm code."""
import numpy as np


def ema(x, alpha):
    """Exponential moving average, the loop every quant writes first."""
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, len(x)):
        out[t] = alpha * x[t] + (1 - alpha) * out[t - 1]
    return out


def tridiag_solve(a, b, c, d):
    """Thomas algorithm: a forward sweep and a back substitution, element by element."""
    n = len(d)
    cp = np.zeros(n)
    dp = np.zeros(n)
    x = np.zeros(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x[-1] = dp[-1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


def lorenz_arrays(x0, y0, z0, dt, n):
    """Forward Euler on the Lorenz system, each variable an array indexed by step."""
    x, y, z = np.empty(n), np.empty(n), np.empty(n)
    x[0], y[0], z[0] = x0, y0, z0
    for i in range(1, n):
        x[i] = x[i - 1] + dt * 10.0 * (y[i - 1] - x[i - 1])
        y[i] = y[i - 1] + dt * (x[i - 1] * (28.0 - z[i - 1]) - y[i - 1])
        z[i] = z[i - 1] + dt * (x[i - 1] * y[i - 1] - 8.0 / 3.0 * z[i - 1])
    return x, y, z


def trapz_loop(f, x):
    """The trapezoidal rule, summed into a Python float."""
    total = 0.0
    for i in range(len(x) - 1):
        total += 0.5 * (f[i] + f[i + 1]) * (x[i + 1] - x[i])
    return total


def diffuse_inplace(u, steps):
    """Explicit diffusion by ``+=`` into a view the right-hand side overlaps."""
    for _ in range(steps):
        u[1:-1] += 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u


def laplacian_pad(u):
    p = np.pad(u, 1, mode="edge")
    return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * u


def sobel_magnitude(img):
    gx = (img[:-2, 2:] + 2 * img[1:-1, 2:] + img[2:, 2:]) - (img[:-2, :-2] + 2 * img[1:-1, :-2] + img[2:, :-2])
    gy = (img[2:, :-2] + 2 * img[2:, 1:-1] + img[2:, 2:]) - (img[:-2, :-2] + 2 * img[:-2, 1:-1] + img[:-2, 2:])
    return np.hypot(gx, gy)


def bucket_counts(x, edges):
    idx = np.searchsorted(edges, x)
    return np.bincount(idx, minlength=len(edges) + 1)


def nll_of_labels(logits, y):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean()


def logistic_regression_gd(X, y, lr, iters):
    w = np.zeros(X.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        w -= lr * X.T @ (p - y) / len(y)
    return w


def ranks(x):
    return np.argsort(np.argsort(x, kind="stable"), kind="stable")


def batchnorm_train(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=0)
    var = x.var(axis=0)
    xhat = (x - mu) / np.sqrt(var + eps)
    return gamma * xhat + beta, mu, var


def _rng():
    return np.random.default_rng(11)


def _tridiag(n):
    r = _rng()
    return r.random(n), r.random(n) + 4.0, r.random(n), r.random(n)


EXAMPLES = {
    "ema": (ema, lambda n: (_rng().random(n), 0.1), {}, 40, 2000),
    "tridiag_solve": (tridiag_solve, _tridiag, {}, 30, 1000),
    "lorenz_arrays": (lorenz_arrays, lambda n: (1.0, 1.0, 1.0, 0.01), {"n": 500}, 0, 0),
    "trapz_loop": (trapz_loop, lambda n: (_rng().random(n), np.sort(_rng().random(n))), {}, 50, 2000),
    "diffuse_inplace": (diffuse_inplace, lambda n: (_rng().random(n),), {"steps": 10}, 50, 1_000_000),
    "laplacian_pad": (laplacian_pad, lambda n: (_rng().random((n, n + 3)),), {}, 12, 2000),
    "sobel_magnitude": (sobel_magnitude, lambda n: (_rng().random((n, n + 5)).astype(np.float32),), {}, 12, 2000),
    "bucket_counts": (bucket_counts, lambda n: (_rng().random(n), np.linspace(0.1, 0.9, 5)), {}, 100, 1_000_000),
    "nll_of_labels": (nll_of_labels, lambda n: (_rng().standard_normal((n, 7)) * 1e3, _rng().integers(0, 7, n)),
                      {}, 50, 200_000),
    "logistic_regression_gd": (logistic_regression_gd, lambda n: (_rng().standard_normal((n, 4)),
                                                                  (_rng().random(n) > 0.5).astype(float), 0.5),
                               {"iters": 20}, 60, 100_000),
    "ranks": (ranks, lambda n: (_rng().integers(0, 10, n).astype(float),), {}, 50, 1_000_000),
    "batchnorm_train": (batchnorm_train, lambda n: (_rng().standard_normal((n, 8)).astype(np.float32),
                                                    np.ones(8, np.float32), np.zeros(8, np.float32)),
                        {}, 64, 500_000),
}
