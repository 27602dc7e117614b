"""Simulations and data chores as people write them: an RK4 integrator whose
right-hand side builds its state with ``np.array([...])``, the Game of Life by
``np.roll``, a particle-in-cell deposit with ``np.add.at`` and its gather,
Monte-Carlo pricing over given normals, a minmod-limited advection step,
k-nearest-neighbour voting, a group-by mean through ``np.unique`` and
``np.bincount``, histogram equalization, and Newton's method that stops on a
tolerance (a loop whose trip count depends on the data)."""
import numpy as np


def pendulum_rk4(theta0, omega0, dt, steps):
    """A damped pendulum, fourth-order Runge-Kutta, the state a 2-vector."""
    def deriv(state):
        theta, omega = state
        return np.array([omega, -9.81 * np.sin(theta) - 0.1 * omega])

    state = np.array([theta0, omega0])
    path = np.zeros((steps + 1, 2))
    path[0] = state
    for i in range(steps):
        k1 = deriv(state)
        k2 = deriv(state + 0.5 * dt * k1)
        k3 = deriv(state + 0.5 * dt * k2)
        k4 = deriv(state + dt * k3)
        state = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        path[i + 1] = state
    return path


def game_of_life(board, generations):
    """Conway's Game of Life on a torus, neighbours counted with np.roll."""
    for _ in range(generations):
        n = sum(np.roll(np.roll(board, dy, axis=0), dx, axis=1)
                for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))
        board = ((n == 3) | (board & (n == 2))).astype(board.dtype)
    return board


def pic_deposit_gather(x, q, field, ngrid):
    """Particle-in-cell: charge deposited on a periodic grid by linear weights
    (np.add.at, repeated cells accumulate), then the field gathered back."""
    dx = 1.0 / ngrid
    cell = np.floor(x / dx).astype(np.int64)
    frac = x / dx - cell
    left = cell % ngrid
    right = (cell + 1) % ngrid
    rho = np.zeros(ngrid)
    np.add.at(rho, left, q * (1 - frac))
    np.add.at(rho, right, q * frac)
    rho /= dx
    e_at = field[left] * (1 - frac) + field[right] * frac
    return rho, e_at


def mc_asian_call(s0, strike, rate, sigma, maturity, normals):
    """Arithmetic-average Asian call by Monte Carlo over given standard normals
    (paths x steps): log-price increments, cumulative sums, discounted payoff."""
    n_paths, n_steps = normals.shape
    dt = maturity / n_steps
    increments = (rate - 0.5 * sigma ** 2) * dt + sigma * np.sqrt(dt) * normals
    paths = s0 * np.exp(np.cumsum(increments, axis=1))
    payoff = np.maximum(paths.mean(axis=1) - strike, 0.0)
    price = np.exp(-rate * maturity) * payoff.mean()
    stderr = np.exp(-rate * maturity) * payoff.std(ddof=1) / np.sqrt(n_paths)
    return price, stderr


def minmod_advection(u, c, steps):
    """Second-order upwind advection with a minmod slope limiter, periodic."""
    for _ in range(steps):
        du_left = u - np.roll(u, 1)
        du_right = np.roll(u, -1) - u
        slope = np.where(du_left * du_right > 0,
                         np.sign(du_left) * np.minimum(np.abs(du_left), np.abs(du_right)), 0.0)
        face = u + 0.5 * (1 - c) * slope
        u = u - c * (face - np.roll(face, 1))
    return u


def knn_vote(train, labels, test, k):
    """k-nearest-neighbour classification: squared distances by broadcasting,
    the k nearest by argsort, a vote per test point by bincount."""
    d2 = ((test[:, None, :] - train[None, :, :]) ** 2).sum(axis=-1)
    nearest = np.argsort(d2, axis=1, kind="stable")[:, :k]
    votes = labels[nearest]
    n_classes = labels.max() + 1
    predicted = np.empty(len(test), dtype=labels.dtype)
    for i in range(len(test)):
        predicted[i] = np.argmax(np.bincount(votes[i], minlength=n_classes))
    return predicted


def group_means(keys, values):
    """A group-by mean (the pandas one-liner, by hand): unique keys, their
    inverse index, sums and counts by bincount."""
    uniq, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=values)
    counts = np.bincount(inverse)
    return uniq, sums / counts


def equalize_histogram(image, bins):
    """Histogram equalization of a float image in [0, 1]: the histogram's
    cumulative distribution, applied by np.interp."""
    hist, edges = np.histogram(image.ravel(), bins=bins, range=(0.0, 1.0))
    cdf = hist.cumsum() / hist.sum()
    centers = 0.5 * (edges[:-1] + edges[1:])
    return np.interp(image.ravel(), centers, cdf).reshape(image.shape)


def newton_sqrt(a, tol=1e-12):
    """Newton's method for elementwise square roots, until every update is small."""
    x = np.where(a > 1, a, 1.0)
    dx = np.ones_like(a)
    iterations = 0
    while np.max(np.abs(dx)) > tol:
        dx = 0.5 * (x - a / x)
        x = x - dx
        iterations += 1
    return x, iterations


def _rng():
    return np.random.default_rng(42)


def _pic(n):
    rng = _rng()
    ngrid = 32
    return rng.random(n), rng.standard_normal(n), np.sin(2 * np.pi * np.arange(ngrid) / ngrid)


def _knn(n):
    rng = _rng()
    return rng.standard_normal((n, 3)), rng.integers(0, 4, n), rng.standard_normal((n // 4 + 1, 3))


# name: (fn, make(size), static kwargs, test size, benchmark size)
EXAMPLES = {
    "pendulum_rk4": (pendulum_rk4, lambda n: (1.0, 0.0, 0.01), {"steps": 200}, 0, 0),
    "game_of_life": (game_of_life, lambda n: ((_rng().random((n, n + 2)) < 0.3).astype(np.uint8),),
                     {"generations": 8}, 16, 512),
    "pic_deposit_gather": (pic_deposit_gather, _pic, {"ngrid": 32}, 200, 200_000),
    "mc_asian_call": (mc_asian_call, lambda n: (100.0, 100.0, 0.05, 0.2, 1.0, _rng().standard_normal((n, 50))),
                      {}, 64, 20_000),
    "minmod_advection": (minmod_advection, lambda n: (np.exp(-((np.arange(n) - n / 3) / (n / 20)) ** 2), 0.4),
                         {"steps": 20}, 64, 200_000),
    "knn_vote": (knn_vote, _knn, {"k": 5}, 40, 800),
    "group_means": (group_means, lambda n: (_rng().integers(0, 7, n), _rng().standard_normal(n)), {}, 100, 1_000_000),
    "equalize_histogram": (equalize_histogram, lambda n: (_rng().random((n, n + 1)) ** 2,), {"bins": 64}, 16, 1000),
    "newton_sqrt": (newton_sqrt, lambda n: (_rng().random(n) * 100 + 0.01,), {}, 50, 1_000_000),
}
