"""Vectorizable elementwise math for the numba CPU target.

numba lowers ``math.exp``/``log``/``tanh``/``erf``/... to scalar libm calls and
this llvmlite ships no SVML, so any loop containing one stays scalar.  This
module provides branch-free replacements (range reduction + minimax
polynomial, integer bit tricks done by tiny ``@intrinsic``s, special cases
resolved with selects) that LLVM inlines into the caller's loop and vectorizes.

Public functions, one per function and dtype, scalar -> scalar of that dtype::

    exp_f32  expm1_f32  log_f32  log1p_f32  tanh_f32  sigmoid_f32  erf_f32  sin_f32  cos_f32
    exp_f64  expm1_f64  log_f64  log1p_f64  tanh_f64  sigmoid_f64  erf_f64  sin_f64  cos_f64

Generated kernels import them as module globals
(``from braze.targets.cpu_math import exp_f32``) and call them inside a
``prange``/``range`` loop.  The argument is converted to the function's dtype
first, so ``exp_f32(1.0)`` computes in float32.

Decoration (measured, see tests/test_cpu_math.py): every function is a plain
``@njit(cache=True, error_model="numpy", fastmath={"contract"})`` dispatcher,
*not* ``inline="always"``, and marks itself ``alwaysinline`` for LLVM through
a tiny intrinsic.  numba links the callee's LLVM IR into the caller, LLVM's
inliner pulls it into the loop and it vectorizes, but every instruction keeps
the callee's own fast-math flags: a caller compiled with
``fastmath={"reassoc", "contract", "nsz"}`` cannot re-associate the
Cody-Waite reductions, the two-step ``2**n`` scaling or the compensated sums
in here.  With ``inline="always"`` (numba-IR inlining, the caller's flags
apply) the same code gave exp_f32(88.39) = inf, log1p errors of 1e7+ ulp and
sigmoid underflowing early.  Without ``alwaysinline`` LLVM's size threshold
left erf_f64 as an out-of-line call and the loop scalar.  The error-free
transforms of the trig reduction sit in a helper compiled without any
fast-math flag.  Selects are explicit (``_where`` -> LLVM ``select``), so
the code is branch-free before LLVM sees it.

Note on caching: a cached kernel embeds the inlined code; like any numba
cache it is not invalidated when this file changes (clear the cache).

``sigmoid(x)`` is ``1/(1+exp(-x))`` in the same dtype (matches NumPy's
formula, so it is 0 wherever exp(-x) overflows; 0 at -inf, 1 at +inf, never
NaN for non-NaN input).

Accuracy, max ulp distance to NumPy (erf: math.erf rounded) on the test
sweeps, f32 / f64 (every f32 result except sigmoid is also within 1 ulp of
the float64-computed value rounded to float32):
exp 3/1 (f32: <= 1 ulp from the correctly rounded value), expm1 2/2, log 4/1, log1p 1/1, tanh 2/2, sigmoid 4/4, erf 1/1,
sin 1/1, cos 1/1.  The f32 3s and 4s are NumPy's own AVX2 exp/log error
(exhaustive over all float32: exp <= 1 ulp and log <= 1 ulp from the true
value).  NaN, +-inf, overflow/underflow thresholds, subnormal results and
signed zeros match NumPy exactly.

sin/cos use an FMA-based double-double Cody-Waite reduction (float32 is
reduced and evaluated in float64) that is accurate for
|x| < 2**48 ~ 2.8e14 (``TRIG_MAX_ARG``).  Beyond that bound no Payne-Hanek
reduction is done and the functions return NaN rather than a wrong value.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64", "log_f32", "log_f64",
    "log1p_f32", "log1p_f64", "tanh_f32", "tanh_f64", "sigmoid_f32",
    "sigmoid_f64", "erf_f32", "erf_f64", "sin_f32", "sin_f64", "cos_f32",
    "cos_f64", "FUNCTIONS", "TRIG_MAX_ARG",
]

# Options for every function here.  No `reassoc`: the range reductions rely on
# exact operation order.  `contract` lets LLVM form FMAs in the polynomials.
_JIT = dict(cache=True, error_model="numpy", nogil=True, fastmath={"contract"})
# Error-free transforms (TwoSum) must not be contracted either.
_JIT_STRICT = dict(cache=True, error_model="numpy", nogil=True)

_njit = njit(**_JIT)
_njit_strict = njit(**_JIT_STRICT)


# --------------------------------------------------------------------------
# intrinsics: bit casts and LLVM float intrinsics (all vectorize on AVX2)
# --------------------------------------------------------------------------

def _float_type(ty):
    return isinstance(ty, types.Float) and ty.bitwidth in (32, 64)


def _call_llvm(builder, name, args):
    ty = args[0].type
    fnty = ir.FunctionType(ty, [ty] * len(args))
    fn = builder.module.declare_intrinsic(name, [ty], fnty)
    return builder.call(fn, args)


@intrinsic
def _rint(typingctx, x):
    """Round to nearest integer (ties to even), result stays float."""
    if not _float_type(x):
        return None

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "llvm.rint", args)
    return x(x), codegen


@intrinsic
def _floor(typingctx, x):
    if not _float_type(x):
        return None

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "llvm.floor", args)
    return x(x), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a*b + c with a single rounding."""
    if not (_float_type(a) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "llvm.fma", args)
    return a(a, b, c), codegen


@intrinsic
def _copysign(typingctx, mag, sgn):
    if not (_float_type(mag) and mag == sgn):
        return None

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "llvm.copysign", args)
    return mag(mag, sgn), codegen


@intrinsic
def _fabs(typingctx, x):
    if not _float_type(x):
        return None

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "llvm.fabs", args)
    return x(x), codegen


@intrinsic
def _always_inline(typingctx):
    """Mark the *calling* jitted function ``alwaysinline`` for LLVM.

    numba links a callee's IR into each caller with ``linkonce_odr`` linkage,
    so LLVM's inliner applies its normal size threshold and the larger
    functions here (erf, tanh) would stay out-of-line calls, which blocks
    vectorization of the caller's loop.  The attribute is part of the IR, so
    it survives numba's on-disk cache.
    """
    def codegen(context, builder, sig, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def _where(typingctx, cond, a, b):
    """Branch-free select ``a if cond else b`` (an LLVM ``select``)."""
    if not (isinstance(cond, types.Boolean) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])
    return a(cond, a, b), codegen


def _int_of(fty):
    return ir.IntType(32) if isinstance(fty, ir.FloatType) else ir.IntType(64)


@intrinsic
def _pow2(typingctx, n):
    """2**n for an integer-valued float n inside the normal exponent range.

    n + 1.5*2**(p-1) puts n (two's complement) in the low mantissa bits; add
    the exponent bias and shift it into the exponent field.  Pure vector
    integer ops, no float->int conversion (none exists for i64 on AVX2).
    """
    if not _float_type(n):
        return None

    def codegen(context, builder, sig, args):
        (v,) = args
        fty = v.type
        ity = _int_of(fty)
        if ity.width == 32:
            magic, bias, shift = 12582912.0, 127, 23            # 1.5 * 2**23
        else:
            magic, bias, shift = 6755399441055744.0, 1023, 52   # 1.5 * 2**52
        t = builder.fadd(v, ir.Constant(fty, magic))
        i = builder.bitcast(t, ity)
        i = builder.add(i, ir.Constant(ity, bias))
        i = builder.shl(i, ir.Constant(ity, shift))
        return builder.bitcast(i, fty)
    return n(n), codegen


@intrinsic
def _exp_scale(typingctx, t):
    """bits(t) << 23 (f32) / << 52 (f64) as a float: for t = 1.5*2**p + B + n
    (an integer-valued float from the magic-number rounding) this is
    2**(B + n - bias), valid while 1 <= B + n <= 2*bias."""
    if not _float_type(t):
        return None

    def codegen(context, builder, sig, args):
        (v,) = args
        fty = v.type
        ity = _int_of(fty)
        shift = 23 if ity.width == 32 else 52
        i = builder.shl(builder.bitcast(v, ity), ir.Constant(ity, shift))
        return builder.bitcast(i, fty)
    return t(t), codegen


def _log_split(builder, v):
    """Integer part of the log reduction: x = 2**k * m, m in [sqrt(.5), sqrt(2))."""
    fty = v.type
    ity = _int_of(fty)
    if ity.width == 32:
        sq, mant, shift = 0x3F3504F3, 0x007FFFFF, 23
    else:
        sq, mant, shift = 0x3FE6A09E667F3BCD, 0x000FFFFFFFFFFFFF, 52
    i = builder.sub(builder.bitcast(v, ity), ir.Constant(ity, sq))
    k = builder.ashr(i, ir.Constant(ity, shift))
    mbits = builder.add(builder.and_(i, ir.Constant(ity, mant)), ir.Constant(ity, sq))
    return k, builder.bitcast(mbits, fty)


@intrinsic
def _log_m(typingctx, x):
    """Mantissa m in [sqrt(.5), sqrt(2)) of a positive normal x."""
    if not _float_type(x):
        return None

    def codegen(context, builder, sig, args):
        return _log_split(builder, args[0])[1]
    return x(x), codegen


@intrinsic
def _log_k(typingctx, x):
    """Exponent k (as a float) with x = 2**k * m, m in [sqrt(.5), sqrt(2))."""
    if not _float_type(x):
        return None

    def codegen(context, builder, sig, args):
        k, _ = _log_split(builder, args[0])
        fty = args[0].type
        if isinstance(fty, ir.FloatType):
            return builder.sitofp(k, fty)
        # i64 -> f64 without cvtqq2pd: k + bits(1.5*2**52) reinterpreted.
        magic = 6755399441055744.0
        kb = builder.add(k, ir.Constant(k.type, 0x4338000000000000))
        return builder.fsub(builder.bitcast(kb, fty), ir.Constant(fty, magic))
    return x(x), codegen


# --------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------

f32 = np.float32

_F32_ONE, _F32_TWO, _F32_HALF, _F32_ZERO = f32(1), f32(2), f32(0.5), f32(0)
_F32_INF, _F32_NAN = f32(np.inf), f32(np.nan)
_F32_3 = f32(3)
_F64_INF, _F64_NAN = np.inf, np.nan

# exp / expm1:  exp(r) = 1 + r + r^2 * Q(r),  |r| <= ln2/2  (exp evaluates it
# as 1 + r*(1 + r*Q(r)) in Horner form, all FMAs)
_INVLN2_32 = f32(1.4426950408889634)
_LN2HI_32 = f32(0.6931471824645996)       # fl32(ln 2); n*hi exact under fma
_LN2LO_32 = f32(-1.9046542121259336e-09)  # fl32(ln 2 - hi)
_EQ32 = tuple(f32(c) for c in (
    0.49999993405341375, 0.16666519978533176, 0.041668395076380337,
    0.008368795723492846, 0.0013814484052226625))
_EXP_HI_32, _EXP_LO_32 = f32(89.0), f32(-104.0)   # clamp: overflow / underflow
_EXP_SUB_32 = f32(-86.0)                  # below: result may be subnormal
_EXP_MNORM_32 = f32(12582912.0 + 126)     # 1.5*2**23 + bias of 2**(n-1)
_EXP_MSUB_32 = f32(12582912.0 + 127 + 64)  # ... of 2**(n+64)
_EXP_FSUB_32 = f32(2.0 ** -64)
_EXPM1_LO_32 = f32(-30.0)
_TINY_EXPM1_32 = f32(2.0 ** -25)

_INVLN2_64 = 1.4426950408889634
_LN2HI_64 = 0.6931471803691238          # 0x3fe62e42fee00000
_LN2LO_64 = 1.9082149292705877e-10
_EQ64 = (0.5000000000000011, 0.1666666666666641, 0.04166666666652907,
         0.008333333333495688, 0.0013888888943955245, 0.00019841269504728142,
         2.480149272706147e-05, 2.7557587293260595e-06, 2.763039197700231e-07,
         2.5000004997363948e-08)
_EXP_HI_64, _EXP_LO_64 = 710.0, -746.0
_EXP_SUB_64 = -705.0
_EXP_MNORM_64 = 6755399441055744.0 + 1022  # 1.5*2**52 + bias of 2**(n-1)
_EXP_MSUB_64 = 6755399441055744.0 + 1023 + 512
_EXP_FSUB_64 = 2.0 ** -512
_EXPM1_LO_64 = -40.0
_TINY_EXPM1_64 = 2.0 ** -54

# tanh: |x| < 0.55: x + x^3 T(x^2);  else 1 - 2/(expm1(2|x|) + 2)
_TANH_SPLIT = 0.55
_TANH_SPLIT_32 = f32(_TANH_SPLIT)
_TH32 = tuple(f32(c) for c in (
    -0.3333333271793176, 0.1333329349229846, -0.05395961552708719,
    0.021782570966423935, -0.008413116379688801, 0.0023947972734587367))
_TH64 = (-0.333333333333333, 0.13333333333326555, -0.053968253963721007,
         0.021869488384692107, -0.008863232581867636, 0.003592091827524047,
         -0.0014555415054502473, 0.0005884388324406425, -0.00023336682505313417,
         8.329481276108839e-05, -1.9481019423530217e-05)

# log:  f32 log(1+f) = f - f^2/2 + f^3 P(f);  f64 (FreeBSD form) with
# s = f/(2+f), R = z*H(z), z = s^2.
_LP32 = tuple(f32(c) for c in (
    0.33333312388904257, -0.2500000963244421, 0.20002135421011602,
    -0.16668008676850674, 0.14219187295958144, -0.12405075936196384,
    0.11890546218752644, -0.11680137170608151, 0.0674669906346635))
_LN2HI_C32 = f32(0.693359375)            # Cephes split, k*hi exact
_LN2LO_C32 = f32(-2.12194440e-4)
_FLT_MIN = f32(1.1754943508222875e-38)
_TWO24 = f32(2.0 ** 24)
_M24 = f32(-24.0)
_TINY_LOG1P_32 = f32(2.0 ** -26)

_LH64 = (0.6666666666666735, 0.3999999999941082, 0.28571428743326177,
         0.22222198469134322, 0.1818357011371482, 0.15313893226372863,
         0.14797612449779146)
_DBL_MIN = 2.2250738585072014e-308
_TWO54 = 2.0 ** 54
_TINY_LOG1P_64 = 2.0 ** -55

# sin / cos:  sin r = r + r^3 S(r^2),  cos r = 1 - r^2/2 + r^4 C(r^2),  |r| <= 0.82
_S64 = (-0.1666666666666663, 0.008333333333322056, -0.00019841269829537825,
        2.7557313602849863e-06, -2.5050744771604542e-08, 1.5896051833229876e-10)
_C64 = (0.041666666666666595, -0.0013888888888872967, 2.4801587288795007e-05,
        -2.755731416253747e-07, 2.0875698513309245e-09, -1.1358413394110069e-11)
_S32 = (-0.16666666640675032, 0.00833332929072849, -0.00019839307727099068,
        2.7180782526631126e-06)
_C32 = (0.04166666661927051, -0.0013888883481335405, 2.479945526015398e-05,
        -2.7205352615888626e-07)
_TWO_OVER_PI = 0.6366197723675814
_PIO2_1 = 1.5707963267948966             # pi/2 = _1 + _2 + _3 (to ~160 bits)
_PIO2_2 = 6.123233995736766e-17
_PIO2_3 = -1.4973849048591698e-33
TRIG_MAX_ARG = 2.0 ** 48
_TINY_SIN_64 = 2.0 ** -27
_TINY_SIN_32 = f32(2.0 ** -12)

# erf:  |x| < 0.84375: erf = x + x P(x^2);  else erf = 1 - exp(-x^2) Q(|x| - c)
_ERF_SPLIT = 0.84375
_ES32 = tuple(f32(c) for c in (
    0.1283791614444387, -0.37612580656560646, 0.11282821709415046,
    -0.026806869028194524, 0.0050583905820856655, -0.0006358147308208647))
_EC32 = tuple(f32(c) for c in (
    0.2187476167632602, -0.07975773768274054, 0.027581758579517175,
    -0.009089298612245849, 0.002892373752003836, -0.0009056858087089655,
    0.0002015356913346793, -9.741187959992452e-05, 4.5655855022994533e-05,
    2.3038482264522935e-05, 1.053379782244924e-05))
_EC32_C = f32(2.396875)
_ERF_SPLIT_32 = f32(_ERF_SPLIT)
_ERF_MAX_32 = f32(3.95)                  # erf rounds to 1 beyond

_ES64 = (0.12837916709551256, -0.37612638903183404, 0.11283791670935525,
         -0.026866170640814258, 0.005223977576660184, -0.0008548323804437405,
         0.0001205520031846872, -1.4922128133845972e-05, 1.6401697567481327e-06,
         -1.5714841532283154e-07, 1.0727452820515764e-08)
# two intervals, [0.84375, 2) and [2, 5.95], coefficients picked per lane
_ECA64 = (0.3348494624055177, -0.1761510083798216, 0.08438474736545586,
          -0.037444297146374456, 0.015571818680454548, -0.006121246983903257,
          0.0022893902021250277, -0.0008188629463213897, 0.00028126744675563734,
          -9.309674695711929e-05, 2.9778489385784798e-05, -9.228990534754168e-06,
          2.778517280238799e-06, -8.091702133331355e-07, 2.2688075548328716e-07,
          -7.06364119689906e-08, 2.2148849861914198e-08)
_ECA64_C = 1.421875
_ECB64 = (0.13781373758668242, -0.03275995329711549, 0.007592923196526908,
          -0.0017187221339932013, 0.0003805027291439722, -8.248755609175528e-05,
          1.753646992897077e-05, -3.6606786177747677e-06, 7.351643430585574e-07,
          -1.6579938298398062e-07, 2.5231232558672052e-08, 2.309348962010633e-11,
          9.452448413203133e-09, 4.927119889152462e-09, 1.868061941626771e-09,
          3.6428650600975156e-10, 3.65198134657785e-11)
_ECB64_C = 3.975
_ERF_MID_64 = 2.0
_ERF_MAX_64 = 5.95


# --------------------------------------------------------------------------
# exp, expm1
# --------------------------------------------------------------------------

@_njit
def _expq_f32(r):
    _always_inline()
    c = _EQ32
    return c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * c[4])))


@_njit
def _expq_f64(r):
    _always_inline()
    c = _EQ64
    return c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * (
        c[5] + r * (c[6] + r * (c[7] + r * (c[8] + r * c[9]))))))))


@_njit
def exp_f32(x):
    _always_inline()
    x = f32(x)
    # Clamp with NaN-propagating selects (a NaN flows through the arithmetic
    # and comes out NaN, no final select needed).
    xc = _where(x > _EXP_HI_32, _EXP_HI_32, x)
    xc = _where(xc < _EXP_LO_32, _EXP_LO_32, xc)
    # n = rint(x/ln2) by the magic-number trick; the magic also carries the
    # exponent bias, so bits(t) << 23 is 2**(n + bias - 127) directly.
    # Normal results: 2**(n-1) * p, then * 2 (exact; n = 128 overflows
    # correctly).  Subnormal results (x < -86): 2**(n+64) * p (exact), then
    # * 2**-64 rounds once.
    sub = xc < _EXP_SUB_32
    m = _where(sub, _EXP_MSUB_32, _EXP_MNORM_32)
    t = _fma(xc, _INVLN2_32, m)
    n = t - m                                       # exact
    r = _fma(-n, _LN2HI_32, xc)                     # exact
    r = _fma(-n, _LN2LO_32, r)
    c = _EQ32
    q = _fma(c[4], r, c[3])
    q = _fma(q, r, c[2])
    q = _fma(q, r, c[1])
    q = _fma(q, r, c[0])
    q = _fma(q, r, _F32_ONE)
    q = _fma(q, r, _F32_ONE)                         # exp(r)
    # At the clamp and below, exp is 0: multiplied by 0, exactly, rather than
    # underflowing to it (an underflow costs a microcode assist per element:
    # a causal softmax's -1e9 masked half ran 5-15x slower).
    return (q * _exp_scale(t)) * _where(xc <= _EXP_LO_32, _F32_ZERO, _where(sub, _EXP_FSUB_32, _F32_TWO))


@_njit
def exp_f64(x):
    _always_inline()
    x = np.float64(x)
    xc = _where(x > _EXP_HI_64, _EXP_HI_64, x)
    xc = _where(xc < _EXP_LO_64, _EXP_LO_64, xc)
    sub = xc < _EXP_SUB_64
    m = _where(sub, _EXP_MSUB_64, _EXP_MNORM_64)
    t = _fma(xc, _INVLN2_64, m)
    n = t - m
    r = _fma(-n, _LN2HI_64, xc)
    r = _fma(-n, _LN2LO_64, r)
    c = _EQ64
    q = _fma(c[9], r, c[8])
    q = _fma(q, r, c[7])
    q = _fma(q, r, c[6])
    q = _fma(q, r, c[5])
    q = _fma(q, r, c[4])
    q = _fma(q, r, c[3])
    q = _fma(q, r, c[2])
    q = _fma(q, r, c[1])
    q = _fma(q, r, c[0])
    q = _fma(q, r, 1.0)
    q = _fma(q, r, 1.0)
    # (0 at the clamp and below, by a multiplication, not an underflow: see exp_f32)
    return (q * _exp_scale(t)) * _where(xc <= _EXP_LO_64, 0.0, _where(sub, _EXP_FSUB_64, 2.0))


@_njit
def expm1_f32(x):
    _always_inline()
    x = f32(x)
    xc = _where(x < _EXP_HI_32, x, _EXP_HI_32)
    xc = _where(xc > _EXPM1_LO_32, xc, _EXPM1_LO_32)
    n = _rint(xc * _INVLN2_32)
    r = _fma(-n, _LN2HI_32, xc)
    r = _fma(-n, _LN2LO_32, r)
    em1 = _fma(r * r, _expq_f32(r), r)             # expm1(r)
    t = _pow2(n - _F32_ONE)                         # 2**(n-1), normal
    # expm1(x) = 2**n expm1(r) + (2**n - 1), evaluated halved then doubled
    # (exact) so that n = 128 does not overflow 2**n prematurely.
    res = _F32_TWO * _fma(t, em1, t - _F32_HALF)
    res = _where(_fabs(x) < _TINY_EXPM1_32, x, res)    # also keeps -0.0
    return _where(x != x, x, res)


@_njit
def expm1_f64(x):
    _always_inline()
    x = np.float64(x)
    xc = _where(x < _EXP_HI_64, x, _EXP_HI_64)
    xc = _where(xc > _EXPM1_LO_64, xc, _EXPM1_LO_64)
    n = _rint(xc * _INVLN2_64)
    r = _fma(-n, _LN2HI_64, xc)
    r = _fma(-n, _LN2LO_64, r)
    em1 = _fma(r * r, _expq_f64(r), r)
    t = _pow2(n - 1.0)
    res = 2.0 * _fma(t, em1, t - 0.5)
    res = _where(_fabs(x) < _TINY_EXPM1_64, x, res)
    return _where(x != x, x, res)


# --------------------------------------------------------------------------
# log, log1p
# --------------------------------------------------------------------------

@_njit
def _log_kernel_f32(f, k, corr):
    """k*ln2 + log(1+f) + corr for f in [sqrt(.5)-1, sqrt(2)-1)."""
    _always_inline()
    c = _LP32
    p = c[0] + f * (c[1] + f * (c[2] + f * (c[3] + f * (c[4] + f * (
        c[5] + f * (c[6] + f * (c[7] + f * c[8])))))))
    z = f * f
    y = f * z * p
    lo = _fma(k, _LN2LO_C32, corr) + (y - _F32_HALF * z)
    return _fma(k, _LN2HI_C32, f + lo)


@_njit
def log_f32(x):
    _always_inline()
    x = f32(x)
    sub = x < _FLT_MIN                               # subnormal (or <= 0)
    xs = _where(sub, x * _TWO24, x)
    m = _log_m(xs)
    k = _log_k(xs) + _where(sub, _M24, _F32_ZERO)
    res = _log_kernel_f32(m - _F32_ONE, k, _F32_ZERO)
    res = _where(x < _F32_INF, res, x + x)          # +inf, NaN
    res = _where(x == _F32_ZERO, -_F32_INF, res)
    return _where(x < _F32_ZERO, _F32_NAN, res)


@_njit
def log1p_f32(x):
    _always_inline()
    x = f32(x)
    u = _F32_ONE + x
    # exact rounding error of u = 1 + x (Fast2Sum, larger operand first);
    # log1p(x) = log(u) + c/u to first order.
    c = _where(x > _F32_ONE, _F32_ONE - (u - x), x - (u - _F32_ONE))
    m = _log_m(u)
    k = _log_k(u)
    res = _log_kernel_f32(m - _F32_ONE, k, c / u)
    res = _where(_fabs(x) < _TINY_LOG1P_32, x, res)
    res = _where(x < _F32_INF, res, x + x)
    res = _where(x == -_F32_ONE, -_F32_INF, res)
    return _where(x < -_F32_ONE, _F32_NAN, res)


@_njit
def _log_kernel_f64(f, k, corr):
    """k*ln2 + log(1+f) + corr (FreeBSD e_log.c structure, own minimax fit)."""
    _always_inline()
    s = f / (2.0 + f)
    z = s * s
    c = _LH64
    R = z * (c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * (
        c[5] + z * c[6]))))))
    hfsq = 0.5 * f * f
    return k * _LN2HI_64 - ((hfsq - (s * (hfsq + R) + (k * _LN2LO_64 + corr))) - f)


@_njit
def log_f64(x):
    _always_inline()
    x = np.float64(x)
    sub = x < _DBL_MIN
    xs = _where(sub, x * _TWO54, x)
    m = _log_m(xs)
    k = _log_k(xs) + _where(sub, -54.0, 0.0)
    res = _log_kernel_f64(m - 1.0, k, 0.0)
    res = _where(x < _F64_INF, res, x + x)
    res = _where(x == 0.0, -_F64_INF, res)
    return _where(x < 0.0, _F64_NAN, res)


@_njit
def log1p_f64(x):
    _always_inline()
    x = np.float64(x)
    u = 1.0 + x
    c = _where(x > 1.0, 1.0 - (u - x), x - (u - 1.0))
    m = _log_m(u)
    k = _log_k(u)
    res = _log_kernel_f64(m - 1.0, k, c / u)
    res = _where(_fabs(x) < _TINY_LOG1P_64, x, res)
    res = _where(x < _F64_INF, res, x + x)
    res = _where(x == -1.0, -_F64_INF, res)
    return _where(x < -1.0, _F64_NAN, res)


# --------------------------------------------------------------------------
# tanh, sigmoid
# --------------------------------------------------------------------------

@_njit
def tanh_f32(x):
    _always_inline()
    x = f32(x)
    ax = _fabs(x)
    z = x * x
    c = _TH32
    p = c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * c[5]))))
    small = _copysign(_fma(ax * z, p, ax), x)       # odd; keeps -0.0
    d = expm1_f32(_F32_TWO * ax) + _F32_TWO         # +inf for large |x|
    big = _copysign(_F32_ONE - _F32_TWO / d, x)
    return _where(ax < _TANH_SPLIT_32, small, big)


@_njit
def tanh_f64(x):
    _always_inline()
    x = np.float64(x)
    ax = _fabs(x)
    z = x * x
    c = _TH64
    p = c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * (c[5] + z * (
        c[6] + z * (c[7] + z * (c[8] + z * (c[9] + z * c[10])))))))))
    small = _copysign(_fma(ax * z, p, ax), x)
    d = expm1_f64(2.0 * ax) + 2.0
    big = _copysign(1.0 - 2.0 / d, x)
    return _where(ax < _TANH_SPLIT, small, big)


@_njit
def sigmoid_f32(x):
    _always_inline()
    x = f32(x)
    return _F32_ONE / (_F32_ONE + exp_f32(-x))


@_njit
def sigmoid_f64(x):
    _always_inline()
    x = np.float64(x)
    return 1.0 / (1.0 + exp_f64(-x))


# --------------------------------------------------------------------------
# erf
# --------------------------------------------------------------------------

@_njit
def erf_f32(x):
    _always_inline()
    x = f32(x)
    ax = _fabs(x)
    z = x * x
    c = _ES32
    p = c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * c[5]))))
    small = _fma(x, p, x)
    xx = _where(ax < _ERF_MAX_32, ax, _ERF_MAX_32)    # NaN fixed at the end
    xx = _where(xx > _ERF_SPLIT_32, xx, _ERF_SPLIT_32)
    hi = xx * xx
    lo = _fma(xx, xx, -hi)                            # x^2 = hi + lo exactly
    t = xx - _EC32_C
    q = _EC32
    Q = q[0] + t * (q[1] + t * (q[2] + t * (q[3] + t * (q[4] + t * (q[5] + t * (
        q[6] + t * (q[7] + t * (q[8] + t * (q[9] + t * q[10])))))))))
    e = exp_f32(-hi) * (Q - Q * lo)                   # erfc(|x|)
    big = _copysign(_F32_ONE - e, x)
    res = _where(ax < _ERF_SPLIT_32, small, big)
    return _where(x != x, x, res)


@_njit
def erf_f64(x):
    _always_inline()
    x = np.float64(x)
    ax = _fabs(x)
    z = x * x
    c = _ES64
    p = c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * (c[5] + z * (
        c[6] + z * (c[7] + z * (c[8] + z * (c[9] + z * c[10])))))))))
    small = _fma(x, p, x)
    xx = _where(ax < _ERF_MAX_64, ax, _ERF_MAX_64)
    xx = _where(xx > _ERF_SPLIT, xx, _ERF_SPLIT)
    hi = xx * xx
    lo = _fma(xx, xx, -hi)
    a = xx < _ERF_MID_64          # per-lane choice of coefficient set
    A = _ECA64
    B = _ECB64
    t = xx - _where(a, _ECA64_C, _ECB64_C)
    Q = _where(a, A[16], B[16])
    Q = _fma(Q, t, _where(a, A[15], B[15]))
    Q = _fma(Q, t, _where(a, A[14], B[14]))
    Q = _fma(Q, t, _where(a, A[13], B[13]))
    Q = _fma(Q, t, _where(a, A[12], B[12]))
    Q = _fma(Q, t, _where(a, A[11], B[11]))
    Q = _fma(Q, t, _where(a, A[10], B[10]))
    Q = _fma(Q, t, _where(a, A[9], B[9]))
    Q = _fma(Q, t, _where(a, A[8], B[8]))
    Q = _fma(Q, t, _where(a, A[7], B[7]))
    Q = _fma(Q, t, _where(a, A[6], B[6]))
    Q = _fma(Q, t, _where(a, A[5], B[5]))
    Q = _fma(Q, t, _where(a, A[4], B[4]))
    Q = _fma(Q, t, _where(a, A[3], B[3]))
    Q = _fma(Q, t, _where(a, A[2], B[2]))
    Q = _fma(Q, t, _where(a, A[1], B[1]))
    Q = _fma(Q, t, _where(a, A[0], B[0]))
    e = exp_f64(-hi) * (Q - Q * lo)
    big = _copysign(1.0 - e, x)
    res = _where(ax < _ERF_SPLIT, small, big)
    return _where(x != x, x, res)


# --------------------------------------------------------------------------
# sin, cos
# --------------------------------------------------------------------------

@_njit_strict
def _trig_reduce(x, n):
    """x - n*pi/2 as a double-double (r, rlo); exact for |n| < 2**52.

    r1 = x - n*P1 is exact (fma); n*P2 is split exactly with an fma and
    subtracted with TwoSum; n*P3 goes into the low part.  Compiled without
    any fast-math flag so the error-free transforms stay exact.
    """
    _always_inline()
    r1 = _fma(-n, _PIO2_1, x)
    p2 = n * _PIO2_2
    e2 = _fma(n, _PIO2_2, -p2)          # n*P2 = p2 + e2
    s = r1 - p2                         # TwoSum(r1, -p2) -> s + es
    bb = s - r1
    es = (r1 - (s - bb)) + (-p2 - bb)
    lo = es - _fma(n, _PIO2_3, e2)
    r = s + lo                          # TwoSum(s, lo) -> r + rlo
    bb = r - s
    rlo = (s - (r - bb)) + (lo - bb)
    return r, rlo


@_njit
def _sincos_f64(x, want_cos):
    _always_inline()
    n = _rint(x * _TWO_OVER_PI)
    r, rlo = _trig_reduce(x, n)
    z = r * r
    S = _S64
    C = _C64
    ps = S[0] + z * (S[1] + z * (S[2] + z * (S[3] + z * (S[4] + z * S[5]))))
    sin_k = r + (r * z * ps + rlo * (1.0 - 0.5 * z))
    pc = C[0] + z * (C[1] + z * (C[2] + z * (C[3] + z * (C[4] + z * C[5]))))
    hz = 0.5 * z
    w = 1.0 - hz
    cos_k = w + (((1.0 - w) - hz) + (z * z * pc - r * rlo))
    q = n - 4.0 * _floor(n * 0.25)      # quadrant 0..3
    odd = (q == 1.0) | (q == 3.0)
    if want_cos:
        v = _where(odd, sin_k, cos_k)
        neg = (q == 1.0) | (q == 2.0)
    else:
        v = _where(odd, cos_k, sin_k)
        neg = q >= 2.0
    v = _where(neg, -v, v)
    return _where(_fabs(x) < TRIG_MAX_ARG, v, _F64_NAN)


@_njit
def sin_f64(x):
    _always_inline()
    x = np.float64(x)
    res = _sincos_f64(x, False)
    return _where(_fabs(x) < _TINY_SIN_64, x, res)


@_njit
def cos_f64(x):
    _always_inline()
    x = np.float64(x)
    return _sincos_f64(x, True)


@_njit
def _sincos_f32(x, want_cos):
    """float32 sin/cos evaluated in float64 (reduction and polynomial)."""
    _always_inline()
    X = np.float64(x)
    n = _rint(X * _TWO_OVER_PI)
    r = _fma(-n, _PIO2_1, X)            # exact
    r = _fma(-n, _PIO2_2, r)
    r = _fma(-n, _PIO2_3, r)
    z = r * r
    S = _S32
    C = _C32
    sin_k = r + r * z * (S[0] + z * (S[1] + z * (S[2] + z * S[3])))
    cos_k = 1.0 - 0.5 * z + z * z * (C[0] + z * (C[1] + z * (C[2] + z * C[3])))
    q = n - 4.0 * _floor(n * 0.25)
    odd = (q == 1.0) | (q == 3.0)
    if want_cos:
        v = _where(odd, sin_k, cos_k)
        neg = (q == 1.0) | (q == 2.0)
    else:
        v = _where(odd, cos_k, sin_k)
        neg = q >= 2.0
    v = _where(neg, -v, v)
    v = _where(_fabs(X) < TRIG_MAX_ARG, v, _F64_NAN)
    return f32(v)


@_njit
def sin_f32(x):
    _always_inline()
    x = f32(x)
    res = _sincos_f32(x, False)
    return _where(_fabs(x) < _TINY_SIN_32, x, res)


@_njit
def cos_f32(x):
    _always_inline()
    x = f32(x)
    return _sincos_f32(x, True)


FUNCTIONS = {
    "exp": {np.dtype(np.float32): exp_f32, np.dtype(np.float64): exp_f64},
    "expm1": {np.dtype(np.float32): expm1_f32, np.dtype(np.float64): expm1_f64},
    "log": {np.dtype(np.float32): log_f32, np.dtype(np.float64): log_f64},
    "log1p": {np.dtype(np.float32): log1p_f32, np.dtype(np.float64): log1p_f64},
    "tanh": {np.dtype(np.float32): tanh_f32, np.dtype(np.float64): tanh_f64},
    "sigmoid": {np.dtype(np.float32): sigmoid_f32, np.dtype(np.float64): sigmoid_f64},
    "erf": {np.dtype(np.float32): erf_f32, np.dtype(np.float64): erf_f64},
    "sin": {np.dtype(np.float32): sin_f32, np.dtype(np.float64): sin_f64},
    "cos": {np.dtype(np.float32): cos_f32, np.dtype(np.float64): cos_f64},
}
