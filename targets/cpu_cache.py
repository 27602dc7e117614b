"""The CPU target's compile cache: generated modules on disk, numba's cache beside them.

A kernel's module is written to ``BRAZE_CACHE_DIR`` (default: the platform's
user cache directory) under a name that hashes its source, braze's
version, numba's version and the CPU. It is written atomically (temporary
file, then ``os.replace``) and imported with the module registered in
``sys.modules`` *before* it executes, so numba's ``cache=True`` records a
real module and a second process loads the machine code from disk instead
of invoking LLVM. A corrupt entry (a module whose text no longer matches
its name, or one that fails to import) is rebuilt and reported once as a
warning; two processes filling the same entry at once both succeed (each
writes its own temporary file; ``os.replace`` is atomic).
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from braze._version import __version__
from braze.log import logger


def _defer_blas_check() -> None:
    """Keep numba's start-up from importing ``scipy.linalg`` (64 ms of a 0.2 s warm first call).

    Loading the first kernel initializes numba's CPU target, which imports
    ``numba.np.arraymath``; that module asks at import whether BLAS is there by
    importing ``scipy.linalg.cython_blas``. braze's kernels never call BLAS from
    numba (matmul and einsum call NumPy's BLAS), so the question is answered
    from whether SciPy is installed, without importing it; numba's own check
    runs unchanged when a numba function really uses BLAS.
    """
    if "numba.np.arraymath" in sys.modules:
        return
    from numba.np import linalg

    check = linalg.ensure_blas

    def installed():
        if importlib.util.find_spec("scipy") is None:
            raise ImportError("scipy 0.16+ is required for linear algebra")

    linalg.ensure_blas = installed
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        linalg.ensure_blas = check


_defer_blas_check()

_lock = threading.RLock()
_loaded: dict[tuple, object] = {}     # (key, function name) -> dispatcher
_modules: dict[str, object] = {}      # key -> imported module
_warned: set[str] = set()


@dataclass
class CacheStats:
    kernels: int = 0            # kernels loaded in this process
    modules_written: int = 0    # modules this process wrote to disk
    modules_reused: int = 0     # modules found on disk
    rebuilt: int = 0            # corrupt entries rebuilt


_stats = CacheStats()


def _cpu_id() -> str:
    try:
        import llvmlite.binding as llvm

        return f"{llvm.get_host_cpu_name()}-{platform.machine()}"
    except Exception:  # pragma: no cover - llvmlite always present with numba
        return platform.machine()


_CPU = _cpu_id()


def _runtime_id() -> str:
    """A hash of the modules generated kernels call into (inlined into their
    machine code): numba's cache only watches the kernel's own file, so a
    changed helper must change the key."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("cpu_runtime.py", "cpu_math.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


_RUNTIME = _runtime_id()


def cache_dir() -> str:
    """Where generated modules live: BRAZE_CACHE_DIR or the user cache directory."""
    explicit = os.environ.get("BRAZE_CACHE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA", os.path.expanduser("~"))
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "braze")


def key_of(source: str) -> str:
    text = "\n".join([source, __version__, numba.__version__, _CPU, _RUNTIME])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _import(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: numba's cache needs a real module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load(source: str, name: str = "kernel"):
    """The dispatcher for ``source`` (a module defining ``name``), from memory or disk."""
    key = key_of(source)
    fn = _loaded.get((key, name))
    if fn is not None:
        return fn
    with _lock:
        fn = _loaded.get((key, name))
        if fn is None:
            fn = _loaded[(key, name)] = getattr(_module(source, key), name)
            _stats.kernels += 1
        return fn


def _module(source: str, key: str):
    """``source``'s module, imported from the cache directory (written there first
    if need be). Called under ``_lock``."""
    if key in _modules:
        return _modules[key]
    directory = cache_dir()
    modname = f"braze_k_{key}"
    header = f"# braze kernel {key}\n"
    text = header + source
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, modname + ".py")
        existing = None
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                existing = f.read()
        if existing == text:
            _stats.modules_reused += 1
            logger.info("kernel %s: module found in the disk cache %s", key[:12], directory)
        else:
            if existing is not None:
                _warn_corrupt(path, "its text does not match its name")
                _clear_numba_cache(directory, modname)
            _write_atomic(path, text)
            _stats.modules_written += 1
            logger.info("kernel %s: new module written to %s", key[:12], directory)
        try:
            module = _import(modname, path)
        except Exception as exc:  # a corrupt numba cache or module: rebuild once
            _warn_corrupt(path, f"importing it failed ({type(exc).__name__}: {exc})")
            _clear_numba_cache(directory, modname)
            _write_atomic(path, text)
            module = _import(modname, path)
    except OSError as exc:
        module = _load_uncached(modname, text, exc)
    _modules[key] = module
    return module


def _from_numba_cache(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(os.path.join("numba", "core", "caching.py")):
            return True
        tb = tb.tb_next
    return False


def recover(fn, exc: BaseException):
    """After ``fn`` (a loaded kernel) raised ``exc``: if numba failed reading its
    disk cache, drop that cache, reload the module, warn once and return the
    fresh function; otherwise re-raise."""
    if not _from_numba_cache(exc):
        raise exc
    with _lock:
        for (key, name), loaded in list(_loaded.items()):  # noqa: B007  (used after break)
            if loaded is fn:
                break
        else:
            raise exc
        directory = cache_dir()
        modname = f"braze_k_{key}"
        path = os.path.join(directory, modname + ".py")
        _warn_corrupt(path, f"numba could not read its compiled code ({type(exc).__name__})")
        _clear_numba_cache(directory, modname)
        module = _import(modname, path)
        _modules[key] = module
        fresh = getattr(module, name)
        _loaded[(key, name)] = fresh
        return fresh


def _load_uncached(modname: str, text: str, exc: OSError):
    """The cache directory is unusable (read-only, full): compile in a private temp dir."""
    key = f"unwritable:{cache_dir()}"
    if key not in _warned:
        _warned.add(key)
        warnings.warn(
            f"braze: cannot write the kernel cache in {cache_dir()} ({exc}); compiling without a "
            "disk cache this session. Set BRAZE_CACHE_DIR to a writable directory.",
            RuntimeWarning,
            stacklevel=4,
        )
    directory = tempfile.mkdtemp(prefix="braze-nocache-")
    path = os.path.join(directory, modname + ".py")
    with open(path, "w") as f:
        f.write(text)
    return _import(modname, path)


def _warn_corrupt(path: str, why: str) -> None:
    _stats.rebuilt += 1
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"braze: rebuilt corrupt cache entry {path}: {why}", RuntimeWarning, stacklevel=5)


def _clear_numba_cache(directory: str, modname: str) -> None:
    pycache = os.path.join(directory, "__pycache__")
    if os.path.isdir(pycache):
        for entry in os.listdir(pycache):
            if entry.startswith(modname):
                try:
                    os.unlink(os.path.join(pycache, entry))
                except OSError:
                    pass


def has_parallel(source: str) -> bool:
    """Whether the parallel kernel of ``source`` was compiled into the disk cache."""
    return os.path.exists(_marker(source))


def _marker(source: str) -> str:
    return os.path.join(cache_dir(), f"braze_k_{key_of(source)}.parallel")


def program_key(steps) -> str:
    """A fingerprint of a program's op-by-op steps (ops, shapes, dtypes; not
    parameters): what ``program_built`` and ``mark_program_built`` are keyed by.
    Two programs sharing one only share a guess about the disk cache."""
    digest = hashlib.sha256("\n".join([__version__, numba.__version__, _CPU]).encode())
    for step in steps:
        node = step.node
        avals = node.aval if isinstance(node.aval, tuple) else (node.aval,)  # (a multi-output op's: a tuple)
        digest.update(f"{node.op}{[(a.shape, a.dtype) for a in avals]};".encode())
    return digest.hexdigest()[:32]


def _program_marker(key: str) -> str:
    return os.path.join(cache_dir(), f"braze_p_{key}.built")


def program_built(key: str) -> bool:
    """Whether a process has built the program ``key`` names before (its
    kernels are then likely all in numba's disk cache)."""
    return os.path.exists(_program_marker(key))


def mark_program_built(key: str) -> None:
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        with open(_program_marker(key), "w") as f:
            f.write("built\n")
    except OSError:  # (only a guess for the next process)
        pass


# A dry run (``dry_run``) notes each kernel a program's run would call, with
# its argument types, instead of calling it: what to compile before the run.
_dry = threading.local()


def dry_run(run) -> list:
    """``run()`` with every kernel call noted instead of made: the (source,
    function name, numba signature) of each, in order. Kernels' outputs stay
    unwritten, so what ``run`` computes is garbage; it stops at the first error
    (a guard on garbage) with what it noted so far, and warns of nothing
    (NumPy's floating-point warnings on that garbage: errstate is per thread)."""
    _dry.jobs = jobs = []
    try:
        with np.errstate(all="ignore"):
            run()
    except Exception:  # noqa: BLE001  (see the docstring)
        pass
    finally:
        _dry.jobs = None
    return jobs


def noted(source: str, names: tuple, args) -> bool:
    """In a dry run: note that ``args`` would compile each of ``names`` in
    ``source``, and say so (the caller then skips the call)."""
    jobs = getattr(_dry, "jobs", None)
    if jobs is None:
        return False
    sig = tuple(numba.typeof(a) for a in args)
    jobs.extend((source, name, sig) for name in names)
    return True


def compiled_before(source: str, name: str) -> bool:
    """Whether numba's disk cache holds code for ``name`` in ``source``'s module
    (for some signature: its index file exists)."""
    pycache = os.path.join(cache_dir(), "__pycache__")
    prefix = f"braze_k_{key_of(source)}.{name}-"
    try:
        return any(e.startswith(prefix) and e.endswith(".nbi") for e in os.listdir(pycache))
    except OSError:
        return False


def module_path(source: str) -> tuple[str, str]:
    """(path, module name) of ``source``'s module, written to the cache if need be."""
    with _lock:
        module = _module(source, key_of(source))  # (cheap: numba compiles lazily)
    return module.__file__, module.__name__


_background: list[threading.Thread] = []


def compile_parallel_later(source: str, serial, on_ready, name: str = "kernel") -> None:
    """Tiered compilation: compile ``name`` (prange) for the argument types the
    serial function was just called with, in a background thread, then hand it
    to ``on_ready``. LLVM's work runs outside the GIL (llvmlite calls through ctypes)."""

    def work():
        try:
            parallel = load(source, name)
            for sig in list(serial.signatures):
                parallel.compile(sig)
            try:
                with open(_marker(source), "w") as f:
                    f.write("compiled\n")
            except OSError:
                pass
            on_ready(parallel)
        except Exception as exc:  # keep the serial kernel; say why once
            key = f"parallel:{key_of(source)}"
            if key not in _warned:
                _warned.add(key)
                warnings.warn(f"braze: compiling the parallel kernel failed ({exc}); running serially",
                              RuntimeWarning, stacklevel=2)

    run_later(work)


def run_later(fn, *args) -> None:
    """``fn(*args)`` in a background thread that ``wait_background`` waits for."""
    t = threading.Thread(target=fn, args=args, name="braze-compile", daemon=True)
    _background.append(t)
    t.start()


def wait_background(timeout: float | None = None) -> None:
    """Wait for background compilations (tests and benchmarks use this),
    including those started meanwhile by the ones waited for."""
    while _background:
        t = _background[0]
        t.join(timeout)
        if t.is_alive():
            return
        try:
            _background.remove(t)
        except ValueError:  # another thread waited for it too
            pass


# A process that exits while a parallel kernel compiles would leave the next
# process to compile it again: finish them first (bounded).
atexit.register(wait_background, 30.0)


def info() -> dict:
    """Counts for this process and what is on disk."""
    directory = cache_dir()
    modules = [f for f in os.listdir(directory) if f.startswith("braze_k_")] if os.path.isdir(directory) else []
    hits = misses = 0
    with _lock:
        loaded = list(_loaded.values())
    for fn in loaded:
        stats = getattr(fn, "stats", None)
        if stats is not None:
            hits += sum(stats.cache_hits.values())
            misses += sum(stats.cache_misses.values())
    return {
        "dir": directory,
        "modules_on_disk": len(modules),
        "kernels_loaded": _stats.kernels,
        "modules_written": _stats.modules_written,
        "modules_reused": _stats.modules_reused,
        "corrupt_rebuilt": _stats.rebuilt,
        "numba_disk_hits": hits,
        "numba_compiles": misses,
    }


def clear() -> None:
    """Forget loaded kernels and delete the on-disk cache."""
    with _lock:
        _loaded.clear()
        _modules.clear()
        directory = cache_dir()
        if os.path.isdir(directory):
            shutil.rmtree(directory, ignore_errors=True)
