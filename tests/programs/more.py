"""More programs in everyday styles: image sampling, signal filters, option
pricing, fractals, wave and diffusion steps, optimizers, PCA, encodings."""
import numpy as np


def bilinear_sample(img, xs, ys):
    x0 = np.floor(xs).astype(int)
    y0 = np.floor(ys).astype(int)
    x1 = np.clip(x0 + 1, 0, img.shape[1] - 1)
    y1 = np.clip(y0 + 1, 0, img.shape[0] - 1)
    x0 = np.clip(x0, 0, img.shape[1] - 1)
    y0 = np.clip(y0, 0, img.shape[0] - 1)
    wx, wy = xs - np.floor(xs), ys - np.floor(ys)
    top = img[y0, x0] * (1 - wx) + img[y0, x1] * wx
    bottom = img[y1, x0] * (1 - wx) + img[y1, x1] * wx
    return top * (1 - wy) + bottom * wy


def fir_filter(signal, taps):
    n = len(taps)
    out = np.zeros(len(signal) - n + 1)
    for k in range(n):
        out += taps[k] * signal[k:k + len(out)]
    return out


def moving_average(x, w):
    return np.convolve(x, np.ones(w) / w, mode="valid")


def logsumexp_rows(a):
    m = np.max(a, axis=1, keepdims=True)
    return (m + np.log(np.sum(np.exp(a - m), axis=1, keepdims=True))).ravel()


def cosine_similarity(X):
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    Xn = X / np.where(norms == 0, 1, norms)
    return Xn @ Xn.T


def pairwise_distances(A, B):
    sq = (A ** 2).sum(1)[:, None] + (B ** 2).sum(1)[None, :] - 2 * A @ B.T
    return np.sqrt(np.maximum(sq, 0.0))


def _norm_cdf(x):
    # the tanh approximation of the normal CDF, as quick pricing scripts write it
    return 0.5 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def black_scholes_call(S, K, T, r, sigma):
    d1 = (np.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * np.sqrt(T))
    d2 = d1 - sigma * np.sqrt(T)
    return S * _norm_cdf(d1) - K * np.exp(-r * T) * _norm_cdf(d2)


def mandelbrot(c, iters):
    z = np.zeros_like(c)
    count = np.zeros(c.shape, dtype=np.int64)
    for _ in range(iters):
        inside = np.abs(z) <= 2.0
        z = np.where(inside, z * z + c, z)
        count += inside
    return count


def wave_1d(u, u_prev, c, steps):
    for _ in range(steps):
        u_next = u.copy()
        u_next[1:-1] = 2 * u[1:-1] - u_prev[1:-1] + c ** 2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        u_prev, u = u, u_next
    return u


def adam_quadratic(x, A, b, lr, steps):
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        g = A @ x - b
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        mhat = m / (1 - beta1 ** t)
        vhat = v / (1 - beta2 ** t)
        x = x - lr * mhat / (np.sqrt(vhat) + eps)
    return x


def pca_project(X, k):
    Xc = X - X.mean(axis=0)
    cov = np.cov(Xc, rowvar=False)
    vals, vecs = np.linalg.eigh(cov)
    top = vecs[:, np.argsort(vals)[::-1][:k]]
    return Xc @ top


def one_hot(labels, n):
    return np.eye(n)[labels]


def interp_table(x, xp, fp):
    return np.interp(x, xp, fp) * 2.0


def bincount_weights(idx, w, n):
    return np.bincount(idx, weights=w, minlength=n)[:n]


def _rng():
    return np.random.default_rng(9)


EXAMPLES = {
    "bilinear_sample": (bilinear_sample, lambda n: (_rng().random((n, n)), _rng().random(4 * n) * (n - 1),
                                                    _rng().random(4 * n) * (n - 1)), {}, 8, 2000),
    "fir_filter": (fir_filter, lambda n: (_rng().standard_normal(n), np.hanning(7)), {}, 30, 1_000_000),
    "moving_average": (moving_average, lambda n: (_rng().random(n),), {"w": 4}, 20, 1_000_000),
    "logsumexp_rows": (logsumexp_rows, lambda n: (_rng().standard_normal((n, 6)) * 50,), {}, 5, 100_000),
    "cosine_similarity": (cosine_similarity, lambda n: (np.r_[_rng().standard_normal((n, 4)), np.zeros((1, 4))],),
                          {}, 5, 1000),
    "pairwise_distances": (pairwise_distances, lambda n: (_rng().standard_normal((n, 3)),
                                                          _rng().standard_normal((n + 1, 3))), {}, 6, 1000),
    "black_scholes_call": (black_scholes_call, lambda n: (_rng().random(n) * 50 + 50, 100.0, 0.5, 0.01,
                                                          _rng().random(n) * 0.3 + 0.1), {}, 10, 1_000_000),
    "mandelbrot": (mandelbrot, lambda n: (np.linspace(-2, 1, n)[None, :] + 0 * np.linspace(-1, 1, n)[:, None],),
                   {"iters": 20}, 8, 500),
    "wave_1d": (wave_1d, lambda n: (np.sin(np.linspace(0, np.pi, n)), np.sin(np.linspace(0, np.pi, n)), 0.5),
                {"steps": 15}, 12, 1_000_000),
    "adam_quadratic": (adam_quadratic, lambda n: (np.zeros(n), np.eye(n) * 2 + 0.1, np.arange(n, dtype=float), 0.1),
                       {"steps": 20}, 4, 200),
    "pca_project": (pca_project, lambda n: (_rng().standard_normal((n, 4)) @ np.diag([3.0, 2.0, 1.0, 0.5]),),
                    {"k": 2}, 12, 100_000),
    "one_hot": (one_hot, lambda n: (_rng().integers(0, 5, n),), {"n": 5}, 7, 100_000),
    "interp_table": (interp_table, lambda n: (_rng().random(n) * 10, np.arange(11.0), np.arange(11.0) ** 2), {},
                     9, 1_000_000),
    "bincount_weights": (bincount_weights, lambda n: (_rng().integers(0, 6, n), _rng().random(n)), {"n": 6},
                         20, 1_000_000),
}
