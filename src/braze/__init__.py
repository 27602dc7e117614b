"""braze: JIT kernel generation for NumPy functions.

>>> import numpy as np, braze
>>> f = braze.compile(lambda x, w: np.tanh(x @ w).sum(axis=-1), target="generic")
>>> f(np.ones((2, 3)), np.ones((3, 4))).shape
(2,)
"""
from __future__ import annotations

from ._version import __version__

import os as _os

# Before anything starts numba's OpenMP pool (a parallel kernel of braze's, or
# of the caller's once braze is imported): idle OpenMP threads sleep instead of
# spinning, so they leave the cores to BLAS. See targets/cpu.py.
if not _os.environ.get("BRAZE_KEEP_OMP_DEFAULT"):
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import ops as _ops  # noqa: F401  (declares every primitive)
from . import numpy  # noqa: F401
from . import distributed  # noqa: F401
from .autodiff import GradientError, GradientTape, defvjp, grad, stop_gradient, value_and_grad, vjp
from .api import CacheInfo, Compiled, Lowered, cache_info, clear_cache, compile, trace  # noqa: A004
from .composite import Composite, composite
from .core import bind
from .errors import (
    ArgumentTypeError,
    AxisError,
    BrazeError,
    CompositeError,
    ConcretizationError,
    DTypeError,
    IndexOutOfRangeError,
    IndexShapeError,
    IndexTypeError,
    LinAlgShapeError,
    ShapeError,
    TargetError,
    TraceError,
    UnsupportedDTypeError,
    UnsupportedOpError,
)
from .graph import Graph, Node
from .log import set_log
from .registry import disable_kernels, register_kernel
from .select import KernelError
from .verify import verify
from . import testing  # noqa: F401
from .kernels import nn  # noqa: E402,F401  (the standard composite library: braze.nn.*)
from .kernels import nn_cpu, nn_cuda  # noqa: E402,F401  (their target kernels; numba loads on first use)

from .core import check_rules as _check_rules

_check_rules()  # every op has every rule the layers need, or braze does not import


def explain(fn, *args, **kwargs) -> str:
    """Everything braze decided for ``fn`` on these arguments, for people:
    the graph, the kernel chosen for each composite call and why, the fused
    kernels and their generated source. ``fn`` may be a compiled function
    (its target is used) or a plain one (compiled for "auto").

    >>> import numpy as np, braze
    >>> text = braze.explain(braze.compile(lambda x: np.exp(x) + 1, target="generic"), np.ones(3))
    >>> "exp" in text
    True
    """
    compiled = fn if isinstance(fn, Compiled) else compile(fn)
    if distributed.has_dask_arrays(args, kwargs):  # the partitioning onto chunks (nothing is computed)
        compiled(*args, **kwargs)
        return distributed.last_plan(compiled.__name__).describe()
    return str(compiled.lower(*args, **kwargs))

__all__ = [
    "BrazeError", "CacheInfo", "Compiled", "Composite", "CompositeError", "ConcretizationError",
    "DTypeError", "Graph", "IndexOutOfRangeError", "IndexShapeError", "IndexTypeError", "LinAlgShapeError",
    "AxisError", "ArgumentTypeError", "Lowered", "Node", "ShapeError", "TargetError", "TraceError",
    "UnsupportedDTypeError", "UnsupportedOpError", "KernelError", "bind", "cache_info", "clear_cache", "compile",
    "defvjp", "disable_kernels", "explain", "grad", "value_and_grad", "vjp", "GradientTape", "GradientError",
    "stop_gradient", "register_kernel", "set_log", "verify", "testing", "composite", "numpy", "trace",
]
