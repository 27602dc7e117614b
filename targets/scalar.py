"""Scalar code for elementwise ops on the numba targets: the ops handler.

Each elementwise op's reference scalar code lives with the op (``Primitive.scalar``
in ``braze/ops/elementwise.py``). A target's handler emits it: ``CpuOps`` (this
module) and ``CudaOps(CpuOps)`` (``cuda_codegen``) override single ops where
their machine wants other code (TorchInductor's ``OpsHandler``): the cpu target
calls its vectorizable math (``cpu_math``) for ``exp log tanh erf ...``, the
cuda target libdevice and products that are never fused into an FMA.

``CpuOps.emit(op, params, args, in_avals, out_dtype)`` returns an expression
computing the op from operand expressions ``args``: operands are cast to the
dtypes of the NumPy ufunc loop that NumPy itself would pick
(``ufunc.resolve_dtypes``, weak Python scalars included), the op is applied,
and the result is cast to the node's dtype, so numba's scalar promotion rules
(which differ from NumPy's array rules) never leak into results.

Helpers named in the code (``rt.maximum``, ``vm.exp_f32``) are module globals
of the generated module: ``rt`` the target's runtime (``cpu_runtime``,
``cuda_runtime``), ``vm`` the cpu's vector math.
"""
from __future__ import annotations

import functools

import numpy as np

from braze.aval import python_scalar_type
from braze.core import KIND, PRIMITIVES
from braze.ops._util import Typed, np_type, typed_as, typed_name, scalar_cast as cast, scalar_literal as literal  # noqa: F401 (re-exported)

from . import cpu_runtime as rt

_ALIAS = {"float16": "float32"}  # computed in float32, stored as float16

# ops that are not NumPy ufuncs: the loop of the ufunc whose dtype rule they follow
_UFUNC = {"scalar_power": "power", "erf": "tanh"}


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


@functools.lru_cache(maxsize=None)
def dtype_name(dtype) -> str:
    """``np.dtype(dtype).name`` (cached: code generation asks for it per operand)."""
    return np.dtype(dtype).name


@functools.lru_cache(maxsize=None)
def _compute(dtype) -> np.dtype:
    return np.dtype(_ALIAS.get(dtype_name(dtype), dtype_name(dtype)))


def _float_name(dtype) -> str:
    return {"float32": "f32", "float64": "f64"}[_compute(dtype).name]


# The ops cpu_math provides vectorizable versions of (sin and cos too, but the
# code generator handles those: a kernel reruns with libm for huge arguments).
VECTOR_MATH = ("exp", "expm1", "log", "log1p", "tanh", "erf")


# Float ops whose numba result has the type of their operands (float32 * float32
# is float32): with operands of the loop's dtype their result needs no cast,
# which numba would type and lower like any call.
SAME_TYPE = frozenset({"add", "subtract", "multiply", "divide", "negative", "positive", "square"})


class CpuOps:
    """The cpu target's scalar code: the ops' own, with vectorizable math."""

    def rule(self, op: str):
        """The scalar rule this target uses for ``op``: an override, or the op's own."""
        return getattr(self, f"op_{op}", None) or PRIMITIVES[op].scalar

    def emit(self, op: str, params: dict, args: list[str], in_avals, out_dtype) -> str:
        """Expression for elementwise ``op`` on operand expressions ``args``."""
        out_dtype = np.dtype(out_dtype)
        if "custom_scalar" in PRIMITIVES[op].flags:
            return self.rule(op)(args, in_avals, out_dtype)
        if op == "erf":  # (no ufunc: computed in the dtype NumPy's transcendentals give)
            t = _compute(out_dtype)
            return cast(self.rule("erf")(cast(args[0], t), t), out_dtype)
        keys = tuple((dtype_name(a.dtype), a.weak) for a in in_avals)
        ins = loop_dtypes(op, keys)[: len(args)]
        t = _compute(ins[0])
        operands = [cast(a, _compute(d)) for a, d in zip(args, ins)]
        expr = self.rule(op)(*operands, t)
        if op in SAME_TYPE and t.kind == "f" and all(typed_as(a, t) for a in operands):
            expr = Typed(expr, t)  # (numba's float arithmetic keeps its operands' type: no cast)
        return cast(expr, out_dtype)

    def mul(self, a: str, b: str, dtype) -> str:
        """A product (the code generator's expansions of ``x ** n`` use it)."""
        dtype = np.dtype(dtype)
        expr = self.rule("multiply")(a, b, dtype)
        return Typed(expr, dtype) if dtype.kind == "f" and typed_as(a, dtype) and typed_as(b, dtype) else expr

    def sqrt(self, a: str, dtype) -> str:
        return self.rule("sqrt")(a, np.dtype(dtype))

    # ---- vectorizable math (cpu_math): a libm call would keep the loop scalar
    @staticmethod
    def _vector(name: str):
        def rule(self, a, t):
            if t.kind == "f" and rt.has_vector_math(name, _float_name(t)):
                return Typed(f"vm.{name}_{_float_name(t)}({a})", t)  # (returns its argument's type)
            return PRIMITIVES[name].scalar(a, t)
        return rule


for _name in VECTOR_MATH:
    setattr(CpuOps, f"op_{_name}", CpuOps._vector(_name))


def missing() -> list[str]:
    """Elementwise ops with no scalar code (every numba target needs it)."""
    return [op for op, kind in KIND.items() if kind == "elementwise" and PRIMITIVES[op].scalar is None]
