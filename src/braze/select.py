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
        if registry.is_disabled(name, target):
            choice.reason = "kernels switched off by disable_kernels"
            return _inline_later(node, target, choices, choice)
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
            return _inline_later(node, target, choices, choice)
        best = max(accepted, key=lambda e: (e.priority, e.seq))
        choice.chosen = best
        ties = [e for e in accepted if e.priority == best.priority and e is not best]
        choice.reason = f"highest priority {best.priority}" + (", later registration wins the tie" if ties else "")
        if best.abstract is not None:
            _check_declared(best, args, dict(attrs), _avals(node.aval))
        out = tuple((a.shape, np.dtype(a.dtype).str) for a in _avals(node.aval))
        return Node.make("kernel", node.inputs, node.aval, name=name, attrs=attrs, entry=best,
                         out=out, multi=isinstance(node.aval, tuple))

    return rewrite(graph, visit), choices


def _inline_later(node: Node, target: str, choices: list, choice: Choice) -> Node:
    """Keep the composite (inlined by the next pass), with its body selected too."""
    params = node.kw
    body, _ = select(params["body"], target, choices, choice.site)
    params["body"] = body
    return Node.make("composite", node.inputs, node.aval, **params)


def _kernel_abstract(*avals, **params):
    raise AssertionError("kernel nodes are made by the selection pass")


def _kernel_impl(*args, name, attrs, entry, out, multi):
    try:
        result = entry.fn(*args, **dict(attrs))
    except BrazeError:
        raise
    except Exception as exc:
        raise KernelError(
            f"kernel {entry.label} (registered at {entry.location}) for composite {name} on target "
            f"{entry.target} raised {type(exc).__name__}: {exc}; check it with braze.verify({name!r}), "
            f"or run the body instead with braze.disable_kernels({name!r})"
        ) from exc
    values = tuple(result) if multi and isinstance(result, (tuple, list)) else (result,)
    got = tuple((tuple(np.shape(v)), np.asarray(v).dtype.str) for v in values)
    if got != out:
        fmt = lambda sig: "(" + ", ".join(str(Aval(tuple(s), np.dtype(d))) for s, d in sig) + ")"
        raise CompositeError(
            f"kernel {entry.label} (registered at {entry.location}) for {name} on {entry.target} "
            f"returned {fmt(got)}, but the composite's body returns {fmt(out)}; a kernel must return "
            "exactly what the body does (declare abstract= to have this checked when tracing)"
        )
    return values if multi else values[0]


declare("kernel", "call", abstract=_kernel_abstract, impl=_kernel_impl)
