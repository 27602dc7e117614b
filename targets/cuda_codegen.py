"""Generate ``numba.cuda`` source for one fused ``Loop`` (see ``braze.fusion``).

The expression code (which op, which casts, NumPy's loop dtypes) is the
``cpu`` target's (``cpu_codegen.LoopCodegen``), with the cuda ops handler
(``CudaOps``, a ``CpuOps`` that emits libdevice and unfused products where
numba.cuda and the numerics contract need them); this module replaces the
loop skeletons, the loads and the reductions.

Arguments, in order: each leaf as a flat device buffer ``aK`` with its
element offset ``aK_o`` and one element stride per dimension ``aK_sD``
(views, broadcasts and transposes are strides, made by the launcher); the
outputs (flat, C-contiguous); the work sizes; the domain sizes; the float
literals. A leaf whose layout is exactly the loop's domain, contiguous, is
*flat* and indexed with the element's flat index (no index arithmetic):
which leaves are flat is part of the source, so the launcher picks one of
at most ``2**leaves`` variants at call time.

Three skeletons, one kernel function each (``kernel``):

* **elementwise** (no reduced axes): a grid-stride loop over the flat
  element index; consecutive threads take consecutive elements (coalesced).
* **rows** (reduced trailing axes under outer axes): one thread block per
  row (grid-stride over rows); per reduction stage every thread accumulates
  the elements ``t, t + T, ...`` of the row, then a shared-memory tree
  combines the ``T`` partials down to one warp, and warp shuffles
  (``shfl_down_sync``) finish it;
  row values are computed by every thread between stages. Leaves read in
  more than one stage are kept in shared memory when the row fits
  (``ROWCAP`` elements), so a softmax reads each row from memory once.
* **split** (full reductions, and rows too few and too long to fill the
  GPU with one block each): each stage is two launches of the same kernel,
  told apart by ``phase``: ``ng`` blocks per row each reduce every
  ``ng``-th stretch of the row to a partial, then a block per row combines
  them into the stage's result; a last phase writes the outputs, a
  grid-stride loop over the elements.
"""
from __future__ import annotations

import re

import numpy as np

from braze.fusion import REDUCE_OPS, Loop
from braze.graph import Node

from .cpu_codegen import KernelSource, LoopCodegen, Writer
from .reductions import CUDA
from .scalar import VECTOR_MATH, CpuOps, cast, literal, np_type
from braze.core import PRIMITIVES
from braze.ops.elementwise import deg2rad_factor, rad2deg_factor

MAXT = 256        # threads per block of row and split kernels (a power of two)
ROWCAP = 1024     # elements of a row kept in shared memory per cached leaf
SHARED_BUDGET = 32 * 1024  # bytes of shared memory for cached rows per block
SHARED_LIMIT = 46 * 1024   # static shared memory per block we allow ourselves (CUDA: 48 KiB)

HEADER = """import numpy as np
from numba import cuda
from braze.targets import cuda_runtime as rt
from braze.targets.cuda_runtime import libdevice, math
"""

def generate(loop: Loop, flat: tuple[bool, ...], skeleton: str | None = None) -> KernelSource:
    """The kernel for ``loop`` with these leaves flat; ``skeleton`` "split" for a
    loop with reduced axes runs several blocks per row (few, long rows)."""
    return CudaLoopCodegen(loop, flat, skeleton).build()


def _shuffle_down(value: str, dtype: np.dtype) -> str:
    """``cuda.shfl_down_sync`` of ``value``. numba-cuda shuffles int32, int64,
    float32 and float64 only, so a partial of another type (an int8 product,
    a uint64 sum, a bool any) travels as the signed int wide enough to hold it
    exactly (uint64 wraps there and back, bit for bit) and is cast back. Found
    on an H100: the simulator shuffles any Python value."""
    dtype = np.dtype(dtype)
    if dtype in (np.int32, np.int64, np.float32, np.float64):
        return f"cuda.shfl_down_sync(0xffffffff, {value}, s)"
    wide = "np.int32" if dtype.itemsize < 4 else "np.int64"
    moved = f"cuda.shfl_down_sync(0xffffffff, {wide}({value}), s)"
    return f"({moved} != 0)" if dtype == np.bool_ else cast(moved, dtype)


class CudaOps(CpuOps):
    """The cuda target's scalar code: the ops' own, except where numba.cuda wants
    another call (libdevice for NumPy's rounding and roots, which it does not
    lower; math for what the cpu vectorizes) or the numerics contract does
    (products NVVM and ptxas never fuse into an FMA: NumPy rounds a product
    before any add)."""

    def op_multiply(self, a, b, t):
        if t.kind == "f":
            return f"libdevice.{'fmul_rn' if t.itemsize <= 4 else 'dmul_rn'}({a}, {b})"
        return PRIMITIVES["multiply"].scalar(a, b, t)

    def op_square(self, a, t):
        return self.op_multiply(a, a, t)

    def op_deg2rad(self, a, t):
        return self.op_multiply(a, literal(deg2rad_factor(t), t), t)

    def op_rad2deg(self, a, t):
        return self.op_multiply(a, literal(rad2deg_factor(t), t), t)

    def rule(self, op: str):
        if op in VECTOR_MATH:  # (no vector math on the GPU: the op's own math call)
            return PRIMITIVES[op].scalar
        return super().rule(op)

    @staticmethod
    def _libdevice(name: str):
        def rule(self, a, t):
            if t.kind != "f":
                return PRIMITIVES[name].scalar(a, t)
            return f"libdevice.{name}{'f' if t.itemsize <= 4 else ''}({a})"
        return rule


for _name in ("sqrt", "floor", "ceil", "trunc", "rint", "cbrt"):
    setattr(CudaOps, f"op_{_name}", CudaOps._libdevice(_name))


class CudaLoopCodegen(LoopCodegen):
    ops = CudaOps()

    def __init__(self, loop: Loop, flat: tuple[bool, ...], skeleton: str | None = None):
        super().__init__(loop, "kernel")
        self.has_trig = False  # libdevice sin/cos are exact over the whole range
        self.flat = flat
        self.flat_expr = "e"
        self.skeleton = skeleton or ("elementwise" if not self.r else ("rows" if self.od else "split"))
        self.cache_rows: dict[int, str] = {}   # leaf index -> shared array name
        self.first_pass: dict[int, int] = {}   # leaf index -> the pass that stores it
        self.pass_now = 0
        self.uses: dict[int, set[int]] = {}

    # ---- loads
    def _load(self, leaf: Node, space: str) -> str:
        k = self.loop.leaves.index(leaf)
        shape = self.leaf_shapes[k]
        name = f"a{k}"
        if space == "full":
            self.uses.setdefault(k, set()).add(self.pass_now)
        if self.flat[k] and space == "full":
            load = f"{name}[{name}_o + {self.flat_expr}]"
        else:
            idx = self._indices(space)
            offset = len(idx) - len(shape)
            terms = [f"{idx[offset + i]} * {name}_s{i}" for i, d in enumerate(shape)
                     if d != 1 and idx[offset + i] != "0"]
            load = f"{name}[{' + '.join([f'{name}_o'] + terms)}]"
        if space == "full" and k in self.cache_rows:
            cache = self.cache_rows[k]
            if self.pass_now == self.first_pass[k]:
                return f"rt.keep({cache}, j, rcok, {load})"
            return f"({cache}[j] if rcok else {load})"
        return load

    # ---- reductions: the table's operations (targets/reductions.py)
    dialect = CUDA

    def _combine(self, red: Node, a: str, b: str) -> list[str]:
        """Statements folding partial ``b`` (its parts b, b_i, ...) into ``a``."""
        return self._red(red).combine(a, b)

    def _parts(self, red: Node) -> list[tuple[str, np.dtype]]:
        """(suffix, dtype) of the values a partial result of ``red`` is made of."""
        return self._red(red).parts()

    def _shared(self, w: Writer, reds: list[Node], accs: dict) -> None:
        for red in reds:
            for sfx, dt in self._parts(red):
                w(f"sh_{accs[id(red)]}{sfx} = cuda.shared.array({MAXT}, {np_type(dt)})")

    def _block_reduce(self, w: Writer, reds: list[Node], accs: dict) -> None:
        """Combine every thread's partial of ``reds``; all threads get the result.
        A shared-memory tree down to one warp, then warp shuffles (no barriers)."""
        if not reds:
            return
        parts = [(accs[id(red)], red) for red in reds]
        for acc, red in parts:
            for sfx, _ in self._parts(red):
                w(f"sh_{acc}{sfx}[tid] = {acc}{sfx}")
        w("cuda.syncthreads()")
        # numba's simulator has no warp shuffles: there (rt.WARP_SHUFFLE False, a
        # compile-time constant on a GPU) the tree goes down to one thread.
        w("s = T // 2")
        w("while s >= (32 if rt.WARP_SHUFFLE else 1):")
        w.indent()
        w("if tid < s:")
        w.indent()
        for acc, red in parts:
            for sfx, _ in self._parts(red):
                w(f"{acc}{sfx} = sh_{acc}{sfx}[tid]")
                w(f"{acc}_o{sfx} = sh_{acc}{sfx}[tid + s]")
            for line in self._combine(red, acc, f"{acc}_o"):
                w(line)
            for sfx, _ in self._parts(red):
                w(f"sh_{acc}{sfx}[tid] = {acc}{sfx}")
        w.dedent()
        w("cuda.syncthreads()")
        w("s //= 2")
        w.dedent()
        w("if rt.WARP_SHUFFLE and tid < 32:")
        w.indent()
        for acc, red in parts:
            for sfx, _ in self._parts(red):
                w(f"{acc}{sfx} = sh_{acc}{sfx}[tid]")
        w("s = 16")
        w("while s > 0:")
        w.indent()
        for acc, red in parts:
            for sfx, dt in self._parts(red):
                w(f"{acc}_o{sfx} = {_shuffle_down(f'{acc}{sfx}', dt)}")
            for line in self._combine(red, acc, f"{acc}_o"):
                w(line)
        w("s //= 2")
        w.dedent()
        w("if tid == 0:")
        w.indent()
        for acc, red in parts:
            for sfx, _ in self._parts(red):
                w(f"sh_{acc}{sfx}[0] = {acc}{sfx}")
        w.dedent()
        w.dedent()
        w("cuda.syncthreads()")
        for acc, red in parts:
            for sfx, _ in self._parts(red):
                w(f"{acc}{sfx} = sh_{acc}{sfx}[0]")
        w("cuda.syncthreads()")  # before the shared arrays are written again

    # ---- skeletons
    def build(self) -> KernelSource:
        self.nin = self.r if self.r else (1 if self.R >= 1 else 0)
        if self.skeleton == "rows":
            self._plan_row_cache()
        self._names = 0
        self.consts, self.const_names = [], {}
        body = Writer()
        getattr(self, f"_{self.skeleton}_body")(body)
        src = HEADER + self._function(body)
        ks = KernelSource(src, list(self.loop.leaves), list(self.loop.outputs), list(self.consts),
                          self.leaf_shapes)
        ks.parts = [self._parts(red) for red in self._all_reductions()]  # split kernels' partial arrays
        ks.npasses = self.npasses
        return ks

    def _plan_row_cache(self) -> None:
        """Which leaves a row kernel keeps in shared memory: those read in more
        than one stage, while they fit in the budget (found by a dry run)."""
        self._names = 0
        self.consts, self.const_names = [], {}
        self._rows_body(Writer())
        # Static shared memory is limited to 48 KiB per block: the reduction
        # arrays come first, cached rows get what is left (up to SHARED_BUDGET).
        trees = sum(MAXT * dt.itemsize for red in self._all_reductions() for _sfx, dt in self._parts(red))
        budget = min(SHARED_BUDGET, SHARED_LIMIT - trees)
        for k in sorted(self.uses):
            if len(self.uses[k]) < 2:
                continue
            size = ROWCAP * np.dtype(self.loop.leaves[k].aval.dtype).itemsize
            if size > budget:
                continue
            budget -= size
            self.cache_rows[k] = f"rc{k}"
            self.first_pass[k] = min(self.uses[k])
        self.uses = {}

    def _function(self, body: Writer) -> str:
        loop = self.loop
        args = ["phase"] if self.skeleton == "split" else []
        for k, n in enumerate(loop.leaves):
            args += [f"a{k}", f"a{k}_o"] + [f"a{k}_s{i}" for i in range(len(self.leaf_shapes[k]))]
        args += [f"o{k}" for k in range(len(loop.outputs))]
        if self.skeleton == "split":
            for red in self._all_reductions():
                for sfx, _ in self._parts(red):
                    args += [f"p{self._red_index(red)}{sfx}", f"q{self._red_index(red)}{sfx}"]
        args += ["n", "no", "ni"] + (["ng"] if self.skeleton == "split" else []) + [f"d{k}" for k in range(self.R)]
        args += [f"c{k}" for k in range(len(self.consts))]
        text = "\n".join(body.lines)
        return f"\n\n@cuda.jit(cache=True)\ndef kernel({', '.join(args)}):\n{text}\n"

    def _all_reductions(self) -> list[Node]:
        return [m for m in self.loop.members if m.op in REDUCE_OPS]

    def _red_index(self, red: Node) -> int:
        return self._all_reductions().index(red)

    def _emit_unravel(self, w: Writer, flat: str, names: list[str], sizes: list[str], body: str) -> None:
        """Unravel ``flat`` into ``names`` (C order over ``sizes``), if ``body`` uses any."""
        if not any(re.search(rf"\b{n}\b", body) for n in names):
            return
        rem = flat
        for k in range(len(names) - 1, -1, -1):
            if k == 0:
                w(f"{names[0]} = {rem}")
            else:
                w(f"{names[k]} = {rem} % {sizes[k]}")
                w(f"u{k}_{names[k]} = {rem} // {sizes[k]}")
                rem = f"u{k}_{names[k]}"

    def _sub_writer(self) -> Writer:
        w = Writer()
        w.depth = 0
        return w

    def _elementwise_body(self, w: Writer) -> None:
        """Grid-stride loop over the flat element index ``e``."""
        env: dict = {"__lines__": []}
        self.flat_expr = "e"
        head = self._sub_writer()
        self._row_env(head, env, 0)
        inner = self._sub_writer()
        self.pass_now = 1
        for line in self._pass_lines(env, 1, {}, "e"):
            inner(line)
        body_text = "\n".join(head.lines + inner.lines)
        w("e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x")
        w("st = np.int64(cuda.gridDim.x) * cuda.blockDim.x")
        w("while e < n:")
        w.indent()
        names = [f"i{k}" for k in range(self.od)] + ["j0"] * (self.R > 0)
        self._emit_unravel(w, "e", names, [f"d{k}" for k in range(self.R)], body_text)
        for line in head.lines + inner.lines:
            w(line)
        w("e += st")
        w.dedent()

    def _rows_body(self, w: Writer) -> None:
        loop = self.loop
        accs = {id(r): f"acc{k}" for k, r in enumerate(self._all_reductions())}
        w("tid = cuda.threadIdx.x")
        w("T = cuda.blockDim.x")
        self._shared(w, self._all_reductions(), accs)
        for k, name in self.cache_rows.items():
            w(f"{name} = cuda.shared.array({ROWCAP}, {np_type(loop.leaves[k].aval.dtype)})")
        if self.cache_rows:
            w(f"rcok = ni <= {ROWCAP}")
        w("row = np.int64(cuda.blockIdx.x)")
        w("while row < no:")
        w.indent()
        self.flat_expr = "rb + j"
        w("rb = row * ni")
        rest = self._sub_writer()
        env: dict = {"__lines__": []}
        self.pass_now = 0
        self._row_env(rest, env, 0)
        for p in range(1, self.nloops + 1):
            self.pass_now = p
            reds = self._reductions(p)
            for red in reds:
                for line in self._acc_init(red, accs[id(red)]):
                    rest(line)
            lines = self._pass_lines(env, p, accs, "rb + j")
            rest("j = np.int64(tid)")
            rest("while j < ni:")
            rest.indent()
            inner = self._sub_writer()
            self._emit_unravel(inner, "j", [f"j{k}" for k in range(self.nin)],
                               [f"d{self.od + k}" for k in range(self.nin)], "\n".join(lines))
            for line in inner.lines + lines:
                rest(line)
            rest("j += T")
            rest.dedent()
            self._block_reduce(rest, reds, accs)
            for red in reds:
                var = self._fresh("red")
                rest(f"{var} = {self._acc_result(red, accs)}")
                env[id(red)] = var
            self._row_env(rest, env, p)
        tail = self._sub_writer()
        for out in self.row_outputs:
            value = env[id(out)] if id(out) in env else self._value_now(tail, out, env)
            tail("if tid == 0:")
            tail(f"    o{self.out_index[id(out)]}[row] = {value}")
        text = "\n".join(rest.lines + tail.lines)
        self._emit_unravel(w, "row", [f"i{k}" for k in range(self.od)], [f"d{k}" for k in range(self.od)], text)
        for line in rest.lines + tail.lines:
            w(line)
        w("row += cuda.gridDim.x")
        w.dedent()

    def _store(self, w: Writer, reds: list[Node], accs: dict, array: str, index: str) -> None:
        """Thread 0 stores the block's result of each reduction at ``array<k>[index]``."""
        w("if tid == 0:")
        w.indent()
        for red in reds:
            for sfx, _ in self._parts(red):
                w(f"{array}{self._red_index(red)}{sfx}[{index}] = {accs[id(red)]}{sfx}")
        w.dedent()

    def _split_body(self, w: Writer) -> None:
        """Several blocks per row (``ng`` of them), in phases: 1..P reduce stage
        p, one partial per block; P+1..2P combine each row's partials (a block
        per row); 0 writes the outputs (grid-stride over the elements).
        Full reductions are this with one row."""
        reds_all = self._all_reductions()
        accs = {id(r): f"acc{k}" for k, r in enumerate(reds_all)}
        P = self.npasses
        self.flat_expr = "rb + j"
        w("tid = cuda.threadIdx.x")
        w("T = cuda.blockDim.x")
        w("blk = np.int64(cuda.blockIdx.x)")
        self._shared(w, reds_all, accs)
        inner_names = [f"j{k}" for k in range(self.nin)]
        inner_sizes = [f"d{self.od + k}" for k in range(self.nin)]
        outer_names = [f"i{k}" for k in range(self.od)]
        outer_sizes = [f"d{k}" for k in range(self.od)]

        def known(upto: int, out: Writer, env: dict) -> None:
            """Results of stages 1..upto for this row, read back from their q arrays."""
            self._row_env(out, env, 0)
            for p in range(1, upto + 1):
                for red in self._reductions(p):
                    k = self._red_index(red)
                    for sfx, _ in self._parts(red):
                        out(f"{accs[id(red)]}{sfx} = q{k}{sfx}[row]")
                    var = self._fresh("red")
                    out(f"{var} = {self._acc_result(red, accs)}")
                    env[id(red)] = var
                self._row_env(out, env, p)

        for p in range(1, P + 1):
            reds = self._reductions(p)
            # level 1: block blk works on row blk // ng, on every ng-th stretch of T elements
            w(f"{'if' if p == 1 else 'elif'} phase == {p}:")
            w.indent()
            w("row = blk // ng")
            w("rb = row * ni")
            env: dict = {"__lines__": []}
            pre = self._sub_writer()
            self.pass_now = p
            known(p - 1, pre, env)
            for red in reds:
                pre.lines += self._acc_init(red, accs[id(red)])
            inner_env = dict(env)
            inner_env["__lines__"] = []
            lines = []
            for red in reds:
                src = red.inputs[0]
                value = self._value(src, inner_env) if id(src) in self.members else \
                    self._operand(src, "full", inner_env)
                lines += inner_env["__lines__"]
                inner_env["__lines__"] = []
                lines += self._acc_update(red, value, accs[id(red)], "j")
            text = "\n".join(pre.lines + lines)
            unr = self._sub_writer()
            self._emit_unravel(unr, "row", outer_names, outer_sizes, text)
            for line in unr.lines + pre.lines:
                w(line)
            w("j = (blk - row * ng) * T + tid")
            w("while j < ni:")
            w.indent()
            unr = self._sub_writer()
            self._emit_unravel(unr, "j", inner_names, inner_sizes, "\n".join(lines))
            for line in unr.lines + lines:
                w(line)
            w("j += ng * T")
            w.dedent()
            self._block_reduce(w, reds, accs)
            self._store(w, reds, accs, "p", "blk")
            w.dedent()
            # level 2: one block per row combines the row's ng partials
            w(f"elif phase == {P + p}:")
            w.indent()
            w("row = blk")
            for red in reds:
                for line in self._acc_init(red, accs[id(red)]):
                    w(line)
            w("t = np.int64(tid)")
            w("while t < ng:")
            w.indent()
            for red in reds:
                k, acc = self._red_index(red), accs[id(red)]
                for sfx, _ in self._parts(red):
                    w(f"{acc}_o{sfx} = p{k}{sfx}[row * ng + t]")
                for line in self._combine(red, acc, f"{acc}_o"):
                    w(line)
            w("t += T")
            w.dedent()
            self._block_reduce(w, reds, accs)
            self._store(w, reds, accs, "q", "row")
            w.dedent()
        # phase 0: the outputs, a grid-stride loop over every element
        if P:
            w("else:")
            w.indent()
        env = {"__lines__": []}
        body = self._sub_writer()
        self.pass_now = P + 1
        body("row = e // ni if ni else e")
        body("j = e - row * ni")
        body("rb = row * ni")
        known(P, body, env)
        inner_env = dict(env)
        inner_env["__lines__"] = []
        full = []
        for out in self.full_outputs:
            value = self._value(out, inner_env)
            full += inner_env["__lines__"]
            inner_env["__lines__"] = []
            full.append(f"o{self.out_index[id(out)]}[e] = {value}")
        if full:
            body("if j < ni:")  # (rows of no elements: e counts rows, and there is nothing to write)
            body.lines += ["    " + line for line in full]
        tail = self._sub_writer()
        for out in self.row_outputs:
            value = env[id(out)] if id(out) in env else self._value_now(tail, out, env)
            tail(f"o{self.out_index[id(out)]}[row] = {value}")
        if tail.lines:
            body("if j == 0:")
            body.lines += ["    " + line for line in tail.lines]
        w("e = blk * T + tid")
        w("while e < (n if ni else no):")  # rows of no elements still write their results
        w.indent()
        text = "\n".join(body.lines)
        unr = self._sub_writer()
        lines = body.lines[:3]
        for line in lines:
            w(line)
        self._emit_unravel(unr, "row", outer_names, outer_sizes, text)
        self._emit_unravel(unr, "j", inner_names, inner_sizes, text)
        for line in unr.lines + body.lines[3:]:
            w(line)
        w("e += np.int64(cuda.gridDim.x) * T")
        w.dedent()
        if P:
            w.dedent()
