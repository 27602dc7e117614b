"""The reduction table: what every reduction a fused loop computes means, as
code, for both compiling targets' loop skeletons.

Each reduction keeps an accumulator *state* (named parts: the value, and a
compensation term, an index or a NaN-seen flag where it needs one) and is
written through four operations:

* ``init(acc)``: the identity state;
* ``update(acc, value, index)``: fold one element in;
* ``combine(a, b)``: fold partial state ``b`` into ``a`` (block partials,
  chunk partials, warp shuffles), for partials over any split of the
  elements, in any order;
* ``finalize(acc)``: the result in the output dtype.

The cpu and cuda skeletons emit reductions only through this table, so what a
reduction computes is the same on both by construction:

* **sum**: in the result's dtype for integers; float32 accumulates in
  float64; float64 with Neumaier's compensation (``rt.neumaier``), so the
  error stays within NumPy's pairwise summation's on every target.
* **prod**: in the result's dtype, one rounded multiply per element (never
  an FMA), as NumPy's loop.
* **max/min**: NaN propagates (any NaN gives NaN); otherwise the largest
  (smallest) value, where -0.0 and +0.0 compare equal (NumPy returns either
  sign depending on its loop's order; so may braze).
* **argmax/argmin**: the first index of the first NaN, else of the largest
  (smallest) value; ties go to the smallest index.
* **any/all**: a flag.

A ``Dialect`` says how a target represents the state, never what it means:
the cpu reduces float max/min as integer *order keys* (``rt.fkey``; LLVM
vectorizes integer max, and float max only under a no-NaNs flag NumPy's
semantics forbid) and adds float sums in vectorized blocks (``rt.radd``,
``blocked``); the cuda target keeps flags as int32 (warp shuffles carry it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from braze.graph import Node

from .cpu_runtime import key_of_float
from .scalar import cast, literal, np_type


@dataclass(frozen=True)
class Dialect:
    name: str
    flag: np.dtype   # dtype of NaN-seen / any / all flags
    keyed: bool      # float max/min reduce integer order keys

    def true(self) -> str:
        return "True" if self.flag == np.bool_ else f"{np_type(self.flag)}(1)"

    def false(self) -> str:
        return "False" if self.flag == np.bool_ else f"{np_type(self.flag)}(0)"

    def flag_of(self, cond: str) -> str:
        return f"({cond})" if self.flag == np.bool_ else f"{np_type(self.flag)}({cond})"

    def is_set(self, flag: str) -> str:
        return flag if self.flag == np.bool_ else f"({flag} != 0)"


CPU = Dialect("cpu", np.dtype(np.bool_), keyed=True)
CUDA = Dialect("cuda", np.dtype(np.int32), keyed=False)


class Reduction:
    """One reduction op's state and operations (subclasses per kind)."""

    def __init__(self, red: Node, dialect: Dialect):
        self.red, self.d = red, dialect
        self.out = np.dtype(red.aval.dtype)
        self.src = np.dtype(red.inputs[0].aval.dtype)

    def parts(self) -> list[tuple[str, np.dtype]]:
        """(suffix, dtype) of each part of the state; the value part first."""
        return [("", self.acc_dtype())]

    def acc_dtype(self) -> np.dtype:
        return self.out

    def init(self, acc: str) -> list[str]:
        raise NotImplementedError

    def update(self, acc: str, value: str, index: str) -> list[str]:
        raise NotImplementedError

    def combine(self, a: str, b: str) -> list[str]:
        raise NotImplementedError

    def finalize(self, acc: str) -> str:
        return cast(acc, self.out)


class Sum(Reduction):
    @property
    def compensated(self) -> bool:
        return self.out == np.float64

    @property
    def blockable(self) -> bool:
        """A float sum: the cpu adds it in vectorized blocks (cpu_codegen.BLOCK)."""
        return self.out in (np.float32, np.float64)

    def acc_dtype(self) -> np.dtype:
        if self.out.kind == "f" and self.out.itemsize < 8:
            return np.dtype(np.float64)  # float32 (and float16) sums accumulate in float64
        return self.out

    def parts(self):
        return super().parts() + ([("_c", np.dtype(np.float64))] if self.compensated else [])

    def init(self, acc):
        return [f"{acc} = {literal(0, self.acc_dtype())}"] + ([f"{acc}_c = np.float64(0.0)"] if self.compensated else [])

    def update(self, acc, value, index):
        if self.compensated:
            return [f"{acc}, {acc}_c = rt.neumaier({acc}, {acc}_c, {cast(value, self.acc_dtype())})"]
        return [f"{acc} += {cast(value, self.acc_dtype())}"]

    def combine(self, a, b):
        if self.compensated:
            return [f"{a}, {a}_c = rt.neumaier({a}, {a}_c, {b})", f"{a}_c += {b}_c"]
        return [f"{a} += {b}"]

    def finalize(self, acc):
        if self.compensated:
            return cast(f"rt.compensated({acc}, {acc}_c)", self.out)
        return cast(acc, self.out)

    # the cpu's blocked strategy: BLOCK elements into a partial in the result's
    # dtype (``rt.radd``: the one reassociable add), then the partial into the state
    def block_init(self, acc) -> str:
        return f"{acc}_b = {literal(0, self.out)}"

    def block_update(self, acc, value) -> str:
        return f"{acc}_b = rt.radd({acc}_b, {cast(value, self.out)})"

    def block_close(self, acc) -> str:
        if self.compensated:
            return f"{acc}, {acc}_c = rt.neumaier({acc}, {acc}_c, {acc}_b)"
        return f"{acc} += np.float64({acc}_b)"


class Prod(Reduction):
    def init(self, acc):
        return [f"{acc} = {literal(1, self.out)}"]

    def update(self, acc, value, index):
        return [f"{acc} *= {cast(value, self.out)}"]

    def combine(self, a, b):
        return [f"{a} *= {b}"]


def extremum_identity(dt: np.dtype, sign: int):
    """The value a max (``sign`` 1) or min (-1) starts from in dtype ``dt``."""
    if dt.kind == "f":
        return -np.inf * sign
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return info.min if sign > 0 else info.max
    return sign < 0  # bool: max from False, min from True


class Extremum(Reduction):
    """max (``sign`` 1) or min (-1)."""

    def __init__(self, red, dialect, sign: int):
        super().__init__(red, dialect)
        self.sign = sign
        self.cmp = ">" if sign > 0 else "<"

    @property
    def keyed(self) -> bool:
        return self.d.keyed and self.out.kind == "f"

    def acc_dtype(self):
        if self.keyed:
            return np.dtype(np.int32 if self.out.itemsize == 4 else np.int64)
        return self.out

    def parts(self):
        return super().parts() + ([("_n", self.d.flag)] if self.keyed else [])

    def _identity(self):
        return extremum_identity(self.out, self.sign)

    def init(self, acc):
        if self.keyed:
            return [f"{acc} = {literal(key_of_float(self._identity(), self.out), self.acc_dtype())}",
                    f"{acc}_n = {self.d.false()}"]
        return [f"{acc} = {literal(self._identity(), self.out)}"]

    def update(self, acc, value, index):
        if self.keyed:
            return [f"k_{acc} = rt.fkey({value})",
                    f"{acc} = k_{acc} if k_{acc} {self.cmp} {acc} else {acc}",
                    f"{acc}_n = {acc}_n | {self.d.flag_of(f'{value} != {value}')}"]
        if self.out.kind == "f":  # NaN propagates: rt.maximum keeps a NaN operand
            fn = "rt.maximum" if self.sign > 0 else "rt.minimum"
            return [f"{acc} = {fn}({acc}, {cast(value, self.out)})"]
        return [f"{acc} = {value} if {value} {self.cmp} {acc} else {acc}"]

    def combine(self, a, b):
        if self.keyed:
            return [f"{a} = {b} if {b} {self.cmp} {a} else {a}", f"{a}_n = {a}_n | {b}_n"]
        if self.out.kind == "f":
            fn = "rt.maximum" if self.sign > 0 else "rt.minimum"
            return [f"{a} = {fn}({a}, {b})"]
        return [f"{a} = {b} if {b} {self.cmp} {a} else {a}"]

    def finalize(self, acc):
        if self.keyed:
            return cast(f"({literal(np.nan, self.out)} if {self.d.is_set(f'{acc}_n')} else rt.funkey({acc}))",
                        self.out)
        return cast(acc, self.out)


class Flag(Reduction):
    """any (``all_`` False) or all."""

    def __init__(self, red, dialect, all_: bool):
        super().__init__(red, dialect)
        self.all = all_

    def acc_dtype(self):
        return self.d.flag

    def init(self, acc):
        return [f"{acc} = {self.d.true() if self.all else self.d.false()}"]

    def update(self, acc, value, index):
        if self.all:
            return [f"{acc} = {acc} & {self.d.flag_of(f'{value} != 0')}"]
        return [f"{acc} = {acc} | {self.d.flag_of(f'{value} != 0')}"]

    def combine(self, a, b):
        return [f"{a} = {a} {'&' if self.all else '|'} {b}"]

    def finalize(self, acc):
        return self.d.is_set(acc)


class ArgExtremum(Extremum):
    """argmax / argmin: state (best value, its index, NaN seen)."""

    @property
    def keyed(self) -> bool:
        return False

    def acc_dtype(self):
        return self.src

    def parts(self):
        return [("", self.src), ("_i", np.dtype(np.int64)), ("_n", self.d.flag)]

    def _identity(self):
        return extremum_identity(self.src, self.sign)

    def init(self, acc):
        return [f"{acc} = {literal(self._identity(), self.src)}", f"{acc}_i = np.int64(0)",
                f"{acc}_n = {self.d.false()}"]

    def update(self, acc, value, index):
        """Selects, not branches: which element of a row wins is the data's
        (random data mispredicts a branch about twice a row: an (n, 8)
        argmin took 13 ns a row)."""
        seen, nan = self.d.is_set(f"{acc}_n"), f"({value} != {value})"
        return [
            f"{acc}_b = ({nan} | ({value} {self.cmp} {acc})) & (not {seen})",
            f"{acc} = {value} if {acc}_b else {acc}",
            f"{acc}_i = np.int64({index}) if {acc}_b else {acc}_i",
            f"{acc}_n = {self.d.flag_of(f'{seen} | {nan}')}",
        ]

    def update_past_nan(self, acc, value, index):
        """The update of a row loop that finds a row's first NaN afterwards
        (cpu_codegen's ``_nan_rerun``): only the comparison picks, and NaN
        sets the flag beside it. A NaN in the select's condition made the
        (n, 8) argmin of k-means twice as slow (a dependency chain through
        the flag); a row with a NaN, rare, is read a second time instead."""
        seen, nan = self.d.is_set(f"{acc}_n"), f"({value} != {value})"
        return [
            f"{acc}_b = {value} {self.cmp} {acc}",
            f"{acc} = {value} if {acc}_b else {acc}",
            f"{acc}_i = np.int64({index}) if {acc}_b else {acc}_i",
            f"{acc}_n = {self.d.flag_of(f'{seen} | {nan}')}",
        ]

    def lanes_init(self, lanes, n):
        """``n`` lanes of a chunk, each reducing every ``n``-th element
        (cpu_codegen's ``_lanes_loop``): value and index arrays, the pair a
        sweep writes (``lanes_swap``), and whether any lane saw a NaN."""
        return [f"{lanes} = np.full({n}, {literal(self._identity(), self.src)})",
                f"{lanes}_i = np.zeros({n}, np.int64)",
                f"{lanes}_w = np.empty({n}, {np_type(self.src)})",
                f"{lanes}_wi = np.empty({n}, np.int64)",
                f"{lanes}_n = False"]

    def lanes_alloc(self, lanes, n, sweeps=True):
        """The lanes' arrays, for blocks that reuse them (``lanes_reset`` each
        block; cpu_codegen's ``_row_lanes``): an allocation per block of 256
        rows was an eighth of k-means' argmin kernel. Without ``sweeps``
        (rows accumulating in registers: ``row_update``), no pair for a
        sweep to write."""
        arrays = [f"{lanes} = np.empty({n}, {np_type(self.src)})", f"{lanes}_i = np.empty({n}, np.int64)"]
        if sweeps:
            arrays += [f"{lanes}_w = np.empty({n}, {np_type(self.src)})", f"{lanes}_wi = np.empty({n}, np.int64)"]
        return arrays

    def lanes_reset(self, lanes, n):
        """Lanes made by ``lanes_alloc`` set to start a block."""
        return [f"for r in range({n}):",
                f"    {lanes}[r] = {literal(self._identity(), self.src)}",
                f"    {lanes}_i[r] = 0",
                f"{lanes}_n = False"]

    def lane_update(self, lanes, value, index):
        """``update_past_nan`` in lane ``r``: the loop over the lanes vectorizes
        (independent selects, no chain through one accumulator). A sweep reads
        one pair of arrays and writes the other: a select stored back where its
        unchosen value was loaded from became a masked store (``vmaskmovpd``),
        slow on AMD's cores (k-means' (400000, 8) argmin: 7.6 -> 5.7 ms). The
        index is loaded whichever is chosen (else a masked load), and a NaN
        anywhere sets one flag for all the lanes (an OR reduction, where a
        flag per lane was a load and a store per element: 13% of the kernel):
        the rows or chunk it covers read their values again."""
        return [f"{lanes}_v = {lanes}[r]",
                f"{lanes}_iv = {lanes}_i[r]",
                f"{lanes}_b = {value} {self.cmp} {lanes}_v",
                f"{lanes}_w[r] = {value} if {lanes}_b else {lanes}_v",
                f"{lanes}_wi[r] = np.int64({index}) if {lanes}_b else {lanes}_iv",
                f"{lanes}_n = {lanes}_n | ({value} != {value})"]

    def row_start(self, acc):
        """A row's accumulator, kept in registers (cpu_codegen's rows in
        lanes of a short literal length: ``row_update`` per element)."""
        return [f"{acc} = {literal(self._identity(), self.src)}",
                f"{acc}_i = np.int64(0)"]

    def row_update(self, lanes, acc, value, index):
        """``update_past_nan`` for a row of lane ``r`` whose elements loop
        inside the loop over lanes: LLVM unrolls the short literal loop and
        vectorizes the lanes, the accumulator in registers. A NaN sets the
        block's flag (``lane_update``)."""
        return [f"{acc}_b = {value} {self.cmp} {acc}",
                f"{acc} = {value} if {acc}_b else {acc}",
                f"{acc}_i = np.int64({index}) if {acc}_b else {acc}_i",
                f"{lanes}_n = {lanes}_n | ({value} != {value})"]

    def row_store(self, lanes, acc):
        """A row's accumulator into its lane, for the block's rows after."""
        return [f"{lanes}[r] = {acc}", f"{lanes}_i[r] = {acc}_i"]

    def lanes_swap(self, lanes):
        """After a sweep over the lanes: what it wrote is what the next one reads."""
        return [f"{lanes}, {lanes}_w = {lanes}_w, {lanes}",
                f"{lanes}_i, {lanes}_wi = {lanes}_wi, {lanes}_i"]

    def lanes_close(self, acc, lanes, n):
        """The lanes into the chunk's accumulator: the better value, of equal
        ones the smaller index (a lane holds no NaN: it never compares better;
        the flag sends the chunk to its second reading)."""
        seen = self.d.is_set(f"{acc}_n")
        return [f"{acc}_n = {self.d.flag_of(f'{seen} | {lanes}_n')}",
                f"for r in range({n}):",
                f"    if {lanes}[r] {self.cmp} {acc} or ({lanes}[r] == {acc} and {lanes}_i[r] < {acc}_i):",
                f"        {acc} = {lanes}[r]",
                f"        {acc}_i = {lanes}_i[r]"]

    def first_nan(self, acc, value, index):
        """In the second reading of a row whose flag is set: the first NaN is
        the answer (its value and index), and the loop stops there."""
        return [f"if {value} != {value}:",
                f"    {acc} = {value}",
                f"    {acc}_i = np.int64({index})",
                "    break"]

    def combine(self, a, b):
        """Any split, any order: a NaN wins by the smaller index, then the
        better value, then (a tie) the smaller index. A partial that saw no
        element better than the identity keeps index 0, which is the answer
        exactly when no partial did better."""
        a_n, b_n = self.d.is_set(f"{a}_n"), self.d.is_set(f"{b}_n")
        return [
            f"if {b_n}:",
            f"    if not {a_n} or {b}_i < {a}_i:",
            f"        {a} = {b}",
            f"        {a}_i = {b}_i",
            f"        {a}_n = {b}_n",
            f"elif not {a_n}:",
            f"    if {b} {self.cmp} {a} or ({b} == {a} and {b}_i < {a}_i):",
            f"        {a} = {b}",
            f"        {a}_i = {b}_i",
        ]

    def finalize(self, acc):
        return f"{acc}_i"


class ValueOfArg(Reduction):
    """max / min of the values an argmax / argmin of the same loop reduces in
    the same order (``d.argmin(1)`` and ``d.min(1)``): no state of its own; its
    result is the value the arg reduction kept, which is NaN if any element is,
    else the extremum (of -0.0 and +0.0, the first: either sign is max/min's
    contract). ``finalize`` takes the arg reduction's accumulator."""

    def parts(self):
        return []

    def init(self, acc):
        return []

    def update(self, acc, value, index):
        return []

    def combine(self, a, b):
        return []


def twin_arg(red: Node, members) -> Node | None:
    """The argmax / argmin among ``members`` before ``red``, a max / min, that
    reduces the same values over the same axes (see ValueOfArg), or None."""
    want = {"reduce_max": "argmax", "reduce_min": "argmin"}.get(red.op)
    if want is None:
        return None
    x = red.inputs[0]
    for m in members:
        if m is red:
            return None
        if m.op == want and m.inputs[0] is x and m.kw["keepdims"] == red.kw["keepdims"] and (
                tuple(red.kw["axes"]) == (tuple(range(x.aval.ndim)) if m.kw["axis"] is None else (m.kw["axis"],))):
            return m
    return None


def reduction(red: Node, dialect: Dialect) -> Reduction:
    """The table entry for reduction node ``red`` in a target's ``dialect``."""
    op = red.op
    if op == "reduce_sum":
        return Sum(red, dialect)
    if op == "reduce_prod":
        return Prod(red, dialect)
    if op in ("reduce_max", "reduce_min"):
        return Extremum(red, dialect, 1 if op == "reduce_max" else -1)
    if op in ("argmax", "argmin"):
        return ArgExtremum(red, dialect, 1 if op == "argmax" else -1)
    if op in ("reduce_any", "reduce_all"):
        return Flag(red, dialect, op == "reduce_all")
    raise AssertionError(f"no reduction table entry for {op}")
