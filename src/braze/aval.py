"""Abstract values: what a trace knows about an array (shape, dtype, weak type).

A *weak* value stands for a Python scalar (NEP 50): it takes the dtype of the
strongly typed operand it meets, so ``float32_array * 2.0`` stays float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np

from .errors import DTypeError, UnsupportedDTypeError, UnsupportedOpError, where

_SHORT = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "float32": "f32", "float64": "f64",
}

SUPPORTED_DTYPES = frozenset(np.dtype(name) for name in _SHORT)


def short_dtype(dtype) -> str:
    dtype = np.dtype(dtype)
    return _SHORT.get(dtype.name, dtype.name)


@dataclass(frozen=True, eq=False)
class Aval:
    """Shape, dtype and weakness of one traced array. Its hash is computed once:
    every node's interning key holds its aval, hashed at each lookup."""

    shape: tuple[int, ...]
    dtype: np.dtype
    weak: bool = False

    def __post_init__(self):
        object.__setattr__(self, "_key", (self.shape, self.dtype, self.weak))
        object.__setattr__(self, "_hash", hash(self._key))

    def __eq__(self, other):
        return self is other or (type(other) is Aval and self._key == other._key)

    def __hash__(self):
        return self._hash

    def __reduce__(self):  # (a hash is per process: another one computes its own)
        return (Aval, (self.shape, self.dtype, self.weak))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # (Python ints: no overflow, and a tenth of np.prod's cost)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{short_dtype(self.dtype)}{'~' if self.weak else ''}[{dims}]"

    def sample(self):
        """A tiny concrete stand-in with the same promotion behaviour."""
        if self.weak:
            return python_scalar_type(self.dtype)(1)
        return np.array(1, self.dtype)


def python_scalar_type(dtype):
    kind = np.dtype(dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[kind]


def check_dtype(dtype, what: str) -> np.dtype:
    """The dtype, if braze supports it; else a DTypeError saying what to do."""
    try:
        dtype = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"{what}: {dtype!r} is not a dtype{where()}") from exc
    if dtype not in SUPPORTED_DTYPES:
        if dtype.kind == "c":
            hint = "complex arrays are not compiled yet; pass the real and imaginary parts as two float arrays"
        elif dtype.kind in "OUSV":
            hint = "only numeric and bool arrays can be traced; pass strings and objects as static arguments (static_argnums)"
        else:
            hint = "convert it with .astype(np.float64) or another supported dtype"
        supported = ", ".join(sorted(d.name for d in SUPPORTED_DTYPES))
        raise UnsupportedDTypeError(f"{what}: dtype {dtype} is not supported{where()}; {hint}. "
                                    f"Supported: {supported}")
    return dtype


def is_device_array(value) -> bool:
    """A GPU array (``__cuda_array_interface__``: numba, CuPy, PyTorch; or the
    CUDA simulator's stand-in)."""
    return hasattr(value, "__cuda_array_interface__") or type(value).__name__ == "FakeCUDAArray"


def is_ndarray(value) -> bool:
    """Whether ``value`` is a concrete NumPy array. A braze array answers
    ``isinstance(x, np.ndarray)`` as the array it stands for does (user code
    branching on it takes NumPy's branch), so braze itself asks its type."""
    return issubclass(type(value), np.ndarray)


def aval_of_value(value, what: str = "argument") -> Aval:
    """The abstract value of a concrete leaf (array, NumPy scalar, Python scalar).

    NumPy scalars are strong, Python scalars weak (NEP 50). ``np.float64`` is
    a subclass of ``float`` (and ``np.complex128`` of ``complex``), so NumPy
    types are recognised first: ``np.sqrt(2.0)`` is as strong as an array.
    """
    if is_ndarray(value) or isinstance(value, np.generic):
        return Aval(tuple(value.shape), check_dtype(value.dtype, what))
    if isinstance(value, bool):
        return Aval((), np.dtype(bool), True)
    if isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:  # (NumPy takes it as uint64, an object or a float: values, not types)
            raise UnsupportedOpError(f"{what}: the Python int {value} is beyond int64{where()}; braze traces "
                                     "Python ints as int64, so this call runs as NumPy")
        return Aval((), np.dtype(np.int64), True)
    if isinstance(value, float):
        return Aval((), np.dtype(np.float64), True)
    if isinstance(value, complex):
        check_dtype(np.complex128, what)
    if is_device_array(value):
        cai = getattr(value, "__cuda_array_interface__", None)
        dtype = np.dtype(cai["typestr"]) if cai is not None else np.dtype(value.dtype)
        return Aval(tuple(value.shape), check_dtype(dtype, what))
    raise DTypeError(
        f"{what}: cannot trace a value of type {type(value).__name__}{where()}; "
        "pass NumPy arrays or Python/NumPy scalars, or mark it static (static_argnums)"
    )
