"""Scalar code for every elementwise op: one table, shared by the numba targets.

``emit(node, args)`` returns a Python/numba expression computing ``node`` from
the operand expressions ``args``. Operands are first cast to the dtypes of
the NumPy ufunc loop that NumPy itself would pick (``ufunc.resolve_dtypes``,
weak Python scalars included), the op is applied, and the result is cast to
the node's dtype, so numba's scalar promotion rules (which differ from
NumPy's array rules) never leak into results.

Helpers named in templates (``rt.maximum``, ``vm.exp_f32``) are module
globals of the generated module: ``rt`` is ``braze.targets.cpu_runtime``,
``vm`` the vectorizable math of ``braze.targets.cpu_math``.
"""
from __future__ import annotations

import functools

import numpy as np

from braze.aval import python_scalar_type
from braze.core import KIND

from . import cpu_runtime as rt

_ALIAS = {"float16": "float32"}  # computed in float32, stored as float16


def np_type(dtype) -> str:
    dtype = np.dtype(dtype)
    return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"


def cast(expr: str, dtype) -> str:
    return f"{np_type(dtype)}({expr})"


def literal(value, dtype) -> str:
    """A constant of ``dtype`` as source text (NaN and inf included)."""
    dtype = np.dtype(dtype)
    value = np.asarray(value).astype(dtype)[()]
    if dtype.kind == "f":
        if np.isnan(value):
            return f"{np_type(dtype)}(np.nan)"
        if np.isinf(value):
            return f"{np_type(dtype)}({'-' if value < 0 else ''}np.inf)"
        return f"{np_type(dtype)}({float(value)!r})"
    if dtype.kind == "b":
        return "True" if value else "False"
    return f"{np_type(dtype)}({int(value)})"


# ops whose dtype rule is another ufunc's
_UFUNC = {"scalar_power": "power"}


@functools.lru_cache(maxsize=4096)
def loop_dtypes(op: str, keys: tuple) -> tuple[np.dtype, ...]:
    """The NumPy ufunc loop (input dtypes..., output dtype) for these operands."""
    ufunc = getattr(np, _UFUNC.get(op, op))
    operands = tuple(python_scalar_type(d) if weak else np.dtype(d) for d, weak in keys)
    try:
        return tuple(np.dtype(d) for d in ufunc.resolve_dtypes(operands + (None,) * ufunc.nout))
    except (TypeError, ValueError):
        # resolve_dtypes rejects some weak-only combinations; ask with strong defaults
        strong = tuple(np.dtype(d) for d, _ in keys)
        return tuple(np.dtype(d) for d in ufunc.resolve_dtypes(strong + (None,) * ufunc.nout))


def _float_name(dtype) -> str:
    return {"float32": "f32", "float64": "f64"}[_ALIAS.get(np.dtype(dtype).name, np.dtype(dtype).name)]


# ---------------------------------------------------------------- templates
# Each template takes the operand expressions (already in the loop dtype) and
# the loop dtype, and returns the expression in that dtype.

def _infix(symbol):
    return lambda a, b, t: f"({a} {symbol} {b})"


# sin and cos are libm calls here; the code generator (cpu_codegen._trig)
# emits cpu_math's vector versions instead, with a flag for arguments beyond
# their range (|x| >= 2**48) that makes the launcher rerun the loop exactly.
VECTOR_MATH = {"exp", "expm1", "log", "log1p", "tanh", "erf"}


def _math(fn, vector=None):
    def template(a, t):
        if vector and t.kind == "f" and rt.has_vector_math(vector, _float_name(t)):
            return f"vm.{vector}_{_float_name(t)}({a})"
        return f"math.{fn}({a})"

    return template


TEMPLATES = {
    "add": lambda a, b, t: f"({a} | {b})" if t.kind == "b" else f"({a} + {b})",
    "subtract": _infix("-"),
    "multiply": lambda a, b, t: f"({a} & {b})" if t.kind == "b" else f"({a} * {b})",
    "divide": _infix("/"),
    "floor_divide": lambda a, b, t: f"rt.floor_divide_{t.kind}({a}, {b})",
    "remainder": lambda a, b, t: f"rt.remainder_{t.kind}({a}, {b})",
    "fmod": lambda a, b, t: f"rt.fmod_{t.kind}({a}, {b})",
    "power": lambda a, b, t: f"({a} ** {b})" if t.kind == "f" else f"rt.ipower({a}, {b})",
    "scalar_power": lambda a, b, t: f"({a} ** {b})" if t.kind == "f" else f"rt.ipower({a}, {b})",
    "arctan2": lambda a, b, t: f"math.atan2({a}, {b})",
    "hypot": lambda a, b, t: f"math.hypot({a}, {b})",
    "copysign": lambda a, b, t: f"math.copysign({a}, {b})",
    "logaddexp": lambda a, b, t: f"rt.logaddexp({a}, {b})",
    "logaddexp2": lambda a, b, t: f"rt.logaddexp2({a}, {b})",
    "maximum": lambda a, b, t: f"rt.maximum({a}, {b})",
    "minimum": lambda a, b, t: f"rt.minimum({a}, {b})",
    "fmax": lambda a, b, t: f"rt.fmax({a}, {b})",
    "fmin": lambda a, b, t: f"rt.fmin({a}, {b})",
    "logical_and": lambda a, b, t: f"(({a} != 0) & ({b} != 0))",
    "logical_or": lambda a, b, t: f"(({a} != 0) | ({b} != 0))",
    "logical_xor": lambda a, b, t: f"(({a} != 0) ^ ({b} != 0))",
    "bitwise_and": _infix("&"),
    "bitwise_or": _infix("|"),
    "bitwise_xor": _infix("^"),
    "left_shift": lambda a, b, t: f"rt.left_shift({a}, {b}, {t.itemsize * 8})",
    "right_shift": lambda a, b, t: f"rt.right_shift_{'u' if t.kind == 'u' else 'i'}({a}, {b}, {t.itemsize * 8})",
    "equal": _infix("=="),
    "not_equal": _infix("!="),
    "less": _infix("<"),
    "less_equal": _infix("<="),
    "greater": _infix(">"),
    "greater_equal": _infix(">="),
    "negative": lambda a, t: f"(-{a})",
    "positive": lambda a, t: f"(+{a})",
    "conjugate": lambda a, t: a,
    "absolute": lambda a, t: a if t.kind in "bu" else f"abs({a})",
    "sign": lambda a, t: f"rt.sign({a})",
    "exp": _math("exp", "exp"),
    "exp2": lambda a, t: f"rt.exp2({a})",
    "expm1": _math("expm1", "expm1"),
    "log": _math("log", "log"),
    "log2": lambda a, t: f"rt.log2({a})",
    "log10": lambda a, t: f"rt.log10({a})",
    "log1p": _math("log1p", "log1p"),
    "sqrt": lambda a, t: f"np.sqrt({a})",
    "square": lambda a, t: f"({a} * {a})",
    "reciprocal": lambda a, t: f"(1 / {a})" if t.kind == "f" else
    f"rt.ireciprocal({a}, {literal(np.iinfo(t).min if t.kind == 'i' else 0, t)})",
    "sin": _math("sin"),
    "cos": _math("cos"),
    "tan": _math("tan"),
    "arcsin": _math("asin"),
    "arccos": _math("acos"),
    "arctan": _math("atan"),
    "sinh": _math("sinh"),
    "cosh": _math("cosh"),
    "tanh": _math("tanh", "tanh"),
    "arcsinh": _math("asinh"),
    "arccosh": _math("acosh"),
    "arctanh": _math("atanh"),
    "floor": lambda a, t: f"np.floor({a})" if t.kind == "f" else a,
    "ceil": lambda a, t: f"np.ceil({a})" if t.kind == "f" else a,
    "trunc": lambda a, t: f"np.trunc({a})" if t.kind == "f" else a,
    "rint": lambda a, t: f"np.rint({a})" if t.kind == "f" else a,
    "isnan": lambda a, t: f"({a} != {a})" if t.kind == "f" else "False",
    "isinf": lambda a, t: f"(abs({a}) == np.inf)" if t.kind == "f" else "False",
    "isfinite": lambda a, t: f"(({a} == {a}) & (abs({a}) != np.inf))" if t.kind == "f" else "True",
    "signbit": lambda a, t: f"rt.signbit({a})" if t.kind == "f" else f"({a} < 0)",
    "logical_not": lambda a, t: f"({a} == 0)",
    "invert": lambda a, t: f"(not {a})" if t.kind == "b" else f"(~{a})",
    "cbrt": lambda a, t: f"np.cbrt({a})",
    "deg2rad": lambda a, t: f"({a} * {literal(np.pi / 180, t)})",
    "rad2deg": lambda a, t: f"({a} * {literal(180 / np.pi, t)})",
    "erf": _math("erf", "erf"),
}


def emit(op: str, params: dict, args: list[str], in_avals, out_dtype, templates=None) -> str:
    """Expression for elementwise ``op`` on operand expressions ``args``
    (``templates``: a target's own table, default the cpu's)."""
    templates = TEMPLATES if templates is None else templates
    out_dtype = np.dtype(out_dtype)
    if op == "convert":
        (a,) = args
        if out_dtype == np.bool_:
            return f"({a} != 0)"
        src = np.dtype(in_avals[0].dtype)
        if src.kind == "f" and out_dtype.kind in "iu" and out_dtype.itemsize < 4:
            # NumPy's C cast on x86 converts to a 32-bit int and wraps (40000.0 ->
            # int16 -25536, NaN -> 0); LLVM's vector conversion would saturate.
            return cast(cast(a, np.int32), out_dtype)
        return cast(a, out_dtype)
    if op == "where":
        c, x, y = args
        return f"({cast(x, out_dtype)} if {c} else {cast(y, out_dtype)})"
    if op == "clip":
        x, lo, hi = args
        t = _compute(out_dtype)
        x, lo, hi = (cast(v, t) for v in (x, lo, hi))
        return cast(f"rt.minimum(rt.maximum({x}, {lo}), {hi})", out_dtype)
    if op == "erf":
        t = _compute(out_dtype)
        return cast(templates["erf"](cast(args[0], t), t), out_dtype)
    keys = tuple((np.dtype(a.dtype).name, a.weak) for a in in_avals)
    dtypes = loop_dtypes(op, keys)
    ins = dtypes[: len(args)]
    t = _compute(ins[0])
    operands = [cast(a, _compute(d)) for a, d in zip(args, ins)]
    return cast(templates[op](*operands, t), out_dtype)


def _compute(dtype) -> np.dtype:
    return np.dtype(_ALIAS.get(np.dtype(dtype).name, np.dtype(dtype).name))


def missing() -> list[str]:
    """Elementwise ops with no scalar template: every target needs one per op."""
    special = {"convert", "where", "clip"}
    return [op for op, kind in KIND.items() if kind == "elementwise" and op not in TEMPLATES and op not in special]
