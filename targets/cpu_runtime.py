"""Scalar helpers the generated numba kernels call, with NumPy's exact semantics.

Generated modules import this module as ``rt`` and refer to helpers as
module globals (a kernel that closes over a jitted function misses numba's
disk cache in a new process). Integer division and remainder by zero give
0, as NumPy's do; float floor division and remainder follow NumPy's
``npy_divmod``.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import binding as llvm
from numba import njit, types
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

_jit = njit(cache=True, error_model="numpy")


_INTERLEAVE = [0]  # the -force-vector-interleave in force (0: LLVM's cost model)


def interleaved(count: int, **options):
    """``@njit(**options)`` whose loops LLVM's vectorizer also interleaves
    ``count`` vector iterations (``-force-vector-interleave``).

    A long elementwise body full of exp/log polynomials and divisions is
    bound by its dependency chains, not its instruction count: one iteration's
    chain is longer than the out-of-order window can hide (Black-Scholes: 160
    cycles for 187 instructions a vector).  Interleaving puts the independent
    chains of several vectors side by side (11.2 from 20.5 ms, one thread), as
    PyTorch's inductor does with its two-vector ``VectorizedN``.  The cost
    model never picks it for a body this long.  LLVM's options are global, so
    the option is set and reset around this dispatcher's compilations while
    numba's compiler lock is held (every numba compilation takes it): no other
    function is compiled with it.  A kernel loaded from numba's cache is not
    optimized again, so the option does not matter there.
    """
    def decorate(fn):
        dispatcher = njit(**options)(fn)
        plain = dispatcher.compile

        def compile(sig):
            with global_compiler_lock:
                # a compilation nested in another (a caller typing its callee)
                # gives the caller its own setting back, not LLVM's default
                outer = _INTERLEAVE[0]
                _INTERLEAVE[0] = count
                llvm.set_option("", f"-force-vector-interleave={count}")
                try:
                    return plain(sig)
                finally:
                    _INTERLEAVE[0] = outer
                    llvm.set_option("", f"-force-vector-interleave={outer}")

        dispatcher.compile = compile
        return dispatcher
    return decorate


def has_vector_math(name: str, suffix: str) -> bool:
    """Whether braze.targets.cpu_math provides a vectorizable ``name_suffix``."""
    try:
        from . import cpu_math
    except ImportError:
        return False
    return hasattr(cpu_math, f"{name}_{suffix}")


@_jit
def maximum(a, b):
    """NumPy's: NaN wins, and of two equal values (-0.0 and 0.0) the second."""
    return a if (a > b or a != a) else b


@_jit
def minimum(a, b):
    return a if (a < b or a != a) else b


@_jit
def fmax(a, b):
    return a if (a >= b or b != b) else b


@_jit
def fmin(a, b):
    return a if (a <= b or b != b) else b


@_jit
def sign(a):
    if a != a:
        return a
    return (a > 0) * 1 - (a < 0) * 1  # (bools do not subtract under NumPy scalars: the cuda simulator)


@_jit
def signbit(a):
    return math.copysign(1.0, a) < 0


@_jit
def floor_divide_i(a, b):
    if b == 0:
        return a - a  # zero of a's own type (a * 0 would be float64 for uint64)
    if b == -1:  # MIN // -1 overflows (undefined in LLVM); NumPy wraps to MIN
        return -a
    return a // b


@_jit
def floor_divide_u(a, b):
    if b == 0:
        return a - a  # zero of a's own type (a * 0 would be float64 for uint64)
    return a // b


@_jit
def floor_divide_b(a, b):
    return a // b if b else a - a


@_jit
def remainder_i(a, b):
    if b == 0 or b == -1:  # MIN % -1 overflows in the division; the remainder is 0
        return a - a  # zero of a's own type (a * 0 would be float64 for uint64)
    return a % b


@_jit
def remainder_u(a, b):
    if b == 0:
        return a - a  # zero of a's own type (a * 0 would be float64 for uint64)
    return a % b


remainder_b = floor_divide_b


@_jit
def fmod_i(a, b):
    """C's remainder (the sign of ``a``), as NumPy's; 0 for b == 0 and b == -1
    (MIN % -1 overflows in the division). From the floored one, with no abs():
    abs(MIN) is MIN again, and int8's -128 made fmod(1, -128) -127."""
    if b == 0 or b == -1:
        return a - a  # zero of a's own type (a * 0 would be float64 for uint64)
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r -= b
    return r


fmod_u = remainder_u


@_jit
def _divmod_f(a, b):
    mod = np.fmod(a, b)
    if b == 0:
        return a / b, mod
    div = (a - mod) / b
    if mod:
        if (b < 0) != (mod < 0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div:
        floordiv = np.floor(div)
        if div - floordiv > 0.5:
            floordiv += 1.0
    else:
        floordiv = math.copysign(0.0, a / b)
    return floordiv, mod


@_jit
def floor_divide_f(a, b):
    if b == 0:
        return a / b
    return _divmod_f(a, b)[0]


@_jit
def remainder_f(a, b):
    if b == 0:
        return np.fmod(a, b) if a == a else a
    return _divmod_f(a, b)[1]


@_jit
def fmod_f(a, b):
    return np.fmod(a, b)


@_jit
def left_shift(a, b, bits):
    """NumPy's ``a << b`` for ``bits``-wide ints: 0 once ``b`` reaches the width
    (C leaves it undefined). Computed on 64 bits; the caller casts back."""
    if b < 0 or b >= bits:
        return np.int64(0)
    return np.int64(a) << np.int64(b)


@_jit
def right_shift_i(a, b, bits):
    """NumPy's signed ``a >> b``: the sign (0 or -1) once ``b`` reaches the width."""
    x = np.int64(a)
    if b < 0 or b >= bits:
        return x >> np.int64(63)
    return x >> np.int64(b)


@_jit
def right_shift_u(a, b, bits):
    """NumPy's unsigned ``a >> b``: 0 once ``b`` reaches the width."""
    if b >= bits:
        return np.uint64(0)
    return np.uint64(a) >> np.uint64(b)


@_jit
def ipower(a, b):
    if b < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    result = a * 0 + 1
    base = a
    while b:
        if b & 1:
            result *= base
        base *= base
        b >>= 1
    return result


@_jit
def ireciprocal(a, at_zero):
    """NumPy's integer reciprocal: (int)(1.0 / a); 1/0 is ``at_zero``."""
    if a == 0:
        return at_zero
    if a == 1 or a == -1:
        return a
    return a * 0


@_jit
def exp2(a):
    return 2.0 ** a


@_jit
def log2(a):
    return math.log2(a) if a > 0 else (math.log(a) if a != 0 else -math.inf)


@_jit
def log10(a):
    return math.log10(a) if a > 0 else (math.log(a) if a != 0 else -math.inf)


@_jit
def logaddexp(x, y):
    if x == y:
        return x + math.log(2.0)
    tmp = x - y
    if tmp > 0:
        return x + math.log1p(math.exp(-tmp))
    if tmp <= 0:
        return y + math.log1p(math.exp(tmp))
    return tmp


# NumPy's npy_logaddexp2: x + LOG2E * log1p(exp2(-(x - y))), in the operands' precision
# (the float32 loop multiplies by a float32 LOG2E; a float64 product rounds differently).
_LOG2E = 1.442695040888963407359924681001892137
_LOG2E_F32 = np.float32(_LOG2E)


@_jit
def logaddexp2(x, y):
    if x == y:
        return x + 1.0
    tmp = x - y
    if tmp > 0:
        return x + _LOG2E * math.log1p(math.exp2(-tmp))
    if tmp <= 0:
        return y + _LOG2E * math.log1p(math.exp2(tmp))
    return tmp


@_jit
def logaddexp2_f32(x, y):
    if x == y:
        return x + 1.0
    tmp = x - y
    if tmp > 0:
        return x + _LOG2E_F32 * np.float32(math.log1p(np.float32(math.exp2(-tmp))))
    if tmp <= 0:
        return y + _LOG2E_F32 * np.float32(math.log1p(np.float32(math.exp2(tmp))))
    return tmp


# ---- the one reassociable instruction: a reduction's accumulate.
# Kernels compile without fast-math (NumPy's elementwise order and rounding,
# bit for bit); a float sum vectorizes only if LLVM may reorder its adds, so
# the accumulate alone carries the ``reassoc`` flag. Flags are per
# instruction: the value being accumulated keeps NumPy's order.

@intrinsic
def radd(typingctx, acc, value):
    """``acc + value`` that LLVM may reassociate with the other accumulates of
    the same loop (and only with those)."""
    if not (isinstance(acc, types.Float) and acc == value):
        return None

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return acc(acc, value), codegen


@_jit
def neumaier(total, comp, value):
    """One step of Neumaier's compensated sum: ``(total, comp)`` plus ``value``.
    The result is ``total + comp`` while ``total`` is finite (see ``compensated``)."""
    t = total + value
    if abs(total) >= abs(value):
        comp += (total - t) + value
    else:
        comp += (value - t) + total
    return t, comp


@_jit
def compensated(total, comp):
    """The compensated sum; once ``total`` is inf or NaN the compensation is
    meaningless (inf - inf) and ``total`` is the answer, as in NumPy."""
    if total - total == 0.0:
        return total + comp
    return total


# ---- order keys: max/min of floats as integer max/min (which vectorize).
# LLVM vectorizes a float max reduction only under the no-NaNs flag, which
# NumPy's NaN semantics forbid; kernels track NaN separately and reduce the
# float's order-preserving integer key instead.

def _key_transform(builder, b, width):
    from llvmlite import ir

    sign = builder.ashr(b, ir.Constant(b.type, width - 1))
    return builder.xor(b, builder.and_(sign, ir.Constant(b.type, (1 << (width - 1)) - 1)))


@intrinsic
def fkey(typingctx, x):
    """An integer that orders like the float ``x`` (NaN aside)."""
    if x not in (types.float32, types.float64):
        return None
    ity, width = (types.int32, 32) if x == types.float32 else (types.int64, 64)

    def codegen(context, builder, signature, args):
        b = builder.bitcast(args[0], context.get_value_type(ity))
        return _key_transform(builder, b, width)

    return ity(x), codegen


@intrinsic
def funkey(typingctx, k):
    """The float whose key is ``k`` (the key map is its own inverse)."""
    if k not in (types.int32, types.int64):
        return None
    fty, width = (types.float32, 32) if k == types.int32 else (types.float64, 64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(_key_transform(builder, args[0], width), context.get_value_type(fty))

    return fty(k), codegen


def key_of_float(value, dtype) -> int:
    """``fkey`` in Python, for the initial value of a reduction."""
    dtype = np.dtype(dtype)
    ity = np.int32 if dtype == np.float32 else np.int64
    b = int(np.asarray(value, dtype).view(ity))
    bits = dtype.itemsize * 8
    return b ^ ((b >> (bits - 1)) & ((1 << (bits - 1)) - 1))
