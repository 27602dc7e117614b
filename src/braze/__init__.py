"""braze: JIT kernel generation for NumPy functions.

>>> import numpy as np, braze
>>> f = braze.compile(lambda x, w: np.tanh(x @ w).sum(axis=-1), target="generic")
>>> f(np.ones((2, 3)), np.ones((3, 4))).shape
(2,)
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import ops as _ops  # noqa: F401  (declares every primitive)
from . import numpy  # noqa: F401
from .api import CacheInfo, Compiled, Lowered, cache_info, clear_cache, compile, trace  # noqa: A004
from .composite import Composite, composite
from .core import bind
from .errors import (
    BrazeError,
    CompositeError,
    ConcretizationError,
    DTypeError,
    ShapeError,
    TargetError,
    TraceError,
    UnsupportedOpError,
)
from .graph import Graph, Node

__all__ = [
    "BrazeError", "CacheInfo", "Compiled", "Composite", "CompositeError", "ConcretizationError",
    "DTypeError", "Graph", "Lowered", "Node", "ShapeError", "TargetError", "TraceError",
    "UnsupportedOpError", "bind", "cache_info", "clear_cache", "compile", "composite", "numpy", "trace",
]
