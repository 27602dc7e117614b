"""Gradients: every differentiable primitive and library composite against
central finite differences (float64), through every path: ``grad`` eagerly,
the tape, ``vjp``, ``compile(grad)`` on generic and cpu, and the paired
compiled forward/backward. Plus second derivatives, tape semantics, custom
and kernel-paired gradients, and the errors.
"""
import numpy as np
import pytest

import braze
from braze import GradientError, GradientTape
from braze.core import NONDIFFERENTIABLE, PRIMITIVES
from _compare import central_differences

RTOL = 1e-5


def _rng(seed=0):
    return np.random.default_rng(seed)


def numeric_grad(f, args, k, eps=1e-6):
    """Central differences of scalar f with respect to args[k]."""
    x = np.array(args[k], dtype=np.float64)
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = f(*[x if j == k else a for j, a in enumerate(args)])
        flat[i] = old - eps
        lo = f(*[x if j == k else a for j, a in enumerate(args)])
        flat[i] = old
        gflat[i] = (float(hi) - float(lo)) / (2 * eps)
    return g


def assert_close(got, want, what=""):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    err = float(np.abs(got - want).max(initial=0)) / scale
    assert err < RTOL, f"{what}: relative error {err:.2e}\n got {got}\nwant {want}"


def weighted(fn, out_shape_seed=1):
    """sum(fn(*args) * w) for a fixed random w: a non-uniform cotangent."""
    cache = {}

    def loss(*args):
        out = fn(*args)
        shape = np.shape(out)
        if shape not in cache:
            cache[shape] = _rng(out_shape_seed).uniform(0.5, 1.5, shape)
        return np.sum(out * cache[shape])

    return loss


# (name, fn, argument factory, differentiable argnums)
def _u(lo, hi, shape=(3, 4), seed=0):
    return lambda: (_rng(seed).uniform(lo, hi, shape),)


def _signed(lo, hi, shape=(3, 4), seed=0):
    def make():
        r = _rng(seed)
        return (r.uniform(lo, hi, shape) * r.choice([-1.0, 1.0], shape),)
    return make


UNARY = {
    "negative": (np.negative, _u(-2, 2)), "positive": (np.positive, _u(-2, 2)),
    "absolute": (np.absolute, _signed(0.2, 2)), "exp": (np.exp, _u(-2, 2)), "exp2": (np.exp2, _u(-2, 2)),
    "expm1": (np.expm1, _u(-2, 2)), "log": (np.log, _u(0.5, 3)), "log2": (np.log2, _u(0.5, 3)),
    "log10": (np.log10, _u(0.5, 3)), "log1p": (np.log1p, _u(-0.5, 2)), "sqrt": (np.sqrt, _u(0.5, 3)),
    "cbrt": (np.cbrt, _signed(0.3, 2)), "square": (np.square, _u(-2, 2)),
    "reciprocal": (np.reciprocal, _signed(0.5, 2)), "sin": (np.sin, _u(-3, 3)), "cos": (np.cos, _u(-3, 3)),
    "tan": (np.tan, _u(-1, 1)), "arcsin": (np.arcsin, _u(-0.8, 0.8)), "arccos": (np.arccos, _u(-0.8, 0.8)),
    "arctan": (np.arctan, _u(-2, 2)), "sinh": (np.sinh, _u(-2, 2)), "cosh": (np.cosh, _u(-2, 2)),
    "tanh": (np.tanh, _u(-2, 2)), "arcsinh": (np.arcsinh, _u(-2, 2)), "arccosh": (np.arccosh, _u(1.5, 3)),
    "arctanh": (np.arctanh, _u(-0.8, 0.8)), "deg2rad": (np.deg2rad, _u(-2, 2)),
    "rad2deg": (np.rad2deg, _u(-2, 2)), "erf": (braze.numpy.erf, _u(-2, 2)),
    # float32 rounding is added back, so finite differences at 1e-6 see the identity
    "convert": (lambda x: x.astype(np.float32).astype(np.float64) + (x - x.astype(np.float32)), _u(-2, 2)),
}


def _pair(lo1, hi1, lo2, hi2, s1=(3, 4), s2=(3, 4), sign2=False):
    def make():
        r = _rng(3)
        y = r.uniform(lo2, hi2, s2)
        if sign2:
            y = y * r.choice([-1.0, 1.0], s2)
        return r.uniform(lo1, hi1, s1), y
    return make


def _distinct():
    r = _rng(4)
    x = r.uniform(-2, 2, (3, 4))
    return x, x + r.choice([-0.5, 0.5], (3, 4))


BINARY = {
    "add": (np.add, _pair(-2, 2, -2, 2, s2=(4,))), "subtract": (np.subtract, _pair(-2, 2, -2, 2, s1=(3, 1))),
    "multiply": (np.multiply, _pair(-2, 2, -2, 2, s2=(1, 4))),
    "divide": (np.divide, _pair(-2, 2, 0.5, 2, sign2=True)),
    "remainder": (np.remainder, _pair(2.1, 2.9, 0.7, 0.8)), "fmod": (np.fmod, _pair(2.1, 2.9, 0.7, 0.8)),
    "power": (np.power, _pair(0.5, 2, -2, 2)), "arctan2": (np.arctan2, _pair(-2, 2, 0.5, 2, sign2=True)),
    "hypot": (np.hypot, _pair(0.5, 2, 0.5, 2)), "maximum": (np.maximum, _distinct),
    "minimum": (np.minimum, _distinct), "fmax": (np.fmax, _distinct), "fmin": (np.fmin, _distinct),
    "copysign": (np.copysign, _pair(0.5, 2, 0.5, 2, sign2=True)),
    "logaddexp": (np.logaddexp, _pair(-2, 2, -2, 2)), "logaddexp2": (np.logaddexp2, _pair(-2, 2, -2, 2)),
    "heaviside": (np.heaviside, _pair(0.5, 2, -2, 2)),  # (a step away from 0: zero in both)
}


def _mask_where(x, y):
    return np.where(x > 0, x * y, y - x)


def _clip(x, lo, hi):
    return np.clip(x, lo, hi)


def _clip_args():
    r = _rng(5)
    x = np.array([[-2.0, -0.3, 0.2, 1.7], [0.9, -1.4, 0.05, 2.5]])
    return x, r.uniform(-1, -0.5, (2, 1)), r.uniform(0.5, 1.0, (1, 4))


def _ints():
    return _rng(6).uniform(-1, 1, (5, 3))


_STEP_AT = np.array([[-1.5, 0.0, 2.0, 0.0], [0.0, 0.7, -0.2, 0.0], [3.0, 0.0, 0.0, -1.0]])

MISC = {
    "heaviside_at_zero": (lambda h: np.heaviside(_STEP_AT, h) * 2.0, _u(-1, 1)),  # h counts where x == 0
    "where": (_mask_where, lambda: (_rng(1).uniform(-1, 1, (3, 4)), _rng(2).uniform(-1, 1, (4,)))),
    "clip": (_clip, _clip_args),
    "reduce_sum": (lambda x: x.sum(axis=1, keepdims=True) * x.sum(axis=0), _u(-1, 1)),
    "reduce_sum_all": (lambda x: np.sum(x) * x, _u(-1, 1)),
    "reduce_prod": (lambda x: np.prod(x, axis=0), _u(0.5, 1.5)),
    "reduce_prod_zeros": (lambda x: np.prod(x * np.array([[0.0], [1.0], [1.0]]), axis=0)
                          + np.prod(x * np.array([[0.0], [0.0], [1.0]]), axis=0), _u(0.5, 1.5)),
    "reduce_max": (lambda x: x.max(axis=1), _u(-1, 1)), "reduce_min": (lambda x: np.min(x, axis=(0, 1)), _u(-1, 1)),
    "mean_var_std": (lambda x: x.mean(axis=0) + x.var(axis=1, keepdims=True) + x.std(), _u(-1, 1)),
    "reshape": (lambda x: x.reshape(2, 6) @ np.ones((6, 2)), _u(-1, 1)),
    "transpose": (lambda x: np.transpose(x[None], (2, 0, 1)) * np.arange(3.0), _u(-1, 1)),
    "broadcast_to": (lambda x: np.broadcast_to(x[:, :1], (3, 5)), _u(-1, 1)),
    "concatenate": (lambda x, y: np.concatenate([x, y * 2, x], axis=1), lambda: (_rng(1).normal(size=(2, 3)),
                                                                              _rng(2).normal(size=(2, 1)))),
    "stack_split": (lambda x: np.stack(np.split(x, 2, axis=1), axis=0) ** 2, _u(-1, 1)),
    "squeeze_expand": (lambda x: np.expand_dims(np.squeeze(x[:, :1]), 0) * 3, _u(-1, 1)),
    "slice": (lambda x: x[1:, ::-2] ** 2, _u(-1, 1)),
    "int_index": (lambda x: x[1] * x[-1, 2], _u(-1, 1)),
    "gather": (lambda x: x[np.array([0, 2, 2, 0])] ** 2, _u(-1, 1)),
    "gather_2d": (lambda x: x[np.array([0, 2, 2]), np.array([1, 1, 3])] ** 2, _u(-1, 1)),
    "take_along_axis_1": (lambda x: np.take_along_axis(x, np.array([[1], [3], [-1]]), axis=1) ** 2, _u(-1, 1)),
    "take_along_axis_k": (lambda x: np.take_along_axis(x, np.array([[1, 1, 0], [3, 2, 3], [0, 0, 0]]), axis=1) ** 2,
                          _u(-1, 1)),
    "matmul": (lambda a, b: a @ b, lambda: (_rng(1).normal(size=(3, 4)), _rng(2).normal(size=(4, 2)))),
    "matmul_batched": (lambda a, b: np.matmul(a, b), lambda: (_rng(1).normal(size=(2, 3, 4)),
                                                              _rng(2).normal(size=(4, 2)))),
    "matmul_vec_left": (lambda a, b: a @ b, lambda: (_rng(1).normal(size=(4,)), _rng(2).normal(size=(2, 4, 3)))),
    "matmul_vec_right": (lambda a, b: a @ b, lambda: (_rng(1).normal(size=(3, 4)), _rng(2).normal(size=(4,)))),
    "matmul_vec_vec": (lambda a, b: a @ b, lambda: (_rng(1).normal(size=(4,)), _rng(2).normal(size=(4,)))),
    "einsum": (lambda a, b: np.einsum("ij,jk->ik", a, b), lambda: (_rng(1).normal(size=(3, 4)),
                                                                 _rng(2).normal(size=(4, 2)))),
    "einsum_summed_out": (lambda a, b: np.einsum("ijk,j->i", a, b), lambda: (_rng(1).normal(size=(2, 3, 4)),
                                                                           _rng(2).normal(size=(3,)))),
    "outer_dot": (lambda a, b: np.outer(a, b).sum() + np.dot(a, a), lambda: (_rng(1).normal(size=(3,)),
                                                                           _rng(2).normal(size=(4,)))),
}


def _setitem_slice_fn(x):
    y = x * 1.0
    y[1:, 1:3] = x[:2, :2] ** 2
    return y


def _setitem_fancy_fn(x):
    y = np.zeros_like(x)
    y[np.array([0, 2])] = x[np.array([1, 1])] * 3
    y[1] += x[0]
    return y


def _inplace_view_fn(x):
    y = x * 2.0
    v = y[:, 1:]
    v *= x[:, :3]
    return y ** 2


MISC["setitem_slice"] = (_setitem_slice_fn, _u(-1, 1))
MISC["setitem_fancy"] = (_setitem_fancy_fn, _u(-1, 1))
MISC["inplace_view"] = (_inplace_view_fn, _u(-1, 1))
MISC["bool_mask"] = (lambda x: x[np.array([True, False, True])] * 2, _u(-1, 1))

CASES = {**{f"u_{k}": v for k, v in UNARY.items()}, **{f"b_{k}": v for k, v in BINARY.items()}, **MISC}


def _numeric_all(loss, args):
    return [numeric_grad(loss, args, k) for k in range(len(args))]


def _check_eager(name, loss, args):
    """``grad`` against finite differences for every argument; returns the
    differences for further paths."""
    want = _numeric_all(loss, args)
    got = braze.grad(loss, argnums=tuple(range(len(args))))(*args)
    for k in range(len(args)):
        assert_close(got[k], want[k], f"{name} eager grad, argument {k}")
    return want


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    fn, make = CASES[name]
    args = make()
    loss = weighted(fn)
    want = _check_eager(name, loss, args)
    # the tape
    with GradientTape() as tape:
        ws = [tape.watch(a) for a in args]
        y = loss(*ws)
    for k, g in enumerate(tape.gradient(y, ws)):
        assert_close(g, want[k], f"{name} tape, argument {k}")
    # vjp with a cotangent of 1
    value, back = braze.vjp(loss, *args)
    assert_close(value, loss(*args), f"{name} vjp value")
    for k, g in enumerate(back(1.0)):
        assert_close(g, want[k], f"{name} vjp, argument {k}")


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_gradient_matches_eager(name, target):
    fn, make = CASES[name]
    args = make()
    loss = weighted(fn)
    nums = tuple(range(len(args)))
    eager = braze.grad(loss, argnums=nums)(*args)
    compiled = braze.compile(braze.value_and_grad(loss, argnums=nums), target=target)
    value, got = compiled(*args)
    assert_close(value, loss(*args), f"{name} value on {target}")
    for k in nums:
        assert_close(got[k], eager[k], f"{name} compiled grad on {target}, argument {k}")


def test_every_primitive_has_a_vjp_rule_or_is_marked_nondifferentiable():
    missing = [op for op, p in PRIMITIVES.items() if p.vjp is None and p.kind != "call"]
    assert missing == []
    assert all(callable(p.vjp) or p.vjp == NONDIFFERENTIABLE for p in PRIMITIVES.values() if p.kind != "call")


# ---------------------------------------------------------------- library composites

def _lib_cases():
    r = _rng(7)
    x = r.normal(size=(3, 5))
    nn = braze.nn
    return {
        "softmax": (lambda x: nn.softmax(x), (x,)),
        "softmax_axis0": (lambda x: nn.softmax(x, axis=0), (x,)),
        "log_softmax": (lambda x: nn.log_softmax(x), (x,)),
        "logsumexp": (lambda x: nn.logsumexp(x, axis=1, keepdims=True), (x,)),
        "layer_norm": (lambda x, g, b: nn.layer_norm(x, g, b), (x, r.normal(size=5), r.normal(size=5))),
        "rms_norm": (lambda x, g: nn.rms_norm(x, g), (x, r.normal(size=5))),
        "gelu_tanh": (lambda x: nn.gelu(x), (x,)),
        "gelu_erf": (lambda x: nn.gelu(x, approximate=False), (x,)),
        "sigmoid": (lambda x: nn.sigmoid(x), (x,)),
        "silu": (lambda x: nn.silu(x), (x,)),
        "softmax_cross_entropy": (lambda x: nn.softmax_cross_entropy(x, np.array([0, 4, 2])), (x,)),
        "attention": (lambda q, k, v: nn.attention(q, k, v), (r.normal(size=(2, 3, 4)), r.normal(size=(2, 5, 4)),
                                                              r.normal(size=(2, 5, 3)))),
        "attention_causal": (lambda q, k, v: nn.attention(q, k, v, causal=True),
                             (r.normal(size=(1, 4, 4)), r.normal(size=(1, 4, 4)), r.normal(size=(1, 4, 2)))),
    }


LIB = _lib_cases()


@pytest.mark.parametrize("name", sorted(LIB))
def test_library_composite_gradients(name):
    fn, args = LIB[name]
    loss = weighted(fn)
    want = _check_eager(name, loss, args)
    nums = tuple(range(len(args)))
    for target in ("generic", "cpu"):
        got = braze.compile(braze.grad(loss, argnums=nums), target=target)(*args)
        for k in nums:
            assert_close(got[k], want[k], f"{name} compiled on {target}, argument {k}")
        out, back = braze.compile(loss, target=target).vjp(*args)
        assert_close(out, loss(*args), f"{name} paired forward on {target}")
        for k, g in enumerate(back(1.0)):
            assert_close(g, want[k], f"{name} paired backward on {target}, argument {k}")


# ---------------------------------------------------------------- second order

SECOND = {
    "sin_cube": (lambda x: np.sum(np.sin(x) * x ** 3), _u(-1, 1, (4,))),
    "tanh_matmul": (lambda x: np.sum(np.tanh(x @ np.arange(12.0).reshape(4, 3) / 10)), _u(-1, 1, (2, 4))),
    "softmax": (lambda x: np.sum(braze.nn.softmax(x) * np.arange(4.0)), _u(-1, 1, (2, 4))),
    "layer_norm": (lambda x: np.sum(braze.nn.layer_norm(x, np.ones(4), np.zeros(4)) ** 3), _u(-1, 1, (2, 4))),
    "exp_log": (lambda x: np.sum(np.log1p(np.exp(x)) * x), _u(-1, 1, (4,))),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivative(name):
    fn, make = SECOND[name]
    (x,) = make()
    g = braze.grad(fn)
    v = _rng(9).normal(size=x.shape)
    hvp = lambda x: np.sum(g(x) * v)  # noqa: E731
    want = numeric_grad(lambda x: np.sum(braze.grad(fn)(x) * v), (x,), 0)
    assert_close(braze.grad(hvp)(x), want, f"{name} grad(grad) eager")
    assert_close(braze.compile(braze.grad(hvp), target="cpu")(x), want, f"{name} grad(grad) on cpu")
    assert_close(braze.compile(braze.grad(hvp), target="generic")(x), want, f"{name} grad(grad) on generic")


# ---------------------------------------------------------------- dtypes, pytrees, aux

def test_float32_gradient_stays_float32_and_integer_inputs_are_refused():
    x = np.ones(3, np.float32)
    g = braze.grad(lambda x: np.sum(x * 2.0))(x)
    assert g.dtype == np.float32
    assert braze.compile(braze.grad(lambda x: np.sum(x * 2.0)), target="cpu")(x).dtype == np.float32
    with pytest.raises(GradientError, match="int64.*only floating-point"):
        braze.grad(lambda x: np.sum(x * 2.0))(np.arange(3))
    with pytest.raises(GradientError, match="bool"):
        braze.grad(lambda x, m: np.sum(x * m), argnums=1)(x, np.ones(3, bool))


def test_integer_argument_not_differentiated_is_fine():
    logits = _rng(1).normal(size=(4, 6))
    labels = np.array([1, 0, 5, 2])
    g = braze.grad(lambda x, y: braze.nn.softmax_cross_entropy(x, y))(logits, labels)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    p[np.arange(4), labels] -= 1
    assert_close(g, p / 4, "cross-entropy gradient")


def test_pytree_arguments_and_aux():
    params = {"w": _rng(1).normal(size=(3, 2)), "b": [np.zeros(2), np.float64(0.5)]}
    x = _rng(2).normal(size=(4, 3))

    def loss(p, x):
        y = np.tanh(x @ p["w"] + p["b"][0]) * p["b"][1]
        return np.sum(y ** 2), {"mean": y.mean()}

    (value, aux), grads = braze.value_and_grad(loss, has_aux=True)(params, x)
    assert set(grads) == {"w", "b"} and isinstance(grads["b"], list)
    assert np.shape(grads["b"][1]) == ()
    for path in (("w",), ("b", 0), ("b", 1)):
        def f(v, path=path):
            p = {"w": params["w"], "b": list(params["b"])}
            if path[0] == "w":
                p["w"] = v
            else:
                p["b"][path[1]] = v
            return loss(p, x)[0]
        base = params[path[0]] if len(path) == 1 else params["b"][path[1]]
        got = grads[path[0]] if len(path) == 1 else grads["b"][path[1]]
        assert_close(got, numeric_grad(f, (base,), 0), f"pytree leaf {path}")
    compiled = braze.compile(braze.value_and_grad(loss, has_aux=True), target="cpu")
    (value2, aux2), grads2 = compiled(params, x)
    assert_close(value2, value, "compiled value")
    assert_close(aux2["mean"], aux["mean"], "compiled aux")
    assert_close(grads2["w"], grads["w"], "compiled pytree gradient")


def test_grad_requires_scalar_output_and_valid_argnums():
    with pytest.raises(GradientError, match="must return a scalar.*shape \\(3,\\)"):
        braze.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(GradientError, match="argnums=2"):
        braze.grad(lambda x: np.sum(x), argnums=2)(np.ones(3))
    with pytest.raises(GradientError, match="has_aux=True"):
        braze.grad(lambda x: np.sum(x), has_aux=True)(np.ones(3))


def test_python_control_flow_on_values_works_eagerly():
    def f(x):
        if x.sum() > 0:
            return np.sum(x ** 2)
        return np.sum(-x)
    assert_close(braze.grad(f)(np.array([1.0, 2.0])), [2.0, 4.0])
    assert_close(braze.grad(f)(np.array([-1.0, -2.0])), [-1.0, -1.0])


def test_max_ties_split_like_jax():
    g = braze.grad(lambda x: np.max(x))(np.array([1.0, 3.0, 3.0]))
    assert_close(g, [0.0, 0.5, 0.5])
    g = braze.grad(lambda x, y: np.sum(np.maximum(x, y)), argnums=(0, 1))(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    assert_close(g[0], [0.5, 1.0], "maximum tie, x")
    assert_close(g[1], [0.5, 0.0], "maximum tie, y")


def test_unused_input_gets_zeros_and_stop_gradient_blocks():
    g = braze.grad(lambda x, y: np.sum(x), argnums=1)(np.ones(2), np.ones(3))
    assert_close(g, np.zeros(3))
    g = braze.grad(lambda x: np.sum(x * braze.stop_gradient(x)))(np.array([2.0, 3.0]))
    assert_close(g, [2.0, 3.0])


# ---------------------------------------------------------------- the tape

def test_tape_non_persistent_persistent_and_stop_recording():
    x = np.array([1.0, 2.0])
    with GradientTape() as tape:
        w = tape.watch(x)
        y = np.sum(w ** 2)
    assert_close(tape.gradient(y, w), 2 * x)
    with pytest.raises(GradientError, match="persistent=True"):
        tape.gradient(y, w)
    with GradientTape(persistent=True) as tape:
        w = tape.watch(x)
        y = np.sum(w ** 2)
        with tape.stop_recording():
            z = np.sum(w ** 3)  # not recorded: no gradient through z
        y2 = y + z
    assert_close(tape.gradient(y, w), 2 * x)
    assert_close(tape.gradient(y2, w), 2 * x)
    assert type(np.asarray(y2)) is np.ndarray  # the value, detached


def test_tapes_nest_and_must_exit_in_order():
    x = np.array([0.5, 1.5])
    with GradientTape() as outer:
        wo = outer.watch(x)
        with GradientTape() as inner:
            wi = inner.watch(wo)
            y = np.sum(np.sin(wi) * wi)
        g = inner.gradient(y, wi)
        s = np.sum(g)
    assert_close(np.asarray(g), np.cos(x) * x + np.sin(x))
    assert_close(outer.gradient(s, wo), -np.sin(x) * x + 2 * np.cos(x))

    a, b = GradientTape(), GradientTape()
    a.__enter__()
    b.__enter__()
    with pytest.raises(braze.TraceError, match="out of order"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert np.exp(np.zeros(1))[0] == 1.0  # the context stack is sound afterwards


def test_tape_rejects_misuse():
    tape = GradientTape()
    with pytest.raises(GradientError, match="inside the tape's `with` block"):
        tape.watch(np.ones(2))
    with GradientTape() as tape:
        w = tape.watch(np.ones(2))
        y = np.sum(w)
    with pytest.raises(GradientError, match="not watched by this tape"):
        tape.gradient(y, np.ones(2))
    with pytest.raises(GradientError, match="int64"):
        with GradientTape() as tape:
            tape.watch(np.arange(3))


def test_tape_view_writes_through_and_gradient_follows():
    x = np.arange(1.0, 5.0)
    with GradientTape() as tape:
        w = tape.watch(x)
        y = w * 1.0
        v = y[1:3]
        v *= 10.0  # writes through to y
        total = np.sum(y * y)
    g = tape.gradient(total, w)
    want = 2 * x * np.array([1.0, 100.0, 100.0, 1.0])
    assert_close(g, want)


def test_compiled_function_called_under_a_tape_is_differentiated():
    f = braze.compile(lambda x: np.sum(np.exp(x)), target="cpu")
    x = np.array([0.1, 0.2])
    assert_close(braze.grad(f)(x), np.exp(x))


# ---------------------------------------------------------------- custom gradients

def test_defvjp_is_used_eagerly_and_compiled(restore_registry):
    calls = []

    @braze.composite("test.grad.clipped_identity")
    def clipped(x, *, bound=1.0):
        return x * 1.0

    def fwd(x, *, bound=1.0):
        return x * 1.0, (x,)

    def bwd(res, g, *, bound=1.0):
        calls.append(bound)
        return (np.clip(g, -bound, bound),)

    clipped.defvjp(fwd, bwd)
    x = np.array([1.0, 2.0])
    loss = lambda x: np.sum(clipped(x, bound=0.5) * np.array([3.0, -0.25]))  # noqa: E731
    assert_close(braze.grad(loss)(x), [0.5, -0.25])
    assert_close(braze.compile(braze.grad(loss), target="cpu")(x), [0.5, -0.25])
    assert calls == [0.5, 0.5]
    text = str(braze.compile(loss, target="cpu").lower_vjp(x))
    assert "gradient from its defvjp rule" in text


def test_defvjp_bad_backward_is_a_clear_error():
    @braze.composite("test.grad.bad_bwd")
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g,))
    with pytest.raises(braze.CompositeError, match="tuple of 2 cotangent"):
        braze.grad(lambda x: np.sum(f(x, x)))(np.ones(2))


def test_kernel_pair_used_when_selected_and_body_otherwise(restore_registry):
    name = "test.grad.scaled_softmax"

    @braze.composite(name)
    def scaled_softmax(x, *, scale=1.0):
        e = np.exp(x * scale - braze.stop_gradient((x * scale).max(axis=-1, keepdims=True)))
        return e / e.sum(axis=-1, keepdims=True)

    used = []

    def backward(residuals, g, *, scale=1.0):
        used.append("backward")
        (y,) = residuals
        return (scale * y * (g - (g * y).sum(axis=-1, keepdims=True)),)

    @scaled_softmax.register("cpu", backward=backward)
    def forward(x, *, scale=1.0):
        used.append("forward")
        z = x * scale
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
        return y, (y,)

    x = _rng(3).normal(size=(3, 4))
    w = _rng(4).normal(size=(3, 4))
    loss = lambda x: np.sum(scaled_softmax(x, scale=2.0) * w)  # noqa: E731
    want = numeric_grad(loss, (x,), 0)
    used.clear()
    got = braze.compile(braze.grad(loss), target="cpu")(x)
    assert_close(got, want, "kernel pair gradient")
    assert "forward" in used and "backward" in used
    text = str(braze.compile(loss, target="cpu").lower_vjp(x))
    assert "gradient from the kernel pair" in text
    assert "gradient from the kernel pair" in braze.explain(braze.compile(braze.grad(loss), target="cpu"), x)
    out, back = braze.compile(loss, target="cpu").vjp(x)
    assert_close(back(1.0)[0], want, "paired vjp with a kernel pair")
    # the same kernel runs as a plain forward (residuals dropped) without gradients
    assert_close(braze.compile(lambda x: scaled_softmax(x, scale=2.0), target="cpu")(x),
                 scaled_softmax(x, scale=2.0))
    # generic has no kernel: the gradient is derived from the body
    used.clear()
    assert_close(braze.compile(braze.grad(loss), target="generic")(x), want)
    assert used == []


def test_kernel_without_backward_recomputes_the_body(restore_registry):
    @braze.composite("test.grad.square_plus")
    def square_plus(x):
        return x * x + 1.0

    @square_plus.register("cpu")
    def kernel(x):
        return x * x + 1.0

    x = np.array([1.0, -2.0])
    loss = lambda x: np.sum(square_plus(x) ** 2)  # noqa: E731
    assert_close(braze.compile(braze.grad(loss), target="cpu")(x), 4 * x * (x * x + 1))
    text = str(braze.compile(loss, target="cpu").lower_vjp(x))
    assert "has no backward, so its forward is recomputed" in text


# ---------------------------------------------------------------- paired forward / backward

def _mlp_loss(params, x, labels):
    w1, w2 = params
    h = braze.nn.gelu(x @ w1)
    return braze.nn.softmax_cross_entropy(h @ w2, labels)


def _mlp_reference(params, x, labels):
    w1, w2 = params
    return numeric_grad(lambda w: _mlp_loss((w, w2), x, labels), (w1,), 0), \
        numeric_grad(lambda w: _mlp_loss((w1, w), x, labels), (w2,), 0)


def test_paired_mlp_forward_backward_on_cpu():
    r = _rng(11)
    # (every contraction longer than SMALL_CONTRACTION: BLAS, not products written out)
    n, d, h, c = 12, 11, 10, 7
    x = r.normal(size=(n, d))
    params = (r.normal(size=(d, h)) * 0.5, r.normal(size=(h, c)) * 0.5)
    labels = np.array([0, 2, 1, 1, 0, 2] * 2)
    f = braze.compile(_mlp_loss, target="cpu")
    loss, back = f.vjp(params, x, labels)
    assert_close(loss, _mlp_loss(params, x, labels))
    (g_params, g_x, g_labels) = back(1.0)
    want = _mlp_reference(params, x, labels)
    assert_close(g_params[0], want[0], "dW1")
    assert_close(g_params[1], want[1], "dW2")
    assert g_labels is None and g_x.shape == x.shape
    lowered = f.lower_vjp(params, x, labels)
    text = str(lowered)
    assert "# forward program" in text and "# backward program" in text and "# residuals" in text
    assert "matmul" in lowered.forward.plan and "matmul" in lowered.backward.plan
    # residuals: the hidden layer before and after GELU, the softmax numerator and
    # its row sums; GELU's elementwise derivative pieces are recomputed, not saved
    assert lowered.residual_bytes <= 2 * (n * h * 8) + n * c * 8 + n * 8, str(lowered)


def test_paired_residuals_recompute_elementwise_values():
    x = _rng(1).normal(size=(64, 32))
    g, b = np.ones(32), np.zeros(32)
    lowered = braze.compile(lambda x, g, b: braze.nn.layer_norm(x, g, b), target="cpu").lower_vjp(x, g, b)
    saved = [r for r in lowered.residuals if r.kind == "saved"]
    assert all(r.aval.shape == (64, 1) for r in saved), [str(r) for r in lowered.residuals]
    assert lowered.recomputed, "the normalized activations should be recomputed, not saved"
    assert "recomputed in the backward program" in str(lowered)


def test_paired_vjp_errors_and_structure():
    f = braze.compile(lambda x: (x * 2.0, np.sum(x)), target="generic")
    out, back = f.vjp(np.ones(3))
    (g,) = back((np.ones(3), 1.0))
    assert_close(g, np.full(3, 3.0))
    with pytest.raises(GradientError, match="cotangent has structure"):
        back(np.ones(3))
    with pytest.raises(GradientError, match="cotangent of shape"):
        back((np.ones(4), 1.0))

    def mutates(x):
        x += 1.0
        return np.sum(x)
    with pytest.raises(GradientError, match="in place"):
        braze.compile(mutates, target="generic").vjp(np.ones(2))


def test_large_column_sums_use_numpy_reduction_and_stay_exact():
    # the bias gradient of a big layer: a sum over rows, done by NumPy row by row
    x = _rng(3).normal(size=(300, 257)).astype(np.float32)
    f = braze.compile(lambda x: (x * 2.0).sum(axis=0), target="cpu")
    np.testing.assert_allclose(f(x), (x * 2.0).sum(axis=0), rtol=1e-5, atol=1e-4)
    assert "extern reduce_sum" in f.lower(x).plan
    small = braze.compile(lambda x: (x * 2.0).sum(axis=0), target="cpu")
    np.testing.assert_allclose(small(x[:4, :5]), (x[:4, :5] * 2.0).sum(axis=0), rtol=1e-5)
    assert "extern reduce_sum" not in small.lower(x[:4, :5]).plan


# ---------------------------------------------------------------- arrays built from watched values
# NumPy builds np.array([x, ...]) by calling __array__ on each element: a
# plain array, and a silently zero gradient. braze intercepts these calls
# while a tape or a trace is active and builds the array with its own ops.

ESCAPES = {
    "array_of_scalars": lambda x: np.array([x, x * 1.0, x + 2.5]).sum(),
    "array_of_arrays": lambda x: (np.array([x, x * 2.0]) ** 2).sum(),
    "nested_lists": lambda x: (np.array([[x, x * 3.0], [x * x, x]]) * np.arange(1.0, 5.0).reshape((2, 2) + (1,) * np.ndim(x))).sum(),
    "asarray_keeps_it": lambda x: np.asarray(x).sum() * 3.0,
    "r_": lambda x: (np.r_[x, x * 2.0, 1.0] ** 2).sum(),
    "c_": lambda x: (np.c_[x, x * 2.0] * np.arange(1.0, 3.0)).sum(),
    "append": lambda x: (np.append(x, x * 2.0) ** 2).sum(),
    "append_axis": lambda x: (np.append(np.atleast_2d(x), np.atleast_2d(x * 3.0), axis=0) ** 2).sum(),
    "max_of_array": lambda x: np.max(np.array([x, x * 0.5 + 1.0])),
}


@pytest.mark.parametrize("shape", [(), (3,)])
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_arrays_built_from_watched_values_carry_the_gradient(name, shape):
    fn = ESCAPES[name]
    x = np.linspace(0.5, 1.5, 3)[: shape[0]] if shape else np.float64(0.75)
    want = numeric_grad(fn, [x], 0)
    assert np.abs(want).max() > 0  # the check below cannot pass with a zero gradient
    assert_close(braze.grad(fn)(x), want, f"{name} eager")
    for target in ("generic", "cpu"):
        assert_close(braze.compile(braze.grad(fn), target=target)(x), want, f"{name} on {target}")
        assert_close(braze.compile(fn, target=target)(x), fn(x), f"{name} value on {target}")


def test_a_watched_value_escaping_into_a_numpy_array_is_an_error_not_a_zero():
    buf = np.empty(2)  # a plain NumPy buffer made outside: the tape cannot see it

    def f(x):
        buf[:] = x * 2.0
        return buf.sum() + x[0]

    def g(x):
        buf[0] = x.sum()  # (an element: NumPy converts with float())
        return buf.sum() + x[0]

    with pytest.raises(GradientError, match="stop_gradient"):
        braze.grad(f)(np.ones(2))
    with pytest.raises((GradientError, ValueError)):  # (NumPy replaces what float() raised with a ValueError)
        braze.grad(g)(np.ones(2))
    # detaching on purpose is allowed, and gives the gradient of what is left
    g = braze.grad(lambda x: (braze.stop_gradient(x) * x).sum())(np.array([2.0, 3.0]))
    assert np.array_equal(g, [2.0, 3.0])


@pytest.mark.parametrize("compiled", [False, True])
def test_watched_values_written_into_a_buffer_the_function_made_keep_their_gradient(compiled):
    def loss(x):  # (out[i] = w into a plain NumPy array went through float(w): a silent zero gradient)
        out = np.empty(2)
        out[0] = np.sum(x)
        out[1] = np.sum(x * 2)
        stacked = np.zeros((2, 3))
        stacked[0] = x[:3]
        return (out ** 2).sum() + (stacked ** 3).sum()

    x = np.random.default_rng(2).random(4)
    grad = braze.compile(braze.grad(loss), target="cpu") if compiled else braze.grad(loss)
    want = 10 * x.sum() + np.r_[3 * x[:3] ** 2, 0.0]
    np.testing.assert_allclose(grad(x), want, rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_watched_values_written_into_eye_identity_and_tri_keep_their_gradient(compiled):
    """``L = np.eye(n); L[k, i] = w`` (Doolittle's LU): the matrix constructors
    are watched buffers under a tape as np.zeros is; NumPy's setitem refused
    ``w`` (float() of a watched value), eagerly and compiled."""
    def loss(a):
        L = np.eye(3)
        L[1, 0] = a[0] * 2
        T = np.tri(3)
        T[0, 2] = a[1] ** 2
        return L.sum() + (T @ a).sum() + (np.identity(3)[[0, 2]] * a).sum()

    a = np.array([1.0, 2.0, 3.0])
    grad = braze.compile(braze.grad(loss), target="cpu") if compiled else braze.grad(loss)
    # L: 2 a0; T @ a summed: 3 a0 + 2 a1 + (1 + a1^2) a2; the rows of identity: a0 + a2
    np.testing.assert_allclose(grad(a), [2 + 3 + 1, 2 + 2 * a[1] * a[2], 1 + a[1] ** 2 + 1], rtol=1e-12)


@pytest.mark.parametrize("convert", [float, complex, lambda w: w.item(), lambda w: w.tolist()])
def test_a_watched_value_made_a_python_number_is_an_error_not_a_zero_gradient(convert):
    def loss(x):
        return np.float64(convert(x.sum())).real * x[0]

    with pytest.raises(braze.GradientError, match="silently drop its gradient"):
        braze.grad(loss)(np.ones(3))
    assert braze.grad(lambda x: x[int(x.sum()) % 3] * 2.0)(np.ones(3))[0] == 2.0  # (int(): no gradient lost)


def test_a_call_with_no_gradient_rule_is_fine_in_aux_and_an_error_in_the_loss():
    """np.nanmedian has no rule: reported beside the loss (has_aux) it is its
    value; the loss depending on it raises at the backward pass, never a zero."""
    x = np.arange(5.0)
    g, aux = braze.grad(lambda x: ((x ** 2).sum(), np.nanmedian(x)), has_aux=True)(x)
    np.testing.assert_array_equal(g, 2 * x)
    assert aux == 2.0
    with pytest.raises(braze.GradientError, match="numpy.nanmedian"):
        braze.grad(lambda x: np.nanmedian(x) * 2.0)(x)
    with pytest.raises(braze.GradientError, match="numpy.nanmedian"):
        braze.grad(lambda x: x.sum() + np.nanmedian(x[1:]))(x)


@pytest.mark.parametrize("subscripts,shapes", [("ii", [(3, 3)]), ("ii->i", [(3, 3)]), ("iij->j", [(3, 3, 4)]),
                                               ("jii->j", [(4, 3, 3)]), ("ij,ii->j", [(3, 3), (3, 3)]),
                                               ("ii,ij->j", [(3, 3), (3, 2)])])
def test_einsum_with_a_repeated_index_differentiates(subscripts, shapes):
    """A repeated letter in one operand is its diagonal (a view): every operand differentiates."""
    r = np.random.default_rng(len(subscripts))
    ops = [r.standard_normal(s) for s in shapes]
    for k in range(len(ops)):
        def f(x, k=k):
            xs = list(ops)
            xs[k] = x
            return (np.einsum(subscripts, *xs) ** 2).sum()

        np.testing.assert_allclose(braze.grad(f)(ops[k]), central_differences(f, ops[k]), rtol=1e-6, atol=1e-8)
    for target in ("generic", "cpu"):
        np.testing.assert_allclose(braze.compile(lambda *xs: np.einsum(subscripts, *xs), target=target)(*ops),
                                   np.einsum(subscripts, *ops), rtol=1e-12)


ORDER_STATISTICS = {
    "median": lambda x: np.median(x) ** 2,
    "median axis 0": lambda x: (np.median(x, axis=0) ** 2).sum(),
    "median kept axis": lambda x: (np.median(x, axis=1, keepdims=True) * np.arange(4.0)[:, None]).sum(),
    "percentile": lambda x: np.percentile(x, 30) * 3,
    "percentiles along rows": lambda x: (np.percentile(x, [10, 75], axis=1) * np.arange(8.0).reshape(2, 4)).sum(),
    "quantile": lambda x: np.quantile(x, 0.9, axis=-1).sum(),
    "median absolute deviation": lambda x: np.median(np.abs(x - np.median(x))),
}


@pytest.mark.parametrize("name", list(ORDER_STATISTICS))
def test_gradients_of_median_percentile_quantile_match_finite_differences(name):
    """NumPy's order statistics (graph breaks) have a rule: the cotangent goes
    to the two sorted elements their linear interpolation reads (probe 9
    found them refused)."""
    loss = ORDER_STATISTICS[name]
    x = np.random.default_rng(1).standard_normal((4, 5))
    want = central_differences(loss, x)
    np.testing.assert_allclose(braze.grad(loss)(x), want, atol=1e-8)
    np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(x), want, atol=1e-8)


def test_order_statistics_other_methods_say_they_have_no_rule():
    with pytest.raises(GradientError, match="method='linear'"):
        braze.grad(lambda x: np.quantile(x, 0.3, method="nearest"))(np.arange(5.0))


# Functions braze runs untraced that write into an array (probe 12): the tape
# went on with the value from before the write, a wrong gradient, zero for the
# values written. Each now raises GradientError, eagerly and compiled.
_W = np.array([1.0, 10.0, 100.0])
_FIRST = np.array([True, False, False])
UNTRACED_WRITES = {
    "put": lambda y, x: np.put(y, [0], x[2]),
    "place": lambda y, x: np.place(y, _FIRST, x[2]),
    "putmask": lambda y, x: np.putmask(y, _FIRST, x[2]),
    "copyto where": lambda y, x: np.copyto(y, 2 * x[::-1], where=_FIRST),
    "fill_diagonal": lambda y, x: np.fill_diagonal(y.reshape(1, 3), x[2]),
    "multiply.at": lambda y, x: np.multiply.at(y, [0], x[2]),
    "maximum.at": lambda y, x: np.maximum.at(y, [0], x[2]),
    "subtract.at": lambda y, x: np.subtract.at(y, [0, 0], x[1:]),
    "put into a plain array": lambda y, x: np.put(np.zeros(3), [0], x[2]),
}


@pytest.mark.parametrize("target", [None, "cpu"])
@pytest.mark.parametrize("name", sorted(UNTRACED_WRITES))
def test_untraced_writes_under_a_gradient_raise(name, target):
    write = UNTRACED_WRITES[name]

    def f(x):
        y = x.copy()
        write(y, x)
        return (y * _W).sum()

    x = np.array([1.0, 2.0, 3.0])
    assert braze.compile(f, target="cpu")(x.copy()) == f(x.copy())  # (no tape: NumPy's value)
    g = braze.grad(f)
    with pytest.raises(GradientError, match="writes into an array"):
        (g if target is None else braze.compile(g, target=target))(x.copy())


def test_writes_into_a_detached_array_keep_working_under_a_tape():
    def f(x):
        y = np.zeros(3)
        np.put(y, [0], 7.0)  # (no watched value involved: NumPy runs it)
        return (x * y).sum()

    np.testing.assert_array_equal(braze.grad(f)(np.ones(3)), [7.0, 0.0, 0.0])


# Ravels in F, K and A order follow the layout of the watched array (probe 12:
# the tape did not know it, and read every array in C order: gradients came
# back transposed).
RAVELS = {
    "ravel F": lambda x: x.ravel(order="F"),
    "flatten F": lambda x: x.flatten("F"),
    "np.ravel F": lambda x: np.ravel(x, order="F"),
    "transpose ravel K": lambda x: x.T.ravel("K"),
    "transpose ravel A": lambda x: x.T.ravel("A"),
    "F copy ravel K": lambda x: np.copy(x, order="F").ravel("K"),
    "asfortranarray ravel K": lambda x: np.asfortranarray(x).ravel("K"),
    "K copy of a transpose, ravel K": lambda x: np.copy(x.T, order="K").ravel("K"),
}


@pytest.mark.parametrize("target", [None, "generic", "cpu"])
@pytest.mark.parametrize("name", sorted(RAVELS))
def test_gradients_of_ravels_follow_the_memory_order(name, target):
    ravel, w = RAVELS[name], np.arange(6.0) + 1.0

    def f(x):
        return (ravel(x) * w).sum()

    x = np.arange(6.0).reshape(2, 3)
    g = braze.grad(f)
    got = (g if target is None else braze.compile(g, target=target))(x)
    np.testing.assert_allclose(got, central_differences(f, x), rtol=1e-7)
