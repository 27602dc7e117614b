"""The suite's programs hand-written as ``numba.njit`` loops, as an expert
would write them for speed: explicit loops, ``prange`` over the outer axis,
``fastmath=True`` (the ceiling a user reaches by hand; braze itself keeps
NumPy's rounding), no temporaries beyond what the algorithm needs. Each takes
and returns what the NumPy program does."""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

jit = numba.njit(parallel=True, fastmath=True, cache=True)


@jit
def _heat_step(u, v, alpha):
    n0, n1, n2 = u.shape
    for i in prange(1, n0 - 1):
        for j in range(1, n1 - 1):
            for k in range(1, n2 - 1):
                c = u[i, j, k]
                v[i, j, k] = c + alpha * (u[i + 1, j, k] + u[i - 1, j, k] + u[i, j + 1, k] + u[i, j - 1, k]
                                          + u[i, j, k + 1] + u[i, j, k - 1] - 6.0 * c)


def heat_3d(u, v, steps, alpha=0.1):
    for _ in range(steps):
        _heat_step(u, v, alpha)
        u, v = v, u
    return u


@jit
def _advect_update(q, flux, lapbuf, dt, kappa):
    n, m = q.shape
    for i in prange(2, n - 1):
        for j in range(m):
            lapbuf[i, j] = q[i + 1, j] - 2.0 * q[i, j] + q[i - 1, j]
    for i in prange(2, n - 1):
        for j in range(m):
            q[i, j] = q[i, j] - dt * (flux[i, j] - flux[i - 1, j]) + dt * kappa * lapbuf[i, j]


@jit
def _advect_flux(q, vel, flux, dt):
    n, m = q.shape
    for i in prange(1, n - 1):
        for j in range(m):
            up = q[i, j] - q[i - 1, j]
            dn = q[i + 1, j] - q[i, j]
            r = up / dn if abs(dn) > 1e-12 else 0.0
            phi = (r + abs(r)) / (1.0 + abs(r))
            v = vel[i, j]
            if v >= 0.0:
                face = q[i, j] + 0.5 * phi * (1.0 - v * dt) * dn
            else:
                face = q[i + 1, j] - 0.5 * phi * (1.0 + v * dt) * dn
            flux[i, j] = v * face


def advect_diffuse(q, vel, steps, dt=0.2, kappa=0.05):
    flux = np.empty_like(q)
    lap = np.empty_like(q)
    for _ in range(steps):
        _advect_flux(q, vel, flux, dt)
        _advect_update(q, flux, lap, dt, kappa)
    return q


@jit
def _eos(S, T, p, out):
    for i in prange(S.size):
        s, t, pr = S[i], T[i], p[i]
        s15 = s * math.sqrt(s)
        rho_w = 999.842594 + t * (6.793952e-2 + t * (-9.095290e-3 + t * (1.001685e-4 + t * (-1.120083e-6 + t * 6.536332e-9))))
        rho_0 = (rho_w + s * (0.824493 + t * (-4.0899e-3 + t * (7.6438e-5 + t * (-8.2467e-7 + t * 5.3875e-9))))
                 + s15 * (-5.72466e-3 + t * (1.0227e-4 - t * 1.6546e-6)) + 4.8314e-4 * s * s)
        K_w = 19652.21 + t * (148.4206 + t * (-2.327105 + t * (1.360477e-2 - t * 5.155288e-5)))
        K_0 = K_w + s * (54.6746 + t * (-0.603459 + t * (1.09987e-2 - t * 6.1670e-5))) + s15 * (7.944e-2 + t * (1.6483e-2 - t * 5.3009e-4))
        A = 3.239908 + t * (1.43713e-3 + t * (1.16092e-4 - t * 5.77905e-7)) + s * (2.2838e-3 + t * (-1.0981e-5 - t * 1.6078e-6)) + 1.91075e-4 * s15
        B = 8.50935e-5 + t * (-6.12293e-6 + t * 5.2787e-8) + s * (-9.9348e-7 + t * (2.0816e-8 + t * 9.1697e-10))
        K = K_0 + pr * (A + B * pr)
        out[i] = rho_0 / (1.0 - pr / K)


def eos_unesco(S, T, p):
    out = np.empty_like(S)
    _eos(S.reshape(-1), T.reshape(-1), p.reshape(-1), out.reshape(-1))
    return out


@jit
def _kmeans(X, C, labels, sums, counts, dmin):
    n, dim = X.shape
    k = C.shape[0]
    for i in prange(n):
        best, bd = 0, np.inf
        for c in range(k):
            acc = 0.0
            for j in range(dim):
                t = X[i, j] - C[c, j]
                acc += t * t
            if acc < bd:
                best, bd = c, acc
        labels[i] = best
        dmin[i] = bd
    # per-thread partial sums would need a thread id: a serial pass is what experts write
    for i in range(n):
        c = labels[i]
        counts[c] += 1
        for j in range(dim):
            sums[c, j] += X[i, j]


def kmeans_step(X, C):
    labels = np.empty(X.shape[0], np.int64)
    sums = np.zeros_like(C)
    counts = np.zeros(C.shape[0], np.int64)
    dmin = np.empty(X.shape[0])
    _kmeans(X, C, labels, sums, counts, dmin)
    new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], C)
    return new, labels, dmin.sum()


@jit
def _nbody(pos, vel, mass, dt, soft, pos_out, vel_out):
    n = pos.shape[0]
    s2 = soft * soft
    for i in prange(n):
        ax = ay = az = 0.0
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            r2 = dx * dx + dy * dy + dz * dz + s2
            w = mass[j] / (r2 * math.sqrt(r2))
            ax += dx * w
            ay += dy * w
            az += dz * w
        vx, vy, vz = vel[i, 0] + dt * ax, vel[i, 1] + dt * ay, vel[i, 2] + dt * az
        vel_out[i, 0], vel_out[i, 1], vel_out[i, 2] = vx, vy, vz
        pos_out[i, 0], pos_out[i, 1], pos_out[i, 2] = xi + dt * vx, yi + dt * vy, zi + dt * vz


def nbody_step(pos, vel, mass, dt, soft=0.01):
    p, v = np.empty_like(pos), np.empty_like(vel)
    _nbody(pos, vel, mass, dt, soft, p, v)
    return p, v


@jit
def _softmax_causal(s, scale, p):
    """p = the causal softmax of s * scale by rows (s float32, p float64:
    NumPy's s / np.sqrt(D) is float64)."""
    T = s.shape[0]
    for i in prange(T):
        m = -np.inf
        for j in range(i + 1):
            m = max(m, s[i, j] * scale)
        tot = 0.0
        for j in range(i + 1):
            e = math.exp(s[i, j] * scale - m)
            p[i, j] = e
            tot += e
        for j in range(i + 1):
            p[i, j] /= tot
        for j in range(i + 1, T):
            p[i, j] = 0.0


@jit
def _softmax_back(p, dp, scale):
    T = p.shape[0]
    for i in prange(T):
        dot = 0.0
        for j in range(T):
            dot += dp[i, j] * p[i, j]
        for j in range(T):
            dp[i, j] = p[i, j] * (dp[i, j] - dot) * scale


@jit
def _tanh_inplace(u):
    for i in prange(u.size):
        u[i] = math.tanh(u[i])


@jit
def _tanh_back(du, g):
    for i in prange(du.size):
        du[i] *= 1.0 - g[i] * g[i]


def transformer_fwd_bwd(x, Wq, Wk, Wv, Wo, W1, W2, target):
    # The dtypes are NumPy's: q, k, v are float32, and dividing by np.sqrt(D) (a
    # float64 scalar) makes the scores and everything after them float64.
    T, D = x.shape
    scale = 1.0 / np.sqrt(D)
    q, k, v = x @ Wq, x @ Wk, x @ Wv
    p = np.empty((T, T))
    _softmax_causal(q @ k.T, scale, p)
    a = p @ v
    h = x + a @ Wo
    g = h @ W1
    _tanh_inplace(g.reshape(-1))
    y = h + g @ W2
    diff = y - target
    loss = 0.5 * np.dot(diff.ravel(), diff.ravel()) / diff.size
    dy = diff / y.size
    dW2 = g.T @ dy
    du = dy @ W2.T
    _tanh_back(du.reshape(-1), g.reshape(-1))
    dW1 = h.T @ du
    dh = dy + du @ W1.T
    dWo = a.T @ dh
    da = dh @ Wo.T
    dp = da @ v.T
    dv = p.T @ da
    _softmax_back(p, dp, scale)
    dq, dk = dp @ k, dp.T @ q
    dx = dh + dq @ Wq.T + dk @ Wk.T + dv @ Wv.T
    return loss, dx, x.T @ dq, x.T @ dk, x.T @ dv, dWo, dW1, dW2


@numba.njit(fastmath=True, cache=True)
def _cnd(d):
    K = 1.0 / (1.0 + 0.2316419 * abs(d))
    r = 0.39894228040143267793994605993438 * math.exp(-0.5 * d * d) * (
        K * (0.31938153 + K * (-0.356563782 + K * (1.781477937 + K * (-1.821255978 + K * 1.330274429)))))
    return 1.0 - r if d > 0 else r


@jit
def _bs(S, X, T, R, V, call, put):
    for i in prange(S.size):
        sqrtT = math.sqrt(T[i])
        d1 = (math.log(S[i] / X[i]) + (R + 0.5 * V * V) * T[i]) / (V * sqrtT)
        d2 = d1 - V * sqrtT
        c1, c2 = _cnd(d1), _cnd(d2)
        e = math.exp(-R * T[i])
        call[i] = S[i] * c1 - X[i] * e * c2
        put[i] = X[i] * e * (1.0 - c2) - S[i] * (1.0 - c1)


def black_scholes(S, X, T, R, V):
    call, put = np.empty_like(S), np.empty_like(S)
    _bs(S, X, T, R, V, call, put)
    return call, put


@jit
def _unsharp(img, out, amount):
    h, w, c = img.shape
    k0, k1, k2 = np.float32(1 / 16), np.float32(4 / 16), np.float32(6 / 16)
    tmp = np.empty((h, w - 4, c), img.dtype)
    for i in prange(h):
        for j in range(w - 4):
            for ch in range(c):
                tmp[i, j, ch] = (k0 * img[i, j, ch] + k1 * img[i, j + 1, ch] + k2 * img[i, j + 2, ch]
                                 + k1 * img[i, j + 3, ch] + k0 * img[i, j + 4, ch])
    for i in prange(h - 4):
        for j in range(w - 4):
            for ch in range(c):
                b = (k0 * tmp[i, j, ch] + k1 * tmp[i + 1, j, ch] + k2 * tmp[i + 2, j, ch]
                     + k1 * tmp[i + 3, j, ch] + k0 * tmp[i + 4, j, ch])
                x = img[i + 2, j + 2, ch]
                out[i, j, ch] = min(max(x + amount * (x - b), 0.0), 1.0)


def unsharp_mask(img, amount=1.5):
    out = np.empty((img.shape[0] - 4, img.shape[1] - 4, img.shape[2]), img.dtype)
    _unsharp(img, out, np.float32(amount))
    return out
