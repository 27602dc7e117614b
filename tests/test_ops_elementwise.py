"""Elementwise ops through `braze.compile(..., target="generic")` vs NumPy.

Every case calls the SAME Python function once on NumPy and once compiled, and
compares dtype, shape and values (tests/_compare.py). Combinations NumPy
itself rejects (e.g. `np.negative` on bool) are filtered out when the
parameters are built, not skipped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import braze

try:
    from _compare import assert_same, check, numpy_accepts, run_both
except ImportError:  # tests/ imported as a package
    from tests._compare import assert_same, check, numpy_accepts, run_both

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
FLOATS = ["float32", "float64"]

SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.5, 2.5, 0.5, -0.75, 3.0, -2.0])


# ---------------------------------------------------------------- input data

def make(dtype, shape, seed=0, *, role="any"):
    """Deterministic test data. `role` restricts the values where NumPy's own
    result would be undefined or platform dependent (integer 1/0, integer
    negative powers)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        a = rng.random(shape) < 0.5
        if role == "nonzero":
            a = np.ones(shape, bool)
        return np.asarray(a, dtype=bool)
    if dt.kind in "iu":
        lo, hi = (0, 4) if role == "exponent" else (-6, 7)
        a = rng.integers(lo, hi, size=shape).astype(dt)
        if role == "nonzero":
            a[a == 0] = 3
        return np.asarray(a)
    a = rng.uniform(-3.0, 3.0, size=shape)
    if role == "exponent":
        a = np.round(a * 2) / 2  # mix of integral and half-integral exponents
    return np.asarray(a.astype(dt))


# Layouts: name -> (shape of a, shape of b, view applied to both operands)
LAYOUTS = {
    "0d": ((), (), None),
    "empty": ((0,), (0,), None),
    "one": ((1,), (1,), None),
    "2d": ((3, 4), (3, 4), None),
    "empty3d": ((2, 0, 3), (2, 0, 3), None),
    "bcast": ((1, 5), (4, 1), None),
    "scalar_bcast": ((3, 4), (), None),
    "T": ((4, 3), (4, 3), lambda a: a.T),
    "step2": ((9,), (9,), lambda a: a[::2]),
    "neg": ((7,), (7,), lambda a: a[::-1]),
    "special": None,  # floats only: NaN, +-inf, -0.0
}
UNARY_LAYOUTS = [k for k in LAYOUTS if k not in ("bcast", "scalar_bcast")] + ["bcast_row"]


def unary_input(layout, dtype, role="any"):
    if layout == "special":
        return SPECIALS.astype(dtype)
    if layout == "bcast_row":
        return make(dtype, (1, 5), 1, role=role)
    shape, _, view = LAYOUTS[layout]
    a = make(dtype, shape, 1, role=role)
    return view(a) if view else a


def binary_inputs(layout, dta, dtb, role_b="any"):
    if layout == "special":
        a = SPECIALS.astype(dta)
        # every special meets every other special somewhere across the two layouts
        b = np.roll(SPECIALS[::-1], 3).astype(dtb)
        return a, b
    sa, sb, view = LAYOUTS[layout]
    a = make(dta, sa, 2)
    b = make(dtb, sb, 3, role=role_b)
    if view:
        a, b = view(a), view(b)
    return a, b


def is_float(dtype):
    return np.dtype(dtype).kind == "f"


# ---------------------------------------------------------------- unary ufuncs

UNARY = [
    "negative", "positive", "abs", "sign", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "sqrt", "square", "reciprocal", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
    "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor", "ceil", "trunc", "rint",
    "isnan", "isinf", "isfinite", "logical_not",
]
# Ops whose integer results at 0 are undefined in NumPy itself (1/0 on ints).
UNARY_ROLE = {"reciprocal": "nonzero"}


def _unary_fn(name):
    op = getattr(np, name)

    def fn(x):
        return op(x)

    fn.__name__ = f"unary_{name}"
    return fn


def _unary_cases():
    cases = []
    for name in UNARY:
        for dt in DTYPES:
            role = UNARY_ROLE.get(name, "any") if not is_float(dt) else "any"
            if not numpy_accepts(getattr(np, name), make(dt, (3,), role=role)):
                continue  # NumPy rejects the dtype: not a case
            for layout in UNARY_LAYOUTS:
                if layout == "special" and not is_float(dt):
                    continue
                cases.append(pytest.param(name, dt, layout, id=f"{name}-{dt}-{layout}"))
    return cases


@pytest.mark.parametrize("name,dtype,layout", _unary_cases())
def test_unary_ufunc(name, dtype, layout):
    role = UNARY_ROLE.get(name, "any") if not is_float(dtype) else "any"
    x = unary_input(layout, dtype, role)
    check(_unary_fn(name), x)


# ---------------------------------------------------------------- binary ufuncs

BINARY = [
    "add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "power",
    "arctan2", "maximum", "minimum", "fmax", "fmin", "logical_and", "logical_or",
    "logical_xor", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "heaviside",
]
BINARY_ROLE_B = {"power": "exponent"}
# A few mixed-dtype pairs exercise promotion (same-dtype pairs cover the rest).
MIXED_PAIRS = [("float32", "float64"), ("int32", "float32"), ("int32", "int64"),
               ("bool", "int32"), ("int64", "float32"), ("bool", "float64")]
MIXED_LAYOUTS = ["2d", "bcast", "0d"]


def _binary_fn(name):
    op = getattr(np, name)

    def fn(x, y):
        return op(x, y)

    fn.__name__ = f"binary_{name}"
    return fn


def _binary_cases():
    cases = []
    for name in BINARY:
        op = getattr(np, name)
        role = BINARY_ROLE_B.get(name, "any")
        pairs = [(dt, dt) for dt in DTYPES] + MIXED_PAIRS
        for dta, dtb in pairs:
            if not numpy_accepts(op, make(dta, (3,)), make(dtb, (3,), role=role)):
                continue
            layouts = list(LAYOUTS) if dta == dtb else MIXED_LAYOUTS
            for layout in layouts:
                if layout == "special" and not (is_float(dta) and is_float(dtb)):
                    continue
                if layout == "special" and name == "power" and not is_float(dtb):
                    continue
                cases.append(pytest.param(name, dta, dtb, layout, id=f"{name}-{dta}-{dtb}-{layout}"))
    return cases


@pytest.mark.parametrize("name,dta,dtb,layout", _binary_cases())
def test_binary_ufunc(name, dta, dtb, layout):
    x, y = binary_inputs(layout, dta, dtb, role_b=BINARY_ROLE_B.get(name, "any"))
    check(_binary_fn(name), x, y)


@pytest.mark.parametrize("name", ["add", "multiply", "maximum", "less", "arctan2", "power"])
def test_binary_ufunc_with_constant_array_operand(name):
    """One operand is a concrete NumPy array captured by the closure."""
    op = getattr(np, name)
    c = np.array([0.5, 1.0, 2.0, 3.0], dtype=np.float64)

    def fn(x):
        return op(x, c), op(c, x)

    check(fn, make("float32", (3, 4), 5))


# ---------------------------------------------------------------- where / clip

@pytest.mark.parametrize("dtype,layout", [
    (dt, lay) for dt in DTYPES for lay in ["0d", "empty", "2d", "bcast", "T", "neg", "special"]
    if lay != "special" or is_float(dt)
])
def test_where_traced_condition(dtype, layout):
    x, y = binary_inputs(layout, dtype, dtype)

    def fn(x, y):
        return np.where(x > y, x, y)

    check(fn, x, y)


@pytest.mark.parametrize("dta,dtb", [("float32", "float32"), ("int32", "float64"), ("float32", "int64"),
                                     ("bool", "int32"), ("int64", "int64")])
def test_where_mixed_and_scalar_branches(dta, dtb):
    x = make(dta, (3, 4), 1)
    y = make(dtb, (4,), 2)

    def fn(x, y):
        return np.where(y > 0, x, y), np.where(y > 0, x, 0), np.where(y > 0, 1.5, x)

    check(fn, x, y)


def test_where_condition_is_concrete_array():
    cond = np.array([[True, False, True, False]])

    def fn(x, y):
        return np.where(cond, x, y)

    check(fn, make("float64", (3, 4), 1), make("float64", (3, 4), 2))


def _clip_cases():
    cases = []
    for dt in DTYPES:
        for lohi in [(-1, 2), (-1.5, 2.5), (None, 1), (0, None)]:
            if not numpy_accepts(np.clip, make(dt, (3,)), *lohi):
                continue
            for layout in ["0d", "empty", "2d", "T", "neg", "special"]:
                if layout == "special" and not is_float(dt):
                    continue
                cases.append(pytest.param(dt, lohi, layout, id=f"{dt}-{lohi}-{layout}"))
    return cases


@pytest.mark.parametrize("dtype,lohi,layout", _clip_cases())
def test_clip_scalar_bounds(dtype, lohi, layout):
    lo, hi = lohi
    x = unary_input(layout, dtype)

    def fn(x):
        return np.clip(x, lo, hi), x.clip(lo, hi)

    check(fn, x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_clip_traced_array_bounds(dtype):
    x = make(dtype, (3, 4), 1)
    lo = make(dtype, (4,), 2)
    hi = lo + np.asarray(2, dtype)

    def fn(x, lo, hi):
        return np.clip(x, lo, hi)

    check(fn, x, lo, hi)


# ---------------------------------------------------------------- astype

def _astype_cases():
    cases = []
    for src in DTYPES:
        for dst in DTYPES + ["float16", "int8", "uint8"]:
            for layout in ["0d", "empty", "2d", "T", "neg"]:
                cases.append(pytest.param(src, dst, layout, id=f"{src}-to-{dst}-{layout}"))
    return cases


@pytest.mark.parametrize("src,dst,layout", _astype_cases())
def test_astype(src, dst, layout):
    x = unary_input(layout, src)  # finite values in [-3, 3]: every cast is defined

    def fn(x):
        return x.astype(dst)

    check(fn, x)


@pytest.mark.parametrize("dst", [np.float32, np.int64, bool, float, int])
def test_astype_type_objects(dst):
    def fn(x):
        return x.astype(dst) * 2

    check(fn, make("float64", (5,), 1))


# ---------------------------------------------------------------- operators

BINARY_OPERATORS = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "truediv": lambda x, y: x / y,
    "floordiv": lambda x, y: x // y,
    "mod": lambda x, y: x % y,
    "pow": lambda x, y: x ** y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
}


def _operator_cases():
    cases = []
    for opname, op in BINARY_OPERATORS.items():
        role = "exponent" if opname == "pow" else "any"
        for dt in DTYPES:
            if not numpy_accepts(op, make(dt, (3,)), make(dt, (3,), role=role)):
                continue
            for layout in ["0d", "empty", "2d", "bcast", "T", "special"]:
                if layout == "special" and not is_float(dt):
                    continue
                cases.append(pytest.param(opname, dt, layout, id=f"{opname}-{dt}-{layout}"))
    return cases


@pytest.mark.parametrize("opname,dtype,layout", _operator_cases())
def test_binary_operator(opname, dtype, layout):
    role = "exponent" if opname == "pow" else "any"
    x, y = binary_inputs(layout, dtype, dtype, role_b=role)
    check(BINARY_OPERATORS[opname], x, y)


UNARY_OPERATORS = {
    "neg": lambda x: -x,
    "pos": lambda x: +x,
    "abs": lambda x: abs(x),
}


@pytest.mark.parametrize("opname,dtype", [
    (name, dt) for name in UNARY_OPERATORS for dt in DTYPES
    if numpy_accepts(UNARY_OPERATORS[name], make(dt, (3,)))
])
@pytest.mark.parametrize("layout", ["0d", "2d", "T", "special"])
def test_unary_operator(opname, dtype, layout):
    if layout == "special" and not is_float(dtype):
        layout = "neg"  # special values exist for floats only
    check(UNARY_OPERATORS[opname], unary_input(layout, dtype))


def test_unary_minus_on_bool_rejected_like_numpy():
    x = make("bool", (4,), 1)
    with pytest.raises(TypeError):
        (lambda x: -x)(x)
    with pytest.raises(Exception):
        braze.compile(lambda x: -x, target="generic")(x)


REFLECTED = {
    "rsub_float": lambda x: 2.0 - x,
    "radd_int": lambda x: 3 + x,
    "rmul_float": lambda x: 1.5 * x,
    "rtruediv": lambda x: 1.0 / x,
    "rfloordiv": lambda x: 7 // x,
    "rmod": lambda x: 7 % x,
    "rpow": lambda x: 2 ** x,
    "rpow_float": lambda x: 0.5 ** x,
    "rlt": lambda x: 1 < x,
    "req": lambda x: 0 == x,
}


@pytest.mark.parametrize("name", list(REFLECTED))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_reflected_operator_with_python_scalar(name, dtype):
    fn = REFLECTED[name]
    role = "nonzero" if name in ("rfloordiv", "rmod") else ("exponent" if "rpow" in name else "any")
    x = make(dtype, (3, 4), 1, role=role)
    check(fn, x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reflected_operators_on_special_values(dtype):
    def fn(x):
        return 2.0 - x, 1.0 / x, 0.0 * x, -x

    check(fn, SPECIALS.astype(dtype))


INPLACE = {
    "iadd": lambda x, y: _iop(x, y, "add"),
    "isub": lambda x, y: _iop(x, y, "sub"),
    "imul": lambda x, y: _iop(x, y, "mul"),
    "itruediv": lambda x, y: _iop(x, y, "truediv"),
    "ifloordiv": lambda x, y: _iop(x, y, "floordiv"),
    "imod": lambda x, y: _iop(x, y, "mod"),
    "ipow": lambda x, y: _iop(x, y, "pow"),
}


def _iop(x, y, kind):
    z = x * 1  # a fresh traced value (NumPy: a fresh array, the input stays untouched)
    if kind == "add":
        z += y
    elif kind == "sub":
        z -= y
    elif kind == "mul":
        z *= y
    elif kind == "truediv":
        z /= y
    elif kind == "floordiv":
        z //= y
    elif kind == "mod":
        z %= y
    elif kind == "pow":
        z **= y
    return z


def _inplace_cases():
    cases = []
    for name, op in INPLACE.items():
        role = "exponent" if name == "ipow" else "any"
        for dta, dtb in [("float32", "float32"), ("float64", "float64"), ("int32", "int32"),
                         ("int64", "int64"), ("float32", "float64"), ("float64", "int32"),
                         ("int32", "float64"), ("float32", "int64")]:
            if not numpy_accepts(op, make(dta, (3,)), make(dtb, (3,), role=role)):
                continue  # e.g. int32 array /= anything: NumPy's same_kind casting rejects it
            cases.append(pytest.param(name, dta, dtb, id=f"{name}-{dta}-{dtb}"))
    return cases


@pytest.mark.parametrize("name,dta,dtb", _inplace_cases())
def test_inplace_operator_on_traced_value(name, dta, dtb):
    role = "exponent" if name == "ipow" else "any"
    x = make(dta, (3, 4), 1)
    y = make(dtb, (4,), 2, role=role)
    check(INPLACE[name], x, y)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_inplace_on_argument_itself(dtype):
    """`x += y` rebinding the parameter name: the result is x + y, in x's dtype."""
    def fn(x, y):
        x += y
        x *= 2
        return x

    x = make(dtype, (3, 4), 1)
    y = make(dtype, (3, 4), 2)
    expected = fn(x.copy(), y)
    actual = braze.compile(fn, target="generic")(x.copy(), y)
    assert_same(actual, expected)


def test_inplace_int_from_float_rejected_like_numpy():
    def fn(x, y):
        x = x * 1
        x += y
        return x

    x, y = make("int32", (4,), 1), make("float64", (4,), 2)
    with pytest.raises(TypeError):
        fn(x, y)  # NumPy: Cannot cast ufunc 'add' output from float64 to int32
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x, y)


# ---------------------------------------------------------------- NEP 50 weak scalars

def test_nep50_python_float_literal_keeps_float32():
    out = check(lambda x: x + 1.0, make("float32", (4,), 1))
    assert np.asarray(out).dtype == np.float32


def test_nep50_python_int_literal_keeps_int32():
    out = check(lambda x: x * 2, make("int32", (4,), 1))
    assert np.asarray(out).dtype == np.int32


def test_nep50_python_float_literal_with_int_array_gives_float64():
    out = check(lambda x: x + 1.5, make("int32", (4,), 1))
    assert np.asarray(out).dtype == np.float64


def test_nep50_numpy_float64_scalar_argument_is_strong():
    def fn(x, s):
        return s * x

    out = check(fn, make("float32", (4,), 1), np.float64(2.5))
    assert np.asarray(out).dtype == np.float64


def test_nep50_numpy_float64_scalar_constant_is_strong():
    s = np.float64(2.5)

    def fn(x):
        return x * s

    out = check(fn, make("float32", (4,), 1))
    assert np.asarray(out).dtype == np.float64


def test_nep50_numpy_float32_scalar_with_float64_array():
    def fn(x, s):
        return x + s

    out = check(fn, make("float64", (4,), 1), np.float32(0.25))
    assert np.asarray(out).dtype == np.float64


def test_nep50_python_float_argument_is_weak():
    def fn(x, s):
        return x + s

    out = check(fn, make("float32", (4,), 1), 1.25)
    assert np.asarray(out).dtype == np.float32


def test_nep50_python_float_argument_is_traced_not_baked_in():
    def fn(x, s):
        return x * s

    f = braze.compile(fn, target="generic")
    x = make("float32", (4,), 1)
    with np.errstate(all="ignore"):
        for s in (1.25, -3.0, 0.5):
            assert_same(f(x, s), fn(x, s))


def test_nep50_python_float_argument_with_int_array():
    def fn(x, s):
        return x * s

    out = check(fn, make("int32", (4,), 1), 0.5)
    assert np.asarray(out).dtype == np.float64


def test_nep50_python_int_argument_is_static_and_weak():
    def fn(x, n):
        return x * n + n

    f = braze.compile(fn, target="generic")
    x = make("int32", (4,), 1)
    for n in (3, -2, 7):
        assert_same(f(x, n), fn(x, n))
        assert np.asarray(f(x, n)).dtype == np.int32


def test_nep50_0d_array_argument_is_strong():
    def fn(x, s):
        return x + s

    out = check(fn, make("float32", (4,), 1), np.array(2.0))
    assert np.asarray(out).dtype == np.float64


def test_nep50_numpy_int64_scalar_with_int32_array():
    def fn(x, s):
        return x + s

    out = check(fn, make("int32", (4,), 1), np.int64(3))
    assert np.asarray(out).dtype == np.int64


@pytest.mark.parametrize("flag", [True, False])
def test_nep50_python_bool_argument(flag):
    def fn(x, flag):
        return x * flag + (1.0 if flag else 2.0)

    out = check(fn, make("float32", (4,), 1), flag)
    assert np.asarray(out).dtype == np.float32


def test_python_int_literal_out_of_range_rejected_like_numpy():
    def fn(x):
        return x + 2**40

    x = make("int32", (4,), 1)
    with pytest.raises(OverflowError):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)


def test_a_python_int_past_the_arrays_range_divides_as_numpys_float64():
    """Division has only float loops: NumPy divides an int32 array by 2**40
    (or 2**40 by it) in float64, where an add raises OverflowError."""
    x = make("int32", (4,), 1)
    for fn in (lambda x: x / 2**40, lambda x: -2**40 / (x + 100), lambda x: np.true_divide(x, 2**31)):
        for target in ("generic", "cpu"):
            got, want = braze.compile(fn, target=target)(x), fn(x)
            assert got.dtype == want.dtype == np.float64
            np.testing.assert_array_equal(got, want)


def test_compiled_function_reused_across_dtypes_and_layouts():
    """One compiled object, many signatures: each call must match NumPy (no stale cache hit)."""
    def fn(x):
        return x * 2 + 1

    f = braze.compile(fn, target="generic")
    base = make("float64", (4, 6), 1)
    inputs = [base.astype(np.float32), base.astype(np.int32), base, base.T, base[::2], base[:, ::-1],
              base[0], np.float32(2.5), np.array(3, np.int64), make("bool", (3,), 2), base.astype(np.float32)]
    for a in inputs:
        assert_same(f(a), fn(a))


def test_nep50_weak_scalar_in_ufunc_call():
    def fn(x):
        return np.maximum(x, 0.5), np.power(x, 2), np.arctan2(x, 1.0), np.where(x > 0, x, 0.0)

    check(fn, make("float32", (5,), 1))


def test_nep50_float32_0d_array_with_python_float():
    out = check(lambda x: x * 3.0 + 1.0, np.array(1.5, dtype=np.float32))
    assert np.asarray(out).dtype == np.float32


# ---------------------------------------------------------------- integer division semantics

INT_NUM = np.array([-7, -7, 7, 7, -6, 6, 0, -1, 1, 5], dtype=np.int64)
INT_DEN = np.array([2, -2, 2, -2, 3, -3, 5, 3, -3, 5], dtype=np.int64)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_floor_divide_and_remainder_signs(dtype):
    def fn(a, b):
        return a // b, a % b, np.floor_divide(a, b), np.remainder(a, b), np.mod(a, b)

    a, b = INT_NUM.astype(dtype), INT_DEN.astype(dtype)
    out = check(fn, a, b)
    # Pin NumPy's floor semantics explicitly as well: -7 // 2 == -4, -7 % 2 == 1.
    assert np.asarray(out[0])[0] == -4 and np.asarray(out[1])[0] == 1
    assert np.asarray(out[0])[1] == 3 and np.asarray(out[1])[1] == -1


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_divide_by_zero_matches_numpy(dtype):
    def fn(a, b):
        return a // b, a % b

    a = np.array([5, -5, 0], dtype=dtype)
    b = np.zeros(3, dtype=dtype)
    check(fn, a, b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_floor_divide_and_remainder_signs(dtype):
    a = np.array([-7.5, 7.5, -7.5, 7.5, -0.0, 3.0, np.inf, 1.0], dtype=dtype)
    b = np.array([2.0, -2.0, -2.0, 2.0, 2.0, np.inf, 2.0, 0.0], dtype=dtype)

    def fn(a, b):
        return a // b, a % b, np.floor_divide(a, b), np.remainder(a, b)

    out = check(fn, a, b)
    assert np.asarray(out[1])[0] == np.asarray(0.5, dtype)  # -7.5 % 2 == 0.5 (sign of divisor)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_division_by_python_int_scalar(dtype):
    def fn(a):
        return a // 3, a % 3, a // -3, a % -3, -7 // a, -7 % a

    check(fn, INT_DEN.astype(dtype))


# ---------------------------------------------------------------- NaN propagation

@pytest.mark.parametrize("dtype", FLOATS)
def test_maximum_minimum_propagate_nan_fmax_fmin_ignore_it(dtype):
    a = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0, -0.0], dtype=dtype)
    b = np.array([1.0, np.nan, np.nan, 3.0, np.inf, 0.0], dtype=dtype)

    def fn(a, b):
        return np.maximum(a, b), np.minimum(a, b), np.fmax(a, b), np.fmin(a, b)

    mx, mn, fmx, fmn = check(fn, a, b)
    assert np.isnan(np.asarray(mx)[:3]).all() and np.isnan(np.asarray(mn)[:3]).all()
    assert np.asarray(fmx)[0] == 1.0 and np.asarray(fmx)[1] == 1.0 and np.isnan(np.asarray(fmx)[2])
    assert np.asarray(fmn)[0] == 1.0 and np.asarray(fmn)[1] == 1.0 and np.isnan(np.asarray(fmn)[2])


# ---------------------------------------------------------------- erf (braze.numpy only)

@pytest.mark.parametrize("dtype", FLOATS)
def test_braze_numpy_erf_against_math_erf(dtype):
    bnp = braze.numpy
    x = np.concatenate([np.linspace(-4, 4, 17), [0.0, -0.0, 1e-8, 6.0, -6.0, np.inf, -np.inf, np.nan]])
    x = x.astype(dtype)
    expected = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(dtype)
    f = braze.compile(lambda x: bnp.erf(x), target="generic")
    with np.errstate(all="ignore"):
        actual = f(x)
    # math.erf is accurate to ~1 ulp in float64; the default tolerances apply.
    assert_same(actual, expected)


# ---------------------------------------------------------------- braze.numpy mirrors np

@pytest.mark.parametrize("name", ["exp", "log1p", "tanh", "maximum", "where", "clip", "arctan2", "floor_divide"])
def test_braze_numpy_functions_match_numpy(name):
    bnp = braze.numpy
    b_op, n_op = getattr(bnp, name), getattr(np, name)
    x = make("float32", (3, 4), 1)
    y = make("float32", (3, 4), 2)
    args = {"where": (x > 0, x, y), "clip": (x, -1.0, 1.0)}.get(name)
    if args is None:
        args = (x,) if n_op.nin == 1 else (x, y)

    def via_braze(*a):
        return b_op(*a)

    with np.errstate(all="ignore"):
        expected = n_op(*args)
        actual = braze.compile(via_braze, target="generic")(*args)
    assert_same(actual, expected)
