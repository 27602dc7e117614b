"""A time-stepped explicit heat equation on a 2-d grid with fixed boundaries,
as in a numerical-methods course: a Laplacian by shifted slices, a time loop."""
import numpy as np


def heat(u, alpha, dt, dx, steps):
    u = u.copy()
    for _ in range(steps):
        lap = (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]) / dx**2
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * dt * lap
    return u


def _args(n):
    u = np.zeros((n, n))
    u[n // 4: 3 * n // 4, n // 4: 3 * n // 4] = 1.0
    return (u, 0.1, 0.1, 1.0)


EXAMPLES = {"heat": (heat, _args, {"steps": 20}, 10, 1000)}
