"""The NumPy array surface shared by braze's boxed arrays.

``ArrayMethods`` gives a class with ``shape``/``dtype`` and two hooks
(``_update`` for in-place writes, ``_concrete_error`` for values Python
needs concretely) the operators, methods and NumPy protocols of an ndarray,
all routed to ``braze.numpy``. Tracers use it; the gradient tape's watched
arrays can use it the same way.
"""
from __future__ import annotations

import inspect
import math
import operator
import sys

import numpy as np

from .aval import is_ndarray, python_scalar_type
from . import indexing, pytree, ufuncs
from . import numpy as bnp
from .core import bind, context_stack
from .errors import DTypeError, ShapeError, UnsupportedOpError, where
from .ops._util import broadcast_shape

def _unsupported_function(name: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"numpy.{name} is not supported on traced arrays{where()}; write it with supported "
        "NumPy functions (elementwise ufuncs, reductions, reshapes, indexing, matmul/einsum), "
        "or define it as a braze.composite and register a kernel for it"
    )


def call_untraced(fn, name: str, args: tuple, kwargs: dict, why: str = "braze runs it untraced",
                  refused: BaseException | None = None):
    """``fn(*args, **kwargs)`` in the innermost context its arguments belong to:
    recorded on a tape (with its ``braze.defvjp`` rule), as a graph break in a
    trace, or simply run."""
    owners = [leaf for leaf in pytree.flatten((tuple(args), dict(kwargs)))[0] if isinstance(leaf, ArrayMethods)]
    if not owners:
        return fn(*args, **kwargs)
    depth = {id(c): i for i, c in enumerate(context_stack())}
    inner = max(owners, key=lambda v: depth.get(id(v._owner()), -1))
    if refused is None:
        refused = UnsupportedOpError(f"{name} is not traced: braze runs it as a graph break, which this trace "
                                     f"does not allow (braze.trace, or compile with fullgraph=True){where()}")
    return inner._untraced(fn, name, args, kwargs, why, refused)


def _raw(name: str):
    """The op itself, keeping weak (Python-scalar) types as Python arithmetic does."""
    return lambda *args: bind(name, *args)


def _pow(self, other):
    bnp.check_power(self, other)
    if self._is_scalar() and not _is_array(other):
        if getattr(self, "weak", False) and hasattr(other, "dtype") and not getattr(other, "weak", False):
            # a Python number ** a NumPy scalar is NumPy's scalar math in the scalar's type (NEP 50)
            self = bnp.astype(self, np.result_type(self.dtype.type(0).item(), other.dtype))
        result = bind("scalar_power", self, other)  # NumPy's scalar math: C's pow (an array: NumPy's power)
        if _python_number(self) and _python_number(other) and np.dtype(bnp._dtype(result)).kind == "f":
            return _python_power(self, other, result)
        return result
    if type(other) is int and other == 2 and np.dtype(self.dtype) == np.bool_:
        return bnp.square(self)  # NumPy's fast path for ** 2: bool ** 2 is int8, as np.square gives
    return bind("power", self, other)


def _is_array(value) -> bool:
    """An array (not a NumPy or Python scalar), traced or not."""
    if isinstance(value, ArrayMethods):
        return not value._is_scalar()
    return is_ndarray(value)


def _checked(name: str):
    """The op, with Python's errors where two Python numbers meet (below)."""
    fn = _raw(name)
    if name in _PYTHON_ZERO:
        return lambda a, b: _python_division(name, a, b, fn)
    if name == "power":
        def power(a, b):
            result = fn(a, b)
            if _python_number(a) and _python_number(b) and np.dtype(bnp._dtype(result)).kind == "f":
                return _python_power(a, b, result)
            return result
        return power
    return fn


def _binary(name: str, reflected: bool = False):
    fn = _checked(name)
    if reflected:
        return lambda self, other: fn(other, self)
    return lambda self, other: fn(self, other)


# Python's float arithmetic, where two Python numbers meet (a Python float
# argument, traced as a weak float64, divided by another or by a literal):
# ZeroDivisionError, OverflowError and complex powers where NumPy's float64 gives
# inf or nan. A value known when traced raises at once; one that is not is
# guarded, and a call where it fails traces again and raises there.
_PYTHON_ZERO = {"divide": "float division by zero", "floor_divide": "float floor division by zero",
                "remainder": "float modulo", "divmod": "float divmod()"}


def _python_number(v) -> bool:
    if isinstance(v, ArrayMethods):
        # (a traced Python number; under a gradient tape a value is NumPy's)
        return hasattr(v, "_ctx") and v._is_scalar() and v.weak and np.dtype(v.dtype).kind in "biuf"
    return type(v) in (bool, int, float)


def _traced_value(v):
    """(the value now, whether it changes between calls), or None where the trace has none."""
    if not isinstance(v, ArrayMethods):
        return v, False
    if not v._ctx.can_break():
        return None
    return np.asarray(v._ctx.value(v._node))[()], v._node.op != "const"


def _python_division(name: str, a, b, fn):
    if not (_python_number(a) and _python_number(b)):
        return fn(a, b)
    known = _traced_value(b)
    if known is not None:
        value, changes = known
        if value == 0:
            raise ZeroDivisionError(_PYTHON_ZERO[name] if isinstance(value, float) or np.dtype(bnp._dtype(a)).kind
                                    == "f" else "division by zero")
        if changes:
            bnp._guard(b, bind("not_equal", b, 0), True, f"a Python number divided by {b.aval} (not zero)")
    return fn(a, b)


def _divmod(a, b):
    return _raw("floor_divide")(a, b), _raw("remainder")(a, b)


def _python_power(a, b, result):
    """Python's float ** float: 0.0 ** -1.0 and 10.0 ** 400.0 raise, (-8.0) ** 0.5 is complex."""
    known_a, known_b = _traced_value(a), _traced_value(b)
    if known_a is None or known_b is None:
        return result
    (x, a_changes), (y, b_changes) = known_a, known_b
    if x == 0 and y < 0 and not math.isinf(y):  # (0.0 ** -inf is inf)
        raise ZeroDivisionError("0.0 cannot be raised to a negative power")
    if x < 0 and math.isfinite(y) and y != math.floor(y):  # ((-7) ** inf is inf, as NumPy's)
        raise UnsupportedOpError(f"a negative Python number to a fractional power is complex in Python{where()}; "
                                 "braze traces no complex values")
    if math.isfinite(x) and math.isfinite(y) and not math.isfinite(float(_traced_value(result)[0])):
        raise OverflowError(34, "Numerical result out of range")
    if a_changes or b_changes:
        ok = bnp.logical_not(bnp.logical_or(bnp.logical_or(
            bnp.logical_and(bnp.equal(a, 0), bnp.logical_and(bnp.less(b, 0), bnp.isfinite(b))),
            bnp.logical_and(bnp.less(a, 0), bnp.logical_and(bnp.not_equal(b, bnp.floor(b)), bnp.isfinite(b)))),
            bnp.logical_and(bnp.isinf(result), bnp.logical_and(bnp.isfinite(a), bnp.isfinite(b)))))
        bnp._guard(a if a_changes else b, ok, True, "a Python number's power (no error, a real result)")
    return result


def _inplace(name: str):
    fn = _checked(name) if name != "matmul" else bnp.matmul
    if name == "power":
        fn = _pow

    def method(self, other):
        if self._is_scalar():
            # a NumPy scalar (x[i, j], a reduction) is immutable: s += v rebinds s
            # (with NumPy's promotion) and never writes into x
            return fn(self, other)
        self._assign(fn(self, other), f"{name} (in place)")
        return self

    return method


def _given(impl, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` less the ones that are ``np._NoValue``, NumPy's "not
    given" (what ``np.sum``'s own defaults are when ``np.sum`` itself is compiled:
    ``keepdims=np._NoValue`` is no keepdims), so braze's defaults apply."""
    try:
        bound = inspect.signature(impl).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):  # (no signature, or one the call does not fit: impl says so)
        return args, kwargs
    for name in [k for k, v in bound.arguments.items() if v is np._NoValue]:
        del bound.arguments[name]
    return bound.args, bound.kwargs


class ArrayMethods:
    """Operators, methods and NumPy protocols, in terms of ``braze.numpy``."""

    __slots__ = ()
    __array_priority__ = 1000

    @property
    def __class__(self):
        """What ``isinstance`` sees: ``isinstance(x, np.ndarray)`` holds for a
        traced array as for the array it stands for, and a traced scalar is, to
        code outside braze, the scalar it stands for (``isinstance(x[0],
        np.floating)``, ``np.isscalar``, a weak one's Python type): user code
        branching on it takes NumPy's branch. Inside braze a scalar's class is
        its own (braze asks whether a value is traced before what it is).
        ``type(x)`` is still the braze class; braze's own checks use
        ``is_ndarray`` (a concrete NumPy array)."""
        if not self._is_scalar():
            return np.ndarray
        if sys._getframe(1).f_globals.get("__name__", "").startswith("braze"):
            return type(self)
        dtype = np.dtype(self.dtype)
        return python_scalar_type(dtype) if getattr(self, "weak", False) else dtype.type

    # ---- protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        try:
            return ufuncs.dispatch(ufunc, method, inputs, kwargs)
        except UnsupportedOpError as exc:
            refused = exc
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        return self._untraced(fn, name, inputs, kwargs, "braze's rule does not cover this ufunc call", refused)

    def __array_function__(self, func, types, args, kwargs):
        impl = bnp.ARRAY_FUNCTIONS.get(func)
        if impl is None:
            module = getattr(func, "__module__", "numpy") or "numpy"
            public = ".".join(p for p in module.split(".") if not p.startswith("_"))
            name = getattr(func, "__name__", str(func))
            name = f"{public}.{name}"[len("numpy."):] if public.startswith("numpy") else name
            return self._untraced(func, f"numpy.{name}", args, kwargs, "braze has no rule for it",
                                  _unsupported_function(name))
        try:
            if any(a is np._NoValue for a in args) or any(v is np._NoValue for v in kwargs.values()):
                args, kwargs = _given(impl, args, kwargs)
            return impl(*args, **kwargs)
        except UnsupportedOpError as exc:
            refused = exc
        name = getattr(func, "__name__", str(func))
        return self._untraced(func, f"numpy.{name}", args, kwargs, "braze's rule does not cover these arguments",
                              refused)

    def _untraced(self, fn, name: str, args, kwargs, why: str, refused: BaseException):
        """``fn(*args, **kwargs)``, which braze does not trace: a graph break where
        one may happen, else ``refused`` (what braze's rule said, if it had one).
        A watched argument's tape comes first: it records the call with its rule."""
        leaves = pytree.flatten((tuple(args), dict(kwargs)))[0]
        if any(leaf._owner() is not self._owner() for leaf in leaves if isinstance(leaf, ArrayMethods)):
            return call_untraced(fn, name, args, kwargs, why, refused)
        if self._can_break():
            return self._ctx.host_call(fn, name, args, kwargs, why)
        raise refused

    def _can_break(self) -> bool:
        """Whether a step braze cannot trace may run here as a graph break."""
        return False

    def _owner(self):
        """The context (trace or tape) this array belongs to."""
        raise NotImplementedError

    def _concretize(self, convert, what: str):
        raise self._concrete_error(what)

    def __array__(self, dtype=None, copy=None):
        if isinstance(dtype, ArrayMethods):
            raise TypeError("Cannot construct a dtype from an array")  # NumPy's words
        if self._can_break():
            value = self._concretize(np.asarray, "converted to a NumPy array by code braze does not trace")
            return np.asarray(value, dtype=dtype)
        raise self._concrete_error(
            "converted to a NumPy array (np.asarray / np.array, or stored into a NumPy array; "
            "to fill a buffer, allocate it inside the function with np.zeros / np.empty / "
            "np.full / np.zeros_like, which braze traces, not with a function imported as "
            "`from numpy import zeros`; a Python list or tuple passed as an argument is a pytree whose "
            "elements are traced one by one: pass np.asarray(list) instead)"
        )

    def _is_scalar(self) -> bool:
        """Whether this is a NumPy scalar (immutable) rather than an array."""
        return False

    # ---- concretization
    def __bool__(self):
        return self._concretize(bool, "used as a Python bool (if / while / and / or)")

    def __int__(self):
        return self._concretize(int, "converted with int()")

    def __float__(self):
        return self._concretize(float, "converted with float()")

    def __complex__(self):
        return self._concretize(complex, "converted with complex()")

    def __index__(self):
        return self._concretize(operator.index, "used as a Python index (range, list index, slice bound)")

    # A float scalar's Python methods (np.float64 is a float; np.float32 has them
    # too): the value read into Python, as ``float()`` reads it.
    def is_integer(self):
        return self._float_method("is_integer")

    def as_integer_ratio(self):
        return self._float_method("as_integer_ratio")

    def hex(self):
        return self._float_method("hex")

    def _float_method(self, name: str):
        dt = np.dtype(self.dtype)
        if not self._is_scalar() or dt.kind != "f" or (name == "hex" and dt != np.float64):  # (float64's own)
            raise AttributeError(f"'numpy.{'ndarray' if not self._is_scalar() else np.dtype(self.dtype).name}' "
                                 f"object has no attribute '{name}'")
        return getattr(self._concretize(float, f"read into Python with .{name}()"), name)()

    def __round__(self, ndigits=None):
        """``round(s)`` of a NumPy scalar reads it into a Python int; ``round(s, n)``
        stays a traced NumPy scalar (``np.round``). Arrays have no ``round()``."""
        if not self._is_scalar():
            raise TypeError("type numpy.ndarray doesn't define __round__ method")  # NumPy's words
        if ndigits is None:
            return self._concretize(round, "rounded to a Python int with round()")
        if getattr(self, "weak", False) and np.dtype(self.dtype).kind == "f":
            # a Python float: Python's round, correctly rounded in decimal (round(2.675, 2)
            # is 2.67, the double nearest 2.675 being below it; np.round's scaling gives 2.68)
            return self._concretize(lambda v: round(float(v), operator.index(ndigits)),
                                    "rounded with round(x, ndigits), Python's")
        return bnp.round(self, ndigits)

    def __trunc__(self):
        if not self._is_scalar():
            raise TypeError("type numpy.ndarray doesn't define __trunc__ method")
        return self._concretize(math.trunc, "converted with math.trunc()")

    def item(self, *args):
        return self._concretize(lambda v: np.asarray(v).item(*args), "read with .item()")

    def __str__(self):
        """A Python number's text (``str(lr)`` as a key or a tag) is its value: a
        graph break, guarded. Other traced values show themselves, as in print."""
        if getattr(self, "weak", False) and self._is_scalar():
            return self._concretize(lambda v: str(v.item()), "converted with str()")
        return repr(self)

    def __hash__(self):
        """A scalar hashes as its value (a dict keyed by numbers), read into Python
        as ``float()`` reads it; an array is unhashable, as NumPy's."""
        if not self._is_scalar():
            raise TypeError("unhashable type: 'numpy.ndarray'")
        return self._concretize(hash, "hashed")

    def __format__(self, spec: str) -> str:
        """``f"{x.mean():.3f}"``: the value, formatted as NumPy formats it (a
        format spec reads the value into Python; without one, as in print, the
        traced array shows itself and nothing is read)."""
        if not spec:
            return str(self)
        scalar = self._is_scalar() or not self.shape
        return self._concretize(lambda v: format(np.asarray(v)[()] if scalar else np.asarray(v), spec),
                                "formatted into a string")

    def tolist(self):
        return self._concretize(lambda v: np.asarray(v).tolist(), "read with .tolist()")

    # ---- structure
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def T(self):
        return bnp.transpose(self)

    @property
    def mT(self):
        return bnp.swapaxes(self, -1, -2)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d traced array)")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # ---- indexing
    def __getitem__(self, key):
        return indexing.getitem(self, key)

    def __setitem__(self, key, value):
        self._assign(indexing.setitem(self, key, value), "setitem")

    # ---- in-place writes: NumPy casts with same_kind and never grows the array
    def _assign(self, value, what: str, casting: str = "same_kind") -> None:
        value_dtype = np.dtype(value.dtype) if hasattr(value, "dtype") else np.asarray(value).dtype
        if value_dtype != self.dtype:
            if not np.can_cast(value_dtype, self.dtype, casting):
                raise DTypeError(
                    f"{what}: cannot cast the {value_dtype} result into the {self.dtype} array "
                    f"in place (NumPy's {casting} casting rule){where()}; use x = x.astype(...) first, "
                    "or assign to a new name instead of updating in place"
                )
            value = bnp.astype(value, self.dtype)
        ctx = getattr(self, "_ctx", None)
        same = bool(getattr(ctx, "counted", None)) and ctx.same_selection(self, value)
        vshape = None if same else bnp.shape(value)  # (x[mask] += 1: no selection's length read)
        if vshape is not None and vshape != tuple(self.shape):
            try:
                ok = tuple(broadcast_shape(vshape, self.shape)) == tuple(self.shape)
            except ValueError:
                ok = False
            if not ok:
                raise ShapeError(
                    f"{what}: result of shape {vshape} does not fit the array of shape "
                    f"{tuple(self.shape)} it updates in place{where()}"
                )
            value = bnp.broadcast_to(value, tuple(self.shape))
        self._update(value)

    # ---- operators
    __add__, __radd__, __iadd__ = _binary("add"), _binary("add", True), _inplace("add")
    __sub__, __rsub__, __isub__ = _binary("subtract"), _binary("subtract", True), _inplace("subtract")
    __mul__, __rmul__, __imul__ = _binary("multiply"), _binary("multiply", True), _inplace("multiply")
    __truediv__, __rtruediv__, __itruediv__ = _binary("divide"), _binary("divide", True), _inplace("divide")
    __floordiv__, __rfloordiv__, __ifloordiv__ = (
        _binary("floor_divide"), _binary("floor_divide", True), _inplace("floor_divide"))
    __mod__, __rmod__, __imod__ = _binary("remainder"), _binary("remainder", True), _inplace("remainder")
    __pow__, __rpow__, __ipow__ = _pow, _binary("power", True), _inplace("power")
    __and__, __rand__, __iand__ = _binary("bitwise_and"), _binary("bitwise_and", True), _inplace("bitwise_and")
    __or__, __ror__, __ior__ = _binary("bitwise_or"), _binary("bitwise_or", True), _inplace("bitwise_or")
    __xor__, __rxor__, __ixor__ = _binary("bitwise_xor"), _binary("bitwise_xor", True), _inplace("bitwise_xor")
    __lshift__, __rlshift__, __ilshift__ = _binary("left_shift"), _binary("left_shift", True), _inplace("left_shift")
    __rshift__, __rrshift__, __irshift__ = (
        _binary("right_shift"), _binary("right_shift", True), _inplace("right_shift"))
    __lt__, __le__ = _binary("less"), _binary("less_equal")
    __gt__, __ge__ = _binary("greater"), _binary("greater_equal")
    __eq__, __ne__ = _binary("equal"), _binary("not_equal")
    __imatmul__ = _inplace("matmul")

    def __matmul__(self, other):
        return bnp.matmul(self, other)

    def __rmatmul__(self, other):
        return bnp.matmul(other, self)

    def __divmod__(self, other):
        return _python_division("divmod", self, other, _divmod)

    def __rdivmod__(self, other):
        return _python_division("divmod", other, self, _divmod)

    def __neg__(self):
        return bind("negative", self)

    def __pos__(self):
        return bind("positive", self)

    def __abs__(self):
        return bind("absolute", self)

    def __invert__(self):
        return bind("invert", self)

    # ---- methods (NumPy's signatures; keywords passed on, so none is dropped)
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return bnp.sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return bnp.prod(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return bnp.max(self, axis=axis, out=out, keepdims=keepdims, **kw)

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return bnp.min(self, axis=axis, out=out, keepdims=keepdims, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return bnp.mean(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return bnp.var(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return bnp.std(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kw)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return bnp.argmax(self, axis=axis, out=out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return bnp.argmin(self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False, **kw):
        return bnp.any(self, axis=axis, out=out, keepdims=keepdims, **kw)

    def all(self, axis=None, out=None, keepdims=False, **kw):
        return bnp.all(self, axis=axis, out=out, keepdims=keepdims, **kw)

    def cumsum(self, axis=None, dtype=None, out=None):
        return bnp.cumsum(self, axis=axis, dtype=dtype, out=out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return bnp.cumprod(self, axis=axis, dtype=dtype, out=out)

    def reshape(self, *shape, order="C", copy=None):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return bnp.reshape(self, shape, order, copy=copy)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
            axes = axes[0]
        return bnp.transpose(self, axes or None)

    def swapaxes(self, axis1, axis2):
        return bnp.swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return bnp.squeeze(self, axis)

    def ravel(self, order="C"):
        return bnp.ravel(self, order)

    def flatten(self, order="C"):
        return bnp.copy_as(bnp.asarray_copy(bnp.ravel(self, order)), "C")

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        return bnp.astype_method(self, dtype, order, casting, subok, copy)

    def copy(self, order="C"):
        return bnp.copy(self, order=order)

    def view(self, dtype=None, type=None):
        """A view with the same data (another dtype would reinterpret bytes: refused)."""
        if type is not None or (dtype is not None and bnp._as_dtype("view", dtype) != self.dtype):
            raise UnsupportedOpError(
                f"ndarray.view({dtype!r}): reinterpreting the bytes of a traced {self.dtype} array is not "
                f"supported{where()}; use .astype() to convert values")
        return bnp.view(self)

    def fill(self, value):
        if bnp.ndim(value):
            raise ShapeError(f"ndarray.fill: the value must be a scalar, got shape {bnp.shape(value)}{where()}")
        self._assign(bnp.full(tuple(self.shape), value, self.dtype), "fill", casting="unsafe")

    def conj(self, out=None):
        return _conj_into(self, out)

    conjugate = conj

    @property
    def real(self):
        return self  # NumPy returns the array itself for a real dtype

    @property
    def imag(self):
        return bnp.read_only(bnp.zeros_like(self))  # read-only zeros, as NumPy's for a real dtype

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def strides(self):
        strides = getattr(self, "_strides", None)
        if strides is None:
            raise UnsupportedOpError(f"ndarray.strides of a traced {self.aval} whose memory layout braze does not "
                                     f"model (a gather or einsum result){where()}")
        return tuple(int(s) * self.itemsize for s in strides)

    def __copy__(self):
        return bnp.copy(self, order="K")

    def __deepcopy__(self, memo):  # (an array's deep copy is its copy; never a copy of the trace or tape)
        return bnp.copy(self, order="K")

    def __contains__(self, value):
        return bool(bnp.any(bnp.equal(self, value)))  # (traced: a ConcretizationError, as for any bool)

    def tobytes(self, order="C"):
        raise self._concrete_error("read with .tobytes()")

    tostring = tobytes

    def __getattr__(self, name):
        # An ndarray attribute braze does not implement is a clear error, not an AttributeError from
        # deep inside; other names (and the protocols NumPy probes) stay AttributeErrors.
        if name in _NDARRAY_ATTRIBUTES:
            if name in _FUNCTION_METHODS:  # (NumPy's function: braze's rule, or a graph break where it refuses)
                method = getattr(np, name)
                return lambda *args, **kwargs: method(self, *args, **kwargs)
            raise UnsupportedOpError(f"ndarray.{name} is not supported on traced arrays{where()}; write it "
                                     "with supported NumPy functions, or define it as a braze.composite")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def flat(self):
        """``x.flat``: reads and writes by flat (C-order) index, and iteration."""
        return _Flat(self)

    def clip(self, min=None, max=None, out=None, **kw):
        return bnp.clip(self, min, max, out, **kw)

    def dot(self, b, out=None):
        return bnp.dot(self, b, out)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return bnp.take(self, indices, axis, out, mode)

    def round(self, decimals=0, out=None):
        return bnp.round(self, decimals, out)

    def sort(self, axis=-1, kind=None, order=None, *, stable=None):
        """In place, as ``ndarray.sort`` (``np.sort`` returns a sorted copy)."""
        self._assign(bnp.sort(self, axis=axis, kind=kind, order=order, stable=stable), "sort")

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
        return bnp.argsort(self, axis=axis, kind=kind, order=order, stable=stable)

    def partition(self, kth, axis=-1, kind="introselect", order=None):
        """In place, as ``ndarray.partition``."""
        self._assign(bnp.partition(self, kth, axis=axis, kind=kind, order=order), "partition")


class _Flat:
    """``x.flat`` of a traced array: ``x.flat[k]`` is ``x.ravel()[k]``, and
    ``x.flat[k] = v`` writes into ``x`` (through a flat copy stored back)."""

    __slots__ = ("_base",)

    def __init__(self, base):
        self._base = base

    def __getitem__(self, key):
        return bnp.ravel(self._base)[key]

    def __setitem__(self, key, value):
        flat = bnp.ravel(self._base).copy()
        flat[key] = value
        self._base[...] = bnp.reshape(flat, self._base.shape)

    def __iter__(self):
        flat = bnp.ravel(self._base)
        return (flat[k] for k in range(flat.shape[0]))

    def __len__(self):
        return self._base.size

    def __array__(self, dtype=None, copy=None):
        return np.asarray(bnp.ravel(self._base), dtype=dtype)


def _conj_into(x, out):
    return bnp.conjugate(x) if out is None else ufuncs.call(np.conjugate, (x,), {"out": out})


# ndarray methods that are the NumPy function of the same name with the array first
_FUNCTION_METHODS = frozenset(
    "argpartition argsort choose compress diagonal nonzero repeat searchsorted trace".split())
_NDARRAY_ATTRIBUTES = frozenset(n for n in dir(np.ndarray) if not n.startswith("__"))
