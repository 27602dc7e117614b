"""Targets: where a graph runs. One module per target, sharing ``Target``.

``resolve(name_or_target)`` turns what a user passes as ``target=`` into a
Target object, or raises ``TargetError`` listing what is available.
"""
from __future__ import annotations

from braze.errors import TargetError, where

from .base import Target
from .generic import GenericTarget


def _cpu() -> Target:
    from .cpu import CPUTarget  # imports numba: only when asked for

    return CPUTarget()


def _cuda() -> Target:
    from .cuda import CUDATarget  # imports numba.cuda only when probed

    return CUDATarget()


_FACTORIES = {"generic": GenericTarget, "cpu": _cpu, "cuda": _cuda}
_TARGETS: dict[str, Target] = {}


def get(name: str) -> Target:
    if name not in _TARGETS:
        _TARGETS[name] = _FACTORIES[name]()
    return _TARGETS[name]

# "auto" takes the first available of these.
AUTO_ORDER = ("cuda", "cpu", "generic")


def available() -> dict[str, Target]:
    """Every known target by name (available or not)."""
    return {name: get(name) for name in _FACTORIES}


def resolve(target) -> Target:
    if isinstance(target, Target):
        return target
    if target == "auto":
        for name in AUTO_ORDER:
            if name in _FACTORIES and get(name).is_available():
                return get(name)
    if isinstance(target, str) and target in _FACTORIES:
        t = get(target)
        t.check_available()
        return t
    names = ", ".join(["auto"] + list(_FACTORIES))
    raise TargetError(
        f"unknown target {target!r}{where()}; available targets: {names} "
        "(or pass a braze.targets.Target object)"
    )


__all__ = ["Target", "GenericTarget", "resolve", "available"]
