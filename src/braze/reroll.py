"""Re-rolling: the iterations of an unrolled Python loop become one loop again.

A loop writing one region of an array per iteration (``out[i, j] =
np.sum(image[i:i+3, j:j+3] * w)``, ``y[i] = y[i-1] * a + x[i]``) traces to a
chain of ``update_slice`` nodes, each storing a value computed by a small
subgraph of its own (the iteration's *interior*: the nodes only that value
uses) from values shared by all iterations (the *leaves*: ``image``, ``w``)
and from windows of them at offsets that change from one iteration to the
next. A run of such updates whose interiors are the same up to those offsets
is one ``rolled`` node: the interior once, as a graph (the *template*, whose
inputs are the windows and the leaves), and a table with a row of offsets per
iteration (the windows' starts, then the region's starts).

A loop carrying a value from one iteration to the next (``trace +=
np.tanh(a[i, i])``, ``acc = acc * r + c[i]``) traces to a chain of nodes
each computing the next value from the one before and windows at offsets;
a run of alike ones is a ``rolled`` node too, in order, whose template reads
the carried value whole (``Rolled.carry``) and whose result is the last value.

A loop updating several arrays per iteration (``m = b[i] - a[i] * cp[i-1];
cp[i] = c[i] / m; dp[i] = (d[i] - a[i] * dp[i-1]) / m``) traces to one chain
per array, none of which rolls alone (each iteration's ``m`` is read by both);
chains next to each other whose k-th updates make one iteration are one
``rolled`` node over all the arrays, in order (``Rolled.lockstep``), whose
result is the tuple of them.

A loop carrying a few scalars at once (an RK4 step on ``theta, omega`` or
``x, y, z``), each read many times by the next iteration, is *stepped*: an
iteration is the stretch of the program between one step's stores and the
next's (``path[i + 1] = state``), or, where nothing is stored, between one
value of a result's chain and the next (``x = x + dt / 6 * (...)``); alike
ones are a ``rolled`` node carrying the scalars (``Rolled.carried``), whose
result is the array and the last values.

A target compiles the template once and runs it in a loop over the table's
rows (``Rolled.runner``); the iterations are *independent* (parallel) when no
window reads the array being updated and no two regions overlap, and run in
order otherwise, each reading the array as the iterations before it left it:
what the unrolled program computed, update by update.

The pass is linear in the graph: each node is visited a bounded number of
times (an interior is at most ``MAX_INTERIOR`` nodes), and runs are found in
one walk along each chain.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .core import KIND, NUMPY_IMPL
from .graph import Graph, Node, toposort

MIN_RUN = 8         # iterations below which a run stays unrolled
MAX_INTERIOR = 48   # nodes in one iteration's interior (past it: not re-rolled)
_STATEFUL = frozenset({"host_call", "compress", "kernel", "composite", "rolled"})
# ops whose ``shape`` param is the extents of their result: a symbol's in a
# shape-free signature, resolved per iteration by a loop whose extents differ
_SHAPED = frozenset({"reshape", "broadcast_to"})
_SOURCES = frozenset({"input", "const", "capture"})


class Table:
    """The offsets of each iteration (a read-only int64 array ``rows x columns``),
    or its constants (float64), hashed by value so two equal programs intern to
    one node."""

    __slots__ = ("rows", "_hash")

    def __init__(self, rows: np.ndarray, dtype=np.int64):
        self.rows = np.ascontiguousarray(rows, dtype=dtype)
        self.rows.flags.writeable = False
        self._hash = hash((self.rows.shape, self.rows.dtype.str, self.rows.tobytes()))

    def __eq__(self, other):
        return (isinstance(other, Table) and self.rows.shape == other.rows.shape
                and self.rows.dtype == other.rows.dtype and self.rows.tobytes() == other.rows.tobytes())

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"<{self.rows.shape[0]} iterations x {self.rows.shape[1]} offsets>"


@dataclass(frozen=True, eq=False)
class Rolled:
    """What a ``rolled`` node runs (its ``spec`` param).

    ``template``: inputs are the windows, then the leaves (``inputs[1:]`` of the
    node: the first is the array updated); its one output is the value stored.
    ``windows[w]``: (which leaf, -1 for the array updated; its extents; its
    steps): its starts are table columns ``ndim`` at a time, in order, then
    the region's (``region``: extents, steps). ``independent``: the
    iterations may run in any order. ``carry``: the node's first input is a
    value each iteration replaces, not an array it updates a region of: the
    template's first input is that value, read whole, then the windows and
    leaves; its output is the next value (``region`` is None), and the
    node's result the last. ``params``: the avals of the scalar constants
    that differ from one iteration to the next (``x[i] * i``): the template's
    last inputs, their values a row of ``consts`` (float64) per iteration.
    ``lockstep``: the regions (extents, steps) of further arrays each
    iteration updates too (``cp[i] = c[i] / m; dp[i] = (d[i] - a[i] * dp[i-1])
    / m``): the node's first inputs are then all the arrays (``dst`` a tuple),
    a window of array ``j`` has ``which`` ``-1 - j``, the template has an output
    per array, the table's last columns are each region's starts in turn, and
    the node's result is the tuple of the arrays.
    ``carried``: the avals of values a *stepped* loop carries from one
    iteration to the next beside the array it updates (``theta, omega`` of an
    RK4 step recording its path, ``path[i + 1] = theta, omega``): the node's
    inputs are the array, the values the first iteration reads, then the
    leaves; the template's first inputs are the values, its outputs the
    values stored (one per region of ``regions``, each a region of the same
    array, stored in order), then the next values; ``region`` is None, the
    table's last columns are each region's starts in turn, and the node's
    result is the tuple of the array and the last values.
    ``stores``: the regions (extents, steps) of the same array each iteration
    stores into after ``region``, in order (``cov[i:, i] = cov[i, i:] = v``:
    a loop storing one value twice); the template has an output per region.
    ``varying``: the extents that differ from one iteration to the next
    (``x[i + 1:]`` for each ``i``, back substitution's), as (its value in the
    template, the table column holding each iteration's): the table's last
    columns. The template is the first iteration's; the ``shape`` of its
    reshapes and broadcasts are those extents too. ``last``: the spec of the
    run's last iteration, for ``compile_template`` to check that the code it
    writes is the same (None once compiled).
    ``runner``: a target's compiled loop, ``runner(dst, leaves, table, consts)``
    writing into ``dst`` (returning the last value, for a carry; for a stepped
    loop ``runner(dst, values, leaves, table, consts)`` returning the last
    values); None runs the template with NumPy, iteration by iteration."""

    template: Graph
    windows: tuple
    region: tuple | None
    independent: bool
    runner: object = None
    carry: bool = False
    params: tuple = ()
    lockstep: tuple = ()
    carried: tuple = ()
    regions: tuple = ()
    varying: tuple = ()
    last: object = None
    stores: tuple = ()

    @property
    def arrayless(self) -> bool:
        """A stepped loop that stores nothing: the node's inputs are the values
        and the leaves, its result the tuple of the last values."""
        return bool(self.carried) and not self.regions

    def __repr__(self):
        kind = "carried" if self.carry else "independent" if self.independent else "in order"
        if self.carried:
            kind = f"stepped, {len(self.carried)} values carried, {len(self.regions)} stores a step"
        if self.lockstep:
            kind += f", {1 + len(self.lockstep)} arrays in lockstep"
        if self.stores:
            kind += f", {1 + len(self.stores)} stores a step"
        return f"<{len(self.template.nodes)} nodes a step, {kind}>"

    def run(self, dst: np.ndarray, leaves, table: Table, consts: Table | None = None) -> np.ndarray:
        crows = consts.rows if consts is not None else np.zeros((len(table.rows), 0))
        if self.carried:  # (arrayless: ``dst`` is None, the values first among ``leaves``)
            values, leaves = tuple(leaves[:len(self.carried)]), tuple(leaves[len(self.carried):])
            if self.runner is not None:
                values = self.runner(dst, values, leaves, table.rows, crows)
            else:
                values = self._run_numpy(dst, values, leaves, table.rows, crows)
            return values if self.arrayless else (dst, *values)
        if self.runner is not None:
            if self.carry:
                return self.runner(dst, leaves, table.rows, crows)
            self.runner(dst, leaves, table.rows, crows)
            return dst
        heads = self._run_numpy(dst, (dst,) if self.carry else (), leaves, table.rows, crows)
        return heads[0] if self.carry else dst

    def _run_numpy(self, dst, heads: tuple, leaves, rows, crows) -> tuple:
        """The template with NumPy, iteration by iteration. ``dst``: the array
        updated (a tuple of them in lockstep, None for an arrayless loop);
        ``heads``: the values of the template's first inputs (a carried value,
        a stepped loop's values), which each iteration's outputs after its
        stores replace. Returns the last heads."""
        inputs = self.template.inputs
        order = [n for n in self.template.nodes if n.op not in ("input", "const")]
        first, nwin = len(heads), len(self.windows)
        params = inputs[len(inputs) - len(self.params):]
        dsts = tuple(dst) if self.lockstep else (dst,)
        if self.carried:
            regions, targets = self.regions, (dst,) * len(self.regions)
        elif self.stores:
            regions, targets = (self.region, *self.stores), (dst,) * (1 + len(self.stores))
        else:
            regions, targets = ((), ()) if self.carry else ((self.region, *self.lockstep), dsts)
        column = dict(self.varying)
        for row, crow in zip(rows, crows):
            env, col = {}, 0

            def sized(extents: tuple) -> tuple:  # (this iteration's: ``varying``)
                return tuple(int(row[column[e]]) if e in column else e for e in extents)

            env.update((id(node), param_value(c, node.aval)) for node, c in zip(params, crow))
            env.update((id(node), v) for node, v in zip(inputs, heads))
            for k, (which, extents, steps) in enumerate(self.windows):
                base = leaves[which] if which >= 0 else heads[0] if self.carry else dsts[-1 - which]
                env[id(inputs[first + k])] = np.asarray(base)[_window(row[col:col + len(extents)], sized(extents),
                                                                      steps)]
                col += len(extents)
            env.update((id(inputs[first + nwin + k]), leaf) for k, leaf in enumerate(leaves))

            def value(n):
                return n.kw["value"].value if n.op == "const" else env[id(n)]

            for n in order:
                kw = n.kw
                if column and n.op in _SHAPED:
                    kw = {**kw, "shape": sized(kw["shape"])}
                env[id(n)] = NUMPY_IMPL[n.op](*[value(i) for i in n.inputs], **kw)
            outs = [value(o) for o in self.template.outputs]  # (all computed before any is stored)
            for d, (extents, steps), v in zip(targets, regions, outs):
                d[_window(row[col:col + len(extents)], sized(extents), steps)] = v
                col += len(extents)
            heads = tuple(outs[len(regions):])
        return heads


def param_value(c: float, aval):
    """A varying constant's value for one iteration, typed as the constant was:
    a Python scalar for a weak one, a NumPy scalar for a strong one."""
    dtype = np.dtype(aval.dtype)
    if aval.weak:
        return bool(c) if dtype.kind == "b" else int(c) if dtype.kind in "iu" else float(c)
    return dtype.type(c)


def _window(starts, extents, steps) -> tuple:
    return tuple(slice(int(a), int(a) + (e - 1) * s + 1, s) if e else slice(int(a), int(a))
                 for a, e, s in zip(starts, extents, steps))


# ---------------------------------------------------------------- the pass


def reroll(graph: Graph, compile_template=None) -> Graph:
    """``graph`` with each run of at least ``MIN_RUN`` alike updates of a chain as
    one ``rolled`` node. ``compile_template(spec, leaves, iterations) -> runner | None``: a
    target's compiled loop for the template (None: the run stays unrolled);
    without it the template runs with NumPy."""
    order = toposort(graph.outputs)
    index = {id(n): k for k, n in enumerate(order)}
    uses: dict[int, int] = {}
    updates: dict[int, list] = {}  # id(array) -> the updates of it
    for n in order:
        for i in n.inputs:
            uses[id(i)] = uses.get(id(i), 0) + 1
        if n.op == "update_slice":
            updates.setdefault(id(n.inputs[0]), []).append(n)
    for o in graph.outputs:
        uses[id(o)] = uses.get(id(o), 0) + 1
    # chains: each update of the one update before it (which other nodes may read:
    # the next iteration's windows, checked by _iteration)
    nxt = {id(n.inputs[0]): n for n in order if n.op == "update_slice"
           and n.inputs[0].op == "update_slice" and len(updates[id(n.inputs[0])]) == 1}
    linked = {id(n) for n in nxt.values()}
    replace: dict[int, Node] = {}
    chains = []
    for head in order:
        if head.op != "update_slice" or id(head) in linked or id(head) not in nxt:
            continue
        chain = [head]
        while id(chain[-1]) in nxt:
            chain.append(nxt[id(chain[-1])])
        if len(chain) >= MIN_RUN and not _called_each_time(chain):
            chains.append(chain)
    done = _lockstep_runs(chains, index, uses, replace, compile_template)
    for k, chain in enumerate(chains):
        if k in done:
            continue
        # iterations alike up to their extents first (``x[i + 1:]`` for each i: one run);
        # where such a run cannot roll, its stretches of equal extents may
        its, runs = _alike_runs(lambda j, recompute: _iteration([chain[j]], index, uses, recompute), len(chain), 0,
                                key=_shape_free)
        for start, end in runs:
            if _roll(chain, its, start, end, index, compile_template, replace):
                done.add(k)
            elif len({it.extents for it in its[start:end]}) > 1:
                for a, b in _runs(its[start:end], 0):
                    if _roll(chain, its, start + a, start + b, index, compile_template, replace):
                        done.add(k)
    for k, chain in enumerate(chains):
        if k not in done and _periodic_runs(chain, index, uses, replace, compile_template):
            done.add(k)
    # stepped iterations are cut in DFS order, which follows the trace where an
    # update chain is reached first: a loop returning its last state and its
    # path (``return state, path``) would otherwise list every state first
    first = sorted(graph.outputs, key=lambda o: o.op != "update_slice")
    steps_index = index if first == list(graph.outputs) else {id(n): k for k, n in enumerate(toposort(first))}
    taken = _stepped_runs(chains, done, steps_index, uses, replace, compile_template)
    taken = _carried_runs(order, index, uses, replace, compile_template, taken)
    _anchored_runs(graph, index, uses, replace, compile_template, taken)
    if not replace:
        return graph
    mapping: dict[int, Node] = {}
    for n in order:
        new = replace.get(id(n), n)
        if new.op == "pick" and new is not n:  # (one array of a lockstep loop: the loop, built once)
            loop = new.inputs[0]
            if id(loop) not in mapping:
                mapping[id(loop)] = loop.replace(mapping.get(id(i), i) for i in loop.inputs)
            mapping[id(n)] = new.replace([mapping[id(loop)]])
            continue
        mapping[id(n)] = new.replace(mapping.get(id(i), i) for i in new.inputs)
    outputs = [mapping[id(o)] for o in graph.outputs]
    return Graph(graph.inputs, outputs, graph.captures, graph.input_names, graph.notes)


def _called_each_time(chain: list) -> bool:
    """Whether each update of ``chain`` stores a result of a call of its own (a
    SciPy call per column): a stateful node is never inside an iteration and a
    leaf of each, so no two are alike, whichever way they are cut; not tried."""
    seen: set[int] = set()
    for update in chain:
        v = update.inputs[1]
        while v.op in ("reshape", "convert", "broadcast_to", "pick"):
            v = v.inputs[0]
        if v.op not in _STATEFUL or id(v) in seen:
            return False
        seen.add(id(v))
    return True


# The most updates of one array an iteration may make (``_periodic_runs``).
MAX_PERIOD = 4


def _periodic_runs(chain: list, index: dict, uses: dict, replace: dict, compile_template) -> bool:
    """Runs of a chain no run of single updates rolled whose iterations each
    make ``p`` updates of its array in turn (``cov[i:m, i] = cov[i, i:m] =
    v``: two regions a step, one value), added to ``replace``. Tried for each
    period up to MAX_PERIOD and each phase, first at one iteration in the
    middle of the chain; returns whether any rolled."""
    for p in range(2, MAX_PERIOD + 1):
        for phase in range(p):
            count = (len(chain) - phase) // p
            if count < MIN_RUN:
                return False
            middle = phase + count // 2 * p
            if _iteration(chain[middle:middle + p], index, uses) is None:
                continue

            def make(j, recompute, phase=phase):
                return _iteration(chain[phase + j * p:phase + j * p + p], index, uses, recompute)

            its, runs = _alike_runs(make, count, 0, key=_shape_free)
            rolled = False
            for start, end in runs:
                stretch = [chain[phase + start * p + r:phase + end * p:p] for r in range(p)]
                node = _rolled(stretch, its[start:end], index, compile_template, one_array=True)
                if node is not None:
                    replace[id(stretch[-1][-1])] = node
                    rolled = True
            if rolled:
                return True
    return False


def _roll(chain: list, its: list, start: int, end: int, index: dict, compile_template, replace: dict) -> bool:
    """``chain[start:end]`` re-rolled into ``replace`` (False: it cannot be)."""
    node = _rolled([chain[start:end]], its[start:end], index, compile_template)
    if node is not None:
        replace[id(chain[end - 1])] = node
    return node is not None


@dataclass
class _Iteration:
    signature: tuple   # equal for two updates exactly when they differ only in offsets
    offsets: list      # the windows' starts, then the region's
    leaves: dict       # id -> node read by the interior, computed outside it
    interior: list     # the nodes only this update's value uses, topological
    windows: list      # interior slices of leaves (or of the array updated) at offsets
    consts: list = None  # the scalar constants the interior reads, in order (compared by value apart)
    shared: bool = False  # a value other iterations read too was left a leaf (``recompute`` would take it in)
    moved: dict = None  # id of a window of an array this iteration updates, apart from its region -> which
    shape_free: tuple = ()  # the signature with each extent of 2 or more a symbol (``_erased``)
    extents: tuple = ()  # the symbols' values in this iteration, in order


def _iteration(updates, index, uses, recompute: bool = False) -> _Iteration | None:
    """One update of a chain, or the updates of several arrays a loop makes in
    lockstep (``cp[i] = ...; dp[i] = ...``), as an iteration of a rolled loop
    (None: it cannot be)."""
    if any(not u.kw["slices"] or any(s <= 0 for _, _, s in u.kw["slices"]) for u in updates):
        return None
    return _iteration_of([u.inputs[1] for u in updates], [u.inputs[0] for u in updates],
                         [u.kw["slices"] for u in updates], index, uses, recompute,
                         updates if len(updates) > 1 else None)


def _recomputable(n: Node, value: Node) -> bool:
    """``n``, which nodes outside the iteration read too, may be computed again
    inside it: an elementwise op, slice or reshape no larger than the
    iteration's value (so computing it again costs at most what the iteration
    costs, per node of it)."""
    return (not isinstance(n.aval, tuple) and (KIND[n.op] == "elementwise" or n.op in ("slice", "reshape"))
            and n.aval.size <= max(value.aval.size, 1))


def _iteration_of(values: list, dsts: list, regions: list, index, uses, recompute: bool = False,
                  lockstep: list | None = None) -> _Iteration | None:
    """The iteration computing ``values[j]`` and storing it into ``regions[j]`` of
    ``dsts[j]`` (several: arrays updated in lockstep), or, with ``regions`` [None],
    computing the carried ``values[0]`` from the one before, ``dsts[0]``, which it
    may read whole (None: it cannot be rolled). The dsts are read only through
    windows (the values they held before this iteration). ``recompute``: small
    elementwise values other iterations read too (interned once: ``tanh(a[i %
    n])`` in a loop of more than n iterations) are computed again inside the
    iteration rather than read as a leaf of its own, which would make each
    iteration unlike the others. ``lockstep``: the updates of a loop updating
    several arrays, whose iteration may read an array it updates after the
    update, away from its region (``p[i] = ...; q[i] = 0.8 * p[i - 1]``): that
    is a window of the array before the iteration (``moved``), and the array
    the update before stored was read as many times so by the iteration
    before, if alike (at a run's first iteration, whatever read it reads the
    array the run copies)."""
    carry = regions[0] is None
    stores = {id(u): j for j, u in enumerate(lockstep)} if lockstep else {}
    moved: dict[int, int] = {}
    value = values[0]
    for v, d in zip(values, dsts):
        if v.aval.dtype != d.aval.dtype or v.op in _STATEFUL or (carry and v.aval != d.aval):
            return None
    which = {id(d): j for j, d in enumerate(dsts)}  # (a dst is a value before the loop: no interior)
    if len(which) != len(dsts):
        return None
    for v in values:
        if id(v) in which:
            return None
    # the candidates, bounded: what was computed before the arrays this iteration
    # updates were (``x[i] = dp[i] - cp[i] * x[i + 1]`` after a sweep of 1,000
    # updates of ``dp``) is a leaf, not walked, unless cheap enough to compute again
    floor = min([index[id(d)] for d in dsts])
    taken, stack = {id(v): v for v in values}, list(values)
    while stack:
        n = stack.pop()
        if n.op in _SOURCES or id(n) in which:
            continue
        if stores and n.op == "slice" and id(n.inputs[0]) in stores:
            j = stores[id(n.inputs[0])]
            if _apart(n.kw["slices"], regions[j]):
                moved[id(n)] = j  # (read before the update: the elements are the same)
                continue
        if index[id(n)] < floor and not (n.op in ("slice", "reshape") or _recomputable(n, value)):
            continue
        for i in n.inputs:
            if id(i) not in taken:
                taken[id(i)] = i
                stack.append(i)
                if len(taken) > MAX_INTERIOR * len(values):
                    return None
    shared = False
    users_inside: dict[int, int] = {}
    for v in values:
        users_inside[id(v)] = users_inside.get(id(v), 0) + 1
    inside: set[int] = set()
    interior = []
    for n in sorted(taken.values(), key=lambda m: -index[id(m)]):  # users before what they read
        inner = users_inside.get(id(n), 0)
        if id(n) in which or n.op in _SOURCES or not inner:
            continue
        if inner != uses[id(n)] and not (n.op == "slice" or n.op == "reshape" and n.inputs[0].op == "slice"):
            if not _recomputable(n, value):
                continue
            if not recompute:
                shared = True
                continue  # (a window other iterations read too, interned once, is sliced again by each)
        if n.op in _STATEFUL:
            return None
        interior.append(n)
        inside.add(id(n))
        for i in n.inputs:
            users_inside[id(i)] = users_inside.get(id(i), 0) + 1
    before = [0] * len(dsts)  # per array, its windows the iteration reads before the update
    for m, j in moved.items():
        before[j] += m in inside
    for v in values:
        if id(v) not in inside:
            return None  # a value is read elsewhere
    for j, d in enumerate(dsts):
        if users_inside.get(id(d), 0) + (0 if carry else 1) + before[j] != uses[id(d)]:
            return None  # an array updated is read outside this iteration
    interior.reverse()
    ref: dict[int, tuple] = {}
    it = _Iteration((), [], {}, interior, [], [], shared, moved)
    sig = []
    symbols: dict[int, int] = {}  # an extent of 2 or more -> its symbol, in order of first appearance

    def erased(shape: tuple) -> tuple:
        return tuple(d if d <= 1 else ("z", symbols.setdefault(d, len(symbols))) for d in shape)

    def aval(a) -> tuple:
        return (erased(a.shape), a.dtype, a.weak)
    for n in interior:
        base = n.inputs[0] if n.inputs else None
        if n.op == "slice" and id(base) not in inside and base.op != "const" \
                and all(a >= 0 and s > 0 for a, _, s in n.kw["slices"]):
            dst = moved.get(id(n), which.get(id(base)))
            if dst is None:
                it.leaves.setdefault(id(base), base)
            ref[id(n)] = ("win", len(it.windows))
            it.windows.append(n)
            sig.append(("win", ("dst", dst) if dst is not None else ("leaf", id(base)), aval(n.aval),
                        tuple(s for _, _, s in n.kw["slices"])))
            it.offsets.extend(a for a, _, _ in n.kw["slices"])
            continue
        args = []
        for i in n.inputs:
            if id(i) in ref:
                args.append(ref[id(i)])
            elif id(i) in which:
                if not carry:
                    return None  # an array updated, read whole: not a window of one iteration
                args.append(("carry",))
            elif _scalar_const(i):
                args.append(("const", len(it.consts), i.aval))  # (its value: _params)
                it.consts.append(i)
            else:
                if i.op != "const":
                    it.leaves.setdefault(id(i), i)
                args.append(("leaf", id(i)))
        ref[id(n)] = ("node", len(sig))
        params = n.params
        if n.op in _SHAPED:
            params = tuple((k, erased(v) if k == "shape" else v) for k, v in params)
        sig.append((n.op, params, aval(n.aval), tuple(args)))
    if carry:
        sig.append(("carry", ref[id(value)], aval(value.aval)))
    for v, region in zip(values, regions):
        if region is not None:
            sig.append(("region", ref[id(v)], tuple(s for _, _, s in region), erased(v.aval.shape)))
            it.offsets.extend(a for a, _, _ in region)
    it.shape_free = tuple(sig)
    it.extents = tuple(symbols)
    it.signature = (it.shape_free, it.extents)
    return it


def _rolled(runs: list, its: list[_Iteration], index: dict, compile_template, init: Node | None = None,
            one_array: bool = False) -> Node | None:
    """The ``rolled`` node of a run of alike updates (``runs``: one list of
    updates, or one per array of a lockstep loop, iteration k the k-th of
    each), or with ``init`` (the value the first carries on from) of alike
    carried values (None: left unrolled). ``one_array``: ``runs`` are the
    updates of one array, iteration k making the k-th of each in turn
    (``Rolled.stores``). Iterations alike up to their
    extents (``_Iteration.shape_free``) roll when each extent that differs
    grows or shrinks steadily along the run, a region updated in place
    (``Rolled.varying``)."""
    first = its[0]
    carry = init is not None
    if any(index[id(leaf)] >= min(index[id(run[0])] for run in runs) for leaf in first.leaves.values()):
        return None  # a leaf computed after the run starts (it might read the run's updates)
    dsts = [init] if carry else [run[0].inputs[0] for run in runs[:1 if one_array else len(runs)]]
    leaves = list(first.leaves.values())
    extents = np.array([it.extents for it in its], dtype=np.int64).reshape(len(its), -1)
    varying = [s for s in range(extents.shape[1]) if (extents[:, s] != extents[0, s]).any()]
    if varying and (carry or not all(_monotone(extents[:, s]) for s in varying)):
        return None
    made = _spec(runs, its, 0, dsts, leaves, init)
    if made is None:
        return None
    template, windows, regions, values, avals = made
    if one_array and (first.moved or any(w[0] < -1 for w in windows)):
        return None  # (a read of the array between two of an iteration's stores)
    offsets = np.array([it.offsets for it in its], dtype=np.int64).reshape(len(its), -1)
    table = Table(np.concatenate([offsets, extents[:, varying]], axis=1))
    sizes = [(int(extents[0, s]), offsets.shape[1] + j) for j, s in enumerate(varying)]
    consts = Table(values, np.float64)
    if carry:
        region, lockstep, independent = None, (), False
    elif one_array:
        region, lockstep, independent = regions[0], (), False
    elif len(runs) > 1:
        region, lockstep, independent = regions[0], tuple(regions[1:]), False
    else:
        region, lockstep = regions[0], ()
        independent = all(w[0] >= 0 for w in windows) and _disjoint(table.rows, region, dsts[0].aval.shape,
                                                                    offsets.shape[1], dict(sizes))
    spec = Rolled(template, windows, region, independent, carry=carry, params=avals, lockstep=lockstep,
                  varying=tuple(sizes), stores=tuple(regions[1:]) if one_array else ())
    if compile_template is not None:
        last = None
        if varying:  # (the code the target writes for the last iteration: checked to be the same)
            template, windows, regions, _, _ = _spec(runs, its, -1, dsts, leaves, init)
            last = dataclasses.replace(spec, template=template, windows=windows, region=regions[0],
                                       stores=tuple(regions[1:]) if one_array else (),
                                       lockstep=tuple(regions[1:]) if lockstep else (),
                                       varying=tuple((int(extents[-1, s]), c) for s, (_, c) in zip(varying, sizes)))
        runner = compile_template(dataclasses.replace(spec, last=last), leaves, len(runs[0]))
        if runner is None:
            return None
        spec = dataclasses.replace(spec, runner=runner)
    aval = tuple(d.aval for d in dsts) if lockstep else dsts[0].aval
    return Node.make("rolled", (*dsts, *leaves), aval, spec=spec, table=table, consts=consts)


def _spec(runs: list, its: list[_Iteration], k: int, dsts: list, leaves: list, init: Node | None) -> tuple | None:
    """The template of iteration ``k`` of a run (``_rolled``), over the windows
    it reads, the ``leaves`` and the constants that differ between the
    iterations: (template, windows, regions, the constants' table, their
    avals), or None."""
    it = its[k]
    carry = init is not None
    which = {id(d): -1 - j for j, d in enumerate(dsts if carry else [run[k].inputs[0] for run in runs])}
    position = {id(leaf): j for j, leaf in enumerate(leaves)}
    inputs, windows, mapping = [], [], {}
    if carry:
        mapping[id(init)] = Node.make("input", (), init.aval, index=0)
        inputs.append(mapping[id(init)])
    for n in it.windows:
        base = n.inputs[0]
        moved = it.moved.get(id(n)) if it.moved else None
        windows.append((-1 - moved if moved is not None else which.get(id(base), position.get(id(base))),
                        tuple(n.aval.shape), tuple(s for _, _, s in n.kw["slices"])))
        mapping[id(n)] = Node.make("input", (), n.aval, index=len(inputs))
        inputs.append(mapping[id(n)])
    made = _template_interior(it, its, leaves, inputs, mapping)
    if made is None:
        return None
    values, avals = made
    stored = [runs[0][k]] if carry else [run[k].inputs[1] for run in runs]
    template = Graph(inputs, [mapping[id(v)] for v in stored])
    regions = [] if carry else [(tuple(v.aval.shape), tuple(s for _, _, s in run[k].kw["slices"]))
                                for v, run in zip(stored, runs)]
    return template, tuple(windows), regions, values, avals


def _monotone(column: np.ndarray) -> bool:
    steps = np.diff(column)
    return bool((steps >= 0).all() or (steps <= 0).all())


def _template_interior(first, its: list, leaves: list, inputs: list, mapping: dict) -> tuple | None:
    """The leaves, then the scalar constants that differ between the
    iterations ``its`` (``x[i] * i``), appended to a template's ``inputs``, and
    the interior of ``first`` rebuilt over them into ``mapping``. Returns the
    table of those constants (a row per iteration) and their avals, or None
    when an integer one does not fit a float64 exactly."""
    for leaf in leaves:
        mapping[id(leaf)] = Node.make("input", (), leaf.aval, index=len(inputs))
        inputs.append(mapping[id(leaf)])
    varying = [p for p, c in enumerate(first.consts) if any(it.consts[p] is not c for it in its)]
    values = np.array([[it.consts[p].kw["value"].value for p in varying] for it in its], dtype=np.float64)
    if any(np.dtype(first.consts[p].aval.dtype).kind in "iu" for p in varying) and np.abs(values).max() > 2.0 ** 53:
        return None
    params = {}
    for p in varying:
        params[p] = Node.make("input", (), first.consts[p].aval, index=len(inputs))
        inputs.append(params[p])
    position = 0
    for n in first.interior:
        if id(n) in mapping:  # (a window)
            continue
        ins = []
        for i in n.inputs:
            if _scalar_const(i):
                i = params.get(position, i)
                position += 1
            ins.append(mapping.get(id(i), i))
        mapping[id(n)] = n.replace(ins)
    return values.reshape(len(its), len(varying)), tuple(first.consts[p].aval for p in varying)


def _apart(a, b) -> bool:
    """Two windows ((start, stop, step) per axis, steps positive) share no element:
    on some axis their index ranges do not meet."""
    for (s1, e1, t1), (s2, e2, t2) in zip(a, b):
        if t1 <= 0 or t2 <= 0:
            return False
        if e1 <= s1 or e2 <= s2:
            return True  # (an empty window)
        if s1 + (e1 - s1 - 1) // t1 * t1 < s2 or s2 + (e2 - s2 - 1) // t2 * t2 < s1:
            return True
    return False


def _scalar_const(node: Node) -> bool:
    """A constant an iteration's value may take from a table: a real scalar."""
    return (node.op == "const" and not isinstance(node.aval, tuple) and node.aval.ndim == 0
            and np.dtype(node.aval.dtype).kind in "biuf")


# The most arrays one loop may update in lockstep (``x[i]``, ``y[i]``, ``z[i]``
# of a Lorenz integrator written with arrays: 3).
MAX_LOCKSTEP = 4


def _lockstep_runs(chains: list, index: dict, uses: dict, replace: dict, compile_template) -> set:
    """Runs of alike iterations each updating several arrays, added to
    ``replace`` (each array's last update -> its ``pick`` of the ``rolled``
    node). A loop updating two arrays from values they share (the Thomas
    algorithm's sweep: ``m = b[i] - a[i] * cp[i-1]; cp[i] = c[i] / m; dp[i] =
    (d[i] - a[i] * dp[i-1]) / m``) leaves two chains neither of which rolls
    alone (``m`` is read by the other's update: rolled, ``cp`` would compute
    ``m`` again and leave every update of it in place for ``dp``'s); three
    arrays each read by the others' updates (``x[i]``, ``y[i]``, ``z[i]``)
    leave three. Chains whose last updates are next to each other in the
    program (a Viterbi step's ``psi[t]`` and ``delta[t]``, whatever chain's
    head came between theirs), two, then up to MAX_LOCKSTEP, their last
    updates aligned, whose middle updates make one iteration, are tried as
    one loop whose iteration k makes the k-th update of each. Returns the
    positions of the chains taken. Linear: a chain is in at most
    MAX_LOCKSTEP groups, each update in a bounded walk."""
    by_last = sorted(range(len(chains)), key=lambda j: index[id(chains[j][-1])])
    position, chains = by_last, [chains[j] for j in by_last]
    k, taken = 0, set()
    while k + 1 < len(chains):
        for size in range(2, min(MAX_LOCKSTEP, len(chains) - k) + 1):
            m = min(len(c) for c in chains[k:k + size])
            group = [c[len(c) - m:] for c in chains[k:k + size]]
            if _iteration([c[m // 2] for c in group], index, uses) is not None:
                break
        else:
            k += 1
            continue  # (the commonest case: loops one after the other, tried no further)
        its, runs = _alike_runs(lambda j, recompute: _iteration([c[j] for c in group], index, uses, recompute), m, 0,
                                key=_shape_free)
        for start, end in runs:
            parts = [(start, end)]
            if len({it.extents for it in its[start:end]}) > 1:  # (alike up to extents: else its equal stretches)
                parts += [(start + a, start + b) for a, b in _runs(its[start:end], 0)]
            for a, b in parts:
                if _depends_on([c[a].inputs[0] for c in group], {id(u) for c in group for u in c[a:b]},
                               min(index[id(c[a])] for c in group), index):
                    continue  # (an array the loop starts from is computed from one of its updates)
                node = _rolled([c[a:b] for c in group], its[a:b], index, compile_template)
                if node is None:
                    continue
                for j, c in enumerate(group):
                    replace[id(c[b - 1])] = Node.make("pick", (node,), node.aval[j], index=j)
                taken |= set(range(k, k + size))
                if (a, b) == (start, end):
                    break
        k += size if k in taken else 1
    return {position[j] for j in taken}


def _depends_on(roots: list, targets: set, floor: int, index: dict) -> bool:
    """Whether any of ``roots`` is computed from a node of ``targets`` (ids), none
    of which comes before position ``floor`` of the topological ``index``: the
    walk up from the roots stops at nodes before it, which cannot."""
    stack, seen = [r for r in roots if index[id(r)] >= floor], set()
    while stack:
        n = stack.pop()
        if id(n) in targets:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(i for i in n.inputs if index[id(i)] >= floor)
    return False


# How far along a chain of single users a carried value's next one may be
# (``acc = acc * r + c[i]``: two ops on): a bound on the work per node.
CARRY_REACH = 8


def _carried_runs(order: list, index: dict, uses: dict, replace: dict, compile_template,
                  taken: set = frozenset()) -> set:
    """Runs of at least MIN_RUN alike iterations of carried values (``trace +=
    np.tanh(a[i, i])``), added to ``replace``: the last value of a run -> its
    ``rolled`` node. A carried value is used once, by the interior of the next
    one: the same op with the same params and aval, at most CARRY_REACH
    single users on. Linear: a bounded walk from each node. ``taken``: nodes
    a stepped run took in (left alone); returns them with the nodes these
    runs took in."""
    user: dict[int, Node] = {}
    for n in order:
        for i in n.inputs:
            user[id(i)] = n
    nxt: dict[int, Node] = {}
    link: dict[int, tuple] = {}  # id(h) -> the ops on the way from h to its next one
    for h in order:
        if uses.get(id(h)) != 1 or h.op in _SOURCES or h.op in _STATEFUL or h.op == "update_slice" \
                or isinstance(h.aval, tuple):
            continue
        n = user.get(id(h))
        path = []
        for _ in range(CARRY_REACH):
            if n is None:
                break
            if n.op == h.op and n.params == h.params and n.aval == h.aval:
                nxt[id(h)] = n
                link[id(h)] = tuple(path)
                break
            if uses.get(id(n)) != 1:
                break
            path.append((n.op, n.params, n.aval))
            n = user.get(id(n))
    linked = {id(n) for n in nxt.values()}
    rolled: set[int] = set(taken)  # nodes a run of an earlier chain took in (tanh's chain inside add's)
    for head in order:
        if id(head) in linked or id(head) not in nxt:
            continue
        chain = [head]
        while id(chain[-1]) in nxt:
            chain.append(nxt[id(chain[-1])])
        # two iterations alike have alike ways from one carried value to the next:
        # only stretches of at least MIN_RUN alike ways are walked (``x = tanh(x) *
        # 0.9 if i % 2 else x * 1.0001 + 0.5`` links its multiplies alternately)
        for lo, hi in _stretches(chain, link, rolled):
            part = chain[lo:hi]
            its, runs = _alike_runs(lambda k, recompute: _iteration_of([part[k]], [part[k - 1]], [None], index,
                                                                       uses, recompute), len(part), 1)
            for start, end in runs:
                node = _rolled([part[start:end]], its[start:end], index, compile_template, init=part[start - 1])
                if node is not None:
                    replace[id(part[end - 1])] = node
                    for it in its[start:end]:
                        rolled.update(id(n) for n in it.interior)
    return rolled


# A stepped iteration (``_step``): at most this many updates of its array, and
# this many nodes computing them.
MAX_STORES = 4
MAX_STEP = 256


@dataclass
class _Step:
    signature: tuple  # equal for two iterations exactly when they differ only in offsets and carried values
    offsets: list     # the windows' starts, then each store's region's
    leaves: dict      # id -> node read by the interior, computed before the iteration
    interior: list    # the nodes computing this iteration's stores and next values, topological
    rank: dict        # id -> position in interior
    inner: dict       # id -> uses by this iteration's own nodes and updates
    carried: dict     # rank of a node of the iteration before -> its uses here
    windows: list
    consts: list
    updates: list


def _chain_step(chain: list, lo: int, hi: int, index: dict, arrays: set, before: "_Step | None") -> _Step | None:
    """The updates ``chain[lo:hi]`` as one iteration (``_step``), cut at the update before them."""
    ups = chain[lo:hi]
    if any(not u.kw["slices"] or any(st <= 0 for _, _, st in u.kw["slices"]) for u in ups):
        return None
    bound = index[id(chain[lo - 1])] if lo else index[id(chain[0].inputs[0])]
    return _step([u.inputs[1] for u in ups], ups, bound, index, arrays, before)


def _step(roots: list, ups: list, bound: int, index: dict, arrays: set, before: "_Step | None") -> _Step | None:
    """One iteration of a loop that carries values from one iteration to the
    next (``before``: the iteration before, whose nodes this one reads are its
    carried values), making the updates ``ups`` (their values among
    ``roots``). Its interior is every node the roots need that the program
    computed after position ``bound`` (the update, or the carried value,
    ending the iteration before: in DFS order an iteration's nodes come after
    it), so iterations cut the program in disjoint pieces; the nodes it reads
    from further back are leaves. None: it reads an array of ``arrays``, or
    computes more than MAX_STEP nodes, or stateful ones."""
    taken: dict[int, Node] = {}
    stack = list(roots)
    while stack:
        n = stack.pop()
        if id(n) in taken or n.op in _SOURCES or index[id(n)] < bound:
            continue
        if id(n) in arrays or n.op in _STATEFUL or n.op == "update_slice" or isinstance(n.aval, tuple):
            return None
        taken[id(n)] = n
        if len(taken) > MAX_STEP:
            return None
        stack.extend(n.inputs)
    interior = sorted(taken.values(), key=lambda m: index[id(m)])
    rank = {id(n): k for k, n in enumerate(interior)}
    prior = before.rank if before is not None else {}
    it = _Step((), [], {}, interior, rank, {}, {}, [], [], ups)
    sig = []
    for n in interior:
        base = n.inputs[0] if n.inputs else None
        if n.op == "slice" and id(base) not in rank and id(base) not in prior and base.op != "const" \
                and all(a >= 0 and st > 0 for a, _, st in n.kw["slices"]):
            it.leaves.setdefault(id(base), base)
            it.windows.append(n)
            sig.append(("win", id(base), n.aval, tuple(st for _, _, st in n.kw["slices"])))
            it.offsets.extend(a for a, _, _ in n.kw["slices"])
            continue
        args = []
        for i in n.inputs:
            if id(i) in rank:
                args.append(("node", rank[id(i)]))
                it.inner[id(i)] = it.inner.get(id(i), 0) + 1
            elif id(i) in prior:
                args.append(("carry", prior[id(i)]))
                it.carried[prior[id(i)]] = it.carried.get(prior[id(i)], 0) + 1
            elif _scalar_const(i):
                args.append(("const", len(it.consts), i.aval))
                it.consts.append(i)
            else:
                if i.op != "const":
                    it.leaves.setdefault(id(i), i)
                args.append(("leaf", id(i)))
        sig.append((n.op, n.params, n.aval, tuple(args)))
    for u in ups:
        v = u.inputs[1]
        if id(v) not in rank or not np.can_cast(v.aval.dtype, u.aval.dtype, "safe"):
            return None  # (a value from before the iteration, or a store that may lose what it stores)
        it.inner[id(v)] = it.inner.get(id(v), 0) + 1
        sig.append(("store", rank[id(v)], v.aval.shape, tuple(st for _, _, st in u.kw["slices"])))
        it.offsets.extend(a for a, _, _ in u.kw["slices"])
    sig.append(("carried", tuple(sorted(it.carried))))
    it.signature = tuple(sig)
    return it


def _stepped_runs(chains: list, done: set, index: dict, uses: dict, replace: dict, compile_template) -> set:
    """Runs of alike iterations of loops that update an array and carry values
    (scalars) from one iteration to the next: a time loop recording its path,
    ``state = state + dt / 6 * (k1 + ...); path[i + 1] = state`` with the state's
    elements scalars (``passes.scalarize_small_vectors``). Neither a chain's
    updates alone (each value needs the whole history) nor a carried value
    alone (each is read many times) rolls. An iteration is a stretch of
    ``per`` consecutive updates of a chain (tried 1 to MAX_STORES, each phase),
    with the nodes computing them (``_step``); a run of alike ones is a
    ``rolled`` node whose result is the array and the last values, picked.
    Returns the ids of the nodes the runs took in. Linear: each node is in at
    most one iteration per (per, phase) tried."""
    taken: set[int] = set()
    for k, chain in enumerate(chains):
        if k in done:
            continue
        arrays = {id(u) for u in chain} | {id(chain[0].inputs[0])}
        for per, phase in ((p, f) for p in range(1, MAX_STORES + 1) for f in range(p)):
            count = (len(chain) - phase) // per
            if count < MIN_RUN + 2:
                break
            m = count // 2  # (a probe: two iterations in the middle alike, carrying values)
            def cut(j, b, phase=phase, per=per):
                return _chain_step(chain, phase + j * per, phase + (j + 1) * per, index, arrays, b)
            a = cut(m, cut(m - 1, None))
            b = cut(m + 1, a) if a is not None else None
            if b is None or a.signature != b.signature or not b.carried:
                continue
            steps, before = [], None
            for j in range(count):
                before = cut(j, before)
                steps.append(before)
            for start, end in (p for run in _runs(steps, 1) for p in _pieces(steps, *run, uses)):
                if end - start < MIN_RUN:
                    continue
                at = phase + start * per
                _replace_run(steps, start, end, chain[at - 1] if at else chain[0].inputs[0], replace, taken,
                             compile_template)
            break
    return taken


def _replace_run(steps: list, start: int, end: int, dst: Node | None, replace: dict, taken: set,
                 compile_template) -> None:
    """The stepped run ``steps[start:end]`` as a ``rolled`` node (``_stepped``),
    added to ``replace``: its array's last update and its last values are picks
    of it; its nodes are added to ``taken``."""
    node = _stepped(steps, start, end, dst, compile_template)
    if node is None:
        return
    ranks = sorted(steps[start].carried)
    first = 0 if dst is None else 1
    if dst is not None:
        replace[id(steps[end - 1].updates[-1])] = Node.make("pick", (node,), node.aval[0], index=0)
    for j, r in enumerate(ranks):
        last = steps[end - 1].interior[r]
        replace[id(last)] = Node.make("pick", (node,), node.aval[first + j], index=first + j)
    for st in steps[start:end]:
        taken.update(id(n) for n in st.interior)


# The most scalar results of a program followed back for carried values
# (``_anchored_runs``): the elements of the state a loop returns.
MAX_ANCHORS = 64


def _anchored_runs(graph: Graph, index: dict, uses: dict, replace: dict, compile_template, taken: set) -> None:
    """Runs of alike iterations of a loop that carries scalars and stores
    nothing (an RK4 loop on ``x, y, z`` returning its last state): each scalar
    result of the program, followed back through the input of each node that
    is the same op on the same aval (``x = x + dt / 6 * (...)``: the add's
    first input), gives one value per iteration; the program between one
    iteration's value and the next's is an iteration (``_step``), and alike
    ones make a stepped run with no array. Linear: each node is followed at
    most once, and is in one iteration of one walk."""
    # the roots: scalars the results are built of, and what those read directly
    # (``np.array(state) + seen``: the state's elements under the adds)
    roots, seen, stack = [], set(), [(o, 1) for o in graph.outputs]
    while stack and len(seen) < 4 * MAX_ANCHORS:
        n, depth = stack.pop()
        if id(n) in seen or n.op in _SOURCES or isinstance(n.aval, tuple):
            continue
        seen.add(id(n))
        if n.op in ("concatenate", "reshape"):
            stack.extend((i, depth) for i in n.inputs)
        elif n.aval.ndim == 0:
            roots.append(n)
            if depth:
                stack.extend((i, depth - 1) for i in n.inputs)
    followed: set[int] = set()
    for root in roots[:MAX_ANCHORS]:
        path = [root]
        while id(path[-1]) not in followed:
            n = path[-1]
            followed.add(id(n))
            key = (n.op, n.params, n.aval)
            n = next((i for i in n.inputs if i.op not in _SOURCES and (i.op, i.params, i.aval) == key), None)
            if n is None or id(n) in followed:
                break
            path.append(n)
        if len(path) < MIN_RUN + 3 or any(id(a) in taken or id(a) in replace for a in path):
            continue
        anchors = path[::-1]
        cut = lambda j, b: _step([anchors[j]], [], index[id(anchors[j - 1])] + 1, index, set(), b)  # noqa: E731
        m = len(anchors) // 2
        a = cut(m, cut(m - 1, None))
        b = cut(m + 1, a) if a is not None else None
        if b is None or a.signature != b.signature or not b.carried:
            continue
        steps, before = [None], None
        for j in range(1, len(anchors)):
            before = cut(j, before)
            if before is not None and any(id(n) in taken or id(n) in replace for n in before.interior):
                before = None  # (another run's nodes)
            steps.append(before)
        for start, end in (p for run in _runs(steps, 2) for p in _pieces(steps, *run, uses)):
            if end - start >= MIN_RUN:
                _replace_run(steps, start, end, None, replace, taken, compile_template)


def _pieces(steps: list, start: int, end: int, uses: dict):
    """(start, end) of the parts of a run of alike stepped iterations that may
    be one loop: an iteration whose carried value or array something else
    reads too (``seen = x`` half way) ends a part (its values are the part's
    results); one whose other nodes something else reads, or whose updates
    but the last, stays out of any. Its windows may be read elsewhere too
    (``f = forcing[i]`` read by two loops' iterations: the same node)."""
    carried = steps[start].carried
    at = start
    for j in range(start, end):
        st = steps[j]
        later = steps[j + 1].carried if j + 1 < end else {}
        last = drop = False
        windows = {id(w) for w in st.windows}  # (read elsewhere too, as the same slice interned: sliced again)
        for n in st.interior:
            r = st.rank[id(n)]
            if id(n) in windows or n.op == "reshape" and id(n.inputs[0]) in windows:
                continue
            if uses[id(n)] != st.inner.get(id(n), 0) + later.get(r, 0):
                last = True
                drop |= r not in carried
        drop |= any(uses[id(u)] != 1 for u in st.updates[:-1])
        last |= bool(st.updates) and uses[id(st.updates[-1])] != 1
        if drop:
            yield at, j
            at = j + 1
        elif last:
            yield at, j + 1
            at = j + 1
    if at < end:
        yield at, end


def _stepped(steps: list, start: int, end: int, dst: Node | None, compile_template) -> Node | None:
    """The ``rolled`` node of the alike stepped iterations ``steps[start:end]``
    updating ``dst`` (as it was before them; None: no array), whose nodes
    ``_pieces`` checked nothing else reads, or None: a carried value is not a
    scalar, or the target cannot compile the loop."""
    ranks = sorted(steps[start].carried)
    before = steps[start - 1]
    if not ranks or before is None:
        return None  # (nothing carried: not a stepped loop)
    inits = [before.interior[r] for r in ranks]
    first = steps[start]
    outs = [first.interior[r] for r in ranks]
    if any(i.aval != o.aval or o.aval.ndim for i, o in zip(inits, outs)):
        return None
    leaves = list(first.leaves.values())
    position = {id(leaf): k for k, leaf in enumerate(leaves)}
    inputs, mapping = [], {}
    for n in inits:
        mapping[id(n)] = Node.make("input", (), n.aval, index=len(inputs))
        inputs.append(mapping[id(n)])
    windows = []
    for n in first.windows:
        windows.append((position[id(n.inputs[0])], tuple(n.aval.shape), tuple(st for _, _, st in n.kw["slices"])))
        mapping[id(n)] = Node.make("input", (), n.aval, index=len(inputs))
        inputs.append(mapping[id(n)])
    its = steps[start:end]
    made = _template_interior(first, its, leaves, inputs, mapping)
    if made is None:
        return None
    values, avals = made
    template = Graph(inputs, [mapping[id(u.inputs[1])] for u in first.updates] + [mapping[id(o)] for o in outs])
    table = Table(np.array([it.offsets for it in its], dtype=np.int64).reshape(len(its), len(first.offsets)))
    consts = Table(values, np.float64)
    regions = tuple((tuple(u.inputs[1].aval.shape), tuple(st for _, _, st in u.kw["slices"])) for u in first.updates)
    spec = Rolled(template, tuple(windows), None, False, params=avals,
                  carried=tuple(o.aval for o in outs), regions=regions)
    if compile_template is not None:
        runner = compile_template(spec, leaves, len(its))
        if runner is None:
            return None
        spec = dataclasses.replace(spec, runner=runner)
    if dst is None:
        return Node.make("rolled", (*inits, *leaves), spec.carried, spec=spec, table=table, consts=consts)
    return Node.make("rolled", (dst, *inits, *leaves), (dst.aval, *spec.carried), spec=spec, table=table,
                     consts=consts)


def _stretches(chain: list, link: dict, rolled: set):
    """(lo, hi) of the parts of ``chain`` worth walking for runs: ``chain[lo]``
    the value before the first iteration, each next one reached the same way,
    more than MIN_RUN of them, none already in a rolled run."""
    lo = 0
    while lo < len(chain) - 1:
        hi = lo + 1
        while hi < len(chain) and id(chain[hi]) not in rolled and id(chain[hi - 1]) not in rolled \
                and link[id(chain[hi - 1])] == link[id(chain[lo])]:
            hi += 1
        if hi - lo > MIN_RUN:
            yield lo, hi
        lo = max(hi - 1, lo + 1)


def _alike_runs(make, count: int, start: int, key=None) -> tuple[list, list]:
    """The iterations ``make(k, recompute)`` of ``k`` in ``start..count-1`` and the
    (start, end) of their runs: first as they are, then, in each stretch of
    at least MIN_RUN left outside any run, with their small shared values
    computed again (``_iteration_of``), so that a value an iteration shares
    with others is computed again only where that makes a run."""
    its = [None] * start + [make(k, False) for k in range(start, count)]
    runs = list(_runs(its, start, key))
    gaps, at = [], start
    for s, e in runs:
        gaps.append((at, s))
        at = e
    gaps.append((at, count))
    for s, e in gaps:
        if e - s < MIN_RUN or not any(it is None or it.shared for it in its[s:e]):
            continue  # (alike iterations that differ for other reasons: no second walk)
        again = [make(k, True) for k in range(s, e)]
        for a, b in _runs(again, 0, key):
            its[s + a:s + b] = again[a:b]
            runs.append((s + a, s + b))
    return its, sorted(runs)


def _shape_free(it: _Iteration) -> tuple:
    return it.shape_free


def _runs(its: list, start: int, key=None):
    """(start, end) of each run of at least MIN_RUN alike iterations in
    ``its[start:]`` (``key``: what is compared, the signature by default)."""
    key = key or (lambda it: it.signature)
    while start < len(its):
        end = start + 1
        while end < len(its) and its[start] is not None and its[end] is not None \
                and key(its[end]) == key(its[start]):
            end += 1
        if its[start] is not None and end - start >= MIN_RUN:
            yield start, end
        start = end


def _disjoint(rows: np.ndarray, region, shape, end: int, column: dict) -> bool:
    """No element of the array is in two iterations' regions (whose starts are
    the table's columns before ``end``; ``column``: a varying extent's)."""
    extents, steps = region
    nd = len(extents)
    starts = rows[:, end - nd:end]
    if int(np.prod(extents)) == 1:
        flat = np.ravel_multi_index(tuple(starts.T), shape) if nd else np.zeros(len(rows), np.int64)
        return len(np.unique(flat)) == len(flat)
    count = np.zeros(shape, np.int32)
    for row, full in zip(starts, rows):
        count[_window(row, tuple(int(full[column[e]]) if e in column else e for e in extents), steps)] += 1
    return bool(count.max(initial=0) <= 1)
