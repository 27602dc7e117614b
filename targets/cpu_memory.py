"""Where each value of a CPU program lives: planned once, at lowering.

* **Intermediates** (kernel outputs no one outside the program sees) get
  buffers from a per-thread pool, reused once every reader (views included)
  is done with them, so a call allocates no intermediate after the first.
* **Outputs** go into arrays the caller passed (``Compiled.into``) when they
  fit, else into fresh NumPy arrays (large NumPy allocations get huge pages).
* **Donated inputs** (``donate_argnums``) become the buffer of a kernel
  output of the same shape and dtype, when that kernel is the input's last
  reader and reads it element for element (same index, no broadcast).
* **Slice updates** (``a[i:j] = v``) write into their destination when the
  program owns it and nothing reads the old value afterwards: an
  intermediate, or an input the function updates in place anyway.

Anything that could make two of these share memory wrongly is checked per
call (inputs that overlap each other or a requested output turn the
in-place choices off for that call).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from braze.core import PRIMITIVES
from braze.fusion import Loop, View


@dataclass
class Plan:
    buffer: dict[int, tuple] = field(default_factory=dict)   # slot -> ("pool", k) | ("out", k) | ("donate", i)
    pool: list[tuple] = field(default_factory=list)           # k -> (shape, dtype)
    inplace: set[int] = field(default_factory=set)            # step indices updating their input in place
    direct: dict[int, int] = field(default_factory=dict)      # kernel output slot -> the in-place update
    #   step that stores it: the kernel writes straight into the updated region (see _direct_writes)
    rebased: dict[int, tuple] = field(default_factory=dict)   # update step -> the memory its result goes to,
    #   ("pool", k) or ("input", i), the other of a pair of buffers (see _rebased_writes)
    checks_inputs: bool = False                               # whether calls must check input overlap


def plan(program, slot_of: dict, donated: frozenset, mutable: frozenset, copies_elements: bool = True) -> Plan:
    """The program's memory: buffers, in-place updates, direct and rebased
    writes. ``copies_elements``: the target makes an element view a copy
    (``copied``; the cpu driver does, the cuda one does not)."""
    graph = program.graph
    steps = program.steps
    ninputs = len(graph.inputs)
    out_index: dict[int, int] = {}
    for k, o in enumerate(graph.outputs):
        out_index.setdefault(slot_of[id(o)], k)

    element = copied if copies_elements else (lambda step: False)
    produced: list[list[int]] = []
    reads: list[list[int]] = []
    root: dict[int, int] = {}
    spread: set[int] = set()  # views that broadcast (np.full(shape, r) is one): never written into
    for step in steps:
        if isinstance(step, Loop):
            outs = [slot_of[id(o)] for o in step.outputs]
            ins = [slot_of[id(step.reads(leaf))] for leaf in step.leaves]
        else:
            outs = [slot_of[id(step.node)]]
            ins = [slot_of[id(i)] for i in (step.reads if isinstance(step, View) else step.node.inputs)]
        produced.append(outs)
        reads.append(ins)
        for s in outs:
            root[s] = root.get(ins[0], ins[0]) if isinstance(step, View) and not element(step) else s
            if isinstance(step, View) and (step.node.op == "broadcast_to" or ins[0] in spread):
                spread.add(s)

    def root_of(s):
        return root.get(s, s)

    escaping = {root_of(s) for s in out_index}
    readers: dict[int, list[int]] = {}  # slot -> the steps reading it, in order
    for k, ins in enumerate(reads):
        for s in dict.fromkeys(ins):
            readers.setdefault(s, []).append(k)
    last_use: dict[int, int] = {}
    for k, ins in enumerate(reads):
        for s in ins:
            last_use[root_of(s)] = k

    result = Plan()
    free: dict[tuple, list[int]] = {}
    owner: dict[int, int] = {}  # root slot -> pool index
    fresh: set[int] = set()     # results of functional updates run as copies: new arrays only the program holds
    for k, step in enumerate(steps):
        if isinstance(step, Loop):
            for o, s in zip(step.outputs, produced[k]):
                key = (tuple(o.aval.shape), np.dtype(o.aval.dtype).str)
                if s in out_index:
                    result.buffer[s] = ("out", out_index[s])
                    continue
                if s in escaping:
                    continue
                stack = free.get(key)
                if stack:
                    idx = stack.pop()
                else:
                    idx = len(result.pool)
                    result.pool.append((key[0], np.dtype(key[1])))
                result.buffer[s] = ("pool", idx)
                owner[s] = idx
            _donate(step, k, produced[k], reads[k], slot_of, donated, last_use, root_of, ninputs, result)
        elif PRIMITIVES[step.node.op].inplace is not None and not _carries(step.node):
            target = root_of(reads[k][0])
            owned = (target in owner or target in fresh or (target < ninputs and target in mutable)) \
                and reads[k][0] not in spread
            # not into a buffer a result already lives in (y[1:] = a; t = y.copy(); t[1:] = b,
            # with y returned or y an input updated in place: t's write would show through y)
            if owned and last_use.get(target) == k and target not in reads[k][1:] and target not in escaping:
                result.inplace.add(k)
                # The result lives where its input did, and so does every view of it
                # made later: the buffer stays in use until the last read of any of them.
                alias = {produced[k][0]}
                work = [produced[k][0]]
                while work:
                    for later in readers.get(work.pop(), ()):
                        if later > k:
                            last_use[target] = max(last_use[target], later)
                            if isinstance(steps[later], View) and not element(steps[later]):
                                for p in produced[later]:
                                    if p not in alias:
                                        alias.add(p)
                                        work.append(p)
                for s in alias:
                    root[s] = target
                if any(s in out_index or s in escaping for s in alias):
                    escaping.add(target)
                result.checks_inputs |= target < ninputs
            else:
                # a copy of its input with the update applied: the next update of a
                # chain (a loop writing column after column) may write into it
                fresh.add(produced[k][0])
        for s in set(reads[k]):
            r = root_of(s)
            if last_use.get(r) == k and r in owner and r not in escaping:
                free.setdefault((result.pool[owner[r]][0], result.pool[owner[r]][1].str), []).append(owner.pop(r))
    _direct_writes(steps, reads, produced, readers, root_of, result)
    _rebased_writes(steps, reads, produced, readers, root_of, result, ninputs, mutable)
    return result


def copied(step) -> bool:
    """A view step made as a copy: an element read as a 0-d value (``if a[i]:``,
    a guard the program returns to check after the run). NumPy's ``a[i]`` is a
    new scalar, not a view; as a view it would keep every later update of ``a``
    from writing in place (cpu_driver.op_step makes the copy; a folded one,
    ``a[i]`` with integers, is NumPy's scalar)."""
    return (isinstance(step, View) and not isinstance(step.node.aval, tuple)
            and step.node.aval.shape == () and step.node.op != "broadcast_to")


def _carries(node) -> bool:
    """A re-rolled loop carrying a value, updating several arrays in lockstep,
    or stepped (``braze.reroll``): its result is a new value, or a tuple, not
    its first input updated."""
    spec = node.kw["spec"] if node.op == "rolled" else None
    return spec is not None and (spec.carry or bool(spec.lockstep) or bool(spec.carried))


# How far apart a kernel and the update storing its result may be for the
# kernel to write into the updated region (every step between is checked).
DIRECT_SPAN = 32


def _direct_writes(steps, reads, produced, readers, root_of, result: Plan) -> None:
    """``u[1:-1] = kernel(...)``, updated in place: the kernel writes into
    ``u[1:-1]`` itself (when that region is contiguous at run time) instead of
    into a buffer the update then copies. Only where nothing can tell: the value
    is an intermediate only the update reads, the kernel reads nothing sharing
    memory with ``u``, and no step between them reads or writes ``u``."""
    producer = {s: k for k, outs in enumerate(produced) for s in outs}
    for k in sorted(result.inplace):
        step = steps[k]
        if step.node.op != "update_slice":
            continue
        dst, value = reads[k][0], reads[k][1]
        j = producer.get(value)
        if j is None or not isinstance(steps[j], Loop) or k - j > DIRECT_SPAN or producer.get(dst, -1) >= j:
            continue
        loop = steps[j]
        if loop.ninner or loop.perm is not None or loop.compact or readers.get(value) != [k]:
            continue
        if result.buffer.get(value, (None,))[0] != "pool" or step.node.inputs[0].aval.dtype != step.node.inputs[1].aval.dtype:
            continue  # (an update that casts: NumPy's cast, not the kernel's store)
        target = root_of(dst)
        if any(root_of(s) == target for t in range(j, k) for s in reads[t] + produced[t]):
            continue
        result.direct[value] = k


# A region whose complement has at most this fraction of its elements is
# rebased (the complement copied) rather than updated through a buffer.
REBASE_COMPLEMENT = 0.25


def _rebased_writes(steps, reads, produced, readers, root_of, result: Plan, ninputs: int, mutable) -> None:
    """A time loop updating an argument in place from its own neighbours,
    ``q[2:-1] = q[2:-1] - dt * (flux[1:] - flux[:-1]) + ...``, cannot have its
    kernel write into ``q[2:-1]`` (it reads rows the update has already
    written), so the value goes into a buffer the update then copies in: a
    write and a read of the region per step. Instead such updates alternate
    between two memories, the argument and one pool buffer of its shape: each
    one's kernel writes the new region straight into the memory the value
    before the last lived in (dead by then: the updates are in place, so
    nothing reads an old value after the next update), and the update copies
    only the region's complement across (a few rows). An even number of them
    alternates between the two; an odd number (three or more) walks a second
    pool buffer as well, so either way the last value ends in the argument
    with no copy back.

    The conditions are ``_direct_writes``' but for the kernel's reads of the
    argument: an in-place update of a mutable argument (checked per call with
    ``safe``, as every in-place update), its value an intermediate of a
    kernel only the update reads, the same dtype, a region of unit steps
    whose complement is small (REBASE_COMPLEMENT)."""
    producer = {s: k for k, outs in enumerate(produced) for s in outs}
    direct_updates = set(result.direct.values())
    chains: dict[int, list[int]] = {}
    for k in sorted(result.inplace):
        node = steps[k].node
        target = root_of(reads[k][0])
        if node.op != "update_slice" or k in direct_updates or target >= ninputs or target not in mutable:
            continue
        value = reads[k][1]
        j = producer.get(value)
        if j is None or not isinstance(steps[j], Loop) or k - j > DIRECT_SPAN or readers.get(value) != [k]:
            continue
        loop = steps[j]
        if loop.ninner or loop.perm is not None or loop.compact or result.buffer.get(value, (None,))[0] != "pool":
            continue
        if node.inputs[0].aval.dtype != node.inputs[1].aval.dtype or any(c != 1 for _, _, c in node.kw["slices"]):
            continue
        shape = node.inputs[0].aval.shape
        region = math.prod(b - a for a, b, _ in node.kw["slices"])
        if not region or math.prod(shape) - region > REBASE_COMPLEMENT * region:
            continue
        chains.setdefault(target, []).append(k)
    for target, ks in chains.items():
        if len(ks) < 2:
            continue  # (a single update stays a copy through a buffer: its value must end in the argument)
        node = steps[ks[0]].node
        buffers = []
        for _ in range(1 + len(ks) % 2):
            buffers.append(("pool", len(result.pool)))
            result.pool.append((tuple(node.inputs[0].aval.shape), np.dtype(node.inputs[0].aval.dtype)))
        if len(buffers) == 1:  # even: pool, argument, pool, ..., argument
            memories = [buffers[0] if n % 2 == 0 else ("input", target) for n in range(len(ks))]
        else:  # odd: pool, other pool, pool, ..., argument (each differs from the one before)
            memories = [buffers[n % 2] for n in range(len(ks) - 1)] + [("input", target)]
        for k, memory in zip(ks, memories):
            result.rebased[k] = memory
            result.direct[reads[k][1]] = k


def complement(slices, shape) -> list[tuple]:
    """Index tuples covering the elements of an array of ``shape`` outside the
    region ``slices`` ((start, stop, 1) per axis), without overlap."""
    out = []
    for d, (a, b, _) in enumerate(slices):
        head = tuple(slice(s, e) for s, e, _ in slices[:d])
        tail = (slice(None),) * (len(shape) - d - 1)
        if a > 0:
            out.append(head + (slice(0, a),) + tail)
        if b < shape[d]:
            out.append(head + (slice(b, shape[d]),) + tail)
    return out


def _donate(step: Loop, k, outs, ins, slot_of, donated, last_use, root_of, ninputs, result) -> None:
    if step.ninner or any(m.op in ("sin", "cos") for m in step.members):
        return  # multi-pass kernels store values in an output before the last read of an input,
        # and a kernel with sin/cos may rerun exactly: both need their inputs intact
    for leaf, s in zip(step.leaves, ins):
        i = root_of(s)
        if i >= ninputs or i not in donated or last_use.get(i) != k or id(leaf) in step.dropped:
            continue
        if step.perm is not None or tuple(leaf.aval.shape) != tuple(step.domain) or leaf.op != "input":
            continue
        for o, so in zip(step.outputs, outs):
            if (step.space[id(o)] == "full" and tuple(o.aval.shape) == tuple(leaf.aval.shape)
                    and o.aval.dtype == leaf.aval.dtype and result.buffer.get(so, ("out",))[0] == "out"
                    and not any(v == ("donate", i) for v in result.buffer.values())):
                out_k = result.buffer.get(so)
                result.buffer[so] = ("donate", i, out_k)
                result.checks_inputs = True
                break


def fits(a, shape, dtype) -> bool:
    return (type(a) is np.ndarray and a.shape == shape and a.dtype == dtype
            and a.flags.c_contiguous and a.flags.writeable)


def overlapping(arrays) -> bool:
    """Whether any two of these arrays may share memory."""
    arrs = [a for a in arrays if isinstance(a, np.ndarray)]
    for i in range(len(arrs)):
        for j in range(i + 1, len(arrs)):
            if np.may_share_memory(arrs[i], arrs[j]):
                return True
    return False


class Recycler:
    """Large program outputs, recycled once the caller has dropped them.

    A fresh multi-megabyte array costs a page fault per 4 KiB page (or per
    2 MiB huge page) when a kernel first writes it: for a 32 MB output that is
    several times the kernel itself (measured: a parallel float32 copy of 8M
    elements, 1.8 ms into a warm buffer, 8.5 ms into a fresh ``np.empty``).
    Outputs of at least ``MIN_BYTES`` are therefore views of byte buffers this
    cache keeps. A buffer is handed out again only when nothing but the cache
    refers to it, which CPython's reference count says exactly: every view,
    slice, ``memoryview`` or exported buffer of an output keeps its base
    alive. After each allocation the cache keeps at most ``limit`` bytes of
    buffers nobody uses (``BRAZE_OUTPUT_CACHE_MB``, default 512; 0 turns it
    off), oldest dropped first, and forgets the buffers callers still hold beyond
    ``MAX_TRACKED`` entries (they are then freed normally).
    """

    MIN_BYTES = 1 << 20
    MAX_TRACKED = 64

    def __init__(self, limit: int):
        import threading

        self.limit = limit
        self._bufs: list[np.ndarray] = []  # byte buffers, oldest first
        self._lock = threading.Lock()

    def empty(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = math.prod(shape) * dtype.itemsize
        if n < self.MIN_BYTES or self.limit <= 0:
            return np.empty(shape, dtype)
        with self._lock:
            bufs = self._bufs
            for i in range(len(bufs)):
                if bufs[i].nbytes == n and _unused(bufs, i):
                    b = bufs.pop(i)
                    break
            else:
                b = np.empty(n, np.uint8)
            out = b.view(dtype).reshape(shape)
            bufs.append(b)  # most recently used last
            del b
            self._trim()
            return out

    def _trim(self) -> None:
        bufs = self._bufs
        while len(bufs) > self.MAX_TRACKED:
            del bufs[0]
        free = sum(bufs[i].nbytes for i in range(len(bufs)) if _unused(bufs, i))
        i = 0
        while free > self.limit and i < len(bufs):
            if _unused(bufs, i):
                free -= bufs[i].nbytes
                del bufs[i]
            else:
                i += 1

    def held_bytes(self) -> int:
        """Bytes of buffers the cache keeps that no caller refers to."""
        with self._lock:
            return sum(self._bufs[i].nbytes for i in range(len(self._bufs)) if _unused(self._bufs, i))

    def clear(self) -> None:
        with self._lock:
            self._bufs.clear()


def _unused(bufs: list, i: int) -> bool:
    # The only references: the cache's list and getrefcount's own argument.
    return sys.getrefcount(bufs[i]) <= 2


def _limit_from_env() -> int:
    import os

    raw = os.environ.get("BRAZE_OUTPUT_CACHE_MB", "512")
    try:
        return int(float(raw) * (1 << 20))
    except ValueError:
        return 512 << 20


outputs = Recycler(_limit_from_env())
