"""Target-specific kernels registered for composite ops, by name.

A kernel may be registered before (or without) the composite it serves, so a
downstream package can register by name alone. Every change bumps a version
(per name and overall): compiled functions whose selection depended on a
name re-select on their next call, without a manual cache clear.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import re
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

from .errors import CompositeError, where

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def check_name(name) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise CompositeError(
            f"composite name {name!r} breaks the naming rule{where()}: it must be at least two "
            "dot-separated Python identifiers, like 'org.semantic.opname' (e.g. 'braze.nn.softmax')"
        )
    return name


_lock = threading.Lock()
_seq = itertools.count()
_kernels: dict[str, list["KernelEntry"]] = {}
_versions: dict[str, int] = {}
VERSION = [0]  # bumped on every registration (a list: readers see the live value)

# (name or None, target or None) pairs switched off in this context
_disabled: contextvars.ContextVar[tuple] = contextvars.ContextVar("braze_disabled_kernels", default=())


@dataclass(eq=False)
class KernelEntry:
    """One registered kernel for (composite name, target)."""

    name: str
    target: str
    fn: Callable
    priority: int = 0
    when: Callable | None = None
    backward: Callable | None = None
    abstract: Callable | None = None
    location: str = "?"
    seq: int = field(default_factory=lambda: next(_seq))

    @property
    def label(self) -> str:
        return getattr(self.fn, "__name__", None) or repr(self.fn)

    def __hash__(self):
        return hash(("kernel", self.seq))

    def __repr__(self):
        return f"<kernel {self.label} for {self.name} on {self.target}, priority {self.priority}>"


def _location() -> str:
    """file:line of the code that registered (the first frame outside this
    module and composite.py, so kernels inside braze report their own file)."""
    import os
    import sys

    here = {os.path.abspath(__file__), os.path.abspath(os.path.join(os.path.dirname(__file__), "composite.py"))}
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) in here:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


# Targets kernels may be registered for (a custom braze.targets.Target adds its name).
KNOWN_TARGETS = ["generic", "cpu", "cuda"]


def register_kernel(name: str, target: str, fn: Callable | None = None, *, priority: int = 0,
                    when: Callable | None = None, backward: Callable | None = None,
                    abstract: Callable | None = None):
    """Register ``fn`` as the ``target`` kernel for the composite op ``name``.

    Usable directly or as a decorator (``fn`` omitted). ``when(*args, **attrs)``
    gets abstract arguments (``.shape``, ``.dtype``, ``.ndim``) and the
    attributes, and returns whether this kernel applies. ``abstract`` may
    declare the result (a function of the same abstract arguments returning
    ``(shape, dtype)`` pairs, or one pair), checked against the composite's
    body at trace time; otherwise results are checked on the first call.
    Among applicable kernels the highest ``priority`` wins; a tie goes to the
    later registration. ``backward`` pairs a gradient kernel with it.

    >>> import numpy as np, braze
    >>> @braze.register_kernel("example.kernels.double", "cpu")
    ... def double_cpu(x):
    ...     return x * 2
    """
    check_name(name)
    if not isinstance(target, str):
        raise CompositeError(f"register_kernel({name!r}): target must be a target name like 'cpu', got {target!r}{where()}")
    location = _location()
    if target not in KNOWN_TARGETS:
        warnings.warn(f"braze: register_kernel({name!r}, {target!r}) at {location}: no target is named "
                      f"{target!r} (known: {', '.join(KNOWN_TARGETS)}), so this kernel runs only if such a "
                      "target is defined; check the spelling", UserWarning, stacklevel=2)

    def add(fn: Callable) -> Callable:
        if not callable(fn):
            raise CompositeError(f"register_kernel({name!r}, {target!r}): {fn!r} is not callable{where()}")
        if when is not None and not callable(when):
            raise CompositeError(f"register_kernel({name!r}, {target!r}): when= must be callable{where()}")
        entry = KernelEntry(name, target, fn, int(priority), when, backward, abstract, location)
        with _lock:
            entries = _kernels.setdefault(name, [])
            clash = [e for e in entries if e.target == target and e.priority == priority]
            entries.append(entry)
            _versions[name] = _versions.get(name, 0) + 1
            VERSION[0] += 1
        if clash:
            warnings.warn(
                f"braze: kernel {entry.label} ({location}) for {name} on {target} has the same priority "
                f"{priority} as {clash[-1].label} ({clash[-1].location}); the later registration wins",
                UserWarning, stacklevel=2,
            )
        return fn

    return add if fn is None else add(fn)


def kernels(name: str, target: str | None = None) -> list[KernelEntry]:
    """The kernels registered for ``name`` (on ``target``), in registration order."""
    return [e for e in _kernels.get(name, []) if target is None or e.target == target]


def all_kernels() -> dict[str, list[KernelEntry]]:
    return {name: list(entries) for name, entries in _kernels.items()}


def version(name: str) -> int:
    return _versions.get(name, 0)


def unregister(entry: KernelEntry) -> None:
    """Remove one registration (tests and interactive use)."""
    with _lock:
        entries = _kernels.get(entry.name, [])
        if entry in entries:
            entries.remove(entry)
            _versions[entry.name] = _versions.get(entry.name, 0) + 1
            VERSION[0] += 1


def is_disabled(name: str, target: str) -> bool:
    return any((n is None or n == name) and (t is None or t == target) for n, t in _disabled.get())


def disabled_state() -> tuple:
    return _disabled.get()


@contextlib.contextmanager
def disable_kernels(name: str | None = None, target: str | None = None):
    """Within the block, composites ``name`` (all if None) on ``target`` (all if
    None) run their bodies instead of registered kernels.

    >>> import braze
    >>> with braze.disable_kernels("braze.nn.softmax", target="cpu"):
    ...     pass
    """
    token = _disabled.set(_disabled.get() + ((name, target),))
    try:
        yield
    finally:
        _disabled.reset(token)
