"""Fusion: partition a graph into a ``Program`` of kernels (target-independent).

A ``Loop`` kernel iterates over one *domain* (a shape). Its members are
elementwise ops, reductions and trivial layout ops; each member lives in
one of three index spaces of the domain ``D = outer + inner`` (``inner``
the reduced trailing axes):

* ``full``: shape ``D``; computed inside the inner loop;
* ``keep``: shape ``outer + (1,)*len(inner)`` (a keepdims reduction);
* ``drop``: shape ``outer`` (a reduction without keepdims).

``keep``/``drop`` members are *row values*, computed once per outer index,
between passes over the inner axes. So ``x - x.max(-1, keepdims=True)``,
its ``exp``, the ``sum`` and the division (softmax) are one kernel that
makes one pass per reduction stage over each row while it is in cache.
Reductions over axes that are not trailing become a loop over the domain
transposed so that they are (``perm``); such a kernel holds only the
reduction and its elementwise producers.

Layout ops (transpose, slice, reshape, broadcast) over *materialized*
values are ``views``: the launcher makes them with NumPy strides (no copy)
and the kernel indexes them. A ``broadcast_to`` directly under a kernel is
dropped instead: the kernel reads size-1 dimensions at index 0.

Everything else (matmul/einsum for BLAS, gathers, scatters, slice updates,
concatenation) is an ``Extern`` step, evaluated by the target's library
call; elementwise work after it fuses into the next kernel.
"""
from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np
from dataclasses import dataclass, field

from .core import KIND, PRIMITIVES, with_flag
from .graph import Graph, Node

REDUCE_OPS = frozenset(op for op, kind in KIND.items() if kind == "reduce")
LAYOUT_OPS = with_flag("layout")
SOURCE_OPS = frozenset({"input", "capture", "const"})


@dataclass
class Loop:
    """One fused loop nest over ``domain`` (already permuted by ``perm``)."""

    name: str
    domain: tuple[int, ...]
    ninner: int                     # trailing domain axes that are reduced (0: elementwise)
    perm: tuple[int, ...] | None    # logical axes -> loop axes, for non-trailing reductions
    members: list[Node]             # topological order
    space: dict[int, str]           # id(member) -> "full" | "keep" | "drop"
    leaves: list[Node]              # values read from outside (buffers and views)
    outputs: list[Node]             # members the rest of the program reads
    dropped: frozenset = frozenset()  # ids of broadcast_to leaves read from their input (size-1 dims at 0)
    compact: tuple = ()             # compress members (one mask): a count-then-fill kernel (fuse(compact=True))
    elements: dict = field(default_factory=dict)  # id(0-d leaf) -> (array node, index): read as array[index]
    windows: dict = field(default_factory=dict)   # id(slice leaf) -> (array node, starts, steps): read by offset
    squeezed: dict = field(default_factory=dict)  # id(window leaf) -> the array's axes that are the leaf's (a
    #                                               column ``x[:, i]``: the slice's size-1 axes dropped)
    wraps: dict = field(default_factory=dict)     # id(window leaf) -> per axis, the extent its index wraps
    #                                               around (0: none): a rotation, ``np.roll`` (targets/cpu.py)
    merged: dict = field(default_factory=dict)    # id(leaf) -> (shape it is indexed with, its array's shape):
    #                                               a target merged the domain's last two axes (targets/cpu.py)
    tail_merged: bool = False

    @property
    def outer(self) -> tuple[int, ...]:
        return self.domain[: len(self.domain) - self.ninner]

    def source(self, leaf: Node) -> Node:
        """The node whose value the kernel reads for ``leaf``: a broadcast no other
        kernel computed is read from its input, indexing size-1 dimensions at 0."""
        return leaf.inputs[0] if id(leaf) in self.dropped else leaf

    def reads(self, leaf: Node) -> Node:
        """The value the call reads for ``leaf``: its ``source``, or for a scalar
        that is one element of an array (``elements``) or a window of one
        (``windows``: ``a[1:-1]``, read as ``a[1 + i]``), that array."""
        element = self.elements.get(id(leaf)) or self.windows.get(id(leaf))
        return self.source(leaf) if element is None else element[0]


@dataclass
class Extern:
    """One op evaluated by a library call (BLAS, NumPy)."""

    name: str
    node: Node
    fill: Node | None = None  # an update's value that is one constant broadcast: the constant (a target's fold)


@dataclass
class View:
    """A layout op over a materialized value, made with strides (no copy)."""

    name: str
    node: Node
    index: tuple | None = None      # made as ``base[index]`` instead (a target's fold of a view chain)
    base: Node | None = None        # the value ``index`` applies to

    @property
    def reads(self) -> tuple:
        return (self.base,) if self.base is not None else self.node.inputs


@dataclass
class Program:
    graph: Graph
    steps: list = field(default_factory=list)

    def describe(self) -> str:
        lines = []
        for step in self.steps:
            if isinstance(step, Loop):
                kind = "row kernel" if step.ninner else "elementwise kernel"
                if step.ninner and not step.outer:
                    kind = "reduction kernel"
                if step.compact:
                    kind = "count-then-fill kernel"
                dom = "x".join(map(str, step.domain)) or "scalar"
                perm = f" perm={step.perm}" if step.perm else ""
                ops = ", ".join(m.op for m in step.members)
                lines.append(f"{step.name}: {kind} over {dom}{perm}, {len(step.leaves)} in, "
                             f"{len(step.outputs)} out: {ops}")
            elif isinstance(step, Extern):
                node = step.node
                what = f"host_call {node.kw['call']!r}" if node.op == "host_call" else node.op
                aval = ", ".join(map(str, node.aval)) if isinstance(node.aval, tuple) else node.aval
                lines.append(f"{step.name}: extern {what} -> {aval}")
            else:
                lines.append(f"{step.name}: view {step.node.op} -> {step.node.aval}")
        return "\n".join(lines)


def _is_trailing(axes, ndim) -> bool:
    return tuple(axes) == tuple(range(ndim - len(axes), ndim))


def _reduce_axes(node: Node) -> tuple[int, ...]:
    if node.op in ("argmax", "argmin"):
        axis = node.kw["axis"]
        return tuple(range(node.inputs[0].aval.ndim)) if axis is None else (axis,)
    return node.kw["axes"]


def _keepdims(node: Node) -> bool:
    return node.kw["keepdims"]


def _is_trivial_layout(node: Node) -> bool:
    """Layout ops that keep element order: broadcasts and size-1 reshapes."""
    if node.op == "broadcast_to":
        return True
    if node.op == "reshape":
        a = [d for d in node.inputs[0].aval.shape if d != 1]
        b = [d for d in node.aval.shape if d != 1]
        return a == b
    return False


def _keep_axes(shape, domain) -> tuple[int, ...] | None:
    """The trailing axes a keepdims row value of ``domain`` with this shape reduces."""
    if len(shape) != len(domain) or shape == domain:
        return None
    axes = tuple(i for i, (a, b) in enumerate(zip(shape, domain)) if a != b)
    if any(shape[i] != 1 for i in axes) or not _is_trailing(axes, len(domain)):
        return None
    return tuple(range(axes[0], len(domain)))


# A sum over leading axes of a large array (a column sum, as in the gradient of a
# bias) walks memory across rows when generated as a transposed loop; NumPy's
# reduction adds whole rows at a time and is an order of magnitude faster.
COLUMN_REDUCTION_MIN = 1 << 16
SHORT_TAIL = 8


def _column_reduction(node: Node) -> bool:
    if node.op not in ("reduce_sum", "reduce_prod"):
        return False
    shape = node.inputs[0].aval.shape
    axes = _reduce_axes(node)
    if not axes or _is_trailing(axes, len(shape)) or int(np.prod(shape, dtype=np.int64)) < COLUMN_REDUCTION_MIN:
        return False
    # A reduction over a middle axis followed by a short kept block (the sum over
    # j of an (i, j, 3) value) steps through memory by a few elements: the
    # transposed loop's passes over j share the cache lines, and it fuses with
    # the producers instead of materializing the (i, j, 3) value for NumPy.
    tail = int(np.prod(shape[max(axes) + 1:], dtype=np.int64))
    return tail > SHORT_TAIL


def _flat_compress(node: Node) -> bool:
    """A selection by a mask of the array's own shape (a count-then-fill
    kernel); one of rows by a mask of leading axes is an extern."""
    return node.op == "compress" and node.inputs[1].aval.shape == node.inputs[0].aval.shape


def _computable(node: Node) -> bool:
    if _column_reduction(node):
        return False
    return KIND.get(node.op) in ("elementwise", "reduce") or _is_trivial_layout(node)


# The ops a count-then-fill kernel computes itself. Its fill pass stores at a
# data-dependent position and does not vectorize, and it computes the mask
# twice (count, then fill): a transcendental producer (exp, tanh, ...) is
# cheaper in a vectorized kernel of its own whose result the compaction reads
# (np.exp(y)[mask] over 4M elements: 10.9 ms fused, against 4-5 ms apart).
COMPACT_OPS = frozenset({
    "absolute", "add", "bitwise_and", "bitwise_or", "bitwise_xor", "ceil", "clip", "convert", "copysign",
    "equal", "floor", "fmax", "fmin", "greater", "greater_equal", "invert", "isfinite", "isinf", "isnan",
    "less", "less_equal", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
    "multiply", "negative", "not_equal", "positive", "rint", "sign", "signbit", "square", "subtract", "trunc",
    "where", "broadcast_to", "reshape",
})

# Cheap elementwise ops: recomputing one where it is read costs less than a
# write and a read of its value (see ``_Group._broadcast_member``, ``_rematerialize``).
CHEAP_OPS = with_flag("cheap")

# A kernel holds at most this many ops and reads at most this many values.
# numba's compile time grows faster than linearly in the size of a function
# (a 1,000-op chain fused into one kernel took 23 s to compile, 32 ops take
# 0.4 s), while splitting a long chain costs one extra write and read of every
# value crossing the cut. 128 (measured here, cold, 320-op chain: 1.6 s against
# 1.1 s at 64) keeps a long elementwise formula such as the UNESCO equation of
# state (88 ops) in one kernel: split at 64 it stored four intermediates and ran
# 2.9x slower (4.3 ms against 1.5 ms). The pieces of an unrolled loop are the
# same kernel source, compiled once.
MAX_KERNEL_OPS = 128
MAX_KERNEL_READS = 16


class _Group:
    def __init__(self, root: Node):
        self.members: set[int] = set()
        self.nodes: list[Node] = []
        self.reads: set[int] = set()  # ids of the values outside the group it reads
        self.lowest = None            # smallest program position of a member
        self.highest = -1             # largest program position of a member
        self.ops = 0                  # members that are not layout ops (``MAX_KERNEL_OPS``)
        self.reshaped = False         # the domain or axes changed since the queue last looked
        self.mask = None              # a compaction kernel: the mask its compress members share
        if root.op == "compress":
            self.domain = root.inputs[0].aval.shape
            self.axes = None
            self.mask = root.inputs[1]
        elif root.op in REDUCE_OPS:
            self.domain = root.inputs[0].aval.shape
            self.axes = _reduce_axes(root)
        else:
            self.domain = root.aval.shape
            self.axes = None

    def outer_shapes(self, axes=None):
        axes = self.axes if axes is None else axes
        axes = axes or ()
        keep = tuple(1 if i in axes else d for i, d in enumerate(self.domain))
        drop = tuple(d for i, d in enumerate(self.domain) if i not in axes)
        return keep, drop

    def space_of(self, node: Node, users: list[Node], spaces: dict[int, str],
                 exported: bool = False) -> str | None:
        """The index space ``node`` would have in this group, given the members
        that read it (``users``), or None if it cannot join."""
        rebase = False
        if self.mask is not None and (node.op not in COMPACT_OPS or node.aval.shape != self.domain):
            return None  # a compaction kernel holds cheap elementwise work over its mask's shape only
        if node.op in REDUCE_OPS:
            axes = _reduce_axes(node)
            rebase = node.inputs[0].aval.shape != self.domain
            if rebase:
                # A group of row values (no reduction yet) can grow into this
                # reduction's domain: its members become row values.
                if not (self.axes is None and node.aval.shape == self.domain
                        and _is_trailing(axes, node.inputs[0].aval.ndim)):
                    return None
            elif self.axes is None:
                if not _is_trailing(axes, len(self.domain)) and self.nodes:
                    return None  # a transposed reduction only leads its own kernel
            elif tuple(axes) != tuple(self.axes):
                return None
            space = "keep" if _keepdims(node) else "drop"
        else:
            if self.axes is not None and not _is_trailing(self.axes, len(self.domain)):
                if node.aval.shape != self.domain:
                    return self._broadcast_member(node, users, exported)
            shape = node.aval.shape
            axes = self.axes if self.axes is not None else _keep_axes(shape, self.domain)
            keep, drop = self.outer_shapes(axes)
            if shape == self.domain:
                space = "full"
            elif axes and shape == keep:
                space = "keep"
            elif axes and shape == drop:
                space = "drop"
            else:
                return None
        for user in users:
            if id(user) not in self.members:
                continue  # read from outside: this value becomes a kernel output
            if user.op in REDUCE_OPS or user.op == "compress":
                if space != "full":
                    return None
            elif user.op in LAYOUT_OPS:
                continue  # a trivial reshape/broadcast between spaces
            elif node.aval.shape != user.aval.shape and not (space == "keep" and spaces[id(user)] == "full"):
                return None
        transposed = self.axes is not None and not _is_trailing(self.axes, len(self.domain))
        if exported and space == "full" and transposed:
            return None  # full values of a transposed loop are not written in logical order
        if space == "drop" and not rebase and any(
            id(u) in self.members and spaces[id(u)] == "full" and u.op not in LAYOUT_OPS for u in users
        ):
            return None
        return space


    def _broadcast_member(self, node: Node, users: list[Node], exported: bool) -> str | None:
        """A transposed loop computes everything at the full index: a cheap
        elementwise value of a broadcasting shape joins it recomputed there
        (``mass[None, :, None] * w[:, :, None]`` under an (i, j, 3) sum over j),
        when that repeats it at most ``SHORT_TAIL`` times and only members read it."""
        shape, domain = node.aval.shape, self.domain
        if (exported or node.op not in CHEAP_OPS or len(shape) != len(domain)
                or any(s not in (1, d) for s, d in zip(shape, domain))
                or int(np.prod(domain, dtype=np.int64)) > SHORT_TAIL * max(int(np.prod(shape, dtype=np.int64)), 1)):
            return None
        if any(id(u) in self.members and u.op in REDUCE_OPS for u in users):
            return None  # the reduction reads its operand over the whole domain
        return "full"


def fuse(graph: Graph, compact: bool = False, max_reads: int = MAX_KERNEL_READS, one_kernel: bool = False) -> Program:
    """Partition ``graph`` into loops, views and externs, in execution order.

    With ``compact`` (the target generates count-then-fill kernels), each
    boolean-mask selection (``compress``) leads a kernel over its mask's shape
    holding the elementwise producers of its mask and values; otherwise it is
    an extern. ``max_reads``: the most values a kernel may read (a re-rolled
    iteration's kernel, whose reads are mostly carried scalars, takes more);
    ``one_kernel``: independent kernels over one domain merge too (``_merge_all``)."""
    nodes = graph.nodes
    consumers: dict[int, list[Node]] = defaultdict(list)
    for node in nodes:
        for i in node.inputs:
            consumers[id(i)].append(node)
    graph_outputs = {id(o) for o in graph.outputs}

    pos = {id(n): i for i, n in enumerate(nodes)}
    group_of: dict[int, _Group] = {}
    spaces: dict[int, str] = {}
    groups: list[_Group] = []

    def absorb(group: _Group, node: Node, space: str) -> bool:
        """Add ``node`` to ``group``; whether the group's domain or axes changed."""
        changed = False
        if node.op in REDUCE_OPS and node.inputs[0].aval.shape != group.domain:
            # rebase: the row values so far become row values of the bigger domain
            group.domain = node.inputs[0].aval.shape
            for m in group.nodes:
                spaces[id(m)] = space
            changed = True
        if group.axes is None:
            if node.op in REDUCE_OPS:
                group.axes = _reduce_axes(node)
            elif space in ("keep", "drop"):
                group.axes = _keep_axes(node.aval.shape, group.domain)
            changed = changed or group.axes is not None
        group.members.add(id(node))
        group.nodes.append(node)
        group.ops += node.op not in LAYOUT_OPS
        group.reads.discard(id(node))
        group.reads.update(id(i) for i in node.inputs if id(i) not in group.members and i.op != "const")
        group.lowest = pos[id(node)] if group.lowest is None else min(group.lowest, pos[id(node)])
        group.highest = max(group.highest, pos[id(node)])
        spaces[id(node)] = space
        group_of[id(node)] = group
        return changed

    def new_reads(group: _Group, node: Node) -> int:
        return sum(1 for i in node.inputs if id(i) not in group.members and id(i) not in group.reads
                   and i.op != "const")

    def try_absorb(group: _Group, p: Node, turned_down: dict) -> bool:
        """Add candidate ``p`` to ``group`` if it can join; else note it turned down."""
        if id(p) in group.members or id(p) in group_of or not _computable(p):
            return False
        outside = [c for c in consumers[id(p)] if id(c) not in group.members]
        if ((outside and _feeds(outside, group, group_of, pos))  # kernels would depend both ways
                or _downstream(p, group, pos)  # p reads something computed from this group
                or len(group.reads) - 1 + new_reads(group, p) > max_reads):
            turned_down[id(p)] = p
            return False
        exported = bool(outside) or id(p) in graph_outputs
        space = group.space_of(p, consumers[id(p)], spaces, exported)
        if space is None:
            turned_down[id(p)] = p
            return False
        turned_down.pop(id(p), None)
        group.reshaped |= absorb(group, p, space)
        return True

    # One sweep from the outputs back: each node not yet in a kernel leads one
    # and grows it over its producers. Candidates are examined from a work
    # queue: a candidate turned down is looked at again only when something
    # that could change the answer joins (one of its readers, or a new domain).
    for node in reversed(nodes):
        leads = compact and _flat_compress(node)
        if id(node) in group_of or not (_computable(node) or leads) or node.op in LAYOUT_OPS:
            continue  # layout ops never lead a kernel: alone they are views
        group = _Group(node)
        space = "compact" if leads else group.space_of(node, [], spaces)
        if space is None:  # a lone trivial layout op that cannot lead a group
            continue
        absorb(group, node, space)
        groups.append(group)
        if leads:  # the other selections by the same mask share its count and its pass
            for c in consumers[id(node.inputs[1])]:
                if (_flat_compress(c) and id(c) not in group_of and c.inputs[0].aval.shape == group.domain
                        and not _downstream(c, group, pos) and not _feeds([c], group, group_of, pos)):
                    absorb(group, c, "compact")
        queue = [i for m in group.nodes for i in m.inputs]  # a stack: a producer's own producers first, so a
        turned_down: dict[int, Node] = {}  # capped kernel holds whole loop iterations
        while queue and group.ops < MAX_KERNEL_OPS:
            p = queue.pop()
            if not try_absorb(group, p, turned_down):
                continue
            queue.extend(p.inputs)
            # readers of p turned down because p was computed outside may join now
            queue.extend(c for c in consumers[id(p)] if id(c) in turned_down)
            if group.reshaped:
                group.reshaped = False
                queue.extend(turned_down.values())
        # At the cap, an op only this kernel reads, reading nothing another kernel
        # computes, still joins: alone it would be a kernel of one op (the first
        # op of a loop iteration the cap cut off).
        for p in queue:
            if (id(p) not in group_of and p.op not in LAYOUT_OPS and group.ops < MAX_KERNEL_OPS + 4
                    and all(id(c) in group.members for c in consumers[id(p)])
                    and not any(_computable(i) and i.op not in LAYOUT_OPS for i in p.inputs)):
                try_absorb(group, p, turned_down)

    program = Program(graph)
    counter = {"k": 0, "x": 0, "v": 0}

    def name(kind: str) -> str:
        counter[kind] += 1
        return f"{kind}{counter[kind] - 1}"

    for group in groups:
        _evict_dangling_layouts(group, group_of, spaces)
        group.reads = {id(i) for n in group.nodes for i in n.inputs
                       if id(i) not in group.members and i.op != "const"}
        group.lowest = min((pos[id(n)] for n in group.nodes), default=None)
        group.highest = max((pos[id(n)] for n in group.nodes), default=-1)
    groups = [g for g in groups if g.nodes]
    groups = _merge_siblings(groups, group_of, pos, max_reads)
    groups = _merge_consumers(groups, group_of, pos, max_reads)
    if one_kernel:
        groups = _merge_all(groups, group_of, pos, max_reads)

    # One step per group, extern and view; then order the steps topologically.
    # Kernels run as wholes, so groups can depend on each other in a cycle even
    # where their nodes do not (g1 computes a value g2 reads, and reads a value
    # computed from g2); the absorb checks above follow nodes, not groups. Such
    # a group is split into one kernel per node and the order is tried again.
    while True:
        steps, order = _order_steps(nodes, group_of)
        if order is not None:
            break
        blocked = _blocked_groups(steps)
        assert blocked, "a cycle among single-node steps: the graph itself is cyclic"
        for group in blocked:
            _split(group, groups, group_of, spaces)
    for k in order:
        group, members = steps[k]
        if group is None:
            node = members[0]
            step = View(name("v"), node) if node.op in LAYOUT_OPS else Extern(name("x"), node)
        else:
            step = _make_loop(name("k"), group, members, spaces, consumers, graph_outputs)
        program.steps.append(step)
    _rematerialize(program.steps, graph_outputs, max_reads)
    computed = {id(o) for step in program.steps if isinstance(step, Loop) for o in step.outputs}
    for step in program.steps:
        if isinstance(step, Loop):
            step.dropped = frozenset(id(leaf) for leaf in step.leaves
                                     if leaf.op == "broadcast_to" and id(leaf) not in computed)
    return program


def unfused(graph: Graph) -> Program:
    """The graph as one step per op, in graph order (no kernels): what a target
    runs op by op with NumPy while its kernels are built (targets/cpu_tiered.py)."""
    program = Program(graph)
    for k, node in enumerate(graph.nodes):
        if node.op not in SOURCE_OPS:
            program.steps.append(View(f"v{k}", node) if node.op in LAYOUT_OPS else Extern(f"x{k}", node))
    return program


def _order_steps(nodes, group_of) -> tuple[list, list | None]:
    """Steps (group, members) in program order, and a topological order of them
    (None if the groups depend on each other in a cycle): Kahn's algorithm,
    the earliest ready step in program order first."""
    steps, step_of, index_of = [], {}, {}
    for node in nodes:
        if node.op in SOURCE_OPS:
            continue
        group = group_of.get(id(node))
        if group is None:
            k = len(steps)
            steps.append((None, [node]))
        else:
            k = index_of.get(id(group))
            if k is None:
                k = index_of[id(group)] = len(steps)
                steps.append((group, []))
            steps[k][1].append(node)
        step_of[id(node)] = k
    readers: list[list[int]] = [[] for _ in steps]
    waiting = [0] * len(steps)
    for k, (_, members) in enumerate(steps):
        deps = {step_of[id(i)] for m in members for i in m.inputs if id(i) in step_of} - {k}
        waiting[k] = len(deps)
        for j in deps:
            readers[j].append(k)
    blockers, unblocks, holds = _overwrites(steps, step_of)
    ready = [k for k in range(len(steps)) if not waiting[k]]
    heapq.heapify(ready)
    # An update held back (``parked``) while steps reading its input are ready
    # to run first (``urgent``); when none is, it goes (a copy, as before).
    urgent: list[int] = []
    parked_heap: list[int] = []
    parked, done = [False] * len(steps), [False] * len(steps)
    order = []
    while ready or urgent or parked_heap:
        if urgent:
            k = heapq.heappop(urgent)
            if done[k]:
                continue
        elif parked_heap:
            k = heapq.heappop(parked_heap)
            if not parked[k]:
                continue
            parked[k] = False
        else:
            k = heapq.heappop(ready)
            if done[k]:
                continue
            if blockers[k] > 0:
                parked[k] = True
                heapq.heappush(parked_heap, k)
                for r in holds[k]:
                    if not waiting[r] and not done[r]:
                        heapq.heappush(urgent, r)
                continue
        done[k] = True
        order.append(k)
        for u in unblocks.get(k, ()):
            blockers[u] -= 1
            if blockers[u] == 0 and parked[u]:
                parked[u] = False
                heapq.heappush(ready, u)
        for r in readers[k]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(urgent if any(parked[u] for u in unblocks.get(r, ())) else ready, r)
    if len(order) < len(steps):
        done = set(order)
        return [st for k, st in enumerate(steps) if k not in done], None
    return steps, order


def _overwrites(steps, step_of) -> tuple[list[int], dict, dict]:
    """For each update a target can make in place (``a[i*i::i] = False``), the
    number of other steps reading the value it updates, directly or through
    views (``if a[i]:``, a guard read after the trace); ``unblocks``: reader
    -> the updates it holds back; ``holds``: update -> those readers. Ordered
    after those reads, the update may write into its input instead of a copy
    of it (cpu_memory.plan): a sieve of 10**6 elements copied its array at
    each of its 168 updates. A value read by more than ``MAX_HELD`` steps is
    not waited for (the work stays linear in the graph)."""
    blockers = [0] * len(steps)
    unblocks: dict[int, list[int]] = {}
    holds: dict[int, list[int]] = {}
    users: dict[int, list[int]] = {}
    for k, (_, members) in enumerate(steps):
        for i in {id(i) for m in members for i in m.inputs}:
            users.setdefault(i, []).append(k)
    for k, (group, members) in enumerate(steps):
        if group is not None or PRIMITIVES[members[0].op].inplace is None:
            continue
        seen, work, found = {k}, [members[0].inputs[0]], []
        while work and len(found) <= MAX_HELD:
            for r in users.get(id(work.pop()), ()):
                if r not in seen:
                    seen.add(r)
                    found.append(r)
                    if len(found) > MAX_HELD:  # (one value read by thousands: each update stops here)
                        break
                    rgroup, rmembers = steps[r]
                    if rgroup is None and rmembers[0].op in LAYOUT_OPS:  # a view: its readers read the base
                        work.append(rmembers[0])
        if len(found) > MAX_HELD:
            continue
        blockers[k] = len(found)
        holds[k] = found
        for r in found:
            unblocks.setdefault(r, []).append(k)
    return blockers, unblocks, holds


MAX_HELD = 64


def _blocked_groups(remaining) -> list:
    """The multi-node groups among steps that could not be ordered."""
    return [group for group, members in remaining if group is not None and len(group.nodes) > 1]


def _split(group: _Group, groups: list, group_of: dict, spaces: dict) -> None:
    """Dissolve ``group`` into one group per node (layout ops become views)."""
    groups.remove(group)
    for node in group.nodes:
        group_of.pop(id(node), None)
        spaces.pop(id(node), None)
    for node in group.nodes:
        if node.op in LAYOUT_OPS or node.op == "compress":
            continue  # (a compress alone is an extern)
        single = _Group(node)
        space = single.space_of(node, [], spaces)
        if space is None:
            continue
        single.members.add(id(node))
        single.nodes.append(node)
        spaces[id(node)] = space
        group_of[id(node)] = single
        groups.append(single)


def _evict_dangling_layouts(group: _Group, group_of: dict, spaces: dict) -> None:
    """A layout op inside a kernel must read another member: a kernel indexes its
    leaves in the consumer's index space, which a reshape of a leaf would break.
    Such ops leave the kernel and become views (made with strides)."""
    changed = True
    while changed:
        changed = False
        for node in list(group.nodes):
            if node.op in LAYOUT_OPS and id(node.inputs[0]) not in group.members:
                group.nodes.remove(node)
                group.members.discard(id(node))
                group_of.pop(id(node), None)
                spaces.pop(id(node), None)
                changed = True


# Two kernels that are the same kernel (a loop's iterations: GPT-2's heads) merge
# only through a value they share of at least this many bytes: reading a small
# one again (the 64-128 KiB causal mask, once per head) costs less than a bigger
# kernel costs numba to compile (four heads' softmaxes in one kernel took
# 0.8-1.0 s; one head's, compiled once for all four, 0.25-0.3 s).
SIBLING_MIN_BYTES = 1 << 18


def _signature(g: _Group) -> tuple:
    """What a group computes, up to which values it reads: equal for the kernels
    of alike loop iterations."""
    return tuple((n.op, n.params, n.aval) for n in g.nodes)


def _merge_siblings(groups: list[_Group], group_of: dict, pos: dict, max_reads: int = MAX_KERNEL_READS
                    ) -> list[_Group]:
    """Horizontal fusion: groups over the same domain and axes that read a common
    value and do not depend on each other become one kernel (one pass over memory).

    Candidates are found through the values they share (an index from value to
    the groups reading it), not by comparing every pair of groups."""
    merged_into: dict[int, _Group] = {}

    def find(g: _Group) -> _Group:
        while id(g) in merged_into:
            g = merged_into[id(g)]
        return g

    readers: dict[int, list[_Group]] = defaultdict(list)
    size: dict[int, int] = {}
    for g in groups:
        for n in g.nodes:
            for i in n.inputs:
                if id(i) in g.reads:
                    size[id(i)] = _bytes(i)
        for value in g.reads:
            readers[value].append(g)
    for value, gs in readers.items():
        if len(gs) < 2:
            continue
        small = size.get(value, 0) < SIBLING_MIN_BYTES
        heads: list[_Group] = []
        for g in gs:
            g = find(g)
            if any(g is h for h in heads):
                continue
            for h in heads[-MERGE_PARTNERS:]:
                if small and _signature(h) == _signature(g):
                    continue  # (the same kernel twice: compiled once, each call reads the small value again)
                if _can_merge(h, g, group_of, pos, max_reads):
                    _join(h, g, group_of)
                    merged_into[id(g)] = h
                    break
            else:
                heads.append(g)
    return [g for g in groups if id(g) not in merged_into]


def _join(h: _Group, g: _Group, group_of: dict) -> None:
    """Group ``g``'s nodes into ``h``."""
    h.axes = h.axes if h.axes is not None else g.axes
    for n in g.nodes:
        h.members.add(id(n))
        h.nodes.append(n)
        group_of[id(n)] = h
    h.reads = {i for i in h.reads | g.reads if i not in h.members}
    h.lowest = min(h.lowest, g.lowest)
    h.highest = max(h.highest, g.highest)
    h.ops += g.ops


def _merge_all(groups: list[_Group], group_of: dict, pos: dict, max_reads: int) -> list[_Group]:
    """Each group into the first one before it that may take it, whether or not
    they read a common value (a re-rolled iteration's template: one kernel a
    step if it can be; quadratic in the groups, which a template has few of)."""
    kept: list[_Group] = []
    for g in groups:
        for h in kept:
            if _can_merge(h, g, group_of, pos, max_reads):
                _join(h, g, group_of)
                break
        else:
            kept.append(g)
    return kept


def _merge_consumers(groups: list[_Group], group_of: dict, pos: dict, max_reads: int = MAX_KERNEL_READS
                     ) -> list[_Group]:
    """Vertical fusion of kernels: an elementwise group reading what another
    elementwise group over the same domain computes joins it, when nothing
    between them needs the producer finished first (Black-Scholes' put reads the
    CDFs the call's kernel computes: one pass over memory, not two, and the
    CDFs are never written out). So does a row kernel reading what another row
    kernel over the same rows computes (``d.min(1)`` and ``d.argmin(1)`` of a
    computed ``d``: the sweep gives ``d``'s ops to one of them, and the other
    read it back from memory); code generation orders the passes."""
    merged_into: dict[int, _Group] = {}

    def find(g: _Group) -> _Group:
        while id(g) in merged_into:
            g = merged_into[id(g)]
        return g

    def plain(g: _Group) -> bool:
        return g.axes is None and g.mask is None

    def rows(g: _Group) -> bool:
        return g.axes is not None and g.mask is None and _is_trailing(g.axes, len(g.domain))

    def alike(a: _Group, b: _Group) -> bool:
        return (plain(a) and plain(b)) or (rows(a) and rows(b) and tuple(a.axes) == tuple(b.axes))

    twins: dict[tuple, int] = defaultdict(int)
    for g in groups:
        if rows(g):
            twins[_signature(g)] += 1
    for b in sorted(groups, key=lambda g: g.lowest):
        if id(b) in merged_into or not (plain(b) or rows(b)):
            continue
        inputs = {id(i): i for n in b.nodes for i in n.inputs if id(i) not in b.members}
        for v in sorted(b.reads, key=lambda v: -pos[v]):
            a = group_of.get(v)
            a = find(a) if a is not None else None
            if (a is None or a is b or not alike(a, b) or a.domain != b.domain or a.ops + b.ops > MAX_KERNEL_OPS
                    or len((a.reads | b.reads) - a.members - b.members) > max_reads):
                continue
            if (rows(b) and twins[_signature(b)] > 1
                    and sum(_bytes(i) for vid, i in inputs.items() if vid in a.members) < SIBLING_MIN_BYTES):
                continue  # (a kernel that has twins stays one: compiled once, it reads the small value again)
            others = [i for vid, i in inputs.items() if vid not in a.members]
            if _reaches_group(others, a, group_of, pos):
                continue  # b also reads a through another kernel: merging would make a cycle
            for n in b.nodes:
                a.members.add(id(n))
                a.nodes.append(n)
                group_of[id(n)] = a
            a.reads = {i for i in a.reads | b.reads if i not in a.members}
            a.lowest, a.highest = min(a.lowest, b.lowest), max(a.highest, b.highest)
            a.ops += b.ops
            merged_into[id(b)] = a
            break
    return [g for g in groups if id(g) not in merged_into]


def _reaches_group(starts, a: _Group, group_of: dict, pos: dict) -> bool:
    """Whether any of ``starts`` is computed, through any path, from a member of
    ``a`` (True also past ``WALK_LIMIT`` nodes: the safe answer)."""
    stack, seen = list(starts), set()
    while stack:
        node = stack.pop()
        if id(node) in seen or pos[id(node)] < a.lowest:
            continue
        seen.add(id(node))
        if id(node) in a.members or len(seen) > WALK_LIMIT:
            return True
        other = group_of.get(id(node))
        if other is not None and other is not a:
            stack.extend(i for n in other.nodes for i in n.inputs)
        stack.extend(node.inputs)
    return False


# Groups reading one value tried as merge partners of each new reader.
MERGE_PARTNERS = 8


def _can_merge(a: _Group, b: _Group, group_of: dict, pos: dict, max_reads: int = MAX_KERNEL_READS) -> bool:
    if a.domain != b.domain or a.ops + b.ops > MAX_KERNEL_OPS or a.mask is not b.mask:
        return False  # (compaction kernels merge when they select with the same mask)
    if len(a.reads | b.reads) > max_reads:
        return False
    if a.axes is not None and b.axes is not None and tuple(a.axes) != tuple(b.axes):
        return False
    if (a.axes or b.axes) and not _is_trailing(a.axes or b.axes, len(a.domain)) and (a.axes is None or b.axes is None):
        return False  # (transposed loops merge with transposed loops over the same axes: masked sums of one X)
    return not _depends(a, b, group_of, pos) and not _depends(b, a, group_of, pos)


def _depends(a: _Group, b: _Group, group_of: dict, pos: dict) -> bool:
    """Whether ``a`` reads, through any path, something ``b`` computes (kernels
    run as wholes: whatever a member of a kernel on the path reads, it waits for).
    Nodes before ``b``'s first member cannot lead there and are not walked."""
    return _reaches_group([i for n in a.nodes for i in n.inputs if id(i) not in a.members], b, group_of, pos)


# The dependence walks below give up after this many nodes and answer "yes"
# (the candidate stays out of the kernel: always safe). Without the bound, a
# value read by every iteration of an unrolled loop made each candidate walk
# back over the loop so far (quadratic: 16 s to fuse 35,000 ops).
WALK_LIMIT = 64


def _reaches(starts, targets: set[int], pos, lowest: int) -> bool:
    """Whether an input (transitively) of one of ``starts`` is in ``targets``;
    nodes at or before position ``lowest`` cannot lead there and are skipped.
    True also when the walk would pass ``WALK_LIMIT`` nodes."""
    stack, seen = list(starts), set()
    while stack:
        node = stack.pop()
        for i in node.inputs:
            if id(i) in targets:
                return True
            if id(i) not in seen and pos[id(i)] > lowest:
                seen.add(id(i))
                stack.append(i)
        if len(seen) > WALK_LIMIT:
            return True
    return False


def _feeds(outside: list[Node], group: _Group, group_of, pos) -> bool:
    """Whether any outside reader of a candidate (or its kernel) is upstream of ``group``."""
    sources = []
    for c in outside:
        other = group_of.get(id(c))
        sources.extend(other.nodes if other is not None else [c])
    sources = [n for n in sources if pos[id(n)] < group.highest]  # only these can be upstream
    if not sources:
        return False
    lowest = min(pos[id(n)] for n in sources)
    return _reaches(group.nodes, {id(n) for n in sources}, pos, lowest)


def _downstream(node: Node, group: _Group, pos) -> bool:
    """Whether an input of ``node`` outside ``group`` is computed from a member."""
    outside = [i for i in node.inputs if id(i) not in group.members]
    return _reaches(outside, group.members, pos, group.lowest)


def _make_loop(name, group, members, spaces, consumers, graph_outputs) -> Loop:
    member_ids = group.members
    leaves, seen = [], set()
    for m in members:
        for i in m.inputs:
            if id(i) not in member_ids and i.op != "const" and id(i) not in seen:
                seen.add(id(i))
                leaves.append(i)
    outputs = [
        m for m in members
        if id(m) in graph_outputs or any(id(c) not in member_ids for c in consumers[id(m)])
    ]
    ndim = len(group.domain)
    axes = tuple(group.axes or ())
    perm = None
    if axes and not _is_trailing(axes, ndim):
        perm = tuple(i for i in range(ndim) if i not in axes) + axes
    domain = tuple(group.domain[p] for p in perm) if perm else tuple(group.domain)
    return Loop(name, domain, len(axes), perm, members, {id(m): spaces[id(m)] for m in members},
                leaves, outputs, compact=tuple(m for m in members if m.op == "compress"))


# A value this many times bigger than its inputs (``pos[None] - pos[:, None]``)
# is recomputed by each kernel reading it rather than written and read back.
REMAT_GROWTH = 4
# At most this many cheap ops are recomputed in place of one value read.
REMAT_CHAIN = 4


def _size(node: Node) -> int:
    return int(np.prod(node.aval.shape, dtype=np.int64))


def _bytes(node: Node) -> int:
    return 0 if isinstance(node.aval, tuple) else _size(node) * np.dtype(node.aval.dtype).itemsize


def _is_source(node: Node) -> bool:
    return node.op in SOURCE_OPS or (node.op in LAYOUT_OPS and node.inputs[0].op in SOURCE_OPS)


def _remat_cone(leaf: Node, loop: Loop, logical: tuple, stored: set[int]) -> list[Node] | None:
    """The cheap elementwise ops computing ``leaf`` over the loop's domain
    (``leaf`` last, every op after its inputs) from constants, program inputs,
    views of them, values ``loop`` already reads and other values a step
    stores (``stored``); None when there is no such chain of at most
    REMAT_CHAIN ops. An explicit stack: no recursion."""
    reads = {id(n) for n in loop.leaves if n is not leaf} | (stored - {id(leaf)})
    members = {id(n) for n in loop.members}
    cone, seen, stack = [], set(), [(leaf, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            cone.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op not in CHEAP_OPS or node.aval.shape != logical or len(seen) > REMAT_CHAIN or id(node) in members:
            return None
        stack.append((node, True))
        for i in node.inputs:
            if not (i.op == "const" or id(i) in reads or _is_source(i)):
                stack.append((i, False))
    return cone


def _rematerialize(steps: list, graph_outputs: set[int], max_reads: int = MAX_KERNEL_READS) -> None:
    """A kernel reading a value that cheap elementwise ops compute from
    program inputs computes it itself, when that reads less memory: the (n, n,
    3) pairwise differences of an N-body step from two (n, 3) views of the
    positions (REMAT_GROWTH), or ``1.0 - v * dt`` and ``v >= 0`` of a time
    loop's velocity window, invariant across its iterations and written out
    once by the first, from the window each iteration's kernel reads anyway.
    The producing kernel stops writing a value no step reads any more. The
    same ops on the same operands: bitwise the same values."""
    loops = [s for s in steps if isinstance(s, Loop)]
    owner = {id(o): s for s in loops for o in s.outputs}
    readers: dict[int, int] = defaultdict(int)
    for s in steps:
        for i in (s.leaves if isinstance(s, Loop) else s.reads if isinstance(s, View) else s.node.inputs):
            readers[id(i)] += 1
    # values some step stores that are not cheap to recompute: a recomputed value may read them
    stored = ({id(o) for s in loops for o in s.outputs if o.op not in CHEAP_OPS}
              | {id(s.node) for s in steps if not isinstance(s, Loop)})
    for loop in loops:
        if loop.compact:
            continue
        logical = loop.domain if loop.perm is None else tuple(
            loop.domain[loop.perm.index(a)] for a in range(len(loop.domain)))
        cands = []
        for leaf in loop.leaves:
            if id(leaf) in owner and owner[id(leaf)] is not loop and leaf.op in CHEAP_OPS:
                cone = _remat_cone(leaf, loop, logical, stored)
                if cone is not None:
                    cands.append((leaf, cone))
        # (a cone reading another candidate would need that one computed first)
        cand_ids = {id(leaf) for leaf, _ in cands}
        cands = [(leaf, cone) for leaf, cone in cands if not any(id(i) in cand_ids for n in cone for i in n.inputs)]
        if not cands:
            continue

        def new_reads(chosen):
            inside = {id(n) for _, cone in chosen for n in cone}
            return list({id(i): i for _, cone in chosen for n in cone for i in n.inputs
                         if i.op != "const" and id(i) not in inside and i not in loop.leaves}.values())

        # Values recomputed together may share what they read (three invariants of one window).
        if sum(_size(i) for i in new_reads(cands)) >= sum(_size(leaf) for leaf, _ in cands):
            cands = [(leaf, cone) for leaf, cone in cands
                     if _size(leaf) >= REMAT_GROWTH * sum(_size(i) for i in leaf.inputs)
                     or sum(_size(i) for i in new_reads([(leaf, cone)])) < _size(leaf)]
        new = new_reads(cands)
        front: list[Node] = []
        for _, cone in cands:
            front += [n for n in cone if n not in front]
        if (not cands or len(loop.leaves) - len(cands) + len(new) > max_reads
                or len(loop.members) + len(front) > MAX_KERNEL_OPS):
            continue
        for leaf, _ in cands:
            loop.leaves.remove(leaf)
            readers[id(leaf)] -= 1
        loop.leaves.extend(new)
        for i in new:
            readers[id(i)] += 1
        loop.members[0:0] = front
        for n in front:
            loop.space[id(n)] = "full"
    for loop in loops:
        loop.outputs = [o for o in loop.outputs if id(o) in graph_outputs or readers[id(o)] > 0]
    steps[:] = [s for s in steps if not (isinstance(s, Loop) and not s.outputs)]  # (all recomputed where read)
