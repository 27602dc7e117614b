"""Targets: where a graph runs. One module per target, sharing ``Target``.

``resolve(name_or_target)`` turns what a user passes as ``target=`` into a
Target object, or raises ``TargetError`` listing what is available.
"""
from __future__ import annotations

from braze.errors import TargetError, where

from .base import Target
from .generic import GenericTarget

_TARGETS: dict[str, Target] = {"generic": GenericTarget()}

# "auto" takes the first available of these.
AUTO_ORDER = ("cuda", "cpu", "generic")


def available() -> dict[str, Target]:
    """Every known target by name (available or not)."""
    return dict(_TARGETS)


def resolve(target) -> Target:
    if isinstance(target, Target):
        return target
    if target == "auto":
        for name in AUTO_ORDER:
            t = _TARGETS.get(name)
            if t is not None and t.is_available():
                return t
    if isinstance(target, str) and target in _TARGETS:
        t = _TARGETS[target]
        t.check_available()
        return t
    names = ", ".join(["auto"] + [f"{n}" for n in _TARGETS])
    raise TargetError(
        f"unknown target {target!r}{where()}; available targets: {names} "
        "(or pass a braze.targets.Target object)"
    )


__all__ = ["Target", "GenericTarget", "resolve", "available"]
