"""Forward + backward, float32: braze against hand-derived NumPy, hand-written
``numba.njit(parallel=True)`` gradients, and torch.compile / jax.jit where
installed, in one run.

* layer norm, x (8192, 1024), gradients for x, gamma, beta;
* softmax cross-entropy with integer labels, logits (8192, 1024);
* an MLP: x(512,1024) @ W1(1024,1024) -> tanh-GELU -> @ W2(1024,10) ->
  softmax cross-entropy, gradients for W1 and W2.

``braze vjp`` runs the compiled forward program (outputs + residuals) and
then the compiled backward program, the training-framework split;
``braze grad`` is ``braze.compile(braze.value_and_grad(f))``, one program.
Each row's ``extra_info`` has the GB/s of the minimal traffic (read the
inputs once, write the gradients once) and its share of the triad bandwidth.
"""
import math

import numpy as np
import pytest

import braze
from braze.targets import cpu_cache

numba = pytest.importorskip("numba")
from numba import njit, prange  # noqa: E402

try:
    from braze.targets import cpu_math as vm
except ImportError:  # pragma: no cover
    vm = None

RNG = np.random.default_rng(0)
N, C = 8192, 1024
EPS = 1e-5
F32 = np.float32


# ---------------------------------------------------------------- the functions

def ln_loss(x, g, b, ct):
    return np.sum(braze.nn.layer_norm(x, g, b) * ct)


def ln(x, g, b):
    return braze.nn.layer_norm(x, g, b)


def xent(x, labels):
    return braze.nn.softmax_cross_entropy(x, labels)


def mlp(w1, w2, x, labels):
    return braze.nn.softmax_cross_entropy(braze.nn.gelu(x @ w1) @ w2, labels)


# ---------------------------------------------------------------- hand-derived NumPy

def mlp_data(w1, w2, x, labels):
    """``mlp`` with ``x`` marked as data: a vjp then skips its cotangent (one GEMM)."""
    return mlp(w1, w2, braze.stop_gradient(x), labels)


def np_layer_norm(x, g, b, ct):
    mu = x.mean(axis=1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + F32(EPS))
    xhat = xc * rstd
    y = xhat * g + b
    gy = ct * g
    dx = rstd * (gy - gy.mean(axis=1, keepdims=True) - xhat * (gy * xhat).mean(axis=1, keepdims=True))
    return y, dx, (ct * xhat).sum(axis=0), ct.sum(axis=0)


def np_xent(x, labels):
    n = x.shape[0]
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    loss = (np.log(s[:, 0]) + m[:, 0] - x[rows, labels]).mean()
    e /= s
    e[rows, labels] -= 1
    e *= F32(1.0 / n)
    return loss, e


_K = F32(math.sqrt(2.0 / math.pi))


def np_mlp(w1, w2, x, labels):
    h = x @ w1
    t = np.tanh(_K * (h + F32(0.044715) * h ** 3))
    a = F32(0.5) * h * (1 + t)
    loss, dlogits = np_xent(a @ w2, labels)
    dw2 = a.T @ dlogits
    da = dlogits @ w2.T
    dh = da * (F32(0.5) * (1 + t) + F32(0.5) * h * (1 - t * t) * _K * (1 + F32(3 * 0.044715) * h * h))
    return loss, x.T @ dh, dw2


# ---------------------------------------------------------------- hand-written numba

@njit(fastmath=True, cache=True, inline="always")
def _nb_row_stats(x, i):
    c = x.shape[1]
    s = np.float32(0)
    for j in range(c):
        s += x[i, j]
    mu = s / c
    v = np.float32(0)
    for j in range(c):
        d = x[i, j] - mu
        v += d * d
    return mu, np.float32(1) / np.sqrt(v / c + np.float32(EPS))


@njit(parallel=True, fastmath=True, cache=True)
def nb_layer_norm(x, g, b, ct):
    n, c = x.shape
    y = np.empty_like(x)
    dx = np.empty_like(x)
    for i in prange(n):
        mu, rstd = _nb_row_stats(x, i)
        s1 = np.float32(0)
        s2 = np.float32(0)
        for j in range(c):
            xh = (x[i, j] - mu) * rstd
            y[i, j] = xh * g[j] + b[j]
            gy = ct[i, j] * g[j]
            s1 += gy
            s2 += gy * xh
        s1 /= c
        s2 /= c
        for j in range(c):
            xh = (x[i, j] - mu) * rstd
            dx[i, j] = rstd * (ct[i, j] * g[j] - s1 - xh * s2)
    # parameter gradients: column sums, rows split over threads
    nt = 16
    part_g = np.zeros((nt, c), np.float32)
    part_b = np.zeros((nt, c), np.float32)
    step = (n + nt - 1) // nt
    for t in prange(nt):
        for i in range(t * step, min(n, (t + 1) * step)):
            mu, rstd = _nb_row_stats(x, i)
            for j in range(c):
                part_g[t, j] += ct[i, j] * (x[i, j] - mu) * rstd
                part_b[t, j] += ct[i, j]
    return y, dx, part_g.sum(axis=0), part_b.sum(axis=0)


@njit(parallel=True, fastmath=True, cache=True)
def nb_xent(x, labels):
    n, c = x.shape
    dx = np.empty_like(x)
    losses = np.empty(n, np.float32)
    inv = np.float32(1.0 / n)
    for i in prange(n):
        m = x[i, 0]
        for j in range(c):
            m = max(m, x[i, j])
        s = np.float32(0)
        for j in range(c):
            e = vm.exp_f32(x[i, j] - m)
            dx[i, j] = e
            s += e
        r = inv / s
        for j in range(c):
            dx[i, j] *= r
        dx[i, labels[i]] -= inv
        losses[i] = np.log(s) + m - x[i, labels[i]]
    return losses.mean(), dx


def nb_mlp(w1, w2, x, labels):
    h = x @ w1
    t, a = _nb_gelu(h)
    loss, dlogits = nb_xent(a @ w2, labels)
    dw2 = a.T @ dlogits
    da = dlogits @ w2.T
    return loss, x.T @ _nb_gelu_back(h, t, da), dw2


@njit(parallel=True, fastmath=True, cache=True)
def _nb_gelu(h):
    t = np.empty_like(h)
    a = np.empty_like(h)
    for i in prange(h.shape[0]):
        for j in range(h.shape[1]):
            v = h[i, j]
            tt = np.tanh(_K * (v + np.float32(0.044715) * v * v * v))
            t[i, j] = tt
            a[i, j] = np.float32(0.5) * v * (1 + tt)
    return t, a


@njit(parallel=True, fastmath=True, cache=True)
def _nb_gelu_back(h, t, da):
    out = np.empty_like(h)
    for i in prange(h.shape[0]):
        for j in range(h.shape[1]):
            v = h[i, j]
            tt = t[i, j]
            out[i, j] = da[i, j] * (np.float32(0.5) * (1 + tt) + np.float32(0.5) * v * (1 - tt * tt) * _K
                                    * (1 + np.float32(3 * 0.044715) * v * v))
    return out


# ---------------------------------------------------------------- peers

def _torch(case):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(numba.get_num_threads())
    F = torch.nn.functional

    if case == "layer_norm":
        def f(x, g, b, ct):
            x = x.requires_grad_(True)
            g = g.requires_grad_(True)
            b = b.requires_grad_(True)
            y = F.layer_norm(x, (x.shape[-1],), g, b, EPS)
            dx, dg, db = torch.autograd.grad((y * ct).sum(), (x, g, b))
            return y, dx, dg, db
    elif case == "xent":
        def f(x, labels):
            x = x.requires_grad_(True)
            loss = F.cross_entropy(x, labels)
            return loss, torch.autograd.grad(loss, x)[0]
    else:
        def f(w1, w2, x, labels):
            w1 = w1.requires_grad_(True)
            w2 = w2.requires_grad_(True)
            loss = F.cross_entropy(F.gelu(x @ w1, approximate="tanh") @ w2, labels)
            return (loss,) + torch.autograd.grad(loss, (w1, w2))
    compiled = torch.compile(f)
    return lambda *a: compiled(*[torch.from_numpy(v) for v in a])


def _jax(case):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    if case == "layer_norm":
        def ln(x, g, b, ct):
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return jnp.sum(((x - mu) / jnp.sqrt(var + EPS) * g + b) * ct)
        f = jax.jit(jax.value_and_grad(ln, argnums=(0, 1, 2)))
    elif case == "xent":
        def xe(x, labels):
            lp = jax.nn.log_softmax(x)
            return -jnp.take_along_axis(lp, labels[:, None], axis=1).mean()
        f = jax.jit(jax.value_and_grad(xe))
    else:
        def m(w1, w2, x, labels):
            lp = jax.nn.log_softmax(jax.nn.gelu(x @ w1, approximate=True) @ w2)
            return -jnp.take_along_axis(lp, labels[:, None], axis=1).mean()
        f = jax.jit(jax.value_and_grad(m, argnums=(0, 1)))
    return lambda *a: jax.block_until_ready(f(*a))


# ---------------------------------------------------------------- cases

def _inputs(case):
    if case == "layer_norm":
        return (RNG.standard_normal((N, C), F32), RNG.standard_normal(C, F32), RNG.standard_normal(C, F32),
                RNG.standard_normal((N, C), F32))
    if case == "xent":
        return RNG.standard_normal((N, C), F32), RNG.integers(0, C, N)
    return ((RNG.standard_normal((1024, 1024), F32) * F32(0.03)), (RNG.standard_normal((1024, 10), F32) * F32(0.1)),
            RNG.standard_normal((512, 1024), F32), RNG.integers(0, 10, 512))


def _traffic(case, args) -> int:
    """Bytes a fused forward+backward must move: read the inputs, write the gradients."""
    if case == "layer_norm":
        x = args[0]
        return 4 * x.nbytes  # read x and ct, write y and dx
    if case == "xent":
        return 2 * args[0].nbytes
    return sum(a.nbytes for a in args) + args[0].nbytes + args[1].nbytes


FUNCS = {"layer_norm": (ln_loss, (0, 1, 2), np_layer_norm, nb_layer_norm),
         "xent": (xent, 0, np_xent, nb_xent),
         "mlp": (mlp, (0, 1), np_mlp, nb_mlp)}

IMPLS = ["braze vjp", "braze grad", "numpy", "numba", "torch.compile", "jax.jit"]


def _runner(case, impl):
    fn, argnums, np_fn, nb_fn = FUNCS[case]
    if impl == "braze vjp":
        if case == "layer_norm":  # the cotangent goes to the backward program
            compiled = braze.compile(ln, target="cpu")

            def run(x, g, b, ct):
                out, back = compiled.vjp(x, g, b)
                return out, back(ct)
            return run
        compiled = braze.compile(mlp_data if case == "mlp" else fn, target="cpu")
        seed = F32(1.0)

        def run(*args):
            out, back = compiled.vjp(*args)
            return out, back(seed)
        return run
    if impl == "braze grad":
        return braze.compile(braze.value_and_grad(fn, argnums=argnums), target="cpu")
    if impl == "numpy":
        return np_fn
    if impl == "numba":
        return nb_fn
    if impl == "torch.compile":
        return _torch(case)
    return _jax(case)


def _check(case, impl, result, args):
    want = FUNCS[case][2](*args)  # the hand-derived NumPy: (value, *gradients)
    if impl == "braze vjp":  # cotangents of every float input; the references give the parameters'
        grads = [g for g in result[1] if g is not None][: len(want) - 1]
    elif impl == "braze grad":
        grads = list(result[1]) if isinstance(result[1], tuple) else [result[1]]
    else:
        return  # peers are checked by their own test suites; numpy/numba are the references
    for g, w in zip(grads, want[1:], strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", ["layer_norm", "xent", "mlp"])
def test_forward_backward(benchmark, triad_gbps, case, impl):
    args = _inputs(case)
    fn = _runner(case, impl)
    result = fn(*args)
    _check(case, impl, result, args)
    if impl.startswith("braze"):
        cpu_cache.wait_background()  # measure the tiered-up (parallel) kernels
        fn(*args)
    benchmark.group = f"forward+backward {case} float32"
    benchmark.extra_info["triad GB/s"] = round(triad_gbps, 1)
    benchmark.extra_info["traffic bytes"] = _traffic(case, args)
    benchmark.pedantic(fn, args, rounds=15, iterations=1, warmup_rounds=2)
    if benchmark.stats is None:  # --benchmark-disable: a correctness run
        return
    median = benchmark.stats.stats.median
    gbps = _traffic(case, args) / median / 1e9
    benchmark.extra_info["GB/s"] = round(gbps, 1)
    benchmark.extra_info["% of triad"] = round(100 * gbps / triad_gbps)
