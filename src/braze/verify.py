"""Checking registered kernels against their composites' bodies.

``verify`` runs every registered kernel (or those of one composite) on its
composite's example inputs, each kernel itself (not the one selection would
pick), and compares with the body evaluated on the ``generic`` target. It
also checks what runs when no kernel is chosen: the composite's body as each
compiling target inlines and fuses it (a ``body`` row per target and dtype). ``braze.testing`` wraps
it for pytest.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import registry
from .api import compile  # noqa: A004
from .composite import defined
from .errors import CompositeError
from .aval import is_ndarray
from .targets import available


@dataclass
class Report:
    name: str
    kernel: str
    target: str
    dtype: str
    max_abs_error: float
    max_rel_error: float
    examples: int
    ok: bool
    detail: str = ""

    def __str__(self):
        status = "ok" if self.ok else "FAILED"
        return (f"{self.name:28s} {self.kernel:28s} {self.target:7s} {self.dtype:8s} "
                f"max abs {self.max_abs_error:.3g}  max rel {self.max_rel_error:.3g}  "
                f"({self.examples} examples) {status} {self.detail}")


def _examples(comp):
    if comp.examples is None:
        raise CompositeError(f"composite {comp.name} has no examples; pass examples= to @braze.composite")
    for ex in comp.examples():
        if isinstance(ex, tuple) and len(ex) == 2 and isinstance(ex[1], dict):
            yield ex[0], ex[1]
        else:
            yield tuple(ex), {}


def _tolerance(dtype) -> float:
    return {"float32": 2e-5, "float64": 1e-11}.get(np.dtype(dtype).name, 0.0)


def verify(name: str | None = None, targets=None, *, raise_on_error: bool = False) -> list[Report]:
    """Check every registered kernel for ``name`` (all names if None) on
    ``targets`` (all if None) against its composite's body on the generic
    target, over the composite's examples; one ``Report`` per kernel and dtype.

    >>> import braze
    >>> isinstance(braze.verify("no.such.op"), list)
    True
    """
    targets = (targets,) if isinstance(targets, str) else targets
    reports = []
    for cname, comps in defined(name).items():
        comp = comps[-1]
        reports.extend(_verify_body(cname, comp, _body_targets(targets)))
        for entry in registry.kernels(cname):
            if targets is not None and entry.target not in targets:
                continue
            target = available().get(entry.target)
            if target is None or not target.is_available():
                if targets is not None:  # asked for by name: say it could not be checked
                    reports.append(Report(cname, entry.label, entry.target, "-", 0.0, 0.0, 0, False,
                                          f"not checked: target {entry.target!r} is not available here"))
                continue  # (every available target otherwise: a cuda kernel needs a GPU)
            if comp.examples is None:
                reports.append(Report(cname, entry.label, entry.target, "-", 0.0, 0.0, 0, False,
                                      "not checked: the composite has no examples="))
                continue
            by_dtype: dict[str, Report] = {}
            for args, attrs in _examples(comp):
                call = _bind_attrs(comp, attrs)

                ref = compile(call, target="generic")
                with registry.disable_kernels(cname), np.errstate(all="ignore"):  # examples hold NaN and inf
                    want = ref(*args)
                if entry.when is not None and not entry.when(*[_abstract(a) for a in args], **attrs):
                    continue  # this kernel does not apply to this example
                floats = [a for a in args if is_ndarray(a) and a.dtype.kind == "f"]
                dtype = np.result_type(*(floats or [a for a in args if is_ndarray(a)])).name
                rep = by_dtype.setdefault(dtype, Report(cname, entry.label, entry.target, dtype, 0.0, 0.0, 0, True))
                try:
                    with np.errstate(all="ignore"):
                        got = entry.fn(*args, **attrs)  # this kernel, whatever selection would pick
                        residuals = None
                        if entry.backward is not None:
                            got, residuals = got  # a kernel pair's forward returns (output, residuals)
                except Exception as exc:  # a kernel that raises fails verification
                    rep.ok, rep.detail = False, f"{type(exc).__name__}: {exc}"
                    rep.examples += 1
                    continue
                _compare(rep, got, want)
                rep.examples += 1
                if residuals is not None and all(np.asarray(w).dtype.kind == "f" for w in _tuple(want)):
                    back = by_dtype.setdefault(dtype + " grad", Report(
                        cname, entry.label + " backward", entry.target, dtype, 0.0, 0.0, 0, True))
                    _check_backward(back, entry, call, cname, args, attrs, want, residuals)
            reports.extend(by_dtype.values())
    if raise_on_error and not all(r.ok for r in reports):
        raise CompositeError("kernel verification failed:\n" + "\n".join(str(r) for r in reports if not r.ok))
    return reports


def _body_targets(targets) -> list[str]:
    """The compiling targets a composite's body is checked on: those asked for,
    or every available one (generic is the reference itself)."""
    names = list(targets) if targets is not None else [n for n, t in available().items() if t.is_available()]
    return [n for n in names if n != "generic"]


def _verify_body(cname: str, comp, targets) -> list[Report]:
    """The composite's body as each target compiles it (kernels switched off, so
    the body is inlined and fused) against the body on the generic target."""
    reports = []
    for target in targets:
        if comp.examples is None:
            reports.append(Report(cname, "body", target, "-", 0.0, 0.0, 0, False,
                                  "not checked: the composite has no examples="))
            continue
        by_dtype: dict[str, Report] = {}
        for args, attrs in _examples(comp):
            call = _bind_attrs(comp, attrs)
            floats = [a for a in args if is_ndarray(a) and a.dtype.kind == "f"]
            dtype = np.result_type(*(floats or [a for a in args if is_ndarray(a)])).name
            rep = by_dtype.setdefault(dtype, Report(cname, "body (inlined, fused)", target, dtype, 0.0, 0.0, 0, True))
            with registry.disable_kernels(cname), np.errstate(all="ignore"):
                want = compile(call, target="generic")(*args)
                try:
                    got = compile(call, target=target)(*args)
                except Exception as exc:
                    rep.ok, rep.detail = False, f"{type(exc).__name__}: {exc}"
                    rep.examples += 1
                    continue
            _compare(rep, got, want)
            rep.examples += 1
            if all(np.asarray(w).dtype.kind == "f" and np.isfinite(w).all() for w in _tuple(want)):
                back = by_dtype.setdefault(dtype + " grad", Report(
                    cname, "body backward", target, dtype, 0.0, 0.0, 0, True))
                _check_body_backward(back, call, cname, args, want, target)
        reports.extend(by_dtype.values())
    return reports


def _check_body_backward(rep: Report, call, cname: str, args, want, target: str) -> None:
    """The body's gradient as ``target`` compiles it (paired forward/backward)
    against the generic target's, for a seeded random cotangent."""
    rng = np.random.default_rng(0)
    cts = tuple(rng.standard_normal(np.shape(w)).astype(np.asarray(w).dtype) for w in _tuple(want))
    ct = cts if isinstance(want, tuple) else cts[0]
    with registry.disable_kernels(cname), np.errstate(all="ignore"):
        _, vjp = compile(call, target="generic").vjp(*args)
        expected = vjp(ct)
        try:
            _, vjp = compile(call, target=target).vjp(*args)
            got = vjp(ct)
        except Exception as exc:
            rep.ok, rep.detail = False, f"{type(exc).__name__}: {exc}"
            rep.examples += 1
            return
    _compare(rep, tuple(got), tuple(expected))
    rep.examples += 1


def _tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _compare(rep: Report, got, want) -> None:
    """Fold the differences between a kernel's results and the body's into ``rep``."""
    for g, w in zip(_tuple(got), _tuple(want)):
        if w is None:
            continue
        g, w = _host(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            rep.ok, rep.detail = False, f"returned {g.dtype}{list(g.shape)}, body {w.dtype}{list(w.shape)}"
            continue
        if w.dtype.kind in "biu":
            bad = np.count_nonzero(g != w)
            rep.max_abs_error = max(rep.max_abs_error, float(bad))
            rep.ok &= bad == 0
            continue
        finite = np.isfinite(w)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            rep.ok, rep.detail = False, "NaN positions differ"
        err = np.abs(g[finite].astype(np.float64) - w[finite]) if finite.any() else np.zeros(1)
        rel = err / np.maximum(np.abs(w[finite]).astype(np.float64), 1.0) if finite.any() else err
        rep.max_abs_error = max(rep.max_abs_error, float(err.max(initial=0.0)))
        rep.max_rel_error = max(rep.max_rel_error, float(rel.max(initial=0.0)))
        rep.ok &= rep.max_rel_error <= _tolerance(w.dtype) * 50


def _check_backward(rep: Report, entry, call, cname: str, args, attrs, want, residuals) -> None:
    """A kernel pair's backward against the gradient derived from the body (generic
    target), for a seeded random cotangent; skipped where the body's result is not
    finite (its gradient is NaN there either way)."""
    if not all(np.isfinite(np.asarray(w)).all() for w in _tuple(want)):
        return
    rng = np.random.default_rng(0)
    cts = tuple(rng.standard_normal(np.shape(w)).astype(np.asarray(w).dtype) for w in _tuple(want))
    ct = cts if isinstance(want, tuple) else cts[0]
    try:
        with registry.disable_kernels(cname), np.errstate(all="ignore"):
            _, vjp = compile(call, target="generic").vjp(*args)
            body = vjp(ct)
        with np.errstate(all="ignore"):
            got = entry.backward(residuals, ct, **attrs)
    except Exception as exc:
        rep.ok, rep.detail = False, f"{type(exc).__name__}: {exc}"
        rep.examples += 1
        return
    if not isinstance(got, (tuple, list)) or len(got) != len(body):
        rep.ok, rep.detail = False, f"backward returned {len(got) if isinstance(got, (tuple, list)) else got!r} " \
                                    f"cotangents for {len(body)} arguments"
    else:
        _compare(rep, tuple(got), tuple(body))
    rep.examples += 1


def _host(value) -> np.ndarray:
    """A kernel result on the host (device arrays, e.g. from cuda kernels, are copied)."""
    if hasattr(value, "copy_to_host"):
        return value.copy_to_host()
    if hasattr(value, "__cuda_array_interface__"):
        from numba import cuda

        return cuda.as_cuda_array(value).copy_to_host()
    return np.asarray(value)


def _bind_attrs(comp, attrs):
    """``comp`` with its attributes fixed (closed over, so they stay static)."""
    def call(*args):
        return comp(*args, **attrs)

    return call


def _abstract(a):
    from .aval import aval_of_value

    return aval_of_value(a)
