"""Scientific-computing snippets in the styles people write them: masks and
histograms in statistics, finite differences, ODE steps, particle codes,
small linear-algebra routines with loops over columns."""
import numpy as np


def masked_trapezoid(x, y, lo, hi):
    """Integrate y(x) over lo <= x <= hi with the trapezoid rule on the points inside."""
    mask = (x >= lo) & (x <= hi)
    xs, ys = x[mask], y[mask]
    return np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2.0)


def radial_histogram(image, nbins):
    h, w = image.shape
    yy, xx = np.indices((h, w))
    r = np.sqrt((xx - w / 2) ** 2 + (yy - h / 2) ** 2)
    counts, edges = np.histogram(r, bins=nbins, weights=image)
    norm, _ = np.histogram(r, bins=nbins)
    return counts / np.maximum(norm, 1), edges


def zscore_columns(data):
    mu = data.mean(axis=0)
    sd = data.std(axis=0)
    sd[sd == 0] = 1.0
    return (data - mu) / sd


def running_mean(x, w):
    c = np.cumsum(np.insert(x, 0, 0.0))
    return (c[w:] - c[:-w]) / w


def game_of_life(board, steps):
    for _ in range(steps):
        n = sum(np.roll(np.roll(board, i, 0), j, 1) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0))
        board = ((n == 3) | ((board == 1) & (n == 2))).astype(board.dtype)
    return board


def lorenz_rk4(state, dt, steps, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    def f(s):
        x, y, z = s[0], s[1], s[2]
        return np.array([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])

    for _ in range(steps):
        k1 = f(state)
        k2 = f(state + dt / 2 * k1)
        k3 = f(state + dt / 2 * k2)
        k4 = f(state + dt * k3)
        state = state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return state


def nbody_accelerations(pos, mass, soft):
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d ** 2).sum(-1) + soft ** 2
    inv_r3 = r2 ** -1.5
    np.fill_diagonal(inv_r3, 0.0)
    return (d * (mass[None, :, None] * inv_r3[:, :, None])).sum(1)


def gradient_magnitude(img):
    gy, gx = np.gradient(img)
    return np.hypot(gx, gy)


def gram_schmidt(A):
    n = A.shape[1]
    Q = np.zeros_like(A)
    for j in range(n):
        v = A[:, j].copy()
        for i in range(j):
            v -= (Q[:, i] @ A[:, j]) * Q[:, i]
        Q[:, j] = v / np.linalg.norm(v)
    return Q


def power_iteration(A, iters):
    b = np.ones(A.shape[1])
    for _ in range(iters):
        b = A @ b
        b = b / np.linalg.norm(b)
    return b @ A @ b, b


def cholesky_solve(A, b):
    L = np.linalg.cholesky(A)
    y = np.linalg.solve(L, b)
    return np.linalg.solve(L.T, y)


def percentile_clip(x, q):
    lo, hi = np.percentile(x, [q, 100 - q])
    return np.clip(x, lo, hi)


def _rng():
    return np.random.default_rng(3)


def _spd(n):
    m = _rng().standard_normal((n, n))
    return (m @ m.T + n * np.eye(n),)


EXAMPLES = {
    "masked_trapezoid": (masked_trapezoid, lambda n: (np.linspace(0, 3, n), np.sin(np.linspace(0, 3, n)), 0.5, 2.0),
                         {}, 50, 1_000_000),
    "radial_histogram": (radial_histogram, lambda n: (_rng().random((n, n)),), {"nbins": 8}, 16, 1000),
    "zscore_columns": (zscore_columns, lambda n: (np.c_[_rng().random((n, 3)), np.ones(n)],), {}, 10, 100_000),
    "running_mean": (running_mean, lambda n: (_rng().random(n),), {"w": 5}, 30, 1_000_000),
    "game_of_life": (game_of_life, lambda n: ((_rng().random((n, n)) < 0.3).astype(np.int64),), {"steps": 4},
                     12, 500),
    "lorenz_rk4": (lorenz_rk4, lambda n: (np.array([1.0, 1.0, 1.0]), 0.01), {"steps": 50}, 0, 0),
    "nbody_accelerations": (nbody_accelerations, lambda n: (_rng().standard_normal((n, 3)), _rng().random(n), 0.1),
                            {}, 8, 500),
    "gradient_magnitude": (gradient_magnitude, lambda n: (_rng().random((n, n)),), {}, 9, 2000),
    "gram_schmidt": (gram_schmidt, lambda n: (_rng().standard_normal((n + 2, n)),), {}, 5, 60),
    "power_iteration": (power_iteration, _spd, {"iters": 30}, 6, 500),
    "cholesky_solve": (cholesky_solve, lambda n: _spd(n) + (np.arange(n, dtype=float),), {}, 5, 500),
    "percentile_clip": (percentile_clip, lambda n: (_rng().standard_normal(n), 5.0), {}, 40, 1_000_000),
}
