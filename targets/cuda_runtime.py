"""Scalar helpers the generated ``numba.cuda`` kernels call (``rt.*``), with
NumPy's semantics: the device-function twins of ``cpu_runtime``.

Most helpers are ``cpu_runtime``'s own Python functions compiled as device
functions, so the two targets cannot drift apart. The rest differ because
numba.cuda lowers neither NumPy ufuncs such as ``np.fmod``/``np.floor`` nor
exceptions: float floor division and remainder use ``math.fmod``, and an
integer raised to a negative power is 0 (the cpu target raises NumPy's
ValueError there; a kernel cannot raise).
"""
from __future__ import annotations

import math
import types

import numpy as np
from numba import config, cuda

from . import cpu_runtime as _cpu

# Block reductions finish with warp shuffles on a GPU; numba's simulator has
# none, so there the shared-memory tree runs to the end (a compile-time
# constant for numba.cuda: the branch not taken is not compiled).
WARP_SHUFFLE = not config.ENABLE_CUDASIM

if config.ENABLE_CUDASIM:
    # numba's simulator runs kernels as Python: its libdevice functions are
    # stubs returning None, and Python's math raises where a GPU returns inf or
    # NaN. Generated kernels import ``math`` and ``libdevice`` from here, so
    # in the simulator they get NumPy versions with the GPU's results.
    def _np(fn):
        def call(*args):
            with np.errstate(all="ignore"):
                return fn(*args)
        return staticmethod(call)

    math = types.SimpleNamespace(**{name: getattr(math, name) for name in dir(math) if not name.startswith("_")})
    for _name, _fn in dict(exp=np.exp, exp2=np.exp2, expm1=np.expm1, log=np.log, log1p=np.log1p, log2=np.log2,
                           log10=np.log10, sqrt=np.sqrt, sin=np.sin, cos=np.cos, tan=np.tan, asin=np.arcsin,
                           acos=np.arccos, atan=np.arctan, atan2=np.arctan2, sinh=np.sinh, cosh=np.cosh,
                           tanh=np.tanh, asinh=np.arcsinh, acosh=np.arccosh, atanh=np.arctanh,
                           hypot=np.hypot, copysign=np.copysign, fmod=np.fmod, floor=np.floor,
                           erf=np.vectorize(math.erf, otypes=[float])).items():
        setattr(math, _name, _np(_fn).__func__)
    libdevice = types.SimpleNamespace()
    for _name, _fn in dict(sqrt=np.sqrt, floor=np.floor, ceil=np.ceil, trunc=np.trunc, rint=np.rint,
                           cbrt=np.cbrt).items():
        setattr(libdevice, _name, _np(lambda x, f=_fn: f(np.float64(x))).__func__)
        setattr(libdevice, _name + "f", _np(lambda x, f=_fn: f(np.float32(x))).__func__)
    libdevice.fmul_rn = _np(lambda a, b: np.float32(a) * np.float32(b)).__func__
    libdevice.dmul_rn = _np(lambda a, b: np.float64(a) * np.float64(b)).__func__
else:
    from numba.cuda import libdevice  # noqa: F401  (re-exported to generated kernels)

_device = cuda.jit(device=True)


def _twin(fn):
    """The device-function twin of a cpu_runtime helper: the same code, with
    this module's ``math`` (under the simulator, the NumPy versions above:
    ``math.log`` of a negative number is NaN there as on a GPU, not an error)."""
    py = fn.py_func
    glob = dict(py.__globals__, math=math)
    return _device(types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, py.__closure__))


maximum = _twin(_cpu.maximum)
minimum = _twin(_cpu.minimum)
fmax = _twin(_cpu.fmax)
fmin = _twin(_cpu.fmin)
sign = _twin(_cpu.sign)
signbit = _twin(_cpu.signbit)
floor_divide_i = _twin(_cpu.floor_divide_i)
floor_divide_u = _twin(_cpu.floor_divide_u)
floor_divide_b = _twin(_cpu.floor_divide_b)
remainder_i = _twin(_cpu.remainder_i)
remainder_u = _twin(_cpu.remainder_u)
remainder_b = floor_divide_b
fmod_i = _twin(_cpu.fmod_i)
fmod_u = remainder_u
ireciprocal = _twin(_cpu.ireciprocal)
exp2 = _twin(_cpu.exp2)
left_shift = _twin(_cpu.left_shift)
right_shift_i = _twin(_cpu.right_shift_i)
right_shift_u = _twin(_cpu.right_shift_u)
log2 = _twin(_cpu.log2)
log10 = _twin(_cpu.log10)
logaddexp = _twin(_cpu.logaddexp)
logaddexp2 = _twin(_cpu.logaddexp2)
logaddexp2_f32 = _twin(_cpu.logaddexp2_f32)
neumaier = _twin(_cpu.neumaier)
compensated = _twin(_cpu.compensated)


@_device
def ipower(a, b):
    if b < 0:
        return a - a  # NumPy raises; a kernel cannot (documented above)
    result = a - a + 1
    base = a
    while b:
        if b & 1:
            result *= base
        base *= base
        b >>= 1
    return result


@_device
def _floor(x):
    """floor of a float, as a float (math.floor gives an int64 in numba)."""
    if abs(x) >= 4503599627370496.0 or x != x:  # 2**52: already integral (or inf, NaN)
        return x
    return x - x + math.floor(x)


@_device
def _divmod_f(a, b):
    mod = math.fmod(a, b)
    div = (a - mod) / b
    if mod:
        if (b < 0) != (mod < 0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div:
        floordiv = _floor(div)
        if div - floordiv > 0.5:
            floordiv += 1.0
    else:
        floordiv = math.copysign(0.0, a / b)
    return floordiv, mod


@_device
def floor_divide_f(a, b):
    if b == 0:
        return a / b
    return _divmod_f(a, b)[0]


@_device
def remainder_f(a, b):
    if b == 0:
        return math.fmod(a, b) if a == a else a
    return _divmod_f(a, b)[1]


@_device
def fmod_f(a, b):
    return math.fmod(a, b)


@_device
def keep(cache, j, ok, value):
    """``value``, also stored at ``cache[j]`` when ``ok`` (rows kept in shared memory)."""
    if ok:
        cache[j] = value
    return value
