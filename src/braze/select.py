"""The selection pass: each composite call becomes a registered kernel or its body.

Rule (DESIGN.md): among the kernels registered for (name, target) whose
``when`` accepts the call's abstract arguments and attributes, take the
highest priority; a tie goes to the later registration; if none, the body
is inlined and fusion compiles it. A kernel chosen for an outer composite
wins over anything inside it. Every decision is recorded as a ``Choice``
for ``explain``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import registry
from .aval import Aval
from .core import declare
from .errors import BrazeError, CompositeError
from .graph import Graph, Node
from .passes import rewrite


class KernelError(BrazeError):
    """A registered kernel failed or returned something other than it must."""


@dataclass
class Choice:
    name: str
    attrs: tuple
    candidates: list = field(default_factory=list)  # (entry, verdict) pairs
    chosen: registry.KernelEntry | None = None
    reason: str = ""
    site: tuple = ()  # the call's site path (for "fused into kernel k")

    def describe(self, fused_into: str | None = None) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs)
        lines = [f"composite {self.name}[{attrs}]"]
        if not self.candidates:
            lines.append("  no kernels registered for this target")
        for entry, verdict in self.candidates:
            lines.append(f"  candidate {entry.label} (priority {entry.priority}, {entry.location}): {verdict}")
        if self.chosen is not None:
            lines.append(f"  chosen: {self.chosen.label} ({self.reason})")
        else:
            where = f", fused into kernel {fused_into}" if fused_into else ""
            lines.append(f"  chosen: body inlined{where} ({self.reason})")
        return "\n".join(lines)


def _avals(aval) -> tuple:
    return aval if isinstance(aval, tuple) else (aval,)


def _signature(avals) -> str:
    return "(" + ", ".join(str(a) for a in avals) + ")"


def _check_declared(entry, args, attrs, body_avals) -> None:
    declared = entry.abstract(*args, **attrs)
    if isinstance(declared, tuple) and len(declared) == 2 and isinstance(declared[1], (np.dtype, type, str)):
        declared = [declared]  # one (shape, dtype) pair rather than a sequence of them
    declared_avals = tuple(Aval(tuple(s), np.dtype(d)) for s, d in declared)
    expected = tuple(Aval(a.shape, a.dtype) for a in body_avals)
    if declared_avals != expected:
        raise CompositeError(
            f"kernel {entry.label} (registered at {entry.location}) for {entry.name} on {entry.target} "
            f"declares results {_signature(declared_avals)}, but the composite's body returns "
            f"{_signature(expected)}; a kernel must return exactly what the body does"
        )


def select(graph: Graph, target: str, choices: list[Choice] | None = None,
           prefix: tuple = ()) -> tuple[Graph, list[Choice]]:
    """``graph`` with each chosen composite replaced by a ``kernel`` node."""
    choices = [] if choices is None else choices

    def visit(node: Node) -> Node:
        if node.op != "composite":
            return node
        params = node.kw
        name, attrs = params["name"], params["attrs"]
        choice = Choice(name, attrs, site=prefix + (params.get("site"),))
        choices.append(choice)
        args = [i.aval for i in node.inputs]
        best = _pick(name, target, args, attrs, choice)
        if best is None:
            return _inline_later(node, target, choices, choice)
        if best.abstract is not None:
            _check_declared(best, args, dict(attrs), _avals(node.aval))
        out = tuple((a.shape, np.dtype(a.dtype).str) for a in _avals(node.aval))
        return Node.make("kernel", node.inputs, node.aval, name=name, attrs=attrs, entry=best,
                         out=out, multi=isinstance(node.aval, tuple), pair=None)

    return rewrite(graph, visit), choices


def _pick(name: str, target: str, args, attrs: tuple, choice: Choice):
    """The kernel selection picks for one call (None: inline the body); fills ``choice``."""
    if registry.is_disabled(name, target):
        choice.reason = "kernels switched off by disable_kernels"
        return None
    accepted = []
    for entry in registry.kernels(name, target):
        try:
            ok = True if entry.when is None else bool(entry.when(*args, **dict(attrs)))
        except Exception as exc:
            raise CompositeError(
                f"the when= predicate of kernel {entry.label} (registered at {entry.location}) for "
                f"{name} raised {type(exc).__name__}: {exc}, for arguments {_signature(args)} and "
                f"attributes {dict(attrs)}; make it return True or False for every call"
            ) from exc
        choice.candidates.append((entry, "when accepted" if ok else "when rejected"))
        if ok:
            accepted.append(entry)
    if not accepted:
        choice.reason = "no registered kernel accepts this call" if choice.candidates else "nothing registered"
        return None
    best = max(accepted, key=lambda e: (e.priority, e.seq))
    choice.chosen = best
    ties = [e for e in accepted if e.priority == best.priority and e is not best]
    choice.reason = f"highest priority {best.priority}" + (", later registration wins the tie" if ties else "")
    return best


def choose(name: str, target: str, args, attrs: tuple):
    """The kernel the selection pass would pick for this call, or None (the body)."""
    return _pick(name, target, args, attrs, Choice(name, attrs))


_PAIR_SIGNATURES: dict = {}


def pair_signature(entry, in_avals, attrs: tuple, out_avals) -> list[Aval]:
    """The residual avals a kernel pair's forward returns for these arguments.

    A pair's forward returns ``(out, residuals)``; the residuals' shapes are
    learned by running it once on zero arrays of the call's shapes (cached).
    """
    key = (id(entry), tuple(in_avals), attrs)
    if key not in _PAIR_SIGNATURES:
        args = [a.sample() if not a.shape else np.zeros(a.shape, a.dtype) for a in in_avals]
        with np.errstate(all="ignore"):
            out, residuals = _split_pair(entry, entry.fn(*args, **dict(attrs)), len(out_avals))
        got = tuple(_signature_of(o) for o in out)
        want = tuple((a.shape, np.dtype(a.dtype).str) for a in out_avals)
        if got != want:
            fmt = lambda sig: "(" + ", ".join(str(Aval(tuple(s), np.dtype(d))) for s, d in sig) + ")"
            raise CompositeError(
                f"kernel pair {entry.label} (registered at {entry.location}) for {entry.name}: its forward "
                f"returned outputs {fmt(got)}, but the composite's body returns {fmt(want)}"
            )
        _PAIR_SIGNATURES[key] = [Aval(shape, np.dtype(dtype)) for shape, dtype in map(_signature_of, residuals)]
    return _PAIR_SIGNATURES[key]


def _is_array(value) -> bool:
    """A NumPy array or a device array (numba, CuPy, torch): kept as it is."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (list, tuple))


def _signature_of(value) -> tuple:
    """(shape, dtype.str) of a kernel result, without copying a device array to the host."""
    if _is_array(value):
        return tuple(value.shape), np.dtype(value.dtype).str
    value = np.asarray(value)
    return tuple(value.shape), value.dtype.str


def _split_pair(entry, result, nout: int):
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise CompositeError(
            f"kernel {entry.label} (registered at {entry.location}) for {entry.name} was registered "
            "with backward=, so it must return (output, residuals), where residuals is a tuple of arrays"
        )
    out, residuals = result
    out = tuple(out) if nout > 1 or isinstance(out, (tuple, list)) else (out,)
    residuals = tuple(residuals) if isinstance(residuals, (tuple, list)) else (residuals,)
    return out, residuals


def _inline_later(node: Node, target: str, choices: list, choice: Choice) -> Node:
    """Keep the composite (inlined by the next pass), with its body selected too."""
    params = node.kw
    body, _ = select(params["body"], target, choices, choice.site)
    params["body"] = body
    return Node.make("composite", node.inputs, node.aval, **params)


def _kernel_abstract(*avals, **params):
    raise AssertionError("kernel nodes are made by the selection pass")


def _kernel_impl(*args, name, attrs, entry, out=None, multi=False, pair=None, nout=0, diff=()):
    try:
        if pair == "backward":
            residuals, cts = tuple(args[:nout]), args[nout:]
            result = entry.backward(residuals, cts[0] if len(cts) == 1 else tuple(cts), **dict(attrs))
        else:
            result = entry.fn(*args, **dict(attrs))
    except BrazeError:
        raise
    except Exception as exc:
        which = "backward of kernel" if pair == "backward" else "kernel"
        raise KernelError(
            f"{which} {entry.label} (registered at {entry.location}) for composite {name} on target "
            f"{entry.target} raised {type(exc).__name__}: {exc}; check it with braze.verify({name!r}), "
            f"or run the body instead with braze.disable_kernels({name!r})"
        ) from exc
    if pair == "backward":
        if not isinstance(result, (tuple, list)) or len(result) != len(diff):
            raise CompositeError(
                f"the backward of kernel {entry.label} (registered at {entry.location}) for {name} must "
                f"return a tuple of {len(diff)} cotangents (None for integer arguments)"
            )
        return tuple(r if _is_array(r) else np.asarray(r) for r, d in zip(result, diff) if d)
    if entry.backward is not None:
        outs, residuals = _split_pair(entry, result, nout or len(out))
        if pair == "forward":
            return outs + residuals
        result = outs if multi else outs[0]
    values = tuple(result) if multi and isinstance(result, (tuple, list)) else (result,)
    got = tuple(_signature_of(v) for v in values)
    if got != out:
        fmt = lambda sig: "(" + ", ".join(str(Aval(tuple(s), np.dtype(d))) for s, d in sig) + ")"
        raise CompositeError(
            f"kernel {entry.label} (registered at {entry.location}) for {name} on {entry.target} "
            f"returned {fmt(got)}, but the composite's body returns {fmt(out)}; a kernel must return "
            "exactly what the body does (declare abstract= to have this checked when tracing)"
        )
    return values if multi else values[0]


declare("kernel", "call", abstract=_kernel_abstract, impl=_kernel_impl)
