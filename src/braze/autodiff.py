"""Reverse-mode autodiff: the gradient tape, ``grad``/``value_and_grad``/``vjp``.

A ``GradientTape`` is one more context on the stack (``braze.core``). While
it is the innermost context, every op whose operands include an array it
watches is evaluated by the context below it (NumPy eagerly, a graph while
tracing, an outer tape when nested) and *remembered*; ops on nothing
watched pass straight through. ``gradient`` walks the remembered ops
backwards, applying each op's vjp rule (``braze.core.PRIMITIVES``). Those rules are
written with ``braze.numpy``, so the backward pass itself runs in whatever
context is active: eagerly it computes with NumPy, inside ``braze.compile``
it records ordinary graph nodes (which are fused and compiled like any
others), and under an outer tape it is differentiated again (``grad(grad(f))``).

Composite calls are remembered as one op. Their gradient comes, in order of
preference, from ``Composite.defvjp``, from a kernel pair selected for the
compile target (a kernel registered with ``backward=``), or from the body,
whose forward is then recomputed in the backward pass (when no kernel was
selected, compilation's common-subexpression pass merges the recomputation
with the inlined forward).
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

from . import indexing, intercept
from .aval import Aval, aval_of_value, is_ndarray
from . import numpy as bnp
from . import pytree
from .core import NONDIFFERENTIABLE, PRIMITIVES, VJP, bind, context_stack, pop_context, push_context
from .ops.linalg import lstsq_vjp
from .errors import BrazeError, CompositeError, GradientError, TraceError, where
from .surface import ArrayMethods, call_untraced
from .tracing import GraphContext, Tracer, _is_element
from .views import is_view_op, make_view, refresh, strides_of


_ids = itertools.count(1)


def differentiable(dtype) -> bool:
    return np.dtype(dtype).kind in "fc"


def _shape(x) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else ()


def _dtype(x) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


# ---------------------------------------------------------------- watched arrays


class _read_only:  # noqa: N801  (used as a context manager, named as one)
    """A function run untraced on watched values may not write into an array
    (``np.put(y, i, v)``, ``np.fill_diagonal``, ``np.copyto(buf, w)``): the tape
    would go on with the value before the write, or a plain array would hold
    watched values with no gradient, a wrong gradient either way. The arrays
    are read-only meanwhile, and such a write is a GradientError (``ufunc.at``,
    which writes into a read-only array all the same, always is)."""

    def __init__(self, values, name: str):
        self.message = _WRITES.format(name=name, at=where())
        if name.endswith(".at"):
            raise GradientError(self.message)
        self.frozen = [v for v in values if is_ndarray(v) and v.flags.writeable]
        # (a traced value, under a compiled gradient: the graph break rebinds what it writes)
        self.traced = [(v, v._node) for v in values if isinstance(v, Tracer)]

    def __enter__(self):
        for v in self.frozen:
            v.flags.writeable = False

    def __exit__(self, kind, exc, tb):
        for v in self.frozen:
            v.flags.writeable = True
        if kind is not None and issubclass(kind, ValueError) and "read-only" in str(exc):
            raise GradientError(self.message) from exc
        if kind is None and any(v._node is not node for v, node in self.traced):
            raise GradientError(self.message)


_WRITES = ("{name}{at} writes into an array while the gradient tape watches its arguments; braze does not "
           "trace it and has no gradient for the write. Write with indexing (y[i] = v, y[mask] = v), np.where "
           "or np.add.at, or cut the gradient on purpose with braze.stop_gradient")


def _reread_value(t: "Watched", view, base: "Watched") -> None:
    fresh = bind(view.op, base, **view.params)  # recorded: the gradient follows the view
    t._value_, t._id_ = primal_parts(fresh, t._tape)


class Watched(ArrayMethods):
    """An array a tape watches. It flows through NumPy calls (operators,
    ufuncs, ``np.*`` functions, ``np.array([w, ...])``), which the tape
    records. Converting it to a plain NumPy array while the tape records
    raises ``GradientError`` (the gradient would be lost); detach on purpose
    with ``braze.stop_gradient(w)``.

    In-place updates (``w += 1``, ``w[0] = v``) rebind ``w`` to the updated
    value (the array it wraps is not modified). Views are views as in NumPy
    (``braze.tracing``): a basic-indexing result, a transpose, a reshape that
    needs no copy, ... writes through to the array it came from, and reads the
    new values after that array changed.
    """

    __slots__ = ("_tape", "_value_", "_id_", "_origin", "_view", "_version", "_base_version")

    def __init__(self, tape: "GradientTape", value, ident: int):
        self._tape = tape
        self._value_ = value
        self._id_ = ident
        self._origin = ident
        self._view = None  # a tracing.View: the watched array this one views, and how
        self._version = 0
        self._base_version = 0

    def _sync(self) -> None:
        """Bring a view up to date with the array it views (re-reading it if it
        changed), down a chain of views without recursion."""
        if self._view is not None:
            refresh(self, _reread_value)

    @property
    def _value(self):
        self._sync()
        return self._value_

    def _relayout(self, order: str, like=None) -> None:
        """A new array (a copy) laid out as NumPy lays out its copies (see
        ``Tracer._relayout``): its value, laid out so."""
        value = self._value
        like = like._value if isinstance(like, Watched) else like
        if isinstance(value, Tracer):
            value._relayout(order, like)
        elif is_ndarray(value):
            ref = like if is_ndarray(like) else value
            out = np.empty_like(ref, order=order) if ref.shape == value.shape else np.empty_like(value, order=order)
            out[...] = value
            self._value_ = out

    @property
    def flags(self):
        return self._value.flags

    @property
    def _strides(self):
        """Its value's layout (a NumPy array's, or a tracer's modelled one): order
        'K' and 'F' ravels follow it, as NumPy's do."""
        return bnp._element_strides(self._value)

    @property
    def _id(self):
        self._sync()
        return self._id_

    @property
    def shape(self) -> tuple:
        return _shape(self._value_)

    @property
    def dtype(self) -> np.dtype:
        return _dtype(self._value_)

    @property
    def weak(self) -> bool:
        return bool(getattr(self._value_, "weak", False))

    @property
    def aval(self) -> Aval:
        return Aval(self.shape, self.dtype, self.weak)

    def _active(self) -> bool:
        return self._tape._recording_on_stack()

    def _is_scalar(self) -> bool:
        value = self._value_
        if isinstance(value, (np.generic, int, float, bool)):
            return True
        is_scalar = getattr(value, "_is_scalar", None)  # a traced value under the tape
        return bool(is_scalar()) if is_scalar is not None else False

    def __getitem__(self, key):
        result = indexing.getitem(self, key)
        if _is_element(key, len(self.shape)) and isinstance(result, Watched) and result._tape is self._tape:
            # NumPy gives a scalar: a copy (the same gradient id), not a view
            value = result._value
            if is_ndarray(value):
                value = value[()]
            elif isinstance(value, Tracer):
                value = Tracer(value._ctx, value._node, scalar=True)
            return Watched(self._tape, value, result._id)
        return result

    def _untraced(self, fn, name: str, args, kwargs, why: str, refused: BaseException):
        rule = HOST_RULES.get(fn)
        if rule is None:
            detail = f": {refused}" if why.startswith("braze's rule") else ""
            message = (f"{name}{where()} has no gradient rule: braze does not trace it ({why}{detail}); give it "
                       f"one with braze.defvjp({name}, vjp), or cut the gradient with braze.stop_gradient")
            return self._tape._unruled(fn, name, args, kwargs, message)
        return self._tape._host(fn, name, args, kwargs, rule)

    def _update(self, value) -> None:
        """Rebind to ``value``; through a view, down the chain of views to the
        array that owns the data (a loop, not recursion)."""
        self._sync()
        written, t = [], self
        while True:
            view = t._view
            base_value = None if view is None else view.write(value)
            t._value_, t._id_ = primal_parts(value, t._tape)
            t._version += 1
            written.append(t)
            if view is None:
                break
            t, value = view.base, base_value
        for t in written[:-1]:
            t._base_version = t._view.base._version

    def _concrete(self):
        value = _detach(self)
        if not (is_ndarray(value) or isinstance(value, (np.generic, int, float, bool, complex))):
            return value  # a traced value: its own conversions raise the right error
        return np.asarray(value)

    def _concrete_error(self, what: str):
        return TraceError(f"a watched array {self.aval} was {what}{where()}")

    # NumPy protocols: once the tape stopped recording, a watched array is its value.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not self._active():
            inputs = tuple(_detach(i) for i in inputs)
            if "out" in kwargs:
                kwargs["out"] = tuple(_detach(o) for o in kwargs["out"])
            return getattr(ufunc, method)(*inputs, **kwargs)
        return super().__array_ufunc__(ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if not self._active():
            args = pytree.map_leaves(_detach, args)
            kwargs = pytree.map_leaves(_detach, kwargs)
            return func(*args, **kwargs)
        result = super().__array_function__(func, types, args, kwargs)
        if func in _LIKE and differentiable(_dtype(result)):
            # A buffer "like" a watched array is watched too (as a constant), so
            # that writing watched values into it (y[i] = w) is recorded.
            return Watched(self._tape, result, next(_ids))
        return result

    # Eagerly the value is known: Python may look at it (control flow, printing).
    def __array__(self, dtype=None, copy=None):
        if self._active() and not self._tape._paused and differentiable(self.dtype):
            # NumPy is building a plain array from it: the gradient would be lost
            raise GradientError(
                f"a watched array {self.aval} was converted to a plain NumPy array{where()}, which "
                "would silently drop its gradient; build arrays from watched values with braze's "
                "traced NumPy calls (np.array([...]), np.stack, np.concatenate work), or detach it "
                "on purpose with braze.stop_gradient(x)")
        value = self._concrete()
        return np.asarray(value, dtype=dtype) if copy is not True else np.array(value, dtype=dtype)

    def __bool__(self):
        return bool(self._concrete())

    def __int__(self):  # (int(), indices and bool: piecewise constant, no gradient is lost)
        return int(self._concrete())

    def __float__(self):
        self._check_kept("converted with float()")
        return float(self._concrete())

    def __complex__(self):
        self._check_kept("converted with complex()")
        return complex(self._concrete())

    def __index__(self):
        return self._concrete().__index__()

    def item(self, *args):
        self._check_kept("read with .item()")
        return self._concrete().item(*args)

    def tolist(self):
        self._check_kept("read with .tolist()")
        return self._concrete().tolist()

    def _owner(self):
        return self._tape

    def _check_kept(self, what: str) -> None:
        """A Python number made of a watched value drops its gradient: say so
        (``out[i] = w`` into a plain NumPy array converts ``w`` this way)."""
        if self._active() and not self._tape._paused and differentiable(self.dtype):
            raise GradientError(
                f"a watched array {self.aval} was {what}{where()}, which would silently drop its gradient; "
                "keep it an array (write it into an array made inside the function with np.zeros / np.empty, "
                "which the tape watches), or detach it on purpose with braze.stop_gradient(x)")

    def __repr__(self):
        return f"Watched({self._value!r})"


_LIKE = (np.zeros_like, np.ones_like, np.full_like, np.empty_like)


def primal_parts(value, tape) -> tuple:
    """(primal value, tape id) of an op result as ``tape`` sees it."""
    if isinstance(value, Watched) and value._tape is tape:
        return value._value, value._id
    return value, None


def _detach(x):
    while isinstance(x, Watched):
        x = x._value
    return x


def stop_gradient(x):
    """``x`` with no gradient flowing back through it (for every tape)."""
    return pytree.map_leaves(_detach, x)


# ---------------------------------------------------------------- the tape


class _Record:
    __slots__ = ("op", "params", "in_ids", "in_values", "out_ids", "out_values", "multi", "rule")

    def __init__(self, op, params, in_ids, in_values, out_ids, out_values, multi, rule):
        self.op, self.params, self.rule = op, params, rule
        self.in_ids, self.in_values = in_ids, in_values
        self.out_ids, self.out_values, self.multi = out_ids, out_values, multi


class GradientTape:
    """Records the ops applied to the arrays it watches, for ``gradient``.

    >>> import numpy as np, braze
    >>> with braze.GradientTape() as tape:
    ...     x = tape.watch(np.array([1.0, 2.0]))
    ...     y = np.sum(x * x)
    >>> tape.gradient(y, x)
    array([2., 4.])

    Tapes nest as a stack (exit them in reverse order). A non-persistent
    tape computes one gradient; ``persistent=True`` allows several.
    ``stop_recording()`` pauses recording for a block.
    """

    intercepts = "tape"  # braze.intercept: np.array([w, ...]) of watched values is recorded

    def __init__(self, persistent: bool = False):
        self.persistent = persistent
        self._records: list[_Record] = []
        self._constants: set[int] = set()  # ids of the buffers it watches as constants (np.zeros, ...)
        self._parent = None
        self._entered = False
        self._exited = False
        self._used = False
        self._paused = 0

    # ---- as a context
    def __enter__(self) -> "GradientTape":
        if self._entered:
            raise GradientError("a GradientTape can be entered once; make a new tape for each `with` block")
        self._entered = True
        self._parent = context_stack()[-1]
        push_context(self)
        intercept.acquire()  # np.array([w, ...]) of watched values records a stack
        return self

    def __exit__(self, *exc) -> None:
        stack = context_stack()
        if stack[-1] is not self:
            if exc[0] is None:
                raise TraceError(
                    "gradient tapes exited out of order: an inner tape or trace is still active; "
                    "exit nested `with` blocks in the reverse order of entering them"
                )
            # an exception is already propagating: unwind what is above us quietly
            while self in context_stack() and context_stack()[-1] is not self:
                pop_context(context_stack()[-1])
        pop_context(self)
        intercept.release()
        self._exited = True

    def _recording_on_stack(self) -> bool:
        return self._entered and not self._exited

    @contextmanager
    def stop_recording(self):
        """Within this block, ops on watched arrays are computed but not recorded."""
        if not self._recording_on_stack():
            raise GradientError("stop_recording() needs the tape's `with` block to be active")
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def buffer(self, value) -> "Watched":
        """An array the user's code made (np.zeros, np.empty, ...) while this tape
        records: watched as a constant, so that writes of watched values into
        it (``out[i, j] = w``) are recorded."""
        ident = next(_ids)
        self._constants.add(ident)
        return Watched(self, value, ident)

    # ---- watching
    def watch(self, x):
        """A watched version of ``x`` (an array or a pytree of arrays).

        Ops applied to the result are recorded; pass it to your function
        instead of ``x``. Only floating-point arrays can be watched.
        """
        if not self._recording_on_stack():
            raise GradientError("tape.watch must be called inside the tape's `with` block")
        return pytree.map_leaves(lambda leaf: self._watch_leaf(leaf), x)

    def _watch_leaf(self, leaf, what: str = "tape.watch"):
        if isinstance(leaf, Watched) and leaf._tape is self:
            return leaf
        if isinstance(leaf, (bool, int, float, complex)) or isinstance(leaf, (list, tuple)):
            leaf = np.asarray(leaf)
        if not hasattr(leaf, "dtype"):
            raise GradientError(f"{what}: cannot watch a {type(leaf).__name__}{where()}; pass arrays")
        if not differentiable(leaf.dtype):
            raise GradientError(
                f"{what}: cannot differentiate with respect to an array of dtype {np.dtype(leaf.dtype)} "
                f"and shape {_shape(leaf)}{where()}; only floating-point inputs have gradients "
                "(cast with .astype(np.float64), or leave this argument out of argnums)"
            )
        return Watched(self, leaf, next(_ids))

    # ---- recording (the context protocol)
    def process(self, op: str, args: tuple, params: dict):
        mine = [isinstance(a, Watched) and a._tape is self for a in args]
        if not any(mine):
            return self._parent.process(op, args, params)
        in_values, in_ids = [], []
        for a, m in zip(args, mine):
            value, ident = primal_parts(a, self) if m else (a, None)
            in_values.append(value)
            in_ids.append(ident)
        if self._paused:
            return self._parent.process(op, tuple(in_values), params)
        if op == "composite":
            return self._composite(args, tuple(in_values), tuple(in_ids), params)
        out = self._parent.process(op, tuple(in_values), params)
        rule = VJP.get(op)
        if rule is None or rule == NONDIFFERENTIABLE:
            return out  # no gradient flows through this op (comparisons, argmax, ...)
        result = self._remember(op, params, in_ids, in_values, out, None)
        if mine[0] and isinstance(result, Watched):
            _make_view(result, args[0], op, params)
        return result

    def _host(self, fn, name: str, args: tuple, kwargs: dict, rule):
        """``fn(*args, **kwargs)`` run untraced (NumPy, SciPy, ...) with the user's
        VJP rule (``braze.defvjp``): one record on this tape."""
        args = tuple(args)
        mine = lambda v: isinstance(v, Watched) and v._tape is self  # noqa: E731
        nested = [leaf for a in args if not mine(a) for leaf in pytree.flatten(a)[0] if mine(leaf)]
        if nested or any(mine(leaf) for leaf in pytree.flatten(kwargs)[0]):
            raise GradientError(
                f"{name}{where()}: a watched array is passed inside a container or as a keyword; a "
                "braze.defvjp rule differentiates positional array arguments only"
            )
        in_values, in_ids = [], []
        for a in args:
            value, ident = primal_parts(a, self)
            in_values.append(value)
            in_ids.append(ident)
        with _read_only(in_values, name):
            out = call_untraced(fn, name, tuple(in_values), kwargs)
        if self._paused:
            return out
        n_args = len(args)

        def host_rule(ct):
            cts = rule(ct, *in_values, out=out, **kwargs)
            cts = tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)
            if len(cts) != n_args:
                raise GradientError(f"{name}: its braze.defvjp rule returned {len(cts)} cotangent(s) for "
                                    f"{n_args} positional argument(s); return one per argument (None for none)")
            return cts

        host_rule.sparse = True  # unused results get None, not zeros
        result = self._remember(name, {}, tuple(in_ids), tuple(in_values), out, host_rule)
        if isinstance(out, tuple) and hasattr(out, "_fields") and type(result) is tuple:
            result = type(out)(*result)  # (NumPy's named results: QRResult, ...)
        return result

    def _unruled(self, fn, name: str, args: tuple, kwargs: dict, message: str):
        """``fn`` run untraced with no gradient rule: on the arrays' values, its
        results recorded with a rule that raises GradientError(``message``)
        if a gradient reaches them. A value only reported beside the loss
        (``has_aux``: ``np.median(x)``) is fine; one the loss depends on is
        an error at the backward pass, never a silent zero."""
        leaves, tree = pytree.flatten((tuple(args), dict(kwargs)))
        in_values, in_ids = [], []
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, Watched) and leaf._tape is self:
                value, ident = primal_parts(leaf, self)
                leaves[k] = value
                in_values.append(value)
                in_ids.append(ident)
        plain_args, plain_kwargs = pytree.unflatten(tree, leaves)
        if all(i in self._constants for i in in_ids):  # (no gradient reaches or leaves it: np.put(zeros, i, 7.0))
            out = call_untraced(fn, name, plain_args, plain_kwargs)
        else:
            with _read_only(leaves, name):
                out = call_untraced(fn, name, plain_args, plain_kwargs)
        if self._paused:
            return out

        def refuse(ct):
            raise GradientError(message)

        refuse.sparse = True
        result = self._remember(name, {}, tuple(in_ids), tuple(in_values), out, refuse)
        if isinstance(out, tuple) and hasattr(out, "_fields") and type(result) is tuple:
            result = type(out)(*result)
        return result

    def _remember(self, op, params, in_ids, in_values, out, rule):
        multi = isinstance(out, tuple)
        outs = out if multi else (out,)
        wrapped, out_ids = [], []
        for o in outs:
            if differentiable(_dtype(o)):
                ident = next(_ids)
                wrapped.append(Watched(self, o, ident))
                out_ids.append(ident)
            else:
                wrapped.append(o)
                out_ids.append(None)
        if not any(i is not None for i in out_ids):
            return out
        self._records.append(_Record(op, params, tuple(in_ids), tuple(in_values), tuple(out_ids),
                                     outs, multi, rule))
        return tuple(wrapped) if multi else wrapped[0]

    def _composite(self, args, values, ids, params):
        out, rule, note = composite_gradient(self._parent, args, values, ids, params)
        if rule is None:
            return out  # recorded op by op
        notes = getattr(self._parent, "notes", None)  # a graph context's, which explain shows
        if note and notes is not None and note not in notes:
            notes.append(note)
        return self._remember("composite", params, ids, values, out, rule)

    # ---- differentiating
    def gradient(self, target, sources, output_gradients=None):
        """d(target)/d(sources), with the structure of ``sources``.

        ``target`` is an array (or pytree) computed from watched arrays;
        ``output_gradients`` seeds it (default: ones, so a non-scalar target
        gives the gradient of its sum). A source the target does not depend
        on gets zeros.
        """
        if self._used and not self.persistent:
            raise GradientError(
                "this GradientTape already computed a gradient; a non-persistent tape gives one "
                "gradient (use braze.GradientTape(persistent=True) for several)"
            )
        if self._recording_on_stack() and context_stack()[-1] is not self:
            raise TraceError("tape.gradient: an inner tape or trace is still active; exit it first")
        self._used = True
        targets, _ = pytree.flatten(target)
        if output_gradients is None:
            seeds = [None] * len(targets)
        else:
            seeds, _ = pytree.flatten(output_gradients)
            if len(seeds) != len(targets):
                raise GradientError(
                    f"tape.gradient: {len(seeds)} output gradients for {len(targets)} targets{where()}"
                )
        source_leaves, source_tree = pytree.flatten(sources)
        for s in source_leaves:
            if not (isinstance(s, Watched) and s._tape is self):
                raise GradientError(
                    f"tape.gradient: a source of type {type(s).__name__} is not watched by this tape"
                    f"{where()}; pass the arrays tape.watch returned (or results computed from them)"
                )
        pause = self.stop_recording() if self._recording_on_stack() else _nothing()
        with pause, np.errstate(all="ignore"):
            grads = self._backward(targets, seeds, [s._origin for s in source_leaves])
            out = [g if g is not None else bnp.zeros_like(_detach(s)) for g, s in zip(grads, source_leaves)]
        if not self.persistent:
            self._records = []
        return pytree.unflatten(source_tree, out)

    def _backward(self, targets, seeds, source_ids) -> list:
        cts: dict[int, Any] = {}
        for t, seed in zip(targets, seeds):
            value, ident = primal_parts(t, self)
            if ident is None:
                continue
            if seed is None:
                seed = bnp.ones_like(value)
            else:
                seed = _fit(seed, _shape(value), _dtype(value), "output gradient")
            cts[ident] = _add(cts.get(ident), seed)
        for rec in reversed(self._records):
            if not any(i in cts for i in rec.out_ids if i is not None):
                continue
            out_cts = []
            for i, v in zip(rec.out_ids, rec.out_values):
                ct = cts.get(i) if i is not None else None
                sparse = rec.multi and getattr(rec.rule, "sparse", False)
                out_cts.append(ct if ct is not None else (bnp.zeros_like(v) if rec.multi and not sparse else None))
            if rec.rule is not None:
                in_cts = rec.rule(tuple(out_cts) if rec.multi else out_cts[0])
            else:
                fn = VJP[rec.op]
                extra = {"wants": tuple(i is not None for i in rec.in_ids)} if PRIMITIVES[rec.op].wants else {}
                if rec.multi:  # (qr, eigh, svd: the cotangents and values of all results)
                    in_cts = fn(tuple(out_cts), *rec.in_values, out=tuple(rec.out_values), **extra, **rec.params)
                else:
                    in_cts = fn(out_cts[0], *rec.in_values, out=rec.out_values[0], **extra, **rec.params)
            for ident, value, ct in zip(rec.in_ids, rec.in_values, in_cts):
                if ident is None or ct is None:
                    continue
                ct = _fit(ct, _shape(value), _dtype(value), rec.op)
                cts[ident] = _add(cts.get(ident), ct)
        return [cts.get(i) for i in source_ids]


def _make_view(result: Watched, base: Watched, op: str, params: dict) -> None:
    """``result`` of view op ``op`` on ``base`` is a view of it, as in NumPy
    (a reshape only where NumPy's needs no copy; never a view of a scalar)."""
    if not is_view_op(op) or base._is_scalar():
        return
    result._view = make_view(op, params, base, strides_of(base._value), tuple(base.shape), tuple(result.shape))
    result._base_version = base._version


@contextmanager
def _nothing():
    yield


def _add(a, b):
    return b if a is None else bnp.add(a, b)


def _fit(ct, shape: tuple, dtype, op: str):
    """Undo broadcasting (sum over broadcast axes) and cast to the input's dtype.

    The one place broadcasting is undone: VJP rules return cotangents in
    the broadcast shape of the op's result.
    """
    cshape = _shape(ct)
    if cshape != shape:
        lead = len(cshape) - len(shape)
        if lead < 0 or any(s != 1 and s != c for s, c in zip(shape, cshape[lead:])):
            try:
                return _fit(bnp.broadcast_to(ct, shape), shape, dtype, op)
            except BrazeError:
                raise GradientError(
                    f"{op}: a cotangent of shape {cshape} does not fit an input of shape {shape}"
                ) from None
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and cshape[lead + i] != 1)
        if axes:
            ct = bnp.sum(ct, axis=axes, keepdims=False)
        ct = bnp.reshape(ct, shape)
    if _dtype(ct) != np.dtype(dtype):
        ct = bnp.astype(ct, dtype)
    return ct


# ---------------------------------------------------------------- rules for untraced calls

# callable -> its VJP rule: NumPy functions braze runs as graph breaks (np.linalg.lstsq,
# whose rule is with the other linear-algebra rules), and the user's (braze.defvjp).
HOST_RULES: dict = {np.linalg.lstsq: lstsq_vjp}


def _order_statistic_vjp(fraction):
    """The VJP of NumPy's ``quantile`` family (method "linear", the default):
    the value at ``q`` is ``s[j] + g * (s[j+1] - s[j])`` of the sorted values
    ``s`` at virtual index ``q * (n - 1) = j + g``, so its cotangent goes to
    the elements sorted at ``j`` and ``j+1`` with weights ``1 - g`` and ``g``
    (JAX's rule: ties get the gradient where the stable sort puts them)."""
    def vjp(ct, a, q=None, axis=None, *rest, out, method="linear", keepdims=False, **kwargs):
        if method != "linear" or rest or isinstance(axis, (tuple, list)) or kwargs.get("weights") is not None:
            raise GradientError(f"no gradient rule for this order statistic's arguments (method={method!r}, "
                                f"axis={axis!r}); only method='linear' over one axis or all{where()}")
        if q is not None and hasattr(q, "_node"):
            raise GradientError(f"no gradient for a traced q of an order statistic{where()}; pass q as a "
                                "number or a NumPy array")
        qs = np.asarray(0.5 if q is None else q, dtype=np.float64) * fraction
        shape = np.shape(a)
        x = np.reshape(a, (-1,)) if axis is None else np.moveaxis(a, axis, -1)
        n = np.shape(x)[-1]
        perm = np.argsort(x, axis=-1, kind="stable")
        ct = np.asarray(ct) if not hasattr(ct, "_node") and not hasattr(ct, "_value_") else ct
        if keepdims:  # (the kept axis, size 1, out of the way: the reduced shape)
            ct = np.reshape(ct, np.shape(ct)[: np.ndim(qs)] + (np.shape(x)[:-1] if axis is not None else ()))
        weights = 0.0
        for k, qk in enumerate(qs.reshape(-1)):
            v = qk * (n - 1)
            j = min(int(np.floor(v)), n - 1)
            g = v - j
            row = np.zeros(n)
            row[j] += 1.0 - g
            row[min(j + 1, n - 1)] += g
            ck = ct[np.unravel_index(k, qs.shape)] if qs.ndim else ct
            weights = weights + np.multiply(np.expand_dims(ck, -1), row)
        g_sorted = np.broadcast_to(weights, np.shape(x))
        grad = np.take_along_axis(g_sorted, np.argsort(perm, axis=-1, kind="stable"), axis=-1)
        grad = np.reshape(grad, shape) if axis is None else np.moveaxis(grad, -1, axis)
        return (grad,) + (None,) * (1 if q is not None else 0)
    return vjp


HOST_RULES.update({np.median: _order_statistic_vjp(1.0), np.quantile: _order_statistic_vjp(1.0),
                   np.percentile: _order_statistic_vjp(0.01)})


def defvjp(fn: Callable, vjp: Callable, *, name: str | None = None) -> Callable:
    """Give ``fn``, a function braze does not trace (a NumPy function it runs
    as a graph break, a SciPy or LAPACK call, the user's own NumPy code), a
    gradient rule. Returns ``fn`` wrapped so that it runs as one graph break
    on traced arrays and is differentiated with ``vjp``; a NumPy function
    that dispatches on arrays (``np.linalg.lstsq``) gets the rule wherever
    it is called.

    ``vjp(ct, *args, out=result, **kwargs)`` returns one cotangent per
    positional argument of the call (None for an argument with none). ``ct``
    has the structure of ``fn``'s result: a tuple for several results, with
    None for a result nothing depended on. The rule is written with NumPy
    calls, which braze traces (so gradients of gradients work).

    >>> import numpy as np, braze
    >>> def cube(x):
    ...     return np.asarray(x) ** 3  # (np.asarray: braze could not trace it)
    >>> cube = braze.defvjp(cube, lambda ct, x, *, out: (3 * x ** 2 * ct,))
    >>> float(braze.grad(lambda x: cube(x).sum())(np.array(2.0)))
    12.0
    """
    if not callable(fn) or not callable(vjp):
        raise GradientError(f"braze.defvjp needs a function and a VJP rule (both callable), got "
                            f"{type(fn).__name__} and {type(vjp).__name__}{where()}")
    label = name or f"{getattr(fn, '__module__', None) or ''}.{getattr(fn, '__qualname__', repr(fn))}".lstrip(".")
    HOST_RULES[fn] = vjp

    def untraced(*args, **kwargs):
        return call_untraced(fn, label, args, kwargs)

    untraced.__name__ = getattr(fn, "__name__", "untraced")
    untraced.__qualname__ = getattr(fn, "__qualname__", untraced.__name__)
    untraced.__doc__ = getattr(fn, "__doc__", None)
    untraced.__wrapped__ = fn
    return untraced


# ---------------------------------------------------------------- functional API


def _check_argnums(fn_name: str, argnums, nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not isinstance(a, int) or not -nargs <= a < nargs:
            raise GradientError(
                f"{fn_name}: argnums={argnums!r} does not name a positional argument of a call with "
                f"{nargs} positional argument(s){where()}"
            )
    return tuple(a % nargs for a in nums)


def _unwrap_tree(tree, tape):
    return pytree.map_leaves(lambda v: primal_parts(v, tape)[0] if isinstance(v, Watched) else v, tree)


def _scalar_output(fn_name: str, out):
    if not hasattr(out, "shape") and not isinstance(out, (int, float, np.generic)):
        raise GradientError(
            f"{fn_name}: the function must return a scalar array, got {type(out).__name__}{where()}; "
            "use has_aux=True to return (loss, aux)"
        )
    if _shape(out) != ():
        raise GradientError(
            f"{fn_name}: the function must return a scalar, got an array of shape {_shape(out)}{where()}; "
            "reduce it (e.g. .sum() or .mean()) or use braze.vjp for non-scalar outputs"
        )
    if not differentiable(_dtype(out)):
        raise GradientError(f"{fn_name}: the function returned a {_dtype(out)} scalar, which has no gradient{where()}")


def value_and_grad(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``fn`` -> a function returning ``(fn(*args), grad)`` (``((value, aux), grad)``
    with ``has_aux``). ``grad`` has the structure of ``args[argnums]`` (a tuple
    of those when ``argnums`` is a tuple). Works eagerly on NumPy arrays, inside
    ``braze.compile``, and nested (``grad(grad(f))``).

    >>> import numpy as np, braze
    >>> braze.value_and_grad(lambda x: np.sum(np.sin(x)))(np.zeros(2))
    (np.float64(0.0), array([1., 1.]))
    """
    name = f"value_and_grad({getattr(fn, '__name__', 'fn')})"

    def wrapped(*args, **kwargs):
        nums = _check_argnums(name, argnums, len(args))
        with GradientTape() as tape:
            args = list(args)
            watched = {}
            for a in nums:
                watched[a] = pytree.map_leaves(lambda leaf: tape._watch_leaf(leaf, f"{name} argument {a}"), args[a])
                args[a] = watched[a]
            out = fn(*args, **kwargs)
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise GradientError(f"{name}: with has_aux=True the function must return (value, aux){where()}")
            value, aux = out
        else:
            value, aux = out, None
        _scalar_output(name, value)
        sources = tuple(watched[a] for a in nums)
        grads = tape.gradient(value, sources)
        grads = grads[0] if isinstance(argnums, int) else grads
        value = _unwrap_tree(value, tape)
        if has_aux:
            return (value, _unwrap_tree(aux, tape)), grads
        return value, grads

    wrapped.__name__ = name
    wrapped.__wrapped__ = fn
    return wrapped


def grad(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``fn`` (returning a scalar) -> a function returning its gradient with
    respect to ``args[argnums]`` (plus ``aux`` with ``has_aux=True``).

    >>> import numpy as np, braze
    >>> braze.grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([ 3., 12.])
    """
    vg = value_and_grad(fn, argnums, has_aux)

    def wrapped(*args, **kwargs):
        (value, grads) = vg(*args, **kwargs)
        if has_aux:
            return grads, value[1]
        return grads

    wrapped.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
    wrapped.__wrapped__ = fn
    return wrapped


def vjp(fn: Callable, *primals, has_aux: bool = False):
    """``(fn(*primals), vjp_fn)``: ``vjp_fn(cotangent)`` returns one cotangent per
    primal (with its structure), for a cotangent shaped like the output.
    Integer leaves of the primals get ``None``.

    >>> import numpy as np, braze
    >>> y, back = braze.vjp(lambda x: x * 2.0, np.ones(2))
    >>> back(np.array([1.0, 3.0]))
    (array([2., 6.]),)
    """
    tape = GradientTape(persistent=True)
    with tape:
        watched = [pytree.map_leaves(lambda leaf: tape._watch_leaf(leaf) if differentiable(_dtype(leaf)) else leaf, p)
                   for p in primals]
        out = fn(*watched)
    if has_aux:
        out, aux = out
    out_leaves, out_tree = pytree.flatten(out)
    value = _unwrap_tree(out, tape)

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = pytree.flatten(cotangent)
        if ct_tree != out_tree:
            raise GradientError(
                f"vjp_fn: the cotangent has structure {pytree.describe(ct_tree)} but the function "
                f"returned {pytree.describe(out_tree)}{where()}"
            )
        for ct, o in zip(ct_leaves, out_leaves):
            if _shape(ct) != _shape(o):
                raise GradientError(
                    f"vjp_fn: a cotangent of shape {_shape(ct)} for an output of shape {_shape(o)}{where()}; "
                    "cotangents have the shape of the outputs"
                )
        result = []
        for p in watched:
            leaves, tree = pytree.flatten(p)
            result.append((leaves, tree))
        sources = [leaf for leaves, _ in result for leaf in leaves if isinstance(leaf, Watched)]
        grads = iter(tape.gradient(out_leaves, sources, ct_leaves) if sources else [])
        return tuple(pytree.unflatten(tree, [next(grads) if isinstance(leaf, Watched) else None
                                             for leaf in leaves]) for leaves, tree in result)

    if has_aux:
        return value, vjp_fn, _unwrap_tree(aux, tape)
    return value, vjp_fn


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
        with GradientTape() as inner:
            watched = [inner._watch_leaf(v) if i is not None else v for v, i in zip(values, ids)]
            recomputed = comp.fn(*watched, **attrs)
        sources = [w for w, i in zip(watched, ids) if i is not None]
        grads = iter(inner.gradient(recomputed, sources, ct))
        return tuple(next(grads) if i is not None else None for i in ids)

    return out, body_rule, f"composite {name}: gradient derived from the body ({why})"


def _aval(v):
    return aval_of_value(v)


def _graph_context(ctx):
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


__all__ = ["GradientTape", "Watched", "GradientError", "grad", "value_and_grad", "vjp", "stop_gradient", "defvjp"]
