"""Generate numba source for one fused ``Loop`` (see ``braze.fusion``).

The kernel takes, in order: its leaf arrays (or scalars, for 0-d leaves),
its output arrays (flat, C-contiguous), the domain sizes, and its float
literals. Sizes and literals are arguments, so the source (and the machine
code) depends only on rank, dtypes, which leaf dimensions are size 1, and
contiguity, never on sizes: a new batch size reuses the compiled kernel.

Two loop skeletons:

* **rows** (the domain has outer axes): ``prange`` over the flattened outer
  index; per row, one pass over the inner axes per reduction stage
  (accumulators in registers), row values computed between passes, full
  outputs written in the last pass that can compute them. Pure elementwise
  kernels are rows whose inner axis is the last one.
* **global** (no outer axes: full reductions, 1-D elementwise): each pass is
  a ``prange`` over chunks of the first axis with per-chunk partial results,
  combined serially (a two-level reduction).

The module holds two functions from the same body: ``kernel`` (``prange``)
and ``kernel_serial``; the launcher calls the serial one below
``PARALLEL_MIN`` elements of work (shapes are static per compiled entry, so
the choice costs nothing per call), and numba compiles each only if used.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from braze.fusion import LAYOUT_OPS, REDUCE_OPS, Loop
from braze.graph import Node

from . import cpu_runtime as rt
from .reductions import CPU, ArgExtremum, Sum, ValueOfArg, reduction, twin_arg
from .scalar import CpuOps, Typed, cast, literal, np_type, typed_name

TRIG = ("sin", "cos")
TRIG_MAX = 2.0 ** 48  # cpu_math.TRIG_MAX_ARG: the vector sin/cos reduce arguments below it

# Work (elements) below which a kernel runs serially. Measured with
# bench/threshold.py on the 2-vCPU development machine (omp, PASSIVE): a
# parallel region costs 40-60 us to wake, and parallel first wins from 2**19
# elements for an elementwise chain with exp (531 vs 687 us at 2**20) and
# from 2**21 for a row softmax (the two vCPUs behave like SMT siblings, so
# compute-bound loops gain little); 2**19 favours the commoner elementwise case.
PARALLEL_MIN = 1 << 19
CHUNK = 1 << 14  # elements of the first axis per task in global kernels


@dataclass
class KernelSource:
    source: str            # the module text (imports + kernel function)
    leaves: list[Node]     # argument order
    outputs: list[Node]
    consts: list[Node]     # literal nodes passed as arguments
    leaf_shapes: list[tuple[int, ...]]  # shape each leaf is indexed with (after perm alignment)
    has_trig: bool = False  # takes a flag array last; rerun kernel_exact when it comes back set
    out_windows: tuple = ()  # outputs written into a window of a larger array (``generate``)
    params: tuple | None = None  # the leaves passed, by index (None: all); windows of one array share one
    packed: bool = False  # the windows' starts come as one int64 array, not an int each
    # The leaves (by index) read at literal offsets from the first window of their array
    # (``generate``'s ``anchored``): their starts are not arguments. ``deltas``: (leaf
    # index, its anchor's, offsets) for every such window, whether anchored or not.
    anchored: tuple = ()
    deltas: tuple = ()


HEADER = """import math
import numpy as np
from numba import njit, prange
from braze.targets import cpu_runtime as rt
try:
    from braze.targets import cpu_math as vm
except ImportError:
    vm = None
"""

# A kernel is plain loops over scalars, called from Python or from another
# kernel's loop: numba's rewrites (array expressions, constant getitems, branch
# pruning) find nothing in it, and nothing calls its C wrapper; without the two,
# the 11 kernels of a GPT-2 forward took a median 9% less CPU to compile over 7
# alternating pairs of runs (AMD EPYC; 4.2-5.5 s before), with the same vector
# instructions.
FLAGS = 'error_model="numpy", cache=True, nogil=True, no_rewrites=True, no_cfunc_wrapper=True'
# No fast-math (DESIGN.md, numerics contract): elementwise work runs NumPy's
# operations in NumPy's order and rounding (no reassociation, no FMA
# contraction, signed zeros kept), so it is bitwise equal to NumPy. Only a
# float sum's accumulate may be reordered (``rt.radd``: the reassoc flag on
# that one instruction), which is what lets it vectorize.
FASTMATH = "False"

# Float sums add BLOCK elements of the innermost axis into a vectorized
# partial (``rt.radd``) in the result's dtype, then add the partial into an
# accumulator: float64 for float32 sums, a Neumaier-compensated float64 pair
# for float64 sums. The error stays within NumPy's pairwise summation's.
BLOCK = 256
# Reduced rows of at most this many elements are unrolled (``_short_inner``):
# a loop of 3 additions costs more than the additions; unrolled bodies cost
# compile time, so only the shortest.
SHORT_ROW = 4
# A column of an array whose rows are at most this long (``X[:, 1]`` of (n, 3)
# points) is read at a literal stride (``_column_load``).
COLUMN_ROW = 16
# A flat elementwise loop heavy in vector-math polynomials (cpu_math's exp,
# log, tanh, ...) and divisions is bound by its dependency chains (see
# ``rt.interleaved``): LLVM interleaves INTERLEAVE vector iterations of it.
# Black-Scholes (3 exp, a log, 5 divisions, a sqrt): 20.5 -> 11.2 ms one
# thread, 10.5 -> 5.8 ms two (2 gave 12.9 / 6.6); bitwise the same results.
# Heavy: at least two vector-math calls, or one and two divisions or roots.
# Only flat loops: interleaved rows loops would leave rows shorter than four
# vectors scalar (and a 3-D polynomial's rows gained 0-20% for 3x the compile).
INTERLEAVE = 4
# A rows loop (a bias broadcast along rows: GPT-2's GELU over (128, 1024)) is
# interleaved ROW_INTERLEAVE vectors when its rows hold at least
# ROW_INTERLEAVE_MIN elements (its inner loop then runs long enough):
# 0.81 -> 0.52 ms one thread, 0.52 -> 0.40 ms two (4 gave 0.58 / 0.42).
ROW_INTERLEAVE = 2
ROW_INTERLEAVE_MIN = 256
# tanh, sigmoid, erf and log divide inside: each counts as a division too.
DIVIDING_MATH = frozenset({"tanh", "sigmoid", "erf", "log", "log1p"})
# Rows at least this long are cut where their rolled reads wrap (``_wrap_segments``):
# a short row's segments cost more than its branches (a cross product of (n, 3)
# rows by rolls: 7-14 ms branching, 26-29 ms in segments, 1e6 rows).
SPLIT_MIN = 64
VECTOR_MATH = frozenset({"exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "sin", "cos"})
SLOW_ARITH = frozenset({"divide", "sqrt", "power"})
# Rows per chunk of a rows loop over several outer axes (``_rows_loop``).
ROW_CHUNK = 1024
# Column reductions in lanes (_columns_body): from 8 columns (up to 4 the row
# loop per column was 2-4x faster, from 8 to 2000 1.2-12x slower: (n, k) max
# and any over axis 0, 2e6 elements, one thread), at least this many rows,
# rows per parallel chunk.
COLUMN_MIN_LANES = 8
COLUMN_MIN_ROWS = 16
COLUMN_CHUNK = 8192
# Lanes of a whole-array argmax / argmin over floats (_lanes_loop): 16 and 64
# ran slower, 1024 no faster.
LANES = 256
# Rows in lanes (_row_lanes): rows per block, and the longest row.
ROW_LANES = 256
ROW_LANES_MAX = 64
# Blocks of ROW_LANES rows one task runs, reusing its lane arrays (2,048 rows).
ROW_LANES_GROUP = 8
# Rows in lanes of at most this many elements (a literal in the source), of a
# kernel of at most ROW_REGISTERS_MEMBERS ops, loop over a row's elements inside
# the loop over lanes, accumulating in registers: LLVM unrolls the row and
# vectorizes the lanes (k-means' (400000, 8) argmin kernel 4.0 -> 3.0 ms, one
# thread). A longer row or body (vector math inlines dozens of instructions)
# might not unroll, and would run scalar.
ROW_REGISTERS_MAX = 8
ROW_REGISTERS_MEMBERS = 32

# Sums of one value selected by an integer label's equality with distinct
# constants (k-means' per-cluster sums: ``masked_sums``' rewrite of
# ``X[labels == k].sum(0)`` for each k), at least SEGMENT_MIN of them over at
# most SEGMENT_SPAN labels and rows of at least SEGMENT_ROW elements, add each
# element into its label's partial (one add) instead of every sum testing and
# adding it (K compares, selects and adds); see LoopCodegen._segment_groups.
SEGMENT_MIN = 4
SEGMENT_SPAN = 64
SEGMENT_ROW = 1024
# A rows loop over several outer axes whose first has at least this many
# indices nests a loop per axis, parallel over the first (``_rows_loop``).
NEST_MIN = 64


_INNER_INDEX = re.compile(r"\bj\d")


_LOOP_HEAD = re.compile(r"for (\w+) in p?range\(.*:$")
_RENAME = re.compile(r"(\w+) = (\w+)$")
_ASSIGNED = re.compile(r"(\w+(?:, \w+)*) (?:[-+*/%|&^]|//|<<|>>)?= ")


def hoist_index_casts(lines: list[str]) -> list[str]:
    """``lines`` with each loop index's ``np.uint64(i)`` (what every load
    and store writes) cast once where the index is bound, ``u_i =
    np.uint64(i)``, and the cast's uses renamed: numba types and lowers each
    call separately, and a row kernel wrote a dozen of the same one (a tenth of
    its compile time). LLVM sees the same index either way.

    An index's scope is the lines indented under its loop, or those after its
    binding (``i0 = o``) at that indent, up to where it is bound again. A scope
    in which the index is bound again inside a nested block (a loop's body,
    an ``if``) keeps its casts: a use before that binding may run after it."""
    return list(_hoisted(tuple(lines)))


@functools.lru_cache(maxsize=512)  # (the iterations of an unrolled loop: one body, thousands of kernels)
def _hoisted(lines: tuple) -> tuple:
    poisoned = set(_index_scopes(lines, None))
    return tuple(_index_scopes(lines, poisoned))


def _index_scopes(lines: list[str], poisoned: set | None):
    """hoist_index_casts' one pass: with ``poisoned`` None, the scopes (by
    their first line) whose index is bound again in a nested block; else the
    lines rewritten, skipping the poisoned scopes."""
    out: list[str | None] = []
    found: list[int] = []
    scopes: list[list] = []  # [index, body indent, first line, placeholder position, used]

    def close(scope):
        if not scope[4] and poisoned is not None:
            out[scope[3]] = None  # (never used: no cast)

    for n, line in enumerate(lines):
        text = line.lstrip()
        if not text or text.startswith("#"):
            out.append(line)
            continue
        depth = len(line) - len(text)
        while scopes and depth < scopes[-1][1]:
            close(scopes.pop())
        assigned, head = _ASSIGNED.match(text), _LOOP_HEAD.match(text)
        if assigned or head:  # (an index bound again, by a loop too: its cast is stale from here)
            names = {head.group(1)} if head else set(assigned.group(1).split(", "))
            for scope in [sc for sc in scopes if sc[0] in names]:
                if depth > scope[1]:
                    found.append(scope[2])
                scopes.remove(scope)
                close(scope)
        if poisoned is not None:
            for scope in scopes:
                cast_of = f"np.uint64({scope[0]})"
                if cast_of in line:
                    line = line.replace(cast_of, f"u_{scope[0]}")
                    scope[4] = True
        out.append(line)
        rename = _RENAME.match(text)
        if (head or rename) and (poisoned is None or n not in poisoned):
            index = (head or rename).group(1)
            body = depth + 4 if head else depth
            scopes.append([index, body, n, len(out), False])
            out.append(f"{' ' * body}u_{index} = np.uint64({index})")
    while scopes:
        close(scopes.pop())
    if poisoned is None:
        return found
    return [line for line in out if line is not None]


class Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 1

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self):
        self.depth += 1

    def dedent(self):
        self.depth -= 1


# Generated kernels nest one Python loop per dimension, and Python allows 20
# nested blocks: loops of higher rank (many size-1 dimensions, in practice)
# are evaluated with NumPy instead.
MAX_KERNEL_RANK = 16


def needs_numpy(loop: Loop) -> str | None:
    """Why this loop is evaluated with NumPy rather than a generated kernel, or None."""
    nodes = list(loop.members) + list(loop.leaves)
    if any(np.dtype(n.aval.dtype) == np.float16 for n in nodes):
        return "float16, evaluated with NumPy (numba has no float16 arrays)"
    if max([len(loop.domain)] + [n.aval.ndim for n in nodes]) > MAX_KERNEL_RANK:
        return f"rank above {MAX_KERNEL_RANK}, evaluated with NumPy (kernels nest a loop per dimension)"
    return None


# Constants are kernel arguments, not literals in the source: kernels that differ
# only in them (an unrolled loop's ``np.argmax(A[k:, k]) + k``) are one compiled
# function. Except an integer divisor or shift count, which as a literal LLVM
# divides by multiplying (``i % 7``), a dozen cycles less an element.
_LITERAL_DIVISORS = frozenset({"floor_divide", "remainder", "fmod", "left_shift", "right_shift"})


def const_arg_dtype(node: Node) -> np.dtype:
    """The dtype a literal is passed to a kernel in: its own, but float16 (a
    ``np.float16`` scalar beside float32 data) as float32, which holds it
    exactly: numba has no float16, and the kernel casts it to the operation's
    type anyway (a float16 operation is evaluated with NumPy: needs_numpy)."""
    dtype = np.dtype(node.aval.dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def const_arg(node: Node):
    """A literal's value as the kernel argument it is passed as."""
    return np.asarray(node.kw["value"].value).astype(node.aval.dtype).astype(const_arg_dtype(node))[()]


def generate(loop: Loop, name: str = "kernel", out_windows: dict | None = None,
             anchored: bool = False) -> KernelSource:
    """``out_windows``: output index -> the steps of a window of a larger array
    (``u[1:-1, 1:-1] = ...``) that output is written into: the kernel takes that
    array and the window's starts in place of a flat buffer. Honoured for
    elementwise loops whose outputs span the domain (``KernelSource.out_windows``
    says which were)."""
    return LoopCodegen(loop, name, out_windows, anchored).build()


def _offset(start: str, step: int, index: str) -> str:
    """The index ``start + step * index`` of a window, as source."""
    if index == "0":
        return start
    return f"{start} + {index}" if step == 1 else f"{start} + {step} * {index}"


class LoopCodegen:
    """Source for one fused loop: the expression walk (each member through the
    target's ops handler, ``ops``), loads, and the cpu's loop skeletons. The
    cuda target subclasses it with its own skeletons, loads and ops handler;
    both emit reductions through the reduction table (``dialect``)."""

    ops = CpuOps()  # the scalar code of each elementwise op on this target (the ops handler)

    def __init__(self, loop: Loop, name: str, out_windows: dict | None = None, anchored: bool = False):
        self.loop = loop
        self.name = name
        # Window leaves (``a[1:-1]``, ``a[:, 2:]``, see Loop.windows) are read from
        # their array at offsets: the starts are arguments (so iterations of an
        # unrolled loop share the kernel), the steps part of the source.
        self.windows = {id(leaf): loop.windows[id(leaf)][2] for leaf in loop.leaves if id(leaf) in loop.windows}
        self.wraps = {id(leaf): loop.wraps[id(leaf)] for leaf in loop.leaves if id(leaf) in loop.wraps}
        domain = tuple(int(d) for d in loop.domain)
        self.out_windows = {k: tuple(steps) for k, steps in (out_windows or {}).items()
                            if domain and not loop.ninner and loop.perm is None and not loop.compact and len(steps) == len(domain)
                            and tuple(loop.outputs[k].aval.shape) == domain and loop.space[id(loop.outputs[k])] == "full"}
        self.members = {id(m) for m in loop.members}
        self.R = len(loop.domain)
        self.r = loop.ninner
        # loop structure: reduced axes inner; pure elementwise: last axis inner
        self.nin = self.r if self.r else (1 if self.R >= 1 else 0)
        self.od = self.R - self.nin
        self.leaf_names = {id(n): f"a{k}" for k, n in enumerate(loop.leaves)}
        self.params = self._share_windows()
        self.deltas = self._window_deltas()
        self.anchors = {k: (a, d) for k, a, d in self.deltas} if anchored else {}
        self.out_index = {id(n): k for k, n in enumerate(loop.outputs)}
        self.consts: list[Node] = []
        self.const_names: dict[int, str] = {}
        self.leaf_shapes = [self._leaf_shape(n) for n in loop.leaves]
        self._names = 0
        self._blocking = False
        self._hoist: list[str] | None = None
        self._flat: dict[int, str] | None = None  # short rows: leaves read through flat views (``_flat_load``)
        self._split: dict[tuple, str] = {}  # (leaf, dim) -> its wrapped start in this segment (``_wrap_segments``)
        self._column_views: dict[str, str] = {}  # array -> its flat view, for columns of short rows (``_column_load``)
        self.has_trig = not loop.compact and any(m.op in TRIG and np.dtype(m.aval.dtype) in (np.float32, np.float64)
                                                 for m in loop.members) and all(
            rt.has_vector_math(op, sfx) for op in TRIG for sfx in ("f32", "f64"))
        self.exact = False
        self._seg: dict[int, tuple] = {}  # reduction -> its segmented group (while a row pass is emitted)
        self._past_nan: set[int] = set()  # float arg reductions whose row's NaN is found afterwards (_nan_rerun)
        self._lanes: dict[int, str] = {}  # arg reduction -> its lanes' name, while a lanes loop is emitted
        self._row_regs: dict[int, str] = {}  # the same, while rows in lanes keep their accumulators in registers
        self._hoisted: dict[str, tuple] = {}  # hoisted load's variable -> (load, dtype)
        self._plan_passes()
        # id(max/min) -> the argmax/argmin of the same values in the same pass, whose kept
        # value it is (reductions.ValueOfArg: k-means' d.min(1) beside d.argmin(1))
        self._twins: dict[int, Node] = {}
        if self.dialect is CPU:
            for m in loop.members:
                arg = twin_arg(m, loop.members) if m.op in ("reduce_max", "reduce_min") else None
                if arg is not None and self.pass_of.get(id(arg)) == self.pass_of.get(id(m)):
                    self._twins[id(m)] = arg

    def _share_windows(self) -> tuple | None:
        """Windows of one array (a stencil's ``u[2:, 1:-1]``, ``u[:-2, 1:-1]``,
        ...; a small matmul written out, reading columns of ``F``) are one
        argument: each array argument costs numba ~0.1 us a call to type and
        unbox (a 7-point stencil passed ``u`` 7 times, a 4x4 product written
        out ``F`` and ``P`` 4 times each). Returns the leaves passed, by index."""
        if self.dialect is not CPU or self.loop.perm is not None or not self.windows:
            return None
        first: dict = {}
        params = []
        for k, leaf in enumerate(self.loop.leaves):
            if id(leaf) in self.windows:
                merged = self.loop.merged.get(id(leaf))
                key = (id(self.loop.reads(leaf)), None if merged is None else tuple(merged[1]))
                if key in first:
                    self.leaf_names[id(leaf)] = self.leaf_names[id(self.loop.leaves[first[key]])]
                    continue
                first[key] = k
            params.append(k)
        return tuple(params) if len(params) < len(self.loop.leaves) else None

    def _window_deltas(self) -> tuple:
        """(leaf index, its anchor's, offsets) for each window read from the same
        array argument as an earlier one (``_share_windows``), the anchor: the
        first. Anchored (``generate``), a stencil's reads are ``u[w0 + 1 + i]``,
        ``u[w0 - 1 + i]``, ``u[w0 + i]``: LLVM sees which are the same element
        and loads it once (an advection step's limiter read ``q[i]`` three times
        through windows at offsets it could not compare), and keeps one base
        address per array. Rotations (wrapping reads) are left as they are."""
        if self.params is None:
            return ()
        first, deltas = {}, []
        for k, leaf in enumerate(self.loop.leaves):
            if id(leaf) not in self.windows or any(self.wraps.get(id(leaf), ())):
                continue
            starts = self.loop.windows[id(leaf)][1]
            key = (self.leaf_names[id(leaf)], len(starts))
            if key not in first:
                first[key] = (k, starts)
                continue
            a, base = first[key]
            deltas.append((k, a, tuple(int(s) - int(b) for s, b in zip(starts, base))))
        return tuple(deltas)

    def _start(self, k: int, i: int) -> str:
        """Where window leaf ``k`` starts on axis ``i``, as source."""
        if k not in self.anchors:
            return f"w{k}_{i}"
        a, d = self.anchors[k][0], self.anchors[k][1][i]
        return f"w{a}_{i}" if d == 0 else f"w{a}_{i} + {d}" if d > 0 else f"w{a}_{i} - {-d}"

    def _fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    # ---- leaves
    def _leaf_shape(self, leaf: Node) -> tuple[int, ...]:
        if id(leaf) in self.loop.merged:
            return self.loop.merged[id(leaf)][0]
        base = self.loop.source(leaf)
        shape = tuple(base.aval.shape)
        if self.loop.perm:  # aligned to rank R, then transposed, by the launcher
            shape = (1,) * (self.R - len(shape)) + shape
            shape = tuple(shape[p] for p in self.loop.perm)
        return shape

    def _indices(self, space: str) -> list[str]:
        outer = [f"i{k}" for k in range(self.od)]
        inner = [f"j{k}" for k in range(self.nin)]
        if space == "full":
            return outer + inner
        if space == "keep":
            return outer + ["0"] * self.nin
        return outer

    def _load(self, leaf: Node, space: str) -> str:
        k = self.loop.leaves.index(leaf)
        shape = self.leaf_shapes[k]
        name = self.leaf_names[id(leaf)]
        if not shape:
            return name
        idx = self._indices(space)
        offset = len(idx) - len(shape)
        # A size-1 dimension is a broadcast (index 0) unless the loop's own
        # dimension there is 1 too: then it takes the loop index (0 as well).
        # Otherwise a loop over size-1 dimensions only makes every value
        # loop-invariant, and LLVM's loop unswitching on the branches of
        # inlined exp/tanh/cos then ran for minutes.
        dom = tuple(int(d) for d in self.loop.domain)
        aligned = len(idx) == len(dom)
        # Loop indices are never negative, but numba cannot know it for a loop
        # that starts at a block boundary (range(jb, ...)); as unsigned ints
        # they skip NumPy's negative-index wraparound, which would otherwise
        # turn contiguous loads into gathers.
        parts = ["0" if d == 1 and not (aligned and dom[offset + i] == 1) else idx[offset + i]
                 for i, d in enumerate(shape)]
        steps = self.windows.get(id(leaf))
        kept = self.loop.squeezed.get(id(leaf))
        if kept is not None:  # (the array's other axes at the window's start)
            full = ["0"] * len(steps)
            for j, ax in enumerate(kept):
                full[ax] = parts[j]
            parts = [_offset(self._start(k, i), step, part) for i, (step, part) in enumerate(zip(steps, full))]
            base = self.loop.reads(leaf).aval.shape
            if self.dialect is CPU and len(base) == 2 and kept == (0,) and base[1] <= COLUMN_ROW:
                return self._column_load(name, parts, base[1])
            return f"{name}[{', '.join(p if p == '0' else f'np.uint64({p})' for p in parts)}]"
        if steps is not None:
            parts = [_offset(self._start(k, i), step, part) for i, (step, part) in enumerate(zip(steps, parts))]
            for i, n in enumerate(self.wraps.get(id(leaf), ())):
                if n and (k, i) in self._split and space == "full":  # no wrap inside the row's segment
                    parts[i] = _offset(self._split[(k, i)], steps[i], idx[offset + i])
                elif n:  # a rotation: the index wraps around (its extent is the domain's there)
                    d = f"d{offset + i}" if aligned and dom[offset + i] == n else str(n)
                    parts[i] = f"({parts[i]} - {d} if {parts[i]} >= {d} else {parts[i]})"
        elif self._flat is not None and space == "full" and shape[-1] == int(dom[-1]) and len(shape) > 1:
            return self._flat_load(leaf, name, shape, parts, offset)
        return f"{name}[{', '.join(p if p == '0' else f'np.uint64({p})' for p in parts)}]"

    def _column_load(self, name: str, parts: list, row: int) -> str:
        """A column of an array of short rows (``X[:, 1]`` of an (n, 3) array,
        what ``X @ w`` is written out as) read through a flat view, its row
        length a literal: LLVM vectorizes a constant stride (interleaved
        loads); with the stride read from the array it ran the loop scalar,
        4x slower than reading a contiguous vector (exp and all). The view is
        the array for a C-contiguous one; others are copied once per call."""
        self._column_views[name] = flat = f"{name}c"
        return f"{flat}[np.uint64(({parts[0]}) * {row} + {parts[1]})]"

    def _flat_load(self, leaf: Node, name: str, shape, parts, offset: int) -> str:
        """A load of a short-row kernel through a flat view of the leaf, its row
        length a literal: the loop LLVM vectorizes is the one over rows, and an
        (n, 3) array's row stride read from the array is unknown to it (the
        vector loop it versioned for stride 1 never ran). The view is the array
        for a C-contiguous one; others are copied once per call."""
        self._flat[id(leaf)] = flat = f"{name}f"
        expr = parts[0]
        for i in range(1, len(shape)):
            if shape[i] == 1:
                continue  # (its index is 0)
            size = str(shape[i]) if i == len(shape) - 1 else f"d{offset + i}"
            expr = parts[i] if expr == "0" else f"({expr}) * {size} + {parts[i]}"
        return f"{flat}[np.uint64({expr})]"

    # ---- passes
    def _plan_passes(self):
        loop = self.loop
        self.space = loop.space
        dep: dict[int, int] = {}
        self.pass_of: dict[int, int] = {}
        for m in loop.members:
            d = max((dep.get(id(i), 0) for i in m.inputs if id(i) in self.members), default=0)
            if m.op in REDUCE_OPS:
                self.pass_of[id(m)] = d + 1
                dep[id(m)] = d + 1
            else:
                dep[id(m)] = d
        self.dep = dep
        self.npasses = max(self.pass_of.values(), default=0)
        self.full_outputs = [o for o in loop.outputs if self.space[id(o)] == "full"]
        self.row_outputs = [o for o in loop.outputs if self.space[id(o)] not in ("full", "compact")]
        self.write_pass = {
            id(o): max(dep[id(o)] + 1, self.npasses) if dep[id(o)] == self.npasses else self.npasses
            for o in self.full_outputs
        }
        for o in self.full_outputs:
            self.write_pass[id(o)] = max(self.write_pass[id(o)], 1)
        self.nloops = max([self.npasses] + list(self.write_pass.values()) + [0])
        self._plan_stash()

    def _plan_stash(self):
        """A value computed for a reduction in an early pass and needed again by an
        output written later is stored in that output's buffer, not recomputed
        (softmax: exp(x - max) is summed in pass 2 and divided in pass 3)."""
        self.stash: dict[int, tuple[int, int]] = {}  # id(value) -> (output index, pass)
        used = set()
        for out in self.full_outputs:
            later = self.write_pass[id(out)]
            ancestors = self._ancestors(out)
            for p in range(1, later):
                for red in self._reductions(p):
                    v = red.inputs[0]
                    if (id(v) in self.members and self.space[id(v)] == "full" and id(v) in ancestors
                            and v.aval.dtype == out.aval.dtype and id(v) not in self.stash
                            and id(out) not in used and v.op not in LAYOUT_OPS):
                        self.stash[id(v)] = (self.out_index[id(out)], p)
                        used.add(id(out))

    def _ancestors(self, node: Node) -> set[int]:
        seen, stack = set(), [node]
        while stack:
            n = stack.pop()
            for i in n.inputs:
                if id(i) in self.members and id(i) not in seen:
                    seen.add(id(i))
                    stack.append(i)
        return seen

    # ---- expressions
    def _operand(self, node: Node, space: str, env: dict, divisor: bool = False) -> str:
        if node.op == "const":
            kind = np.dtype(node.aval.dtype).kind
            if kind == "f" or kind in "iu" and not divisor:
                if id(node) not in self.const_names:
                    self.const_names[id(node)] = f"c{len(self.consts)}"
                    self.consts.append(node)
                return Typed(self.const_names[id(node)], const_arg_dtype(node))  # (passed as that scalar)
            return literal(node.kw["value"].value, node.aval.dtype)
        if id(node) in self.members:
            return env[id(node)]
        key = (id(node), space)
        if key not in env:
            var = self._fresh(f"l_{self.leaf_names[id(node)]}_")
            load = self._load(node, space)
            if load != self.leaf_names[id(node)]:  # (an element of an array of the leaf's dtype)
                var = Typed(var, node.aval.dtype)
            if self._hoist is not None and not _INNER_INDEX.search(load):
                self._hoist.append(f"{var} = {load}")  # row-invariant: read once per row
                self._hoisted[var] = (load, np.dtype(node.aval.dtype))
            else:
                env["__lines__"].append(f"{var} = {load}")
            env[key] = var
        return env[key]

    def _value(self, node: Node, env: dict) -> str:
        """Emit ``node`` (a non-reduction member) and the members it needs that are
        not emitted yet into env's lines; return its variable. Post-order with an
        explicit stack: a kernel may hold a chain of thousands of members."""
        if id(node) in env:
            return env[id(node)]
        stack, order, seen = [(node, False)], [], set()
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in seen or id(n) in env:
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((i, False) for i in reversed(n.inputs) if id(i) in self.members and id(i) not in env)
        for n in order:
            self._emit_one(n, env)
        return env[id(node)]

    def _emit_one(self, node: Node, env: dict) -> str:
        """Emit one member whose member inputs are all emitted."""
        space = self.space[id(node)]
        if node.op in LAYOUT_OPS:  # trivial: same element
            env[id(node)] = self._operand(node.inputs[0], space, env)
            return env[id(node)]
        if node.op == "power" and node.inputs[1].op == "const":
            expr = self._power(node, space, env)
            if expr is not None:
                var = self._fresh("v")
                env["__lines__"].append(f"{var} = {expr}")
                env[id(node)] = typed_name(var, expr, node.aval.dtype)
                return env[id(node)]
        divides = node.op in _LITERAL_DIVISORS
        args = [self._operand(i, space, env, divides and k == 1) for k, i in enumerate(node.inputs)]
        if node.op in TRIG and self.has_trig and not self.exact:
            return self._trig(node, args[0], env)
        expr = self.ops.emit(node.op, node.kw, args, [i.aval for i in node.inputs], node.aval.dtype)
        var = self._fresh("v")
        env["__lines__"].append(f"{var} = {expr}")
        env[id(node)] = typed_name(var, expr, node.aval.dtype)
        return env[id(node)]

    def _trig(self, node: Node, arg: str, env: dict) -> str:
        """Vectorized sin/cos, valid for |x| < 2**48; a larger argument sets the
        kernel's flag and the launcher reruns the loop with kernel_exact (libm)."""
        out = np.dtype(node.aval.dtype)
        t = out if out in (np.float32, np.float64) else np.dtype(np.float64)
        suffix = "f32" if t == np.float32 else "f64"
        x = self._fresh("tx")
        var = self._fresh("v")
        env["__lines__"].append(f"{x} = {cast(arg, t)}")
        x = Typed(x, t)
        flag = self._trig_flag
        env["__lines__"].append(f"{flag} = {flag} | (abs({x}) >= {literal(TRIG_MAX, t)})")
        env["__lines__"].append(f"{var} = {cast(f'vm.{node.op}_{suffix}({x})', out)}")
        env[id(node)] = Typed(var, out)
        return env[id(node)]

    # The flag a large sin/cos argument sets. A chunked prange loop keeps its own
    # (``tbigc``): numba does not reduce a flag shared with the code around the
    # loop, so the loop would overwrite what the code before it had set.
    _trig_flag = "tbig"

    def _trig_open(self, w) -> None:
        if self.has_trig and not self.exact:
            w(f"{self._trig_flag} = False")

    def _trig_close(self, w) -> None:
        if self.has_trig and not self.exact:
            w(f"if {self._trig_flag}:")
            w("    tf[0] = 1")

    def _power(self, node: Node, space: str, env: dict) -> str | None:
        """x ** n for a literal n in {-1.5, -1, 0.5, 1, 1.5, 2, 3, 4, 5}: multiplications
        (and a sqrt) that vectorize, instead of a pow call that does not (the
        UNESCO equation of state's ``T ** 5`` and ``S ** 1.5``, an N-body step's
        ``r2 ** -1.5``; README: within 2 ulp of ``pow``, NaN and inf exact)."""
        n = node.inputs[1].kw["value"].value
        out = np.dtype(node.aval.dtype)
        if out.kind != "f" or float(n) not in (-1.5, -1.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0):
            return None
        x = cast(self._operand(node.inputs[0], space, env), out)
        n = float(n)
        if n == 0.5:
            return cast(self.ops.sqrt(x, out), out)
        if n == -1.0:
            return cast(f"({literal(1, out)} / {x})", out)
        var = self._fresh("p")
        env["__lines__"].append(f"{var} = {x}")
        var = typed_name(var, x, out)
        if n in (1.5, -1.5):  # x * sqrt(x); pow(-inf, 1.5) is inf (and pow(-inf, -1.5) 0), not NaN
            v = cast(self.ops.mul(var, cast(self.ops.sqrt(var, out), out), out), out)
            at_minus_inf = literal(np.inf, out)
            if n == -1.5:
                v, at_minus_inf = cast(f"({literal(1, out)} / {v})", out), literal(0, out)
            return f"({v} if {var} != {literal(-np.inf, out)} else {at_minus_inf})"
        if n == 5.0:
            sq = self._fresh("p")
            square = cast(self.ops.mul(var, var, out), out)
            env["__lines__"].append(f"{sq} = {square}")
            sq = typed_name(sq, square, out)
            return cast(self.ops.mul(cast(self.ops.mul(sq, sq, out), out), var, out), out)
        if n == 4.0:
            sq = self._fresh("p")
            square = cast(self.ops.mul(var, var, out), out)
            env["__lines__"].append(f"{sq} = {square}")
            sq = typed_name(sq, square, out)
            return cast(self.ops.mul(sq, sq, out), out)
        if n == 3.0:
            return cast(self.ops.mul(cast(self.ops.mul(var, var, out), out), var, out), out)
        if n == 2.0:
            return cast(self.ops.mul(var, var, out), out)
        return cast(var, out)

    # ---- skeletons
    def build(self) -> KernelSource:
        """Two functions from one body: ``kernel`` (prange, threads) and
        ``kernel_serial`` (range), compiled lazily by numba on first call."""
        loop = self.loop
        functions = []
        variants = [("", True, False), ("_serial", False, False)]
        if self.has_trig:
            variants.append(("_exact", False, True))
        scalar = self.R == 0 and not loop.compact  # (no loop: one body whether parallel or not)
        bodies: dict[bool, tuple] = {}
        for suffix, parallel, exact in variants:
            if scalar and exact in bodies:
                body, self.consts, self.const_names = bodies[exact]
                functions.append(self._function(self.name + suffix, parallel, body))
                continue
            self.exact = exact
            self._names = 0
            self.consts, self.const_names = [], {}
            self.nin = self.r if self.r else (1 if self.R >= 1 else 0)
            self.rng = "prange" if parallel else "range"
            body = Writer()
            rows = False  # (whether the body is a loop over rows: ``_rows_loop``)
            flat = (not loop.compact and self.R == 1 and self.od == 0 and not self.npasses and not self.has_trig
                    and not self.row_outputs)
            if loop.compact:
                self._compact_body(body)
            elif self.R == 0:
                self._scalar_body(body)
            elif flat:
                self._flat_body(body)
            elif self.od == 0:
                self._global_body(body)
            elif self._columns():
                self._columns_body(body)
            elif self._row_lanes_fit():
                trial = Writer()
                if self._row_lanes(trial):
                    body = trial
                else:
                    self._rows_loop(body, self.rng)
                    rows = True
            else:
                self._rows_loop(body, self.rng)
                rows = True
            interleave = 0
            if self._latency_bound():
                if flat:
                    interleave = INTERLEAVE
                elif rows and not self.has_trig and self._row_length() >= ROW_INTERLEAVE_MIN:
                    interleave = ROW_INTERLEAVE
            functions.append(self._function(self.name + suffix, parallel, body, interleave))
            if scalar:
                bodies[exact] = (body, self.consts, self.const_names)
        src = HEADER + "".join(functions)
        return KernelSource(src, list(loop.leaves), list(loop.outputs), list(self.consts), self.leaf_shapes,
                            self.has_trig, tuple(sorted(self.out_windows)), self.params, self._packed(),
                            tuple(sorted(self.anchors)), self.deltas)

    def _packed(self) -> bool:
        """Whether the windows' starts come in one int64 array (``wv``): an int
        argument costs numba ~30 ns a call, and a 7-point stencil has 21."""
        return self.dialect is CPU and sum(len(self.loop.windows[id(n)][1]) for k, n in enumerate(self.loop.leaves)
                                           if id(n) in self.windows and k not in self.anchors) > 2

    def _latency_bound(self) -> bool:
        """Whether the loop's body is a chain of vector-math polynomials and
        divisions long enough for interleaving to pay (INTERLEAVE)."""
        calls = sum(m.op in VECTOR_MATH for m in self.loop.members)
        slow = sum(m.op in SLOW_ARITH or m.op in DIVIDING_MATH for m in self.loop.members)
        return calls >= 2 or (calls == 1 and slow >= 2)

    def _row_length(self) -> int:
        """Elements in one row of a rows loop (the inner axes' extent)."""
        return int(np.prod([int(d) for d in self.loop.domain[self.od:]]))

    def _function(self, name: str, parallel: bool, body: "Writer", interleave: int = 0) -> str:
        loop = self.loop
        starts = [f"w{k}_{i}" for k, n in enumerate(loop.leaves) if id(n) in self.windows and k not in self.anchors
                  for i in range(len(loop.windows[id(n)][1]))]
        packed = self._packed()
        leaves = loop.leaves if self.params is None else [loop.leaves[k] for k in self.params]
        args = (
            [self.leaf_names[id(n)] for n in leaves]
            + [f"o{k}" for k in range(len(loop.outputs))]
            + [f"d{k}" for k in range(self.R)]
            + [f"c{k}" for k in range(len(self.consts))]
            + (["wv"] if packed else starts)
            + [f"t{k}_{i}" for k in sorted(self.out_windows) for i in range(self.R)]
            + (["tf"] if self.has_trig else [])
            + (["cf"] if loop.compact else [])
        )
        unpack = [f"    {w} = wv[{j}]" for j, w in enumerate(starts)] if packed else []
        unpack += [f"    {flat} = {a}.ravel()" for a, flat in self._column_views.items()]
        flags = f"parallel={parallel}, fastmath={FASTMATH}, {FLAGS}"
        deco = f"rt.interleaved({interleave}, {flags})" if interleave else f"njit({flags})"
        lines = hoist_index_casts(unpack + body.lines)
        return f"\n\n@{deco}\ndef {name}({', '.join(args)}):\n" + "\n".join(lines) + "\n"

    def _row_env(self, w: Writer, env: dict, upto: int) -> None:
        """Emit row values (keep/drop, non-reduction) whose inputs are ready after pass ``upto``."""
        for m in self.loop.members:
            if self.space[id(m)] == "full" or m.op in REDUCE_OPS or id(m) in env:
                continue
            if self.dep[id(m)] <= upto:
                env["__lines__"] = []
                self._value(m, env)
                for line in env["__lines__"]:
                    w(line)

    def _reductions(self, p: int) -> list[Node]:
        return [m for m in self.loop.members if self.pass_of.get(id(m)) == p]

    # ---- reductions: the table's operations (targets/reductions.py)
    dialect = CPU

    def _red(self, red: Node):
        if id(red) in self._twins:
            return ValueOfArg(red, self.dialect)
        return reduction(red, self.dialect)

    def _acc_update(self, red: Node, value: str, acc: str, flat: str) -> list[str]:
        r = self._red(red)
        if self._blocking and isinstance(r, Sum) and r.blockable:
            return [r.block_update(acc, value)]
        if id(red) in self._row_regs:
            return r.row_update(self._row_regs[id(red)], acc, value, flat)
        if id(red) in self._lanes:
            return r.lane_update(self._lanes[id(red)], value, flat)
        if id(red) in self._past_nan:
            return r.update_past_nan(acc, value, flat)
        return r.update(acc, value, flat)

    def _past_nan_args(self, p: int) -> list[Node]:
        """The argmax / argmin of pass ``p`` over float values, in a row loop of
        one inner axis: their rows find a NaN after the loop (``_nan_rerun``)."""
        if self.dialect is not CPU or self.nin != 1:
            return []
        return [r for r in self._reductions(p) if isinstance(self._red(r), ArgExtremum)
                and id(r) not in self._twins and np.dtype(r.inputs[0].aval.dtype).kind == "f"]

    def _lanes_loop(self, w: Writer, env: dict, p: int, accs: dict, reds: list, lo: str, hi: str) -> str:
        """A chunk's whole blocks of LANES elements, element ``r`` of a block in
        lane ``r`` (reductions.ArgExtremum.lane_update), then the lanes into
        the chunk's accumulators; returns where the rest of the chunk starts
        (its last partial block, read by the loop after). A plain argmax of
        1e7 float64: 7.2 ms one element at a time, 4.2 ms in 256 lanes."""
        self._lanes = {id(r): self._fresh("ln") for r in reds}
        for red in reds:
            for line in self._red(red).lanes_init(self._lanes[id(red)], LANES):
                w(line)
        end = self._fresh("nfull")
        w(f"{end} = {lo} + ({hi} - {lo}) // {LANES} * {LANES}")
        w(f"for jb in range({lo}, {end}, {LANES}):")
        w.indent()
        w(f"for r in range({LANES}):")
        w.indent()
        w("j0 = jb + r")
        self._pass_body(w, env, p, accs, "np.uint64(j0)")
        w.dedent()
        for red in reds:
            for line in self._red(red).lanes_swap(self._lanes[id(red)]):
                w(line)
        w.dedent()
        for red in reds:
            for line in self._red(red).lanes_close(accs[id(red)], self._lanes[id(red)], LANES):
                w(line)
        self._lanes = {}
        return end

    def _nan_rerun(self, w: Writer, red: Node, env: dict, p: int, accs: dict, out_flat: str,
                   span: str) -> None:
        """A row whose arg reduction saw a NaN reads its values again, up to the
        first NaN, which is the answer (NumPy's argmax / argmin)."""
        acc = accs[id(red)]
        inner_env = dict(env)
        inner_env["__lines__"] = []
        saved, self._hoist = self._hoist, []
        lines = self._stash_reads(inner_env, p, out_flat)
        x = red.inputs[0]
        value = self._value(x, inner_env) if id(x) in self.members else self._operand(x, "full", inner_env)
        lines += inner_env["__lines__"]
        hoisted, self._hoist = self._hoist, saved
        w(f"if {self.dialect.is_set(f'{acc}_n')}:")
        w.indent()
        for line in hoisted:
            w(line)
        w(f"for j0 in range({span}):")
        w.indent()
        for line in lines + self._red(red).first_nan(acc, value, "j0"):
            w(line)
        w.dedent()
        w.dedent()

    def _acc_init(self, red: Node, acc: str) -> list[str]:
        return self._red(red).init(acc)

    def _acc_result(self, red: Node, accs: dict) -> str:
        return self._red(red).finalize(accs[id(self._twins.get(id(red), red))])

    def _result_var(self, w: Writer, red: Node, accs: dict, env: dict) -> None:
        """A reduction's result into a variable of ``env``."""
        var, expr = self._fresh("red"), self._acc_result(red, accs)
        w(f"{var} = {expr}")
        env[id(red)] = typed_name(var, expr, red.aval.dtype)

    def _blocked(self, reds) -> list:
        """The float sums among ``reds``: added in vectorized blocks (see BLOCK)."""
        return [r for r in reds if isinstance(self._red(r), Sum) and self._red(r).blockable]

    def _block_open(self, w: Writer, reds, accs: dict) -> None:
        opened = set()
        for r in reds:
            seg = self._seg.get(id(r))
            if seg is None:
                w(self._red(r).block_init(accs[id(r)]))
            elif seg[0] not in opened:  # (the group's partials, one per label)
                opened.add(seg[0])
                w(f"for q in range({seg[3]}):")
                w(f"    {seg[0]}[q] = {literal(0, self._red(r).out)}")

    def _block_close(self, w: Writer, reds, accs: dict) -> None:
        for r in reds:
            seg = self._seg.get(id(r))
            if seg is None:
                w(self._red(r).block_close(accs[id(r)]))
                continue
            acc, part = accs[id(r)], f"{seg[0]}[{seg[5]}]"
            if self._red(r).compensated:
                w(f"{acc}, {acc}_c = rt.neumaier({acc}, {acc}_c, {part})")
            else:
                w(f"{acc} += np.float64({part})")

    def _segment_groups(self, reds) -> dict[int, tuple]:
        """The blocked float sums among ``reds`` that are ``where(L == c, x,
        0)`` for one integer label ``L``, one value ``x`` and distinct integer
        constants ``c`` (at least SEGMENT_MIN, spanning at most SEGMENT_SPAN):
        id(sum) -> (partials' name, L, x, span, lowest c, this sum's slot).
        Each element is added to its label's partial alone, in the order the
        sums would add it (a label no sum asks for adds nowhere), so each sum
        is bitwise the same as when it added a zero for every other element."""
        if int(np.prod([int(d) for d in self.loop.domain[self.od:]], dtype=np.int64)) < SEGMENT_ROW:
            return {}
        found: dict[tuple, list] = {}
        for r in reds:
            arg = r.inputs[0]
            if id(arg) not in self.members or arg.op != "where" or id(arg) in self.stash:
                continue
            cond, x, zero = arg.inputs
            if zero.op != "const" or zero.kw["value"].value != 0 or cond.op != "equal":
                continue
            a, b = cond.inputs
            if a.op == "const":
                a, b = b, a
            if b.op != "const" or np.dtype(a.aval.dtype).kind not in "iu":
                continue
            c = b.kw["value"].value
            if not isinstance(c, (int, np.integer)) or isinstance(c, (bool, np.bool_)):
                continue
            found.setdefault((id(a), id(x)), []).append((r, a, x, int(c)))
        out = {}
        for items in found.values():
            consts = [c for _, _, _, c in items]
            lo, span = min(consts), max(consts) - min(consts) + 1
            if len(items) < SEGMENT_MIN or len(set(consts)) != len(consts) or span > SEGMENT_SPAN:
                continue
            name = self._fresh("sg")
            for r, a, x, c in items:
                out[id(r)] = (name, a, x, span, lo, c - lo)
        return out

    def _wrap_segments(self, w: Writer) -> list | None:
        """Rotations along the innermost axis (``np.roll(x, 1, 1)``: Game of
        Life's neighbours) read ``w + j`` wrapped at the extent, a branch per
        element that keeps the row loop from vectorizing. The row is instead
        cut where any of them wraps (at ``n - w``, computed once per call and
        sorted): inside each segment every such read is ``w + j`` or
        ``w - n + j`` throughout, chosen once per segment. Pure elementwise
        rows of at least SPLIT_MIN elements only; returns [(leaf, dim, start,
        extent)], with ``self._split`` naming each read's start per segment."""
        if self.r or self._flat is not None or self.nin != 1 or self.dialect is not CPU or self.loop.perm is not None:
            return None
        inner = self.R - 1
        dom = tuple(int(d) for d in self.loop.domain)
        if dom[inner] < SPLIT_MIN:
            return None
        found = []
        for k, leaf in enumerate(self.loop.leaves):
            wraps, steps = self.wraps.get(id(leaf), ()), self.windows.get(id(leaf))
            shape = self.leaf_shapes[k]
            offset = self.R - len(shape)
            for i, n in enumerate(wraps):
                if n and offset + i == inner and shape[i] != 1 and steps[i] == 1:
                    d = f"d{inner}" if len(shape) <= self.R and dom[inner] == n else str(n)
                    found.append((k, i, f"w{k}_{i}", d))
        if not found:
            return None
        w(f"bp = np.empty({len(found) + 2}, np.int64)")
        w("bp[0] = 0")
        for m, (_, _, start, d) in enumerate(found):
            w(f"bp[{m + 1}] = min(max({d} - {start}, 0), d{inner})")
        w(f"bp[{len(found) + 1}] = d{inner}")
        w("bp.sort()")
        self._split = {(k, i): f"e{k}_{i}" for k, i, _, _ in found}
        return found

    def _segment_loop(self, w: Writer, segments: list, rng: str = "range") -> int:
        """Open the row's segments (``_wrap_segments``) and the loop over each."""
        w(f"for sg in range({len(segments) + 1}):")
        w.indent()
        w("js = bp[sg]")
        w("je = bp[sg + 1]")
        for k, i, start, d in segments:
            w(f"{self._split[(k, i)]} = {start} - {d} if js >= {d} - {start} else {start}")
        w(f"for j{self.nin - 1} in {rng}(js, je):")
        w.indent()
        return 2

    def _innermost(self, w: Writer, var: str, lo: str, hi: str, reds, accs: dict) -> int:
        """Open the innermost loop ``for var in range(lo, hi)``, in blocks when
        ``reds`` (blocked sums) accumulate in it; returns the levels opened."""
        if not reds:
            w(f"for {var} in range({lo}, {hi}):" if lo != "0" else f"for {var} in range({hi}):")
            w.indent()
            return 1
        w(f"for jb in range({lo}, {hi}, {BLOCK}):")
        w.indent()
        self._block_open(w, reds, accs)
        w(f"for {var} in range(jb, min({hi}, jb + {BLOCK})):")
        w.indent()
        return 2

    def _innermost_close(self, w: Writer, levels: int, reds, accs: dict) -> None:
        w.dedent()
        if levels == 2:
            self._block_close(w, reds, accs)
            w.dedent()

    def _inner_sizes(self) -> list[str]:
        return [f"d{self.od + k}" for k in range(self.nin)]

    def _flat_inner(self) -> str:
        sizes = self._inner_sizes()
        expr = "j0"
        for k in range(1, self.nin):
            expr = f"({expr} * {sizes[k]} + j{k})"
        return expr

    def _pass_body(self, w: Writer, env: dict, p: int, accs: dict, out_flat: str) -> None:
        for line in self._pass_lines(env, p, accs, out_flat):
            w(line)

    def _pass_lines(self, env: dict, p: int, accs: dict, out_flat: str) -> list[str]:
        """Statements inside the innermost loop of pass ``p``."""
        inner_env = dict(env)
        inner_env["__lines__"] = []
        lines = self._stash_reads(inner_env, p, out_flat)
        added = set()
        for red in self._reductions(p):
            seg = self._seg.get(id(red)) if self._blocking else None
            if seg is not None:  # (the group's one add: see _segment_groups)
                if seg[0] not in added:
                    added.add(seg[0])
                    name, label, x, span, lo = seg[:5]
                    lab = self._value(label, inner_env) if id(label) in self.members else \
                        self._operand(label, "full", inner_env)
                    val = self._value(x, inner_env) if id(x) in self.members else self._operand(x, "full", inner_env)
                    lines.extend(inner_env["__lines__"])
                    inner_env["__lines__"] = []
                    q = self._fresh("q")
                    lines.append(f"{q} = np.int64({lab}) - np.int64({lo})")
                    lines.append(f"if {q} >= 0 and {q} < {span}:")
                    lines.append(f"    {name}[{q}] = rt.radd({name}[{q}], {cast(val, self._red(red).out)})")
                continue
            value = self._value(red.inputs[0], inner_env) if id(red.inputs[0]) in self.members else \
                self._operand(red.inputs[0], "full", inner_env)
            lines.extend(inner_env["__lines__"])
            inner_env["__lines__"] = []
            lines.extend(self._acc_update(red, value, accs[id(red)], self._flat_inner()))
            stash = self.stash.get(id(red.inputs[0]))
            if stash is not None and stash[1] == p:
                lines.append(f"o{stash[0]}[{out_flat}] = {value}")
        for out in self.full_outputs:
            if self.write_pass[id(out)] == p:
                value = self._value(out, inner_env)
                lines.extend(inner_env["__lines__"])
                inner_env["__lines__"] = []
                lines.append(f"{self._out_at(self.out_index[id(out)], out_flat)} = {value}")
        return lines

    def _stash_reads(self, inner_env: dict, p: int, out_flat: str) -> list[str]:
        """Read back what an earlier pass stored."""
        lines = []
        for vid, (k, q) in self.stash.items():
            if q < p and any(self.write_pass[id(o)] == p and self.out_index[id(o)] == k for o in self.full_outputs):
                var = self._fresh("st")
                lines.append(f"{var} = o{k}[{out_flat}]")
                inner_env[vid] = Typed(var, self._out_dtype(k))
        return lines

    def _out_dtype(self, k: int) -> np.dtype:
        """The dtype of output ``k``'s array (what a load from it is)."""
        return next(np.dtype(o.aval.dtype) for o in self.loop.outputs if self.out_index[id(o)] == k)

    def _out_at(self, k: int, flat: str) -> str:
        """Where output ``k`` stores the element at ``flat``: its flat buffer, or
        for a window output, its array at the window's offsets."""
        steps = self.out_windows.get(k)
        if steps is None:
            return f"o{k}[{flat}]"
        parts = [_offset(f"t{k}_{i}", step, idx) for i, (step, idx) in enumerate(zip(steps, self._indices("full")))]
        return f"o{k}[{', '.join(f'np.uint64({p})' for p in parts)}]"

    def _rows_loop(self, w: Writer, rng: str) -> None:
        top, pad = len(w.lines), "    " * w.depth  # (where the flat views go, made once per call)
        self._flat = {} if self._short_inner() is not None and self.loop.perm is None else None
        segments = self._wrap_segments(w)
        nested = self.od > 1 and int(self.loop.domain[0]) >= NEST_MIN
        if not nested:
            w(f"no = {' * '.join(f'd{k}' for k in range(self.od))}")
        w(f"ni = {' * '.join(self._inner_sizes())}")
        if self.od == 1:
            w(f"for o in {rng}(no):")
            w.indent()
            w("i0 = o")
        elif nested:
            # A loop per outer axis, parallel over the first: a 3-D stencil's rows
            # step their pointers by a stride (a flat row counter with carried
            # indices ran 20% slower: the row's addresses recomputed from them).
            w(f"for i0 in {rng}(d0):")
            w.indent()
            w(f"o = i0 * {' * '.join(f'd{k}' for k in range(1, self.od))}")
            for k in range(1, self.od):
                w(f"for i{k} in range(d{k}):")
                w.indent()
        else:
            # Rows in chunks: the row's indices are divided out once per chunk
            # and then counted up (an integer division per row of an (n, 8, 4)
            # distance kernel cost more than the row itself).
            w(f"cs = min({ROW_CHUNK}, max(1, no // 256))")
            w(f"for ob in {rng}((no + cs - 1) // cs):")
            w.indent()
            w("ostart = ob * cs")
            rem = "ostart"
            for k in range(self.od - 1, 0, -1):
                w(f"i{k} = {rem} % d{k}")
                w(f"r{k} = {rem} // d{k}")
                rem = f"r{k}"
            w(f"i0 = {rem}")
            w("for o in range(ostart, min(no, ostart + cs)):")
            w.indent()
        env: dict = {"__lines__": []}
        accs = {}
        self._trig_open(w)
        self._row_env(w, env, 0)
        for p in range(1, self.nloops + 1):
            for red in self._reductions(p):
                accs[id(red)] = f"acc{len(accs)}"
                for line in self._acc_init(red, accs[id(red)]):
                    w(line)
            blocked = self._blocked(self._reductions(p))
            self._blocking = bool(blocked)
            self._seg = self._segment_groups(blocked) if self._short_inner() is None else {}
            for seg in {v[0]: v for v in self._seg.values()}.values():
                red = next(r for r in blocked if self._seg.get(id(r)) is seg)
                w(f"{seg[0]} = np.zeros({seg[3]}, {np_type(self._red(red).out)})")
            self._hoist = []
            past_nan = self._past_nan_args(p)
            self._past_nan = {id(r) for r in past_nan}
            out_flat = f"np.uint64(o * ni + {self._flat_inner()})"
            body = self._pass_lines(env, p, accs, out_flat)
            for line in self._hoist:  # loads that do not change along the row: before its loop
                w(line)
            self._hoist = None
            short = self._short_inner()
            if short is not None:
                # A row of a few elements (an (n, 8, 4) distance's 4, a 3-vector):
                # the row's statements once per element, no loop. The same
                # additions in the same order as the loop's single block.
                self._block_open(w, blocked, accs)
                for j in range(short):
                    w(f"j0 = {j}")
                    for line in body:
                        w(line)
                self._block_close(w, blocked, accs)
            else:
                for k in range(self.nin - 1):
                    w(f"for j{k} in range(d{self.od + k}):")
                    w.indent()
                last = self.nin - 1
                if segments:
                    levels = self._segment_loop(w, segments)
                else:
                    levels = self._innermost(w, f"j{last}", "0", f"d{self.od + last}", blocked, accs)
                for line in body:
                    w(line)
                if segments:
                    for _ in range(levels):
                        w.dedent()
                else:
                    self._innermost_close(w, levels, blocked, accs)
                for _ in range(self.nin - 1):
                    w.dedent()
            self._blocking = False
            self._seg = {}
            for red in past_nan:
                self._nan_rerun(w, red, env, p, accs, out_flat, f"d{self.od}")
            self._past_nan = set()
            for red in self._reductions(p):
                self._result_var(w, red, accs, env)
            self._row_env(w, env, p)
        for out in self.row_outputs:
            value = env[id(out)] if id(out) in env else self._value_now(w, out, env)
            w(f"o{self.out_index[id(out)]}[o] = {value}")
        self._trig_close(w)
        if self._flat:
            w.lines[top:top] = [f"{pad}{flat} = {self.leaf_names[key]}.ravel()" for key, flat in self._flat.items()]
        self._flat = None
        self._split = {}
        if nested:
            w("o += 1")
            for _ in range(self.od):
                w.dedent()
        elif self.od > 1:  # the next row's indices
            for k in range(self.od - 1, 0, -1):
                w(f"i{k} += 1")
                w(f"if i{k} == d{k}:")
                w.indent()
                w(f"i{k} = 0")
            w("i0 += 1")
            for k in range(self.od - 1):
                w.dedent()
            w.dedent()
        w.dedent()

    def _columns(self) -> bool:
        """A reduction over the leading axis of a 2-D domain that keeps a short
        trailing one (``X.sum(axis=0)`` of an (n, 16) array, column means):
        the columns in lanes (``_columns_body``) rather than a row loop per
        column, which reads the array across its rows once per column."""
        loop = self.loop
        return (self.dialect is CPU and loop.perm is not None and self.od == 1 and self.nin == 1
                and not loop.windows and not self.out_windows and int(loop.domain[1]) >= COLUMN_MIN_ROWS
                and (int(loop.domain[0]) >= COLUMN_MIN_LANES or self._column_segments() is not None)
                and self.nloops == 1 and not self.full_outputs and not self.has_trig and not self.stash
                and not any(isinstance(self._red(r), ArgExtremum) for r in self._reductions(1)))
        # (an argmax / argmin keeps its row loop: it compares only there, _past_nan_args)

    def _column_segments(self):
        """(group, label's lines, label) when every reduction of the pass is a
        masked sum of one segment group (k-means' ``where(labels == c, X,
        0).sum(0)`` for each cluster ``c``, ``_segment_groups``) whose label
        is read by row alone; else None."""
        reds = self._reductions(1)
        blocked = self._blocked(reds)
        if not reds or len(blocked) != len(reds) or self.nloops != 1:
            return None
        segs = self._segment_groups(blocked)
        groups = {v[0] for v in segs.values()}
        if set(segs) != {id(r) for r in reds} or len(groups) != 1:
            return None
        seg = next(iter(segs.values()))
        env = {"__lines__": []}
        label = seg[1]
        lab = self._value(label, env) if id(label) in self.members else self._operand(label, "full", env)
        if any(re.search(r"\bi0\b", line) for line in env["__lines__"]) or re.search(r"\bi0\b", lab):
            return None
        return segs, env["__lines__"], lab

    def _columns_body(self, w: Writer) -> None:
        """Chunks of rows in parallel (prange), each adding its rows into one
        accumulator per column (lane); the loop over a row's columns reads
        contiguous memory and vectorizes; float sums add BLOCK rows into a
        block partial per lane first (as the row loop's blocks), then the
        chunks' partials combine in chunk order, column by column."""
        reds = self._reductions(1)
        accs = {id(r): f"acc{k}" for k, r in enumerate(reds)}
        blocked = self._blocked(reds)
        owned = [r for r in reds if self._red(r).parts()]  # (a ValueOfArg keeps no state of its own)
        w(f"nch = (d1 + {COLUMN_CHUNK} - 1) // {COLUMN_CHUNK}" if self.rng == "prange" else "nch = 1")
        w("step = (d1 + nch - 1) // nch if nch else 0")
        for red in owned:
            for sfx, dt in self._red(red).parts():
                w(f"{accs[id(red)]}{sfx}_part = np.empty((nch, d0), {np_type(dt)})")
        w(f"for c in {self.rng}(nch):")
        w.indent()
        for red in owned:
            for sfx, dt in self._red(red).parts():
                w(f"L{accs[id(red)]}{sfx} = np.empty(d0, {np_type(dt)})")
        segmented = self._column_segments() if int(self.loop.domain[0]) < COLUMN_MIN_LANES else None
        for red in blocked if segmented is None else ():
            w(f"L{accs[id(red)]}_b = np.empty(d0, {np_type(self._red(red).out)})")

        def lanes(lines_of, load=(), store=()):
            """``for o in range(d0)`` with the lanes' state in scalars."""
            w("for o in range(d0):")
            w.indent()
            w("i0 = o")
            for name in load:
                w(f"{name} = L{name}[o]")
            for line in lines_of():
                w(line)
            for name in store:
                w(f"L{name}[o] = {name}")
            w.dedent()

        state = [f"{accs[id(r)]}{sfx}" for r in owned for sfx, _ in self._red(r).parts()]
        lanes(lambda: [line for r in owned for line in self._acc_init(r, accs[id(r)])], store=state)
        w("lo = c * step")
        w("hi = min(d1, (c + 1) * step)")
        w(f"for jb in range(lo, hi, {BLOCK}):")
        w.indent()
        if segmented is not None:
            self._column_segment_block(w, segmented, accs, lanes)
        else:
            blocks = [f"{accs[id(r)]}_b" for r in blocked]
            if blocked:
                lanes(lambda: [self._red(r).block_init(accs[id(r)]) for r in blocked], store=blocks)
            w(f"for j0 in range(jb, min(hi, jb + {BLOCK})):")
            w.indent()
            self._blocking = bool(blocked)
            env: dict = {"__lines__": []}
            unblocked = [f"{accs[id(r)]}{sfx}" for r in owned if r not in blocked
                         for sfx, _ in self._red(r).parts()]
            lanes(lambda: self._pass_lines(env, 1, accs, "np.uint64(0)"), load=blocks + unblocked,
                  store=blocks + unblocked)
            self._blocking = False
            w.dedent()
            if blocked:
                closing = [f"{accs[id(r)]}{sfx}" for r in blocked for sfx, _ in self._red(r).parts()]
                lanes(lambda: [self._red(r).block_close(accs[id(r)]) for r in blocked], load=blocks + closing,
                      store=closing)
        w.dedent()
        lanes(lambda: [f"{name}_part[c, o] = {name}" for name in state], load=state)
        w.dedent()
        w("for o in range(d0):")  # the chunks' partials in order, then the row values of each column
        w.indent()
        w("i0 = o")
        env = {"__lines__": []}
        for red in owned:
            self._combine_parts(w, red, accs[id(red)], "c, o")
        self._row_results(w, reds, accs, env)
        w.dedent()

    def _column_segment_block(self, w: Writer, segmented, accs: dict, lanes) -> None:
        """One block of rows of a segment group in column lanes: each row's
        label picks its partials' row, the row's columns are added into it
        (one add per element, as the row loop's ``_segment_groups``), and at
        the block's end each sum's lanes take their label's partials."""
        segs, label_lines, lab = segmented
        name, _, x, span, lo = next(iter(segs.values()))[:5]
        reds = self._reductions(1)
        out = self._red(reds[0]).out
        w(f"{name} = np.zeros(({span}, d0), {np_type(out)})")
        w(f"for j0 in range(jb, min(hi, jb + {BLOCK})):")
        w.indent()
        for line in label_lines:
            w(line)
        w(f"q = np.int64({lab}) - np.int64({lo})")
        w(f"if q >= 0 and q < {span}:")
        w.indent()

        def add():
            env = {"__lines__": []}
            val = self._value(x, env) if id(x) in self.members else self._operand(x, "full", env)
            return env["__lines__"] + [f"{name}[q, o] = rt.radd({name}[q, o], {cast(val, out)})"]

        lanes(add)
        w.dedent()
        w.dedent()
        closing = [f"{accs[id(r)]}{sfx}" for r in reds for sfx, _ in self._red(r).parts()]

        def close():
            lines = []
            for r in reds:
                acc, part = accs[id(r)], f"{name}[{segs[id(r)][5]}, o]"
                if self._red(r).compensated:
                    lines.append(f"{acc}, {acc}_c = rt.neumaier({acc}, {acc}_c, {part})")
                else:
                    lines.append(f"{acc} += np.float64({part})")
            return lines

        lanes(close, load=closing, store=closing)

    def _combine_parts(self, w: Writer, red: Node, acc: str, at: str) -> None:
        """``acc``: the chunks' partials of ``red`` (``{acc}_part[at]``) combined in chunk order."""
        r = self._red(red)
        for line in r.init(acc):
            w(line)
        w("for c in range(nch):")
        w.indent()
        for sfx, _ in r.parts():
            w(f"v{sfx} = {acc}{sfx}_part[{at}]")
        for line in r.combine(acc, "v"):
            w(line)
        w.dedent()

    def _row_results(self, w: Writer, reds, accs: dict, env: dict) -> None:
        """Row ``o``'s reductions finalized, its row values and its outputs."""
        for red in reds:
            self._result_var(w, red, accs, env)
        self._row_env(w, env, 1)
        for out in self.row_outputs:
            value = env[id(out)] if id(out) in env else self._value_now(w, out, env)
            w(f"o{self.out_index[id(out)]}[o] = {value}")

    def _row_lanes_fit(self) -> bool:
        """Rows of a few elements whose argmax / argmin is all the pass does
        (k-means' ``d.argmin(1)`` of (n, 8) distances, with ``d.min(1)``):
        ROW_LANES rows at a time in lanes (``_row_lanes``)."""
        loop = self.loop
        if not (self.dialect is CPU and self.od == 1 and self.nin == 1 and loop.perm is None
                and self.npasses == 1 and self.nloops == 1 and not self.full_outputs and not self.stash
                and not self.has_trig and not loop.compact and 2 <= int(loop.domain[1]) <= ROW_LANES_MAX
                and int(loop.domain[0]) >= 2 * ROW_LANES):
            return False
        args = {id(r) for r in self._past_nan_args(1)}
        return bool(args) and all(id(r) in args or id(r) in self._twins for r in self._reductions(1))

    def _row_lanes(self, w: Writer) -> bool:
        """ROW_LANES rows at a time, row ``r`` of a block in lane ``r``: the
        row-invariant loads copied to a lane array first, then for each
        element of the rows the loop over the lanes, which vectorizes (a
        row's own loop is a chain of compares through one accumulator);
        then per row the NaN check (``_nan_rerun``), the row values and the
        outputs. False (nothing to use) where a value reads an array by row
        and element both (a gather across lanes) or a row value comes before
        the reduction. k-means' (n, 8) argmin with its distances: 5.4 ms in
        rows, 3.3 in lanes, one thread."""
        env: dict = {"__lines__": []}
        pre = Writer()
        self._row_env(pre, env, 0)
        if pre.lines:
            return False
        reds = self._reductions(1)
        accs = {id(r): f"acc{k}" for k, r in enumerate(reds)}
        args = self._past_nan_args(1)
        self._past_nan = {id(r) for r in args}
        row = int(self.loop.domain[1])
        in_registers = (row <= ROW_REGISTERS_MAX and len(self.loop.members) <= ROW_REGISTERS_MEMBERS
                        and not any(m.op in VECTOR_MATH for m in self.loop.members))
        if in_registers:
            self._row_regs = {id(r): self._lanes_name(r, accs) for r in args}
        else:
            self._lanes = {id(r): self._lanes_name(r, accs) for r in args}
        self._hoist, self._hoisted = [], {}
        out_flat = "np.uint64(i0 * ni + j0)"
        body = self._pass_lines(env, 1, accs, out_flat)
        hoisted = [(line.split(" = ", 1)[0], self._hoisted[line.split(" = ", 1)[0]]) for line in self._hoist]
        self._hoist, self._lanes, self._row_regs = None, {}, {}
        if any(re.search(r"\bi0\b", line) for line in body):
            self._past_nan = set()
            return False
        L, G = ROW_LANES, ROW_LANES_GROUP
        w("no = d0")
        w("ni = d1")
        w(f"nb = (no + {L} - 1) // {L}")
        w(f"for cb in {self.rng}((nb + {G} - 1) // {G}):")  # (a task's blocks share the lane arrays)
        w.indent()
        for var, (_, dt) in hoisted:
            w(f"S{var} = np.empty({L}, {np_type(dt)})")
        for red in args:
            for line in self._red(red).lanes_alloc(self._lanes_name(red, accs), L, sweeps=not in_registers):
                w(line)
        w(f"for ob in range(cb * {G}, min(nb, cb * {G} + {G})):")
        w.indent()
        w(f"base = ob * {L}")
        w(f"n = min({L}, no - base)")
        if in_registers:
            for red in args:
                w(f"{self._lanes_name(red, accs)}_n = False")
        else:
            for red in args:
                for line in self._red(red).lanes_reset(self._lanes_name(red, accs), "n"):
                    w(line)
        w("for r in range(n):")
        w.indent()
        w("i0 = base + r")
        for var, (load, _) in hoisted:
            w(f"S{var}[r] = {load}")
        w.dedent()
        if in_registers:  # (LLVM unrolls the literal row loop and vectorizes the one over lanes)
            w("for r in range(n):")
            w.indent()
            for var, _ in hoisted:
                w(f"{var} = S{var}[r]")
            for red in args:
                for line in self._red(red).row_start(accs[id(red)]):
                    w(line)
            w(f"for j0 in range({row}):")
            w.indent()
            for line in body:
                w(line)
            w.dedent()
            for red in args:
                for line in self._red(red).row_store(self._lanes_name(red, accs), accs[id(red)]):
                    w(line)
            w.dedent()
        else:
            w("for j0 in range(d1):")
            w.indent()
            w("for r in range(n):")
            w.indent()
            for var, _ in hoisted:
                w(f"{var} = S{var}[r]")
            for line in body:
                w(line)
            w.dedent()
            for red in args:
                for line in self._red(red).lanes_swap(self._lanes_name(red, accs)):
                    w(line)
            w.dedent()
        w("for r in range(n):")
        w.indent()
        w("o = base + r")
        w("i0 = o")
        for red in args:
            acc, ln = accs[id(red)], self._lanes_name(red, accs)
            w(f"{acc} = {ln}[r]")
            w(f"{acc}_i = {ln}_i[r]")
            w(f"{acc}_n = {self.dialect.flag_of(f'{ln}_n')}")  # (the block's: a row without NaN reads none)
            self._nan_rerun(w, red, env, 1, accs, out_flat, "d1")
        self._past_nan = set()
        self._row_results(w, reds, accs, env)
        w.dedent()
        w.dedent()
        w.dedent()
        return True

    @staticmethod
    def _lanes_name(red: Node, accs: dict) -> str:
        return f"L{accs[id(red)]}"

    def _short_inner(self) -> int | None:
        """The length of a one-axis inner row short enough to unroll (the source
        then holds it: kernels over other lengths are other sources)."""
        if self.nin != 1 or not self.loop.domain or not self.npasses:
            return None  # (elementwise: a short last axis merges with the one before, cpu.py)
        n = int(self.loop.domain[-1])
        return n if 1 <= n <= SHORT_ROW else None

    def _value_now(self, w, node, env):
        env["__lines__"] = []
        var = self._value(node, env)
        for line in env["__lines__"]:
            w(line)
        return var

    def _flat_body(self, w: Writer) -> None:
        """1-D, no reductions: one prange over the elements (numba splits it
        into one contiguous block per thread, which vectorizes best). Rolled
        reads (``np.roll(cells, 1)``) cut it into segments as a row is
        (``_wrap_segments``): a select per element on the wrapped index kept
        the loop scalar (rule 30 on 10**5 uint8 cells: 0.3-0.4 ms a step)."""
        env: dict = {"__lines__": []}
        self._row_env(w, env, 0)
        self._flat = None
        segments = self._wrap_segments(w)
        if segments:
            levels = self._segment_loop(w, segments, self.rng)
        else:
            w(f"for j0 in {self.rng}(d0):")
            w.indent()
            levels = 1
        self._pass_body(w, env, 1, {}, "j0")
        for _ in range(levels):
            w.dedent()
        self._split = {}

    def _global_body(self, w: Writer) -> None:
        """No outer axes: chunked prange over the first axis, partials per chunk."""
        w(f"ntot = {' * '.join(f'd{k}' for k in range(self.R))}")
        w(f"nch = (d0 + {CHUNK} - 1) // {CHUNK}" if self.rng == "prange" else "nch = 1")
        w("step = (d0 + nch - 1) // nch if nch else 0")
        env: dict = {"__lines__": []}
        self._trig_open(w)
        self._row_env(w, env, 0)
        for p in range(1, self.nloops + 1):
            reds = self._reductions(p)
            accs = {}
            for red in reds:
                acc = f"acc{len(accs)}_p{p}"
                accs[id(red)] = acc
                for sfx, dt in self._red(red).parts():  # the chunk partials
                    w(f"{acc}{sfx}_part = np.empty(nch, {np_type(dt)})")
            w(f"for c in {self.rng}(nch):")
            w.indent()
            self._trig_flag = "tbigc"
            self._trig_open(w)
            for red in reds:
                for line in self._acc_init(red, accs[id(red)]):
                    w(line)
            blocked = self._blocked(reds)
            self._blocking = bool(blocked)
            lo, hi = "c * step", "min(d0, (c + 1) * step)"
            self.nin = self.R
            past_nan = self._past_nan_args(p)  # (a chunk with a NaN reads its values again)
            self._past_nan = {id(r) for r in past_nan}
            rest = lo
            if self.R == 1 and past_nan and all(id(r) in self._past_nan or id(r) in self._twins for r in reds):
                rest = self._lanes_loop(w, env, p, accs, past_nan, lo, hi)
            if self.R == 1:
                levels = self._innermost(w, "j0", rest, hi, blocked, accs)
            else:
                w(f"for j0 in range({lo}, {hi}):")
                w.indent()
                for k in range(1, self.R - 1):
                    w(f"for j{k} in range(d{k}):")
                    w.indent()
                levels = self._innermost(w, f"j{self.R - 1}", "0", f"d{self.R - 1}", blocked, accs)
            flat = "j0"
            for k in range(1, self.R):
                flat = f"({flat} * d{k} + j{k})"
            saved = self._flat_inner
            self._flat_inner = lambda flat=flat: flat
            self._pass_body(w, env, p, accs, f"np.uint64({flat})")
            self._flat_inner = saved
            self._innermost_close(w, levels, blocked, accs)
            if self.R > 1:
                for _ in range(1, self.R):
                    w.dedent()
            self._blocking = False
            for red in past_nan:
                self._nan_rerun(w, red, env, p, accs, "np.uint64(j0)", f"{lo}, {hi}")
            self._past_nan = set()
            self._trig_close(w)
            self._trig_flag = "tbig"
            for red in reds:
                acc = accs[id(red)]
                for sfx, _ in self._red(red).parts():
                    w(f"{acc}{sfx}_part[c] = {acc}{sfx}")
            w.dedent()
            for red in reds:
                acc = accs[id(red)]
                r = self._red(red)
                if r.parts():  # (a ValueOfArg has none: its arg reduction's, combined before it)
                    self._combine_parts(w, red, acc, "c")
                self._result_var(w, red, accs, env)
            self._row_env(w, env, p)
        for out in self.row_outputs:
            value = env[id(out)] if id(out) in env else self._value_now(w, out, env)
            w(f"o{self.out_index[id(out)]}[0] = {value}")
        self._trig_close(w)

    def _compact_body(self, w: Writer) -> None:
        """Boolean-mask selections (``compress`` members sharing one mask) with the
        elementwise producers of the mask and the values: a count pass over chunks
        of rows, a prefix sum, then a fill pass in which each chunk writes from
        its offset, branch-free (every element is stored at the chunk's next free
        slot, which advances when the mask holds; the store stops at the chunk's
        end). ``cf[0]`` gets the count; the launcher checks it against the length
        traced and the fill pass runs only when they agree."""
        loop, R = self.loop, self.R
        self.od, self.nin = 0, R
        mask = loop.compact[0].inputs[1]
        inner = " * ".join(f"d{k}" for k in range(1, R)) or "1"
        w(f"ni = {inner}")
        w(f"rows = max(1, {CHUNK} // max(ni, 1))" if self.rng == "prange" else "rows = max(d0, 1)")
        w("nch = (d0 + rows - 1) // rows")
        w("cnt = np.zeros(nch + 1, np.int64)")
        flat = "j0"
        for k in range(1, R):
            flat = f"({flat} * d{k} + j{k})"

        def nest():
            w("for j0 in range(c * rows, min(d0, (c + 1) * rows)):")
            w.indent()
            for k in range(1, R):
                w(f"for j{k} in range(d{k}):")
                w.indent()

        def unnest():
            for _ in range(R):
                w.dedent()

        def element(env):
            m = self._value(mask, env) if id(mask) in self.members else self._operand(mask, "full", env)
            return m

        w(f"for c in {self.rng}(nch):")
        w.indent()
        w("k = np.int64(0)")
        nest()
        env: dict = {"__lines__": []}
        m = element(env)
        for line in env["__lines__"]:
            w(line)
        w(f"k += np.int64({m})")
        unnest()
        w("cnt[c + 1] = k")
        w.dedent()
        w("for c in range(nch):")
        w("    cnt[c + 1] += cnt[c]")
        w("cf[0] = cnt[nch]")
        first = self.out_index[id(loop.compact[0])]
        w(f"if cnt[nch] != o{first}.shape[0]:")
        w("    return")
        w(f"for c in {self.rng}(nch):")
        w.indent()
        w("k = cnt[c]")
        w("lim = cnt[c + 1]")
        nest()
        env = {"__lines__": []}
        m = element(env)
        picked = []
        for sel in loop.compact:
            values = sel.inputs[0]
            picked.append(self._value(values, env) if id(values) in self.members
                          else self._operand(values, "full", env))
        outs = [(self.out_index[id(o)], self._value(o, env)) for o in self.full_outputs]
        for line in env["__lines__"]:
            w(line)
        for k, value in outs:
            w(f"o{k}[np.uint64({flat})] = {value}")
        w("if k < lim:")
        w.indent()
        for sel, value in zip(loop.compact, picked):
            w(f"o{self.out_index[id(sel)]}[np.uint64(k)] = {value}")
        w(f"k += np.int64({m})")
        w.dedent()
        unnest()
        w.dedent()

    def _scalar_body(self, w: Writer) -> None:
        env: dict = {"__lines__": []}
        self._trig_open(w)
        for out in self.loop.outputs:
            value = self._value_now(w, out, env)
            w(f"o{self.out_index[id(out)]}[0] = {value}")
        self._trig_close(w)
