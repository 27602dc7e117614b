"""Elementwise primitives: NumPy's ufuncs, ``erf``, ``where``, ``clip`` and casts.

One block per op: the NumPy function (which also gives the dtype rule: the
result dtype is the ufunc's on stand-ins with the operands' promotion
behaviour, NEP 50 exactly), the vector-Jacobian product, and the scalar code
the numba targets emit, written over operands already cast to the dtypes of
the NumPy loop (``scalar(*operands, t)``, ``t`` the loop dtype). Targets may
override a scalar rule (``targets/ops_cpu.py``: vectorized math; cuda:
libdevice, unfused products); the rule here is the reference.

Each op's binder (``exp(x)``, ``where(c, a, b)``) is a module function: the
other op families' vjp rules use them. Broadcasting in a vjp rule is undone
by the tape, in one place.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..aval import Aval
from ..core import NONDIFFERENTIABLE, bind, declare
from ._util import broadcast_shapes, dtype_error, scalar_cast, scalar_literal

ELEMENTWISE_OPS: list[str] = []
_RECOMPUTABLE = ("recomputable",)


def elementwise(name: str, fn, nin: int, *, vjp, scalar, flags=(), wants: bool = False):
    """Declare elementwise ``name`` (NumPy function ``fn`` of ``nin`` operands); its binder."""
    @functools.lru_cache(maxsize=4096)
    def result_dtype(*keys):
        samples = [Aval((), dtype, weak).sample() for dtype, weak in keys]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*samples)).dtype

    @functools.lru_cache(maxsize=4096)  # (an unrolled loop asks again at every iteration)
    def abstract(*avals):
        if len(avals) != nin:
            raise TypeError(f"{name} takes {nin} operands, got {len(avals)}")
        shape = broadcast_shapes(name, avals)
        try:
            dtype = result_dtype(*((a.dtype, a.weak) for a in avals))
        except (TypeError, ValueError) as exc:
            raise dtype_error(name, avals, exc) from None
        return Aval(shape, dtype, all(a.weak for a in avals))

    declare(name, "elementwise", abstract=abstract, impl=fn, vjp=vjp, wants=wants, scalar=scalar,
            flags=_RECOMPUTABLE + tuple(flags))
    ELEMENTWISE_OPS.append(name)

    def binder(*args):
        return bind(name, *args)

    binder.__name__ = binder.__qualname__ = name
    binder.__doc__ = f"The ``{name}`` primitive (NumPy's ``{getattr(fn, '__name__', name)}``)."
    return binder


def unary(rule):
    """A vjp rule of one operand written as ``rule(ct, x, out) -> cotangent``."""
    return lambda ct, x, *, out, **params: (rule(ct, x, out),)


# ---- scalar code helpers (numba source over loop-dtype operands)

def _infix(symbol):
    return lambda a, b, t: f"({a} {symbol} {b})"


def _math(fn):
    return lambda a, t: f"math.{fn}({a})"


def _rt(fn):
    return lambda *args: f"rt.{fn}({', '.join(args[:-1])})"


def _kind_rt(fn):
    """A runtime helper per dtype kind (rt.floor_divide_f, _i, _u, _b)."""
    return lambda a, b, t: f"rt.{fn}_{t.kind}({a}, {b})"


def deg2rad_factor(t):
    """deg2rad's factor in float dtype ``t``: NumPy's loops compute their constants
    in the loop's precision (float32: ``NPY_PIf / 180.0f``)."""
    return np.dtype(t).type(np.pi) / np.dtype(t).type(180)


def rad2deg_factor(t):
    """rad2deg's factor in float dtype ``t`` (float32: ``180.0f / NPY_PIf``, one
    ulp from float32(180 / pi))."""
    return np.dtype(t).type(180) / np.dtype(t).type(np.pi)


def _literal(value, t) -> str:
    return scalar_literal(value, t)


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_ERF_SCALE = 2.0 / math.sqrt(math.pi)
_ND = NONDIFFERENTIABLE

# ---------------------------------------------------------------- arithmetic

add = elementwise("add", np.add, 2, vjp=lambda ct, x, y, *, out: (ct, ct),
                  scalar=lambda a, b, t: f"({a} | {b})" if t.kind == "b" else f"({a} + {b})", flags=("int_checked", "cheap"))
subtract = elementwise("subtract", np.subtract, 2, vjp=lambda ct, x, y, *, out: (ct, -ct),
                       scalar=_infix("-"), flags=("int_checked", "cheap"))
multiply = elementwise("multiply", np.multiply, 2, vjp=lambda ct, x, y, *, out: (ct * y, ct * x),
                       scalar=lambda a, b, t: f"({a} & {b})" if t.kind == "b" else f"({a} * {b})",
                       flags=("int_checked", "cheap"))
# (a float-only loop: NumPy divides integers as float64, so a Python int of any size is a float64 there)
divide = elementwise("divide", np.divide, 2, vjp=lambda ct, x, y, *, out: (ct / y, -ct * out / y),
                     scalar=_infix("/"))
floor_divide = elementwise("floor_divide", np.floor_divide, 2, vjp=_ND, scalar=_kind_rt("floor_divide"),
                           flags=("int_checked",))
remainder = elementwise("remainder", np.remainder, 2,
                        vjp=lambda ct, x, y, *, out: (ct, -ct * floor(x / y)),
                        scalar=_kind_rt("remainder"), flags=("int_checked",))
fmod = elementwise("fmod", np.fmod, 2, vjp=lambda ct, x, y, *, out: (ct, -ct * trunc(x / y)),
                   scalar=_kind_rt("fmod"), flags=("int_checked",))


def _power_vjp(ct, x, y, *, out, wants):
    # d/dx = y x^(y-1), zero where y == 0 (so 0**0 has no NaN gradient);
    # d/dy = log(x) x^y, zero where x == 0 (JAX's convention).
    dx = dy = None
    if wants[0]:
        if isinstance(y, (int, float)) and y != 0:
            dx = ct * (y * power(x, y - 1)) if y != 2 else ct * (x * 2)
        else:
            dx = ct * where(equal(y, 0), 0, y * power(x, y - 1))
    if wants[1]:
        dy = ct * where(equal(x, 0), 0, out * log(where(equal(x, 0), 1, x)))
    return dx, dy


def _power_scalar(a, b, t):
    return f"({a} ** {b})" if t.kind == "f" else f"rt.ipower({a}, {b})"


power = elementwise("power", np.power, 2, vjp=_power_vjp, wants=True, scalar=_power_scalar, flags=("int_checked",))


def _scalar_power_impl(x, y):
    """``x ** y`` for a NumPy scalar ``x``: NumPy's scalar math, C's ``pow``
    (``np.float64(-inf) ** 0.5`` is inf, where arrays take a square root: NaN)."""
    x = np.asarray(x)[()]
    y = y if isinstance(y, (bool, int, float)) else np.asarray(y)[()]
    return x ** y


scalar_power = elementwise("scalar_power", _scalar_power_impl, 2, vjp=_power_vjp, wants=True,
                           scalar=_power_scalar, flags=("int_checked",))
negative = elementwise("negative", np.negative, 1, vjp=unary(lambda ct, x, out: -ct), scalar=lambda a, t: f"(-{a})",
                      flags=("cheap",))
positive = elementwise("positive", np.positive, 1, vjp=unary(lambda ct, x, out: ct), scalar=lambda a, t: f"(+{a})",
                      flags=("cheap",))
conjugate = elementwise("conjugate", np.conjugate, 1, vjp=unary(lambda ct, x, out: ct),  # (real dtypes only)
                        scalar=lambda a, t: a)
absolute = elementwise("absolute", np.absolute, 1, vjp=unary(lambda ct, x, out: ct * sign(x)),
                       scalar=lambda a, t: a if t.kind in "bu" else f"abs({a})", flags=("cheap",))
sign = elementwise("sign", np.sign, 1, vjp=_ND, scalar=_rt("sign"))
square = elementwise("square", np.square, 1, vjp=unary(lambda ct, x, out: ct * (x * 2)),
                     scalar=lambda a, t: f"({a} * {a})", flags=("cheap",))


def _int_reciprocal_of_zero(t: np.dtype) -> int:
    """NumPy's ``np.reciprocal`` of an integer 0: 1.0 / 0 converted through a
    32-bit int at least (x86's conversion gives INT_MIN), then wrapped to the
    type: INT32_MIN and INT64_MIN, but 0 for int8 and int16 (its low bits) and
    for unsigned types."""
    if t.kind != "i":
        return 0
    return int(np.iinfo(t).min) if t.itemsize >= 4 else 0


reciprocal = elementwise(
    "reciprocal", np.reciprocal, 1, vjp=unary(lambda ct, x, out: -ct * out * out),
    scalar=lambda a, t: f"(1 / {a})" if t.kind == "f" else
    f"rt.ireciprocal({a}, {_literal(_int_reciprocal_of_zero(t), t)})")
sqrt = elementwise("sqrt", np.sqrt, 1, vjp=unary(lambda ct, x, out: ct / (out * 2)),
                   scalar=lambda a, t: f"np.sqrt({a})")
cbrt = elementwise("cbrt", np.cbrt, 1, vjp=unary(lambda ct, x, out: ct / (out * out * 3)),
                   scalar=lambda a, t: f"np.cbrt({a})")

# ---------------------------------------------------------------- exponentials and logarithms

exp = elementwise("exp", np.exp, 1, vjp=unary(lambda ct, x, out: ct * out), scalar=_math("exp"))
exp2 = elementwise("exp2", np.exp2, 1, vjp=unary(lambda ct, x, out: ct * out * _LN2), scalar=_rt("exp2"))
expm1 = elementwise("expm1", np.expm1, 1, vjp=unary(lambda ct, x, out: ct * (out + 1)), scalar=_math("expm1"))
log = elementwise("log", np.log, 1, vjp=unary(lambda ct, x, out: ct / x), scalar=_math("log"))
log2 = elementwise("log2", np.log2, 1, vjp=unary(lambda ct, x, out: ct / (x * _LN2)), scalar=_rt("log2"))
log10 = elementwise("log10", np.log10, 1, vjp=unary(lambda ct, x, out: ct / (x * _LN10)), scalar=_rt("log10"))
log1p = elementwise("log1p", np.log1p, 1, vjp=unary(lambda ct, x, out: ct / (x + 1)), scalar=_math("log1p"))
logaddexp = elementwise("logaddexp", np.logaddexp, 2,
                        vjp=lambda ct, x, y, *, out: (ct * exp(x - out), ct * exp(y - out)), scalar=_rt("logaddexp"))
logaddexp2 = elementwise("logaddexp2", np.logaddexp2, 2,
                         vjp=lambda ct, x, y, *, out: (ct * exp2(x - out), ct * exp2(y - out)),
                         scalar=lambda a, b, t: f"rt.logaddexp2{'_f32' if t == np.float32 else ''}({a}, {b})")

# ---------------------------------------------------------------- trigonometric and hyperbolic

sin = elementwise("sin", np.sin, 1, vjp=unary(lambda ct, x, out: ct * cos(x)), scalar=_math("sin"))
cos = elementwise("cos", np.cos, 1, vjp=unary(lambda ct, x, out: -ct * sin(x)), scalar=_math("cos"))
tan = elementwise("tan", np.tan, 1, vjp=unary(lambda ct, x, out: ct * (out * out + 1)), scalar=_math("tan"))
arcsin = elementwise("arcsin", np.arcsin, 1, vjp=unary(lambda ct, x, out: ct / sqrt(1 - x * x)), scalar=_math("asin"))
arccos = elementwise("arccos", np.arccos, 1, vjp=unary(lambda ct, x, out: -ct / sqrt(1 - x * x)),
                     scalar=_math("acos"))
arctan = elementwise("arctan", np.arctan, 1, vjp=unary(lambda ct, x, out: ct / (x * x + 1)), scalar=_math("atan"))
sinh = elementwise("sinh", np.sinh, 1, vjp=unary(lambda ct, x, out: ct * cosh(x)), scalar=_math("sinh"))
cosh = elementwise("cosh", np.cosh, 1, vjp=unary(lambda ct, x, out: ct * sinh(x)), scalar=_math("cosh"))
tanh = elementwise("tanh", np.tanh, 1, vjp=unary(lambda ct, x, out: ct * (1 - out * out)), scalar=_math("tanh"))
arcsinh = elementwise("arcsinh", np.arcsinh, 1, vjp=unary(lambda ct, x, out: ct / sqrt(x * x + 1)),
                      scalar=_math("asinh"))
arccosh = elementwise("arccosh", np.arccosh, 1, vjp=unary(lambda ct, x, out: ct / sqrt(x * x - 1)),
                      scalar=_math("acosh"))
arctanh = elementwise("arctanh", np.arctanh, 1, vjp=unary(lambda ct, x, out: ct / (1 - x * x)),
                      scalar=_math("atanh"))
deg2rad = elementwise("deg2rad", np.deg2rad, 1, vjp=unary(lambda ct, x, out: ct * (math.pi / 180)),
                      scalar=lambda a, t: f"({a} * {_literal(deg2rad_factor(t), t)})")
rad2deg = elementwise("rad2deg", np.rad2deg, 1, vjp=unary(lambda ct, x, out: ct * (180 / math.pi)),
                      scalar=lambda a, t: f"({a} * {_literal(rad2deg_factor(t), t)})")


def _arctan2_vjp(ct, y, x, *, out):
    denom = x * x + y * y
    return ct * x / denom, -ct * y / denom


arctan2 = elementwise("arctan2", np.arctan2, 2, vjp=_arctan2_vjp, scalar=lambda a, b, t: f"math.atan2({a}, {b})",
                      flags=("int_checked",))
hypot = elementwise("hypot", np.hypot, 2, vjp=lambda ct, x, y, *, out: (ct * x / out, ct * y / out),
                    scalar=lambda a, b, t: f"math.hypot({a}, {b})", flags=("int_checked",))


_erf_f64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf_impl(x):
    """The error function with NumPy's dtype rule for transcendental ufuncs."""
    x = np.asarray(x)
    dtype = np.tanh(np.array(1, x.dtype)).dtype
    return _erf_f64(x.astype(np.float64)).astype(dtype)[()]


erf = elementwise("erf", _erf_impl, 1, vjp=unary(lambda ct, x, out: ct * (exp(-(x * x)) * _ERF_SCALE)),
                  scalar=_math("erf"))

# ---------------------------------------------------------------- rounding and classification

floor = elementwise("floor", np.floor, 1, vjp=_ND, scalar=lambda a, t: f"np.floor({a})" if t.kind == "f" else a)
ceil = elementwise("ceil", np.ceil, 1, vjp=_ND, scalar=lambda a, t: f"np.ceil({a})" if t.kind == "f" else a)
trunc = elementwise("trunc", np.trunc, 1, vjp=_ND, scalar=lambda a, t: f"np.trunc({a})" if t.kind == "f" else a)
rint = elementwise("rint", np.rint, 1, vjp=_ND, scalar=lambda a, t: f"np.rint({a})" if t.kind == "f" else a)
isnan = elementwise("isnan", np.isnan, 1, vjp=_ND,
                    scalar=lambda a, t: f"({a} != {a})" if t.kind == "f" else "False")
isinf = elementwise("isinf", np.isinf, 1, vjp=_ND,
                    scalar=lambda a, t: f"(abs({a}) == np.inf)" if t.kind == "f" else "False")
isfinite = elementwise("isfinite", np.isfinite, 1, vjp=_ND,
                       scalar=lambda a, t: f"(({a} == {a}) & (abs({a}) != np.inf))" if t.kind == "f" else "True")
signbit = elementwise("signbit", np.signbit, 1, vjp=_ND,
                      scalar=lambda a, t: f"rt.signbit({a})" if t.kind == "f" else f"({a} < 0)")


def _copysign_vjp(ct, x, y, *, out):
    flip = not_equal(signbit(x), signbit(out))
    return where(flip, -ct, ct), None


copysign = elementwise("copysign", np.copysign, 2, vjp=_copysign_vjp,
                       scalar=lambda a, b, t: f"math.copysign({a}, {b})", flags=("int_checked",))

heaviside = elementwise(
    "heaviside", np.heaviside, 2,
    # a step: no derivative in x (zero a.e.); the value at x == 0 is x2's
    vjp=lambda ct, x, h0, *, out: (None, where(equal(x, 0), ct, 0.0)),
    scalar=lambda a, b, t: f"({scalar_cast(b, t)} if {a} == 0 else ({scalar_cast(a, t)} if {a} != {a} else "
                           f"({scalar_literal(1, t)} if {a} > 0 else {scalar_literal(0, t)})))",
    flags=("int_checked",))

# ---------------------------------------------------------------- extrema


def _chooser(ct, x, y, pick_x):
    """maximum/minimum: the chosen operand gets the cotangent; ties split it (as JAX)."""
    tie = equal(x, y)
    wx = where(pick_x, 1.0, where(tie, 0.5, 0.0))
    wy = where(logical_or(pick_x, tie), where(tie, 0.5, 0.0), 1.0)
    return ct * wx, ct * wy


def _extremum(name, np_fn, wins, nan_wins, flags=()):
    """maximum/minimum/fmax/fmin: `wins(x, y)` picks x; `nan_wins` says which NaN operand propagates."""
    def vjp(ct, x, y, *, out):
        return _chooser(ct, x, y, logical_or(wins(x, y), isnan(nan_wins(x, y))))
    return elementwise(name, np_fn, 2, vjp=vjp, scalar=_rt(name), flags=("int_checked",) + flags)


maximum = _extremum("maximum", np.maximum, lambda x, y: greater(x, y), lambda x, y: x, flags=("cheap",))
minimum = _extremum("minimum", np.minimum, lambda x, y: less(x, y), lambda x, y: x, flags=("cheap",))
fmax = _extremum("fmax", np.fmax, lambda x, y: greater(x, y), lambda x, y: y)
fmin = _extremum("fmin", np.fmin, lambda x, y: less(x, y), lambda x, y: y)

# ---------------------------------------------------------------- logic, bits and comparisons

logical_not = elementwise("logical_not", np.logical_not, 1, vjp=_ND, scalar=lambda a, t: f"({a} == 0)")
logical_and = elementwise("logical_and", np.logical_and, 2, vjp=_ND,
                          scalar=lambda a, b, t: f"(({a} != 0) & ({b} != 0))", flags=("int_checked",))
logical_or = elementwise("logical_or", np.logical_or, 2, vjp=_ND,
                         scalar=lambda a, b, t: f"(({a} != 0) | ({b} != 0))", flags=("int_checked",))
logical_xor = elementwise("logical_xor", np.logical_xor, 2, vjp=_ND,
                          scalar=lambda a, b, t: f"(({a} != 0) ^ ({b} != 0))", flags=("int_checked",))
invert = elementwise("invert", np.invert, 1, vjp=_ND,
                     scalar=lambda a, t: f"(not {a})" if t.kind == "b" else f"(~{a})")
bitwise_and = elementwise("bitwise_and", np.bitwise_and, 2, vjp=_ND, scalar=_infix("&"), flags=("int_checked",))
bitwise_or = elementwise("bitwise_or", np.bitwise_or, 2, vjp=_ND, scalar=_infix("|"), flags=("int_checked",))
bitwise_xor = elementwise("bitwise_xor", np.bitwise_xor, 2, vjp=_ND, scalar=_infix("^"), flags=("int_checked",))
left_shift = elementwise("left_shift", np.left_shift, 2, vjp=_ND,  # NumPy's rules past the bit width
                         scalar=lambda a, b, t: f"rt.left_shift({a}, {b}, {t.itemsize * 8})", flags=("int_checked",))
right_shift = elementwise(
    "right_shift", np.right_shift, 2, vjp=_ND, flags=("int_checked",),
    scalar=lambda a, b, t: f"rt.right_shift_{'u' if t.kind == 'u' else 'i'}({a}, {b}, {t.itemsize * 8})")
_COMPARE = ("int_checked", "comparison", "cheap")
equal = elementwise("equal", np.equal, 2, vjp=_ND, scalar=_infix("=="), flags=_COMPARE)
not_equal = elementwise("not_equal", np.not_equal, 2, vjp=_ND, scalar=_infix("!="), flags=_COMPARE)
less = elementwise("less", np.less, 2, vjp=_ND, scalar=_infix("<"), flags=_COMPARE)
less_equal = elementwise("less_equal", np.less_equal, 2, vjp=_ND, scalar=_infix("<="), flags=_COMPARE)
greater = elementwise("greater", np.greater, 2, vjp=_ND, scalar=_infix(">"), flags=_COMPARE)
greater_equal = elementwise("greater_equal", np.greater_equal, 2, vjp=_ND, scalar=_infix(">="), flags=_COMPARE)

# ---------------------------------------------------------------- choice, clipping and casts
# Their scalar rules see the operand expressions as they are, with the
# operands' avals and the result dtype (custom_scalar): not a ufunc loop.


def _cast(expr: str, dtype) -> str:
    return scalar_cast(expr, dtype)


def _where_scalar(args, in_avals, out):
    c, x, y = args
    return f"({_cast(x, out)} if {c} else {_cast(y, out)})"


where = elementwise("where", np.where, 3, scalar=_where_scalar, flags=("custom_scalar", "cheap"),
                    vjp=lambda ct, c, a, b, *, out: (None, where(c, ct, 0), where(c, 0, ct)))


def _clip_vjp(ct, x, lo, hi, *, out):
    # np.clip is minimum(maximum(x, lo), hi); ties go to x.
    from_x = greater_equal(x, lo)
    kept = less_equal(where(from_x, x, lo), hi)
    return (where(logical_and(kept, from_x), ct, 0), where(logical_and(kept, logical_not(from_x)), ct, 0),
            where(kept, 0, ct))


def _clip_scalar(args, in_avals, out):
    # x on ties (NumPy's own scalar loop; its vector loop picks the bound for
    # some signed zeros, so no one rule matches NumPy at every length), NaN kept
    x, lo, hi = (_cast(v, out) for v in args)
    return _cast(f"rt.minimum({hi}, rt.maximum({lo}, {x}))", out)


clip = elementwise("clip", np.clip, 3, vjp=_clip_vjp, scalar=_clip_scalar, flags=("custom_scalar",))


def _convert_abstract(x: Aval, *, dtype) -> Aval:
    return Aval(x.shape, np.dtype(dtype))


def _convert_impl(x, *, dtype):
    if isinstance(x, np.generic):  # a NumPy scalar stays one (as a traced scalar's convert does)
        return x.astype(dtype)
    return np.asarray(x).astype(dtype)


def _convert_scalar(args, in_avals, out):
    (a,) = args
    if out == np.bool_:
        return f"({a} != 0)"
    src = np.dtype(in_avals[0].dtype)
    if src.kind == "f" and out.kind in "iu" and out.itemsize < 4:
        # NumPy's C cast on x86 converts to a 32-bit int and wraps (40000.0 ->
        # int16 -25536, NaN -> 0); LLVM's vector conversion would saturate.
        return _cast(_cast(a, np.int32), out)
    return _cast(a, out)


declare("convert", "elementwise", abstract=_convert_abstract, impl=_convert_impl,
        vjp=unary(lambda ct, x, out: ct), scalar=_convert_scalar,
        flags=("recomputable", "identity", "custom_scalar", "cheap"))
ELEMENTWISE_OPS.append("convert")


def convert(x, dtype):
    return bind("convert", x, dtype=np.dtype(dtype))


UNARY = [n for n in ELEMENTWISE_OPS if n not in ("convert", "where", "clip", "erf", "scalar_power")
         and getattr(np, n, None) is not None and getattr(np, n).nin == 1]
BINARY = [n for n in ELEMENTWISE_OPS if n not in ("convert", "where", "clip", "erf", "scalar_power")
          and getattr(np, n, None) is not None and getattr(np, n).nin == 2]
