"""Tiered first calls: a CPU program runs on NumPy until its kernels are built.

numba compiles a kernel in 0.2-0.7 s, and a program unrolled from a Python
loop can hold hundreds of them: a first call that waited for LLVM would cost
seconds where NumPy takes milliseconds. So the cpu target's ``lower`` returns
a ``Tiered`` executable. Its first call runs the graph on the ``generic``
path (NumPy, op by op: NumPy's own time) and then, in a background thread,
fuses the graph, generates the kernels and the driver, and runs the compiled
program once on that call's arguments, so numba compiles (or loads from its
disk cache) every kernel for the argument types it will see. Calls made
meanwhile keep running on NumPy; the first call after that runs compiled.
Before that run, a dry run (kernels noted, not called) lists the kernels and
argument types it will compile, and ``cpu_workers`` compiles them on every
core at once (worker processes fill numba's disk cache; this one loads).

The background run never writes into the caller's arrays: where the real
program would (a donated argument, an argument the function updates in
place), it runs on copies of them, so it compiles the very kernels later
calls run (a kernel writing an update's region straight into the argument
is another source than one writing a buffer). Its results are dropped; an
error it meets (the caller changed an argument meanwhile, so a guard fails)
only means some kernel compiles on its first real call.

``BRAZE_TIERED=0`` turns tiering off (every call compiled, the first one
waiting for numba); ``braze.targets.cpu_cache.wait_background()`` waits for
the background work (benchmarks call it before timing steady state).
Anything that asks what was built (``f.lower``, ``explain``) waits for the
build, or builds then and there if no call has started it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from typing import Callable

import numpy as np

from . import cpu_cache, cpu_workers
from .base import Executable


_switch = {"depth": 0, "saved": None, "lock": threading.Lock()}


@contextlib.contextmanager
def _short_switch_interval():
    """numba's compiler is Python code holding the GIL; the caller's thread,
    meanwhile running NumPy calls that release and retake it, would wait up to
    the switch interval (5 ms) each time. Shorter while any build runs."""
    with _switch["lock"]:
        if _switch["depth"] == 0:
            _switch["saved"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch["saved"], SWITCH_INTERVAL))
        _switch["depth"] += 1
    try:
        yield
    finally:
        with _switch["lock"]:
            _switch["depth"] -= 1
            if _switch["depth"] == 0:
                sys.setswitchinterval(_switch["saved"])


SWITCH_INTERVAL = 0.0005


def enabled() -> bool:
    return os.environ.get("BRAZE_TIERED", "1") != "0"


class Tiered:
    """An ``Executable`` running NumPy until the one ``build()`` returns has run once."""

    def __init__(self, generic: Executable, build: Callable[[], Executable], written: frozenset = frozenset(),
                 dry_run: bool = True, on_built: Callable[[], None] | None = None):
        self.run = self._run
        self.times: dict = {}
        self._generic = generic.run
        self._build, self._written = build, written  # (inputs the program may write: copied for the warm-up)
        self._built: Executable | None = None
        self._dry_run = dry_run     # (whether a dry run may find the kernels to compile on every core)
        self._on_built = on_built   # (called once the warm-up run has compiled every kernel)
        self._fast = None           # the compiled run, once it is ready
        self._lock = threading.Lock()
        self._started = False

    def _run(self, inputs, outs=None):
        fast = self._fast
        if fast is not None:
            return fast(inputs, outs)
        results = self._generic(inputs, outs)
        if not self._started:
            self._started = True
            cpu_cache.run_later(self._warm, list(inputs))
        return results

    def compiled(self) -> Executable:
        """The compiled executable, built now if no call has built it yet."""
        with self._lock:
            if self._built is None:
                self._built = self._build()
                self.times.update(self._built.times)
            return self._built

    def _warm(self, inputs) -> None:
        with _short_switch_interval():
            self._warm_now(inputs)

    def _warm_now(self, inputs) -> None:
        try:
            built = self.compiled()
        except Exception as exc:  # noqa: BLE001  (stay on NumPy, which is correct; say why)
            warnings.warn(f"braze: building the cpu kernels failed ({type(exc).__name__}: {exc}); "
                          "this program keeps running with NumPy", RuntimeWarning, stacklevel=2)
            return

        def copies():
            return [x.copy(order="K") if i in self._written and isinstance(x, np.ndarray) else x
                    for i, x in enumerate(inputs)]

        if self._dry_run and cpu_workers.wanted():
            dry = copies()  # (the kernels it will call, compiled on every core first)
            cpu_workers.compile_many(cpu_cache.dry_run(lambda: built.run(dry)))
        try:
            built.run(copies())
        except Exception:  # noqa: BLE001  (see the module docstring)
            pass
        else:
            if self._on_built is not None:
                self._on_built()
        self._fast = built.run

    # what ``lower()`` and ``explain`` read: the compiled program's
    plan = property(lambda self: self.compiled().plan)
    source = property(lambda self: self.compiled().source)
    sites = property(lambda self: self.compiled().sites)
    counts = property(lambda self: self.compiled().counts)
    driver = property(lambda self: self.compiled().driver)

    def __call__(self, inputs, outs=None) -> list:
        return self._run(inputs, outs)
