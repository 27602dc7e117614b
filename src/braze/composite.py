"""Composite ops: named functions recorded as one node that carries their body.

``@braze.composite("org.semantic.opname")`` marks a function as a standard
composite op (see DESIGN.md). Its keyword-only parameters are the op's
named attributes: static and hashable. Eagerly the body runs on NumPy
arrays; while tracing, each call becomes one ``composite`` node whose
``body`` param is the traced sub-graph, so later passes can swap in a
registered kernel or inline the body.
"""
from __future__ import annotations

import inspect

from . import pytree
from .core import bind
from .errors import CompositeError, where
from .registry import check_name, register_kernel
from .tracing import TRACE_RULES, trace_flat

class Composite:
    """A named composite op. Call it like the function it wraps."""

    def __init__(self, name: str, fn, examples=None):
        self.name = check_name(name)
        self.fn = fn
        self.examples = examples  # () -> list of (args, attrs) or of argument tuples
        self._vjp = None  # (fwd, bwd) from defvjp
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self._sig = inspect.signature(fn)
        self.attr_names = tuple(
            p.name for p in self._sig.parameters.values() if p.kind is p.KEYWORD_ONLY
        )

    def __call__(self, *args, **attrs):
        unknown = set(attrs) - set(self.attr_names)
        if unknown:
            raise CompositeError(
                f"composite {self.name}: unknown attribute(s) {sorted(unknown)}{where()}; "
                f"its attributes (keyword-only parameters) are {list(self.attr_names)}"
            )
        try:
            bound = self._sig.bind(*args, **attrs)
        except TypeError as exc:
            raise CompositeError(f"composite {self.name}: {exc}{where()}") from None
        bound.apply_defaults()
        values = {k: bound.arguments[k] for k in self.attr_names}
        attr_items = tuple(sorted(values.items()))
        try:
            hash(attr_items)
        except TypeError:
            bad = [k for k, v in values.items() if not _hashable(v)]
            raise CompositeError(
                f"composite {self.name}: attribute(s) {bad} are not hashable{where()}; attributes "
                "are static: pass tuples instead of lists, and arrays as positional arguments"
            ) from None
        arrays = [v for k, v in bound.arguments.items() if k not in values]
        flat = []
        for value in arrays:
            flat.extend(value if isinstance(value, tuple) and _is_varargs(self._sig, value, bound) else [value])
        return bind("composite", *flat, composite=self, attrs=attr_items)

    def defvjp(self, fwd, bwd) -> "Composite":
        """Give this composite a custom gradient, in the shape of ``jax.custom_vjp``.

        ``fwd(*args, **attrs)`` returns ``(out, residuals)``; ``bwd(residuals,
        cotangent, **attrs)`` (attributes only if the composite has any)
        returns a tuple with one cotangent per array argument (None for
        integer ones). Both are written with NumPy calls like the body, so
        they run eagerly, compiled, and differentiated again. Without
        ``defvjp`` the gradient is derived from the body.

        >>> import numpy as np, braze
        >>> @braze.composite("example.math.cube")
        ... def cube(x):
        ...     return x ** 3
        >>> cube.defvjp(lambda x: (x ** 3, (x,)), lambda res, g: (3 * res[0] ** 2 * g,))
        <braze.composite example.math.cube>
        >>> braze.grad(lambda x: cube(x).sum())(np.array([1.0, 2.0]))
        array([ 3., 12.])
        """
        if not callable(fwd) or not callable(bwd):
            raise CompositeError(f"composite {self.name}: defvjp needs two functions, fwd and bwd{where()}")
        self._vjp = (fwd, bwd)
        return self

    def register(self, target: str, *, priority: int = 0, when=None, backward=None, abstract=None):
        """Decorator: register a ``target`` kernel for this composite (see
        ``braze.register_kernel``)."""
        return register_kernel(self.name, target, priority=priority, when=when, backward=backward,
                               abstract=abstract)

    def __repr__(self):
        return f"<braze.composite {self.name}>"


def _is_varargs(sig, value, bound) -> bool:
    for name, param in sig.parameters.items():
        if param.kind is param.VAR_POSITIONAL and bound.arguments.get(name) is value:
            return True
    return False


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def composite(name: str, *, examples=None):
    """Decorator: make ``fn`` the composite op ``name`` (``org.semantic.opname``).

    >>> import numpy as np, braze
    >>> @braze.composite("example.math.scale")
    ... def scale(x, *, k=2.0):
    ...     return x * k
    >>> scale(np.ones(2), k=3.0)
    array([3., 3.])
    """
    check_name(name)

    def decorate(fn) -> Composite:
        comp = Composite(name, fn, examples)
        _DEFINED.setdefault(name, []).append(comp)
        return comp

    return decorate


# name -> composites declaring it (several functions may declare one name)
_DEFINED: dict[str, list[Composite]] = {}


def defined(name: str | None = None) -> dict[str, list[Composite]]:
    return {n: list(c) for n, c in _DEFINED.items() if name is None or n == name}


def _trace_composite(ctx, inputs, params):
    comp, attrs = params["composite"], params["attrs"]
    out_tree = []

    def body(*tracers):
        out = comp.fn(*tracers, **dict(attrs))
        leaves, treedef = pytree.flatten(out)
        out_tree.append(treedef)
        return leaves

    graph, mutated = trace_flat(body, [n.aval for n in inputs], [f"arg{i}" for i in range(len(inputs))])
    if mutated:
        raise CompositeError(
            f"composite {comp.name}: its body updates argument(s) {mutated} in place{where()}; "
            "composite bodies must be pure: return new arrays instead"
        )
    if out_tree[0] == pytree.LEAF:
        aval = graph.outputs[0].aval
    elif out_tree[0][0] in ("tuple", "list") and all(c == pytree.LEAF for c in out_tree[0][2]):
        aval = tuple(o.aval for o in graph.outputs)
    else:
        raise CompositeError(
            f"composite {comp.name} must return an array or a tuple of arrays, got "
            f"{pytree.describe(out_tree[0])}{where()}"
        )
    return {"name": comp.name, "attrs": attrs, "body": graph, "site": ctx.next_site()}, aval


TRACE_RULES["composite"] = _trace_composite
