"""Kernels compiled several at once, in worker processes.

numba compiles one function at a time per process (its compiler holds a
global lock, and most of the work holds the GIL), 0.1-0.5 s each here. A
program of a dozen distinct kernels (a GPT-2 forward) waited seconds for
them one after another while the other cores idled. So before a program's
first compiled run, ``compile_many`` compiles the kernels it will call (the
cpu target finds them, and their argument types, by a dry run) on every
core: this thread compiles in-process while worker processes compile the
rest into numba's disk cache, from which this process then loads them (a
few milliseconds each). The disk cache is the only thing shared, and its
writes are atomic, so a worker that dies or a job that fails only means that
kernel compiles in-process on its first call, as it would without workers.

Workers are plain ``python -c`` subprocesses speaking length-prefixed pickles
over their pipes (not ``multiprocessing``, whose spawned children import the
user's ``__main__`` and would rerun an unguarded script). They start on the
first program that needs them, idle between programs, and exit with this
process (their stdin closes). ``BRAZE_COMPILE_WORKERS=N`` sets how many
(default: the usable cores less one, at most 7; 0 turns them off).
"""
from __future__ import annotations

import atexit
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time

from . import cpu_cache

_HEADER = struct.Struct("<Q")


def wanted() -> int:
    """How many worker processes to use (``BRAZE_COMPILE_WORKERS``, else the
    usable cores less one, at most 7)."""
    env = os.environ.get("BRAZE_COMPILE_WORKERS", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, 7))


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:  # (an unbuffered pipe may take part of it)
        view = view[stream.write(view):]
    stream.flush()


def _receive(stream):
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the compile worker closed its pipe")
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the compile worker closed its pipe")
    return pickle.loads(data)


def _warm_numba() -> None:
    """Compile a small kernel in the style of the generated ones: numba's first
    compile in a process loads its lowering registries (about 0.5 s here), which
    a worker does while it waits for its first job rather than during it."""
    import numba
    import numpy as np

    from . import cpu_runtime as rt

    def warm(a, o, n, c):
        acc = np.float32(0.0)
        for i in range(n):
            v = np.float32(a[np.uint64(i)]) * np.float32(c)
            acc = rt.radd(acc, v)
            o[np.uint64(i)] = v
        return acc

    numba.njit(fastmath=False, error_model="numpy", nogil=True)(warm)(
        np.zeros(1, np.float32), np.zeros(1, np.float32), 1, np.float32(1.0))


# Workers start (and warm numba, about 1.5 s of CPU) before anyone knows
# whether the disk cache already holds every kernel: in a warm process the
# program runs compiled meanwhile, and an equal-priority worker took a core
# from it (a transformer step 22 ms instead of 10 for its first two seconds
# on 2 cores). At the lowest priority a worker only uses idle cores, which
# it finds whenever the program waits for its compiles.
WORKER_NICE = 19


def serve() -> None:
    """A worker's loop: (module path, module name, function, signature) in,
    None or the error's text out, until its stdin closes."""
    jobs_in, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # (nothing a compile prints may reach the reply pipe)
    try:  # (a worker warming up while the program already runs compiled must not slow it)
        os.nice(WORKER_NICE)
    except (AttributeError, OSError):
        pass
    try:
        _warm_numba()
    except Exception:  # noqa: BLE001  (only a head start; the jobs say what fails)
        pass
    while True:
        try:
            path, modname, name, sig = _receive(jobs_in)
        except EOFError:
            return
        try:
            module = sys.modules.get(modname) or cpu_cache._import(modname, path)
            getattr(module, name).compile(sig)
            reply = None
        except Exception as exc:  # noqa: BLE001  (reported; the parent compiles it itself)
            reply = f"{type(exc).__name__}: {exc}"
        _send(replies, reply)


# Seconds one job may take in a worker (numba compiles a kernel in well under
# one): past it the worker is stopped and the kernel compiles on its first call.
JOB_TIMEOUT = 120.0


def _read_exact(fd: int, n: int, deadline: float, worker) -> bytes:
    """``n`` bytes from the worker's pipe (unbuffered, so ``select`` sees them)."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            worker.proc.kill()
            raise EOFError(f"the compile worker took more than {JOB_TIMEOUT:.0f} s; stopped")
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("the compile worker closed its pipe")
        data += chunk
    return data


# A worker imports the braze and braze.targets packages without running their
# __init__ (the tracer, the ops, every target: 0.45 s of a worker's 1 s start
# here, while the program waits for its kernels): it only loads kernel modules,
# whose imports are cpu_runtime and cpu_math. Each package is stood in for by
# an empty module with the package's path, so its submodules import as usual.
_BOOT = """import sys, types
for name, path in {packages!r}:
    module = types.ModuleType(name)
    module.__path__ = path
    sys.modules[name] = module
from braze.targets.cpu_workers import serve
serve()
"""


def _boot() -> str:
    packages = [(name, list(sys.modules[name].__path__)) for name in ("braze", "braze.targets")]
    return _BOOT.format(packages=packages)


class _Worker:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # (braze as imported here)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _boot()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def compile(self, job) -> str | None:
        """Compile ``job`` in the worker: None, or why it failed. A worker that
        takes longer than JOB_TIMEOUT seconds is stopped (an EOFError)."""
        _send(self.proc.stdin, job)
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + JOB_TIMEOUT
        head = _read_exact(fd, _HEADER.size, deadline, self)
        return pickle.loads(_read_exact(fd, _HEADER.unpack(head)[0], deadline, self))

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()


_pool: list[_Worker] = []
_pool_lock = threading.Lock()


def _workers(n: int) -> list[_Worker]:
    """``n`` live workers, started now where the pool lacks them."""
    with _pool_lock:
        _pool[:] = [w for w in _pool if w.alive()]
        while len(_pool) < n:
            _pool.append(_Worker())
        return list(_pool[:n])


# A traced program with at least this many steps likely compiles several
# distinct kernels: its workers start (and warm numba) while it is lowered
# and its first call runs NumPy, instead of after.
PRESTART_STEPS = 16


def prestart() -> None:
    """Start the workers now, if any are wanted and none run (returns at once:
    they import braze and warm numba in their own processes)."""
    n = wanted()
    if n and not any(w.alive() for w in _pool):
        _workers(n)


def shutdown() -> None:
    """Stop the workers (they also stop by themselves when this process exits)."""
    with _pool_lock:
        for w in _pool:
            w.stop()
        _pool.clear()


atexit.register(shutdown)


STATS = {"in process": 0, "in workers": 0, "failed in workers": 0}


def compile_many(jobs) -> None:
    """Compile each (source, function name, numba signature) of ``jobs`` that
    numba's disk cache lacks, this thread and the workers taking them in turn
    from one queue; returns when all are done. A job a worker could not do is
    left to the kernel's first call."""
    todo, seen = [], set()
    for source, name, sig in jobs:
        if (source, name, sig) in seen or cpu_cache.compiled_before(source, name):
            continue
        seen.add((source, name, sig))
        todo.append((source, name, sig))
    todo.sort(key=lambda job: -len(job[0]))  # the longest first: the last to finish is a short one
    n = min(wanted(), len(todo) - 1)
    if n <= 0:
        return  # (one kernel, or no workers: its first call compiles it)
    work: queue.Queue = queue.Queue()
    for job in todo:
        work.put(job)

    def feed(worker: _Worker) -> None:
        while True:
            try:
                source, name, sig = work.get_nowait()
            except queue.Empty:
                return
            try:
                path, modname = cpu_cache.module_path(source)
                failed = worker.compile((path, modname, name, sig))
            except Exception as exc:  # noqa: BLE001  (a dead worker: the rest go elsewhere)
                failed = str(exc) or type(exc).__name__
                STATS["failed in workers"] += 1
                cpu_cache.logger.info("compile worker failed (%s); compiling in-process", failed)
                _in_process(source, name, sig)
                return
            STATS["failed in workers" if failed else "in workers"] += 1
            if failed:
                cpu_cache.logger.info("compile worker: %s failed (%s)", name, failed)

    threads = [threading.Thread(target=feed, args=(w,), name="braze-compile-feed", daemon=True)
               for w in _workers(n)]
    for t in threads:
        t.start()
    while True:  # this thread compiles too
        try:
            source, name, sig = work.get_nowait()
        except queue.Empty:
            break
        _in_process(source, name, sig)
    for t in threads:
        t.join()


def _in_process(source: str, name: str, sig) -> None:
    try:
        cpu_cache.load(source, name).compile(sig)
        STATS["in process"] += 1
    except Exception:  # noqa: BLE001  (its first call compiles it, and reports what fails)
        pass
