"""Field notes: programs as people write them, new styles for the corpus."""
import numpy as np


def lcg_uniform(seed, n):
    """A linear congruential generator in uint64 arithmetic (wraps mod 2**64), masked to 32 bits."""
    out = np.empty(n)
    state = np.uint64(seed)
    with np.errstate(over="ignore"):  # (the wrap-around is the point)
        for i in range(n):
            state = (np.uint64(6364136223846793005) * state + np.uint64(1442695040888963407))
            out[i] = (state >> np.uint64(33)) / 2.0 ** 31
    return out


def rolling_mean_cumsum(x, w):
    """Rolling mean by the cumulative-sum trick."""
    c = np.cumsum(np.insert(x, 0, 0.0))
    return (c[w:] - c[:-w]) / w


def sor_sweeps(u, f, omega, sweeps):
    """Successive over-relaxation, row by row in place (each row reads the one just updated)."""
    h2 = 1.0 / (u.shape[0] - 1) ** 2
    for _ in range(sweeps):
        for i in range(1, u.shape[0] - 1):
            new = 0.25 * (u[i - 1, 1:-1] + u[i + 1, 1:-1] + u[i, :-2] + u[i, 2:] - h2 * f[i, 1:-1])
            u[i, 1:-1] += omega * (new - u[i, 1:-1])
    return u


def jacobi_until(A, b, tol):
    """Jacobi iteration until the update is small (a data-dependent while loop)."""
    D = np.diag(A)
    R = A - np.diagflat(D)
    x = np.zeros_like(b)
    for it in range(500):
        x_new = (b - R @ x) / D
        if np.linalg.norm(x_new - x, ord=np.inf) < tol:
            return x_new, it
        x = x_new
    return x, -1


def clip_inplace_out(x, lo, hi):
    """ufuncs with out= into the argument and into a column view."""
    np.clip(x, lo, hi, out=x)
    np.multiply(x, 2.0, out=x)
    stats = np.empty((x.shape[1], 2))
    np.mean(x, axis=0, out=stats[:, 0])
    np.std(x, axis=0, out=stats[:, 1])
    return stats


def mask_assign(x, thresh):
    """Boolean-mask assignment and a running maximum."""
    y = x.copy()
    y[y < thresh] = 0.0
    y[np.isnan(y)] = -1.0
    peaks = np.maximum.accumulate(y, axis=1)
    return y, peaks


def float32_scalars(x):
    """float32 data next to NumPy and Python scalars (NEP 50: np.float64 promotes, 0.5 does not)."""
    a = x * 0.5 + np.float32(1.5)
    b = x * np.float64(0.5)
    c = np.sqrt(np.float32(2.0)) * x
    d = x.sum() / len(x)
    return a, b, c, d


def periodic_particles(pos, vel, box, dt, steps):
    """Particles in a periodic box: positions wrapped with np.mod, a binned density."""
    for _ in range(steps):
        pos = np.mod(pos + dt * vel, box)
        vel = vel * 0.99
    cells = np.floor(pos / box * 8).astype(np.int64)
    density = np.bincount(cells[:, 0] * 8 + cells[:, 1], minlength=64).reshape(8, 8)
    return pos, density


def median_filter_rows(x, k):
    """A running median over windows built by stacking shifted slices."""
    n = x.shape[1] - k + 1
    windows = np.stack([x[:, j:j + n] for j in range(k)], axis=-1)
    return np.median(windows, axis=-1)


def background_mask(frames, threshold):
    """A static camera's background: each pixel's median over a few frames;
    the foreground is where a frame differs from it by more than a threshold."""
    background = np.median(frames, axis=0)
    moving = np.abs(frames - background) > threshold
    return background, moving.mean(axis=(1, 2))


def integer_hist_ops(a, b):
    """Integer arithmetic as NumPy defines it: floor division and modulo of negatives, shifts, bitwise."""
    q = a // b
    r = a % b
    s = (a << 2) ^ (b & 7)
    t = np.right_shift(np.abs(a), 1) | 1
    return q, r, s, t, (a * b).sum(), (a > b).sum()


def softmax_temperature(logits, T):
    """Softmax with a temperature: logits in the millions, ties, and -inf entries."""
    z = logits / T
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=-1, keepdims=True)
    return p, p.argmax(axis=-1)


def einsum_attention_heads(q, k, v):
    """Multi-head attention by einsum over a head axis."""
    s = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1])
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", p, v)


def gradient_diff(y, x):
    """np.gradient and np.diff on an uneven grid."""
    dy = np.gradient(y, x)
    d2 = np.diff(y, n=2)
    return dy, d2, np.trapezoid(y, x) if hasattr(np, "trapezoid") else np.trapz(y, x)


def _rng():
    return np.random.default_rng(7)


def _mask(n):
    x = _rng().standard_normal((n, n + 3))
    x[0, 0] = np.nan
    return x, 0.1


def _softmax(n):
    z = _rng().standard_normal((n, 9)) * 1e6
    z[:, 3] = z[:, 4]                 # ties
    z[0, 1] = -np.inf
    return z, 0.7


def _heads(n):
    r = _rng()
    return tuple(r.standard_normal((4, n, 8)).astype(np.float32) for _ in range(3))


def _sor(n):
    u = np.zeros((n, n))
    u[0] = 1.0
    return u, np.ones((n, n)), 1.5


def _jacobi(n):
    r = _rng()
    A = r.random((n, n)) + n * np.eye(n)
    return A, r.random(n), 1e-10


def _ints(n):
    r = _rng()
    a = r.integers(-1000, 1000, n)
    b = r.integers(1, 50, n) * np.where(r.random(n) < 0.5, -1, 1)
    return a, b


def _particles(n):
    r = _rng()
    return r.random((n, 2)) * 10, r.standard_normal((n, 2)), 10.0, 0.05


EXAMPLES = {
    "lcg_uniform": (lcg_uniform, lambda n: (12345,), {"n": 300}, 0, 0),
    "rolling_mean_cumsum": (rolling_mean_cumsum, lambda n: (_rng().random(n),), {"w": 5}, 40, 1_000_000),
    "sor_sweeps": (sor_sweeps, _sor, {"sweeps": 3}, 12, 200),
    "jacobi_until": (jacobi_until, _jacobi, {}, 20, 400),
    "clip_inplace_out": (clip_inplace_out, lambda n: (_rng().standard_normal((n, 5)), -0.5, 0.8), {}, 30, 1_000_000),
    "mask_assign": (mask_assign, _mask, {}, 10, 2000),
    "float32_scalars": (float32_scalars, lambda n: (_rng().random(n).astype(np.float32),), {}, 33, 1_000_000),
    "periodic_particles": (periodic_particles, _particles, {"steps": 5}, 50, 200_000),
    "median_filter_rows": (median_filter_rows, lambda n: (_rng().random((n, n + 6)),), {"k": 5}, 8, 2000),
    "background_mask": (background_mask, lambda n: (_rng().random((7, n, n)).astype(np.float32), 0.3), {}, 9, 1000),
    "integer_hist_ops": (integer_hist_ops, _ints, {}, 64, 1_000_000),
    "softmax_temperature": (softmax_temperature, _softmax, {}, 20, 200_000),
    "einsum_attention_heads": (einsum_attention_heads, _heads, {}, 16, 512),
    "gradient_diff": (gradient_diff, lambda n: (np.sin(np.linspace(0, 3, n)), np.sort(_rng().random(n)) * 3), {},
                      30, 1_000_000),
}
