"""Textbook algorithms as people type them into NumPy: a prime sieve with a
branch per number, the Mandelbrot set by masked updates, Viterbi decoding,
Gaussian elimination with row swaps, Doolittle's LU, an elementary cellular
automaton on uint8 cells, Burgers' equation with np.roll, k-nearest
neighbours by argpartition and a vote per row, a rolling standard deviation
from cumulative sums, bilinear interpolation, masked column and row edits,
PageRank iterated to a tolerance, and a power spectrum of complex input."""
import numpy as np


def sieve(n):
    is_prime = np.ones(n + 1, dtype=bool)
    is_prime[:2] = False
    for i in range(2, int(n ** 0.5) + 1):
        if is_prime[i]:
            is_prime[i * i::i] = False
    return np.nonzero(is_prime)[0]


def mandelbrot(cr, ci, maxiter):
    zr = np.zeros_like(cr)
    zi = np.zeros_like(ci)
    count = np.zeros(cr.shape, dtype=np.int32)
    for _ in range(maxiter):
        mask = zr * zr + zi * zi < 4.0
        zr_new = zr[mask] ** 2 - zi[mask] ** 2 + cr[mask]
        zi[mask] = 2 * zr[mask] * zi[mask] + ci[mask]
        zr[mask] = zr_new
        count[mask] += 1
    return count


def viterbi(log_a, log_b, log_pi, obs):
    n_steps, n_states = len(obs), log_a.shape[0]
    delta = np.zeros((n_steps, n_states))
    psi = np.zeros((n_steps, n_states), dtype=np.int64)
    delta[0] = log_pi + log_b[:, obs[0]]
    for t in range(1, n_steps):
        scores = delta[t - 1][:, None] + log_a
        psi[t] = scores.argmax(axis=0)
        delta[t] = scores.max(axis=0) + log_b[:, obs[t]]
    path = np.zeros(n_steps, dtype=np.int64)
    path[-1] = delta[-1].argmax()
    for t in range(n_steps - 2, -1, -1):
        path[t] = psi[t + 1, path[t + 1]]
    return path, delta[-1].max()


def gauss_pivot(A, b):
    A = A.copy()
    b = b.copy()
    n = len(b)
    for k in range(n):
        p = np.argmax(np.abs(A[k:, k])) + k
        A[[k, p]] = A[[p, k]]
        b[[k, p]] = b[[p, k]]
        for i in range(k + 1, n):
            f = A[i, k] / A[k, k]
            A[i, k:] -= f * A[k, k:]
            b[i] -= f * b[k]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return x


def lu_doolittle(A):
    n = A.shape[0]
    L = np.eye(n)
    U = np.zeros_like(A)
    for i in range(n):
        for k in range(i, n):
            U[i, k] = A[i, k] - L[i, :i] @ U[:i, k]
        for k in range(i + 1, n):
            L[k, i] = (A[k, i] - L[k, :i] @ U[:i, i]) / U[i, i]
    return L, U


def dtw_distance(a, b):
    """Dynamic time warping of two series, the textbook double loop (Python's
    min of three neighbouring cells)."""
    n, m = len(a), len(b)
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = abs(a[i - 1] - b[j - 1])
            D[i, j] = cost + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[n, m]


def edit_distance(s, t):
    """Levenshtein distance of two symbol sequences, with NumPy's min of a list."""
    n, m = len(s), len(t)
    D = np.zeros((n + 1, m + 1), dtype=np.int64)
    D[:, 0] = np.arange(n + 1)
    D[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            substitute = D[i - 1, j - 1] + (s[i - 1] != t[j - 1])
            D[i, j] = np.min([D[i - 1, j] + 1, D[i, j - 1] + 1, substitute])
    return D[n, m]


def smith_waterman(a, b, match=2.0, mismatch=-1.0, gap=1.0):
    """The best local alignment score of two symbol sequences (NumPy's max of
    a list, with 0.0 among the scores)."""
    n, m = len(a), len(b)
    H = np.zeros((n + 1, m + 1))
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            s = np.where(a[i - 1] == b[j - 1], match, mismatch)
            H[i, j] = np.max([0.0, H[i - 1, j - 1] + s, H[i - 1, j] - gap, H[i, j - 1] - gap])
    return H.max()


def rule30(cells, steps):
    history = np.zeros((steps, cells.size), dtype=np.uint8)
    for t in range(steps):
        history[t] = cells
        left, right = np.roll(cells, 1), np.roll(cells, -1)
        cells = (left ^ (cells | right)).astype(np.uint8)
    return history


def burgers(u, steps, dt=0.01, dx=0.1, nu=0.05):
    for _ in range(steps):
        up, um = np.roll(u, -1), np.roll(u, 1)
        u = u - dt / dx * u * (u - um) + nu * dt / dx ** 2 * (up - 2 * u + um)
    return u


def knn_predict(X_train, y_train, X_test, k=3):
    d = ((X_test[:, None, :] - X_train[None, :, :]) ** 2).sum(-1)
    nearest = np.argpartition(d, k, axis=1)[:, :k]
    votes = y_train[nearest]
    return np.array([np.bincount(v).argmax() for v in votes])


def rolling_std(x, w):
    c1 = np.cumsum(np.insert(x, 0, 0.0))
    c2 = np.cumsum(np.insert(x * x, 0, 0.0))
    s1, s2 = c1[w:] - c1[:-w], c2[w:] - c2[:-w]
    return np.sqrt(np.maximum(s2 / w - (s1 / w) ** 2, 0))


def bilinear(img, xs, ys):
    x0, y0 = np.floor(xs).astype(int), np.floor(ys).astype(int)
    x1, y1 = np.clip(x0 + 1, 0, img.shape[1] - 1), np.clip(y0 + 1, 0, img.shape[0] - 1)
    x0, y0 = np.clip(x0, 0, img.shape[1] - 1), np.clip(y0, 0, img.shape[0] - 1)
    wa, wb = (x1 - xs) * (y1 - ys), (x1 - xs) * (ys - y0)
    wc, wd = (xs - x0) * (y1 - ys), (xs - x0) * (ys - y0)
    return wa * img[y0, x0] + wb * img[y1, x0] + wc * img[y0, x1] + wd * img[y1, x1]


def masked_edits(table):
    """Clean a table: rows flagged in column 0 lose their other fields,
    columns whose first row is negative are doubled, and one row is reset
    where its entries are large."""
    table = table.copy()
    table[table[:, 0] > 0.8, 1:] = -1.0
    table[:, table[0] < 0] *= 2
    table[0, table[0] > 0.5] = 0.5
    return table


def pagerank(M, d=0.85, tol=1e-10):
    n = M.shape[0]
    r = np.full(n, 1.0 / n)
    while True:
        r_new = (1 - d) / n + d * M @ r
        if np.abs(r_new - r).sum() < tol:
            return r_new
        r = r_new


def power_spectrum(z):
    """|z|^2 of complex samples, as a radio engineer would (complex in: NumPy's)."""
    return (np.abs(z) ** 2).mean(), np.angle(z).max()


def _rng():
    return np.random.default_rng(17)


def _mandel(n):
    cr, ci = np.meshgrid(np.linspace(-2, 1, n + 3), np.linspace(-1.5, 1.5, n))
    return cr, ci


def _hmm(n):
    rng = _rng()
    return (np.log(rng.dirichlet(np.ones(4), 4)), np.log(rng.dirichlet(np.ones(5), 4)), np.log(np.full(4, 0.25)),
            rng.integers(0, 5, n))


def _cells(n):
    cells = np.zeros(n, dtype=np.uint8)
    cells[n // 2] = 1
    return (cells,)


def _knn(n):
    rng = _rng()
    return rng.random((n, 2)), rng.integers(0, 3, n), rng.random((n // 4 + 1, 2))


def _link_matrix(n):
    M = _rng().random((n, n))
    return (M / M.sum(axis=0),)


# name -> (function, make arguments (size -> tuple), static keywords, small size, bench size)
EXAMPLES = {
    "sieve": (sieve, lambda n: (), {"n": 2000}, 0, 0),
    "mandelbrot": (mandelbrot, _mandel, {"maxiter": 20}, 10, 400),
    "viterbi": (viterbi, _hmm, {}, 12, 400),
    "gauss_pivot": (gauss_pivot, lambda n: (_rng().random((n, n)), _rng().random(n)), {}, 5, 30),
    "lu_doolittle": (lu_doolittle, lambda n: (_rng().random((n, n)) + n * np.eye(n),), {}, 5, 30),
    "rule30": (rule30, _cells, {"steps": 16}, 31, 100_001),
    "dtw_distance": (dtw_distance, lambda n: (_rng().standard_normal(n), _rng().standard_normal(n + 3)), {}, 6, 40),
    "smith_waterman": (smith_waterman, lambda n: (_rng().integers(0, 4, n), _rng().integers(0, 4, n + 1)), {}, 9, 40),
    "edit_distance": (edit_distance, lambda n: (_rng().integers(0, 4, n), _rng().integers(0, 4, n + 2)), {}, 6, 40),
    "burgers": (burgers, lambda n: (np.sin(np.linspace(0, 2 * np.pi, n)),), {"steps": 20}, 32, 1_000_000),
    "knn_predict": (knn_predict, _knn, {}, 20, 2000),
    "rolling_std": (rolling_std, lambda n: (_rng().random(n),), {"w": 5}, 30, 1_000_000),
    "bilinear": (bilinear, lambda n: (_rng().random((8, 9)), _rng().random(n) * 8, _rng().random(n) * 7), {}, 15,
                 1_000_000),
    "masked_edits": (masked_edits, lambda n: (_rng().standard_normal((n, 6)),), {}, 9, 200_000),
    "pagerank": (pagerank, _link_matrix, {}, 6, 300),
    "power_spectrum": (power_spectrum, lambda n: (_rng().random(n) + 1j * _rng().random(n),), {}, 8, 100_000),
}
