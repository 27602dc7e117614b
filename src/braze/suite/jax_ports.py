"""The suite's programs ported to ``jax.numpy`` where the port is mechanical:
``np`` becomes ``jnp``, a slice assignment ``a[s] = v`` becomes ``a = a.at[s].set(v)``,
Python loops stay (``jax.jit`` unrolls them). ``None`` where it is not
mechanical, with the reason. A NumPy scalar of the source stays one (jax treats
it as NumPy does: ``x32 / np.sqrt(D)`` is float64, where ``jnp.sqrt(D)`` is a
weakly typed float32), so every port computes in NumPy's dtypes."""
from __future__ import annotations

import numpy as np


# The programs with a mechanical port, and why the others have none.
PORTED = ("heat_3d", "advect_diffuse", "eos_unesco", "nbody_step", "transformer_fwd_bwd", "black_scholes",
          "unsharp_mask")
NOT_MECHANICAL = {"kmeans_step": "not mechanical: members = X[labels == k] has a data-dependent shape, "
                                 "which jax.jit cannot trace"}


def ports() -> dict:
    import jax
    import jax.numpy as jnp

    def heat_3d(u, v, steps, alpha=0.1):
        for _ in range(steps):
            v = v.at[1:-1, 1:-1, 1:-1].set(u[1:-1, 1:-1, 1:-1] + alpha * (
                u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1]
                + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
                + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2]
                - 6.0 * u[1:-1, 1:-1, 1:-1]))
            u, v = v, u
        return u

    def advect_diffuse(q, vel, steps, dt=0.2, kappa=0.05):
        for _ in range(steps):
            dq = q[1:] - q[:-1]
            up, dn = dq[:-1], dq[1:]
            ok = jnp.abs(dn) > 1e-12
            r = jnp.where(ok, up / jnp.where(ok, dn, 1.0), 0.0)
            phi = (r + jnp.abs(r)) / (1.0 + jnp.abs(r))
            v = vel[1:-1]
            face = jnp.where(v >= 0.0,
                             q[1:-1] + 0.5 * phi * (1.0 - v * dt) * dn,
                             q[2:] - 0.5 * phi * (1.0 + v * dt) * dn)
            flux = v * face
            lap = q[2:] - 2.0 * q[1:-1] + q[:-2]
            q = q.at[2:-1].set(q[2:-1] - dt * (flux[1:] - flux[:-1]) + dt * kappa * lap[1:])
        return q

    def eos_unesco(S, T, p):
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

    def nbody_step(pos, vel, mass, dt, soft=0.01):
        d = pos[None, :, :] - pos[:, None, :]
        r2 = (d ** 2).sum(-1) + soft ** 2
        inv_r3 = r2 ** -1.5
        acc = (d * (mass[None, :, None] * inv_r3[:, :, None])).sum(1)
        vel = vel + dt * acc
        pos = pos + dt * vel
        return pos, vel

    def transformer_fwd_bwd(x, Wq, Wk, Wv, Wo, W1, W2, target):
        T, D = x.shape
        q, k, v = x @ Wq, x @ Wk, x @ Wv
        s = (q @ k.T) / np.sqrt(D)  # (NumPy's float64 scalar, as in the source: float64 from here)
        s = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), s, -1e9)
        s = s - s.max(axis=-1, keepdims=True)
        p = jnp.exp(s)
        p = p / p.sum(axis=-1, keepdims=True)
        a = p @ v
        h = x + a @ Wo
        g = jnp.tanh(h @ W1)
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
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / jnp.sqrt(D)
        dq, dk = ds @ k, ds.T @ q
        dx = dh + dq @ Wq.T + dk @ Wk.T + dv @ Wv.T
        return loss, dx, x.T @ dq, x.T @ dk, x.T @ dv, dWo, dW1, dW2

    def _cnd(d):
        A1, A2, A3, A4, A5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
        RSQRT2PI = 0.39894228040143267793994605993438
        K = 1.0 / (1.0 + 0.2316419 * jnp.abs(d))
        ret_val = RSQRT2PI * jnp.exp(-0.5 * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))))
        return jnp.where(d > 0, 1.0 - ret_val, ret_val)

    def black_scholes(S, X, T, R, V):
        sqrtT = jnp.sqrt(T)
        d1 = (jnp.log(S / X) + (R + 0.5 * V * V) * T) / (V * sqrtT)
        d2 = d1 - V * sqrtT
        cndd1, cndd2 = _cnd(d1), _cnd(d2)
        expRT = jnp.exp(-R * T)
        call = S * cndd1 - X * expRT * cndd2
        put = X * expRT * (1.0 - cndd2) - S * (1.0 - cndd1)
        return call, put

    def unsharp_mask(img, amount=1.5):
        k = jnp.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=img.dtype) / 16
        tmp = k[0] * img[:, :-4] + k[1] * img[:, 1:-3] + k[2] * img[:, 2:-2] + k[3] * img[:, 3:-1] + k[4] * img[:, 4:]
        blur = k[0] * tmp[:-4] + k[1] * tmp[1:-3] + k[2] * tmp[2:-2] + k[3] * tmp[3:-1] + k[4] * tmp[4:]
        center = img[2:-2, 2:-2]
        return jnp.clip(center + amount * (center - blur), 0.0, 1.0)

    static = {"heat_3d": ("steps",), "advect_diffuse": ("steps",)}
    local = locals()
    out = {name: jax.jit(local[name], static_argnames=static.get(name, ())) for name in PORTED}
    out.update(NOT_MECHANICAL)
    return out
