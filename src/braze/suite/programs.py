"""The whole programs of ``braze bench --suite programs``, in NumPy, written the
way their authors write them (see ``bench/PROGRAMS.md``). Each entry of
``PROGRAMS`` says how to make its inputs at a size, which arguments it updates
in place, and the bytes it must move at the least (for GB/s)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


# ---------------------------------------------------------------- 1. 3-D heat equation, time loop

def heat_3d(u, v, steps, alpha=0.1):
    """Explicit 7-point heat diffusion on a 3-D grid, two buffers swapped each step."""
    for _ in range(steps):
        v[1:-1, 1:-1, 1:-1] = u[1:-1, 1:-1, 1:-1] + alpha * (
            u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1]
            + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
            + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2]
            - 6.0 * u[1:-1, 1:-1, 1:-1])
        u, v = v, u
    return u


# ---------------------------------------------------------------- 2. limited advection + diffusion

def advect_diffuse(q, vel, steps, dt=0.2, kappa=0.05):
    """Upwind advection along axis 0 with a van Leer flux limiter, plus diffusion."""
    for _ in range(steps):
        dq = q[1:] - q[:-1]
        up, dn = dq[:-1], dq[1:]
        ok = np.abs(dn) > 1e-12
        r = np.where(ok, up / np.where(ok, dn, 1.0), 0.0)
        phi = (r + np.abs(r)) / (1.0 + np.abs(r))
        v = vel[1:-1]
        face = np.where(v >= 0.0,
                        q[1:-1] + 0.5 * phi * (1.0 - v * dt) * dn,
                        q[2:] - 0.5 * phi * (1.0 + v * dt) * dn)
        flux = v * face
        lap = q[2:] - 2.0 * q[1:-1] + q[:-2]
        q[2:-1] = q[2:-1] - dt * (flux[1:] - flux[:-1]) + dt * kappa * lap[1:]
    return q


# ---------------------------------------------------------------- 3. equation of state

def eos_unesco(S, T, p):
    """In-situ density of seawater (UNESCO 1981, p in bar): a long elementwise polynomial."""
    rho_w = (999.842594 + 6.793952e-2 * T - 9.095290e-3 * T ** 2 + 1.001685e-4 * T ** 3
             - 1.120083e-6 * T ** 4 + 6.536332e-9 * T ** 5)
    rho_0 = (rho_w + S * (0.824493 - 4.0899e-3 * T + 7.6438e-5 * T ** 2 - 8.2467e-7 * T ** 3 + 5.3875e-9 * T ** 4)
             + S ** 1.5 * (-5.72466e-3 + 1.0227e-4 * T - 1.6546e-6 * T ** 2) + 4.8314e-4 * S ** 2)
    K_w = 19652.21 + 148.4206 * T - 2.327105 * T ** 2 + 1.360477e-2 * T ** 3 - 5.155288e-5 * T ** 4
    K_0 = (K_w + S * (54.6746 - 0.603459 * T + 1.09987e-2 * T ** 2 - 6.1670e-5 * T ** 3)
           + S ** 1.5 * (7.944e-2 + 1.6483e-2 * T - 5.3009e-4 * T ** 2))
    A = (3.239908 + 1.43713e-3 * T + 1.16092e-4 * T ** 2 - 5.77905e-7 * T ** 3
         + S * (2.2838e-3 - 1.0981e-5 * T - 1.6078e-6 * T ** 2) + 1.91075e-4 * S ** 1.5)
    B = 8.50935e-5 - 6.12293e-6 * T + 5.2787e-8 * T ** 2 + S * (-9.9348e-7 + 2.0816e-8 * T + 9.1697e-10 * T ** 2)
    K = K_0 + A * p + B * p ** 2
    return rho_0 / (1.0 - p / K)


# ---------------------------------------------------------------- 4. k-means step

def kmeans_step(X, C):
    """One Lloyd iteration: squared distances, assignment, new centers, inertia."""
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    labels = d.argmin(axis=1)
    new = np.empty_like(C)
    for k in range(C.shape[0]):
        members = X[labels == k]
        new[k] = members.mean(axis=0) if len(members) else C[k]
    return new, labels, d.min(axis=1).sum()


# ---------------------------------------------------------------- 5. N-body step

def nbody_step(pos, vel, mass, dt, soft=0.01):
    """All-pairs gravitational accelerations, then a kick-drift step."""
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d ** 2).sum(-1) + soft ** 2
    inv_r3 = r2 ** -1.5
    acc = (d * (mass[None, :, None] * inv_r3[:, :, None])).sum(1)
    vel = vel + dt * acc
    pos = pos + dt * vel
    return pos, vel


# ---------------------------------------------------------------- 6. transformer block, forward + backward

def transformer_fwd_bwd(x, Wq, Wk, Wv, Wo, W1, W2, target):
    """A causal self-attention + tanh-MLP block with residuals, its squared-error
    loss, and the loss's gradients by hand (as NumPy-from-scratch code writes them)."""
    T, D = x.shape
    q, k, v = x @ Wq, x @ Wk, x @ Wv
    s = (q @ k.T) / np.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -1e9)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    a = p @ v
    h = x + a @ Wo
    g = np.tanh(h @ W1)
    y = h + g @ W2
    loss = 0.5 * ((y - target) ** 2).mean()
    dy = (y - target) / y.size
    dW2 = g.T @ dy
    du = (dy @ W2.T) * (1.0 - g * g)
    dW1 = h.T @ du
    dh = dy + du @ W1.T
    dWo = a.T @ dh
    da = dh @ Wo.T
    dp = da @ v.T
    dv = p.T @ da
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / np.sqrt(D)
    dq, dk = ds @ k, ds.T @ q
    dx = dh + dq @ Wq.T + dk @ Wk.T + dv @ Wv.T
    return loss, dx, x.T @ dq, x.T @ dk, x.T @ dv, dWo, dW1, dW2


# ---------------------------------------------------------------- 7. Black-Scholes

def _cnd(d):
    A1, A2, A3, A4, A5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
    RSQRT2PI = 0.39894228040143267793994605993438
    K = 1.0 / (1.0 + 0.2316419 * np.abs(d))
    ret_val = RSQRT2PI * np.exp(-0.5 * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))))
    return np.where(d > 0, 1.0 - ret_val, ret_val)


def black_scholes(S, X, T, R, V):
    """European call and put prices (the classic benchmark's polynomial normal CDF)."""
    sqrtT = np.sqrt(T)
    d1 = (np.log(S / X) + (R + 0.5 * V * V) * T) / (V * sqrtT)
    d2 = d1 - V * sqrtT
    cndd1, cndd2 = _cnd(d1), _cnd(d2)
    expRT = np.exp(-R * T)
    call = S * cndd1 - X * expRT * cndd2
    put = X * expRT * (1.0 - cndd2) - S * (1.0 - cndd1)
    return call, put


# ---------------------------------------------------------------- 8. image filter

def unsharp_mask(img, amount=1.5):
    """Separable 5-tap binomial blur of an RGB image (shifted slices), then unsharp masking."""
    k = np.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=img.dtype) / 16
    tmp = k[0] * img[:, :-4] + k[1] * img[:, 1:-3] + k[2] * img[:, 2:-2] + k[3] * img[:, 3:-1] + k[4] * img[:, 4:]
    blur = k[0] * tmp[:-4] + k[1] * tmp[1:-3] + k[2] * tmp[2:-2] + k[3] * tmp[3:-1] + k[4] * tmp[4:]
    center = img[2:-2, 2:-2]
    return np.clip(center + amount * (center - blur), 0.0, 1.0)


# ---------------------------------------------------------------- the table

@dataclass
class Program:
    name: str
    fn: Callable
    make: Callable              # size -> tuple of arguments (fresh arrays)
    sizes: dict                 # "full" / "tiny" -> size
    static: dict = field(default_factory=dict)   # keyword arguments (static for braze)
    nbytes: Callable = None     # (args, result) -> bytes a perfect program moves
    style: str = ""
    rtol: float = 1e-9


def _rng():
    return np.random.default_rng(0)


def _heat_args(n):
    u = _rng().random((n, n, n))
    return u, u.copy()


def _advect_args(n):
    r = _rng()
    x = np.linspace(0, 4 * np.pi, 4 * n)[:, None]
    q = np.sin(x) * np.ones((1, n)) + 0.1 * r.random((4 * n, n))
    return q, 0.5 * np.cos(x) + 0.1 * r.standard_normal((4 * n, n))


def _eos_args(n):
    r = _rng()
    shape = (n // 4, n, n)
    return 30.0 + 10.0 * r.random(shape), 25.0 * r.random(shape), 500.0 * r.random(shape)


def _kmeans_args(n):
    r = _rng()
    centers = r.standard_normal((8, 4)) * 4
    X = centers[r.integers(0, 8, n)] + r.standard_normal((n, 4))
    return X, X[:8].copy()


def _nbody_args(n):
    r = _rng()
    return r.standard_normal((n, 3)), 0.1 * r.standard_normal((n, 3)), r.random(n) + 0.5, 1e-3


def _transformer_args(n):
    r = _rng()
    D = 128
    x = r.standard_normal((n, D)).astype(np.float32)
    Ws = [(r.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
          for s in ((D, D), (D, D), (D, D), (D, D), (D, 4 * D), (4 * D, D))]
    return (x, *Ws, r.standard_normal((n, D)).astype(np.float32))


def _bs_args(n):
    r = _rng()
    return (r.uniform(5.0, 30.0, n), r.uniform(1.0, 100.0, n), r.uniform(0.25, 10.0, n), 0.02, 0.30)


def _image_args(n):
    return (_rng().random((n, n, 3)).astype(np.float32),)


def _io(args, result) -> int:
    """Bytes of the arguments and results: each read once, each written once."""
    def leaves(x):
        return [a for a in (x if isinstance(x, tuple) else (x,)) if isinstance(a, np.ndarray)]
    return sum(a.nbytes for a in leaves(args) + leaves(result))


PROGRAMS = {p.name: p for p in [
    Program("heat_3d", heat_3d, _heat_args, {"full": 128, "tiny": 12}, {"steps": 8},
            lambda args, r: 8 * 2 * args[0].nbytes, "3-D 7-point stencil, [1:-1]-shifted slices, time loop"),
    Program("advect_diffuse", advect_diffuse, _advect_args, {"full": 512, "tiny": 16}, {"steps": 5},
            lambda args, r: 5 * 3 * args[0].nbytes, "flux-limited upwind advection, np.where chains, time loop"),
    Program("eos_unesco", eos_unesco, _eos_args, {"full": 192, "tiny": 8}, {},
            _io, "equation of state: a long elementwise polynomial"),
    Program("kmeans_step", kmeans_step, _kmeans_args, {"full": 400_000, "tiny": 300}, {},
            _io, "distances over a small trailing axis, argmin, masked means in a loop"),
    Program("nbody_step", nbody_step, _nbody_args, {"full": 1500, "tiny": 20}, {},
            lambda args, r: _io(args, r), "all-pairs forces: broadcasting to (n, n, 3), small-axis sums"),
    Program("transformer_fwd_bwd", transformer_fwd_bwd, _transformer_args, {"full": 256, "tiny": 8}, {},
            _io, "attention + MLP block, forward and hand-written backward, float32", rtol=2e-3),
    Program("black_scholes", black_scholes, _bs_args, {"full": 4_000_000, "tiny": 100}, {},
            _io, "option pricing: exp, log, sqrt, polynomial CDF, np.where"),
    Program("unsharp_mask", unsharp_mask, _image_args, {"full": 1536, "tiny": 16}, {},
            _io, "separable 5-tap blur of an RGB image by shifted slices, clip", rtol=1e-5),
]}
