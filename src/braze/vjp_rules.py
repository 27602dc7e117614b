"""Vector-Jacobian product rules, one per differentiable primitive, in one table.

``VJP[op](ct, *args, out=out, **params)`` returns one cotangent per operand
(``None`` where none flows: integer operands, conditions, indices). Rules
return cotangents in the *broadcast* shape of the result; the tape undoes
broadcasting and casts to each operand's dtype in one place
(``autodiff._fit``). Rules are written with ``braze.numpy``, so they run
eagerly, are recorded into graphs, and are differentiated again by an outer
tape, like any user code.

Ops absent from the table have no gradient (comparisons, logical and
bitwise ops, ``floor``/``sign``-like steps, ``argmax``): their results are
constants to the tape. ``NONDIFFERENTIABLE`` lists them so a test can check
that every declared op is one or the other.
"""
from __future__ import annotations

import math

import numpy as np

from . import numpy as bnp
from .core import bind
from .errors import CompositeError, UnsupportedOpError, where
from .ops.index import slice_length

VJP: dict = {}

NONDIFFERENTIABLE = frozenset(
    "sign floor ceil trunc rint isnan isinf isfinite signbit logical_not invert floor_divide "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor equal not_equal less "
    "less_equal greater greater_equal reduce_any reduce_all argmax argmin kernel left_shift right_shift".split()
)


def rule(*names, wants=False):
    """Register a rule; with ``wants=True`` it is passed ``wants``, a bool per
    operand saying whether its cotangent is needed (to skip costly ones)."""
    def register(fn):
        fn.wants = wants
        for n in names:
            VJP[n] = fn
        return fn
    return register


def _unary(name, fn):
    VJP[name] = lambda ct, x, *, out, **params: (fn(ct, x, out),)


# ---------------------------------------------------------------- elementwise

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_ERF_SCALE = 2.0 / math.sqrt(math.pi)

_unary("negative", lambda ct, x, out: -ct)
_unary("positive", lambda ct, x, out: ct)
_unary("conjugate", lambda ct, x, out: ct)  # (real arrays only: complex dtypes are not traced)
_unary("absolute", lambda ct, x, out: ct * bnp.sign(x))
_unary("exp", lambda ct, x, out: ct * out)
_unary("exp2", lambda ct, x, out: ct * out * _LN2)
_unary("expm1", lambda ct, x, out: ct * (out + 1))
_unary("log", lambda ct, x, out: ct / x)
_unary("log2", lambda ct, x, out: ct / (x * _LN2))
_unary("log10", lambda ct, x, out: ct / (x * _LN10))
_unary("log1p", lambda ct, x, out: ct / (x + 1))
_unary("sqrt", lambda ct, x, out: ct / (out * 2))
_unary("cbrt", lambda ct, x, out: ct / (out * out * 3))
_unary("square", lambda ct, x, out: ct * (x * 2))
_unary("reciprocal", lambda ct, x, out: -ct * out * out)
_unary("sin", lambda ct, x, out: ct * bnp.cos(x))
_unary("cos", lambda ct, x, out: -ct * bnp.sin(x))
_unary("tan", lambda ct, x, out: ct * (out * out + 1))
_unary("arcsin", lambda ct, x, out: ct / bnp.sqrt(1 - x * x))
_unary("arccos", lambda ct, x, out: -ct / bnp.sqrt(1 - x * x))
_unary("arctan", lambda ct, x, out: ct / (x * x + 1))
_unary("sinh", lambda ct, x, out: ct * bnp.cosh(x))
_unary("cosh", lambda ct, x, out: ct * bnp.sinh(x))
_unary("tanh", lambda ct, x, out: ct * (1 - out * out))
_unary("arcsinh", lambda ct, x, out: ct / bnp.sqrt(x * x + 1))
_unary("arccosh", lambda ct, x, out: ct / bnp.sqrt(x * x - 1))
_unary("arctanh", lambda ct, x, out: ct / (1 - x * x))
_unary("deg2rad", lambda ct, x, out: ct * (math.pi / 180))
_unary("rad2deg", lambda ct, x, out: ct * (180 / math.pi))
_unary("erf", lambda ct, x, out: ct * (bnp.exp(-(x * x)) * _ERF_SCALE))
_unary("convert", lambda ct, x, out: ct)


@rule("add")
def _add(ct, x, y, *, out):
    return ct, ct


@rule("subtract")
def _subtract(ct, x, y, *, out):
    return ct, -ct


@rule("multiply")
def _multiply(ct, x, y, *, out):
    return ct * y, ct * x


@rule("divide")
def _divide(ct, x, y, *, out):
    return ct / y, -ct * out / y


@rule("remainder")
def _remainder(ct, x, y, *, out):
    return ct, -ct * bnp.floor(x / y)


@rule("fmod")
def _fmod(ct, x, y, *, out):
    return ct, -ct * bnp.trunc(x / y)


@rule("power", "scalar_power", wants=True)
def _power(ct, x, y, *, out, wants):
    # d/dx = y x^(y-1), zero where y == 0 (so 0**0 has no NaN gradient);
    # d/dy = log(x) x^y, zero where x == 0 (JAX's convention).
    dx = dy = None
    if wants[0]:
        if isinstance(y, (int, float)) and y != 0:
            dx = ct * (y * bnp.power(x, y - 1)) if y != 2 else ct * (x * 2)
        else:
            dx = ct * bnp.where(y == 0, 0, y * bnp.power(x, y - 1))
    if wants[1]:
        dy = ct * bnp.where(x == 0, 0, out * bnp.log(bnp.where(x == 0, 1, x)))
    return dx, dy


@rule("arctan2")
def _arctan2(ct, y, x, *, out):
    denom = x * x + y * y
    return ct * x / denom, -ct * y / denom


@rule("hypot")
def _hypot(ct, x, y, *, out):
    return ct * x / out, ct * y / out


def _chooser(ct, x, y, pick_x):
    """maximum/minimum: the chosen operand gets the cotangent; ties split it (as JAX)."""
    tie = x == y
    wx = bnp.where(pick_x, 1.0, bnp.where(tie, 0.5, 0.0))
    wy = bnp.where(pick_x | tie, bnp.where(tie, 0.5, 0.0), 1.0)
    return ct * wx, ct * wy


@rule("maximum")
def _maximum(ct, x, y, *, out):
    return _chooser(ct, x, y, (x > y) | bnp.isnan(x))


@rule("minimum")
def _minimum(ct, x, y, *, out):
    return _chooser(ct, x, y, (x < y) | bnp.isnan(x))


@rule("fmax")
def _fmax(ct, x, y, *, out):
    return _chooser(ct, x, y, (x > y) | bnp.isnan(y))


@rule("fmin")
def _fmin(ct, x, y, *, out):
    return _chooser(ct, x, y, (x < y) | bnp.isnan(y))


@rule("copysign")
def _copysign(ct, x, y, *, out):
    flip = bnp.signbit(x) != bnp.signbit(out)
    return bnp.where(flip, -ct, ct), None


@rule("logaddexp")
def _logaddexp(ct, x, y, *, out):
    return ct * bnp.exp(x - out), ct * bnp.exp(y - out)


@rule("logaddexp2")
def _logaddexp2(ct, x, y, *, out):
    return ct * bnp.exp2(x - out), ct * bnp.exp2(y - out)


@rule("where")
def _where(ct, c, a, b, *, out):
    return None, bnp.where(c, ct, 0), bnp.where(c, 0, ct)


@rule("clip")
def _clip(ct, x, lo, hi, *, out):
    # np.clip is minimum(maximum(x, lo), hi); ties go to x.
    from_x = x >= lo
    kept = bnp.where(from_x, x, lo) <= hi
    return (bnp.where(kept & from_x, ct, 0), bnp.where(kept & ~from_x, ct, 0), bnp.where(kept, 0, ct))


# ---------------------------------------------------------------- reductions


def _expand(ct, x_shape, axes, keepdims):
    """A reduction's cotangent, broadcast back over the reduced axes."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x_shape))
    if not keepdims:
        ct = bnp.reshape(ct, kept)
    return bnp.broadcast_to(ct, x_shape)


@rule("reduce_sum")
def _reduce_sum(ct, x, *, out, axes, keepdims, dtype=None):
    return (_expand(ct, bnp.shape(x), axes, keepdims),)


@rule("reduce_prod")
def _reduce_prod(ct, x, *, out, axes, keepdims, dtype=None):
    shape = bnp.shape(x)
    ct_b = _expand(ct, shape, axes, keepdims)
    zero = x == 0
    zeros = bind("reduce_sum", bnp.astype(zero, np.int64), axes=axes, keepdims=True)
    others = bind("reduce_prod", bnp.where(zero, 1, x), axes=axes, keepdims=True)  # product of nonzeros
    safe = bnp.where(zero, 1, x)
    out_b = _expand(out, shape, axes, keepdims)
    grad = bnp.where(zeros == 0, out_b / safe, bnp.where(zero & (zeros == 1), others, 0))
    return (ct_b * grad,)


def _reduce_chooser(ct, x, *, out, axes, keepdims):
    shape = bnp.shape(x)
    hit = x == _expand(out, shape, axes, keepdims)
    count = bind("reduce_sum", bnp.astype(hit, bnp.result_type(x)), axes=axes, keepdims=True)
    return (_expand(ct, shape, axes, keepdims) * bnp.where(hit, 1, 0) / count,)


VJP["reduce_max"] = _reduce_chooser
VJP["reduce_min"] = _reduce_chooser


# ---------------------------------------------------------------- scans


def _reverse_cumsum(x, axis):
    """sum over j >= i along ``axis``: a cumsum of the reversed array, reversed."""
    flip = (slice(None),) * axis + (slice(None, None, -1),)
    return bnp.cumsum(x[flip], axis=axis)[flip]


@rule("cumsum")
def _cumsum(ct, x, *, out, axis):
    return (_reverse_cumsum(ct, axis),)


@rule("cumprod")
def _cumprod(ct, x, *, out, axis):
    # d out_j / d x_i = prod_{k <= j, k != i} x_k. Before a row's first zero z that
    # is out_j / x_i; at z it is the cumprod with x_z replaced by 1; after z it is 0.
    is_zero = bnp.equal(x, 0)
    zeros_so_far = bnp.cumsum(bnp.astype(is_zero, np.int64), axis=axis)
    before = zeros_so_far == 0
    first = is_zero & (zeros_so_far == 1)
    safe = bnp.where(before, x, 1)
    at_first = _reverse_cumsum(ct * bnp.cumprod(bnp.where(first, 1, x), axis=axis), axis)
    return (bnp.where(before, _reverse_cumsum(ct * out, axis) / safe, bnp.where(first, at_first, 0)),)


# ---------------------------------------------------------------- shape


@rule("reshape")
def _reshape(ct, x, *, out, shape):
    return (bnp.reshape(ct, bnp.shape(x)),)


@rule("view")
def _view(ct, x, *, out, readonly=False):
    return (ct,)


@rule("diagonal")
def _diagonal(ct, x, *, out, offset, axis1, axis2):
    # grad[..., i, j] = ct[..., i'] on the diagonal j - i = offset, 0 elsewhere
    shape = bnp.shape(x)
    n1, n2 = shape[axis1], shape[axis2]
    i, j = np.indices((n1, n2))
    index = np.clip(np.where(offset >= 0, i, j), 0, max(bnp.shape(ct)[-1] - 1, 0))
    on = (j - i == offset) & (bnp.shape(ct)[-1] > 0)
    grad = bnp.where(on, bnp.take(ct, index, axis=-1) if bnp.shape(ct)[-1] else 0, 0)  # (rest..., n1, n2)
    return (bnp.moveaxis(grad, (-2, -1), (axis1, axis2)),)


@rule("transpose")
def _transpose(ct, x, *, out, perm):
    return (bnp.transpose(ct, tuple(int(i) for i in np.argsort(perm))),)


@rule("broadcast_to")
def _broadcast_to(ct, x, *, out, shape):
    return (ct,)  # the tape sums over the broadcast axes


@rule("concatenate")
def _concatenate(ct, *xs, out, axis):
    cts, start = [], 0
    for x in xs:
        n = bnp.shape(x)[axis]
        slices = tuple((start, start + n, 1) if i == axis else (0, d, 1) for i, d in enumerate(bnp.shape(ct)))
        cts.append(bind("slice", ct, slices=slices))
        start += n
    return tuple(cts)


# ---------------------------------------------------------------- indexing


@rule("slice")
def _slice(ct, x, *, out, slices):
    return (bind("update_slice", bnp.zeros_like(x, dtype=bnp.result_type(ct)), ct, slices=slices),)


@rule("strided_view")
def _strided_view(ct, buf, *, out, offset, shape, strides):
    from .ops.index import strided_indices

    idx = strided_indices(offset, shape, strides).reshape(-1)  # views may overlap themselves: add
    zeros = bnp.zeros_like(buf, dtype=bnp.result_type(ct))
    return (bind("scatter_add", zeros, bnp.reshape(ct, (-1,)), idx, axes=(0,)),)


@rule("strided_update")
def _strided_update(ct, buf, v, *, out, offset, shape, strides):
    dbuf = bind("strided_update", ct, bnp.zeros(tuple(shape), bnp.result_type(ct)), offset=offset,
                shape=shape, strides=strides)
    return dbuf, bind("strided_view", ct, offset=offset, shape=shape, strides=strides)


@rule("update_slice")
def _update_slice(ct, x, v, *, out, slices):
    region = tuple(slice_length(*s) for s in slices)
    dx = bind("update_slice", ct, bnp.zeros(region, bnp.result_type(ct)), slices=slices)
    return dx, bind("slice", ct, slices=slices)


@rule("gather")
def _gather(ct, x, *idx, out, axes):
    zeros = bnp.zeros_like(x, dtype=bnp.result_type(ct))
    return (bind("scatter_add", zeros, ct, *idx, axes=axes),) + (None,) * len(idx)


@rule("scatter_add")
def _scatter_add(ct, x, v, *idx, out, axes):
    return (ct, bind("gather", ct, *idx, axes=axes)) + (None,) * len(idx)


@rule("scatter")
def _scatter(ct, x, v, *idx, out, axes):
    # Positions written get their cotangent from the value, the rest from x.
    # With repeated indices every copy of a written value gets the cotangent.
    vshape = bnp.shape(v)
    dx = bind("scatter", ct, bnp.zeros(vshape, bnp.result_type(ct)), *idx, axes=axes)
    return (dx, bind("gather", ct, *idx, axes=axes)) + (None,) * len(idx)


@rule("take_along_axis")
def _take_along_axis(ct, x, idx, *, out, axis):
    shape = bnp.shape(x)
    n = shape[axis]
    if bnp.shape(idx)[axis] == 1:
        # One index per line (a label per row): a one-hot comparison that
        # fuses with the rest of the backward pass into one loop.
        # Indices are in [-n, n) (the forward checked), so int32 holds them when
        # n does: a 32-bit compare vectorizes with the float32 select (2x faster).
        itype = np.int32 if n < 2**31 else np.intp
        iota = np.arange(n, dtype=itype).reshape(tuple(n if i == axis else 1 for i in range(len(shape))))
        idx = bnp.astype(bnp.where(idx < 0, idx + n, idx), itype)
        return bnp.where(iota == idx, ct, 0), None
    # General case: scatter-add into zeros, with the other axes indexed by ranges.
    ishape = bnp.shape(idx)
    full = tuple(d if i == axis else max(d, s) for i, (d, s) in enumerate(zip(ishape, shape)))
    index = []
    for i, d in enumerate(full):
        if i == axis:
            index.append(bnp.broadcast_to(bnp.where(idx < 0, idx + n, idx), full))
        else:
            index.append(np.broadcast_to(np.arange(d, dtype=np.intp).reshape(
                tuple(d if j == i else 1 for j in range(len(full)))), full))
    zeros = bnp.zeros_like(x, dtype=bnp.result_type(ct))
    ct = bnp.broadcast_to(ct, full)
    return bind("scatter_add", zeros, ct, *index, axes=tuple(range(len(full)))), None


# ---------------------------------------------------------------- contractions


@rule("matmul", wants=True)
def _matmul(ct, a, b, *, out, wants):
    a_shape, b_shape = bnp.shape(a), bnp.shape(b)
    a2 = bnp.reshape(a, (1,) + a_shape) if len(a_shape) == 1 else a
    b2 = bnp.reshape(b, b_shape + (1,)) if len(b_shape) == 1 else b
    ct2 = ct
    if len(a_shape) == 1:
        ct2 = bnp.expand_dims(ct2, -2 if len(b_shape) > 1 else -1)
    if len(b_shape) == 1:
        ct2 = bnp.expand_dims(ct2, -1)
    da = bnp.matmul(ct2, bnp.swapaxes(b2, -1, -2)) if wants[0] else None
    db = bnp.matmul(bnp.swapaxes(a2, -1, -2), ct2) if wants[1] else None
    if da is not None and len(a_shape) == 1:
        da = bnp.reshape(bnp.sum(da, axis=tuple(range(len(bnp.shape(da)) - 2))) if len(bnp.shape(da)) > 2 else da,
                         a_shape)
    if db is not None and len(b_shape) == 1:
        db = bnp.sum(db, axis=-1)
    return da, db


@rule("einsum", wants=True)
def _einsum(ct, *xs, out, subscripts, wants):
    from .ops.linalg import parse_einsum

    ins, out_spec = parse_einsum(subscripts)
    cts = []
    for k, (spec, x) in enumerate(zip(ins, xs)):
        if not wants[k]:
            cts.append(None)
            continue
        if len(set(spec)) != len(spec):
            raise UnsupportedOpError(
                f"einsum {subscripts!r}: the gradient of an operand with a repeated index ({spec!r}, "
                f"a diagonal) is not supported{where()}; write the diagonal with indexing instead"
            )
        others = [(s, o) for j, (s, o) in enumerate(zip(ins, xs)) if j != k]
        available = set(out_spec).union(*[set(s) for s, _ in others]) if others else set(out_spec)
        result_spec = "".join(c for c in spec if c in available)
        specs = ",".join([out_spec] + [s for s, _ in others])
        g = bnp.einsum(f"{specs}->{result_spec}", ct, *[o for _, o in others])
        if result_spec != spec:  # letters only this operand had: summed, so broadcast back
            shape = tuple(d if c in available else 1 for c, d in zip(spec, bnp.shape(x)))
            g = bnp.broadcast_to(bnp.reshape(g, shape), bnp.shape(x))
        cts.append(g)
    return tuple(cts)


# ---------------------------------------------------------------- composites


def composite_gradient(parent, args, values, ids, params):
    """The forward value and the backward rule of a composite call on a tape.

    Returns ``(out, rule, note)``; ``rule`` is None when the call was
    recorded op by op (eagerly, the body runs on the tape itself).
    """
    comp, attrs = params["composite"], dict(params["attrs"])
    name = comp.name
    custom = getattr(comp, "_vjp", None)
    if custom is not None:
        fwd, bwd = custom
        result = fwd(*values, **attrs)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CompositeError(
                f"composite {name}: its defvjp forward must return (output, residuals), got "
                f"{type(result).__name__}{where()}"
            )
        out, residuals = result

        def custom_rule(ct):
            cts = bwd(residuals, ct, **attrs) if attrs else bwd(residuals, ct)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(values):
                raise CompositeError(
                    f"composite {name}: its defvjp backward must return a tuple of {len(values)} "
                    f"cotangent(s), one per array argument, got {type(cts).__name__}"
                    f"{'' if not isinstance(cts, (tuple, list)) else f' of {len(cts)}'}"
                )
            return tuple(cts)

        return out, custom_rule, f"composite {name}: gradient from its defvjp rule"
    ctx = _graph_context(parent)
    if ctx is None:
        # Eagerly (or under an outer tape) the body runs on this tape: no recomputation.
        return comp.fn(*args, **attrs), None, None
    target = getattr(ctx, "target", None)
    entry = None
    if target is not None:
        from .select import choose

        entry = choose(name, target, [getattr(v, "aval", None) or _aval(v) for v in values], params["attrs"])
    if entry is not None and entry.backward is not None:
        return _kernel_pair(ctx, entry, comp, values, ids, params)
    out = parent.process("composite", values, params)
    if entry is not None:
        why = f"kernel {entry.label} has no backward, so its forward is recomputed in the backward pass"
    else:
        why = "no kernel selected: the body is inlined and its recomputation merges with it"

    def body_rule(ct):
        from .autodiff import GradientTape

        with GradientTape() as inner:
            watched = [inner._watch_leaf(v) if i is not None else v for v, i in zip(values, ids)]
            recomputed = comp.fn(*watched, **attrs)
        sources = [w for w, i in zip(watched, ids) if i is not None]
        grads = iter(inner.gradient(recomputed, sources, ct))
        return tuple(next(grads) if i is not None else None for i in ids)

    return out, body_rule, f"composite {name}: gradient derived from the body ({why})"


def _aval(v):
    from .aval import aval_of_value

    return aval_of_value(v)


def _graph_context(ctx):
    from .tracing import GraphContext

    return ctx if isinstance(ctx, GraphContext) else None


def _kernel_pair(ctx, entry, comp, values, ids, params):
    """Emit the pair's forward kernel (outputs and residuals) and a rule emitting its backward."""
    from .select import pair_signature

    body_out = ctx.process("composite", values, params)  # for the result avals (then dropped as dead code)
    single = not isinstance(body_out, tuple)
    out_avals = [o.aval for o in ((body_out,) if single else body_out)]
    nodes_in = [ctx.lift(v) for v in values]
    in_avals = [n.aval for n in nodes_in]
    res_avals = pair_signature(entry, in_avals, params["attrs"], out_avals)
    outs = ctx.emit("kernel", nodes_in, tuple(out_avals) + tuple(res_avals), name=comp.name,
                    attrs=params["attrs"], entry=entry, pair="forward", nout=len(out_avals))
    out = tuple(outs[: len(out_avals)])
    residuals = tuple(outs[len(out_avals):])
    diff = tuple(i is not None for i in ids)
    grad_avals = tuple(a for a, d in zip(in_avals, diff) if d)

    def pair_rule(ct):
        cts = ct if isinstance(ct, tuple) else (ct,)
        nodes = [ctx.lift(r) for r in residuals] + [ctx.lift(c) for c in cts]
        got = ctx.emit("kernel", nodes, grad_avals, name=comp.name, attrs=params["attrs"], entry=entry,
                       pair="backward", nout=len(residuals), diff=diff)
        it = iter(got)
        return tuple(next(it) if d else None for d in diff)

    note = f"composite {comp.name}: gradient from the kernel pair {entry.label} (forward saves {len(res_avals)} residual(s))"
    return (out[0] if single else out), pair_rule, note
