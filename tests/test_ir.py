"""The graph IR: golden printed text, structural hashing, and the simplifying
passes (dead code elimination, common subexpressions, scalar constant folding).

The golden strings were produced by the implementation, checked by eye against
the functions they print, and then frozen: the printer is part of the API.
"""

import re

import numpy as np

import braze
import braze.numpy as bnp

f32 = np.float32


def ops_in(text):
    """The op name of each top-level line ``%n: type = op args``."""
    return re.findall(r"^  %\S+: \S+ = (\S+)", text, flags=re.M)


def lowered(fn, *args):
    return braze.compile(fn, target="generic").lower(*args).graph


# ---------------------------------------------------------------------------
# golden strings
# ---------------------------------------------------------------------------

def layer(x, w, b):
    h = np.tanh(x @ w + b)
    return h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)


GOLDEN_LAYER = """\
graph(%x: f32[4,8], %w: f32[8,16], %b: f32[16]) {
  %0: f32[4,16] = matmul %x, %w
  %1: f32[4,16] = add %0, %b
  %2: f32[4,16] = tanh %1
  %3: f32[4,16] = multiply %2, %2
  %4: f32[4,1] = reduce_sum[axes=(1,), keepdims=True] %3
  %5: f32[4,1] = divide %4, 16.0:f32
  %6: f32[4,1] = add %5, 1e-05
  %7: f32[4,1] = sqrt %6
  %8: f32[4,16] = divide %2, %7
  return %8
}"""


def test_golden_layer():
    x, w, b = np.ones((4, 8), f32), np.ones((8, 16), f32), np.ones(16, f32)
    assert lowered(layer, x, w, b) == GOLDEN_LAYER
    assert str(braze.trace(layer, x, w, b)) == GOLDEN_LAYER


def mixed(x, y):
    # NumPy promotes int32 with float32 to float64
    return (x + y).sum(axis=0), x.T.reshape(-1)


GOLDEN_MIXED = """\
graph(%x: i32[2,3], %y: f32[3]) {
  %0: f64[2,3] = add %x, %y
  %1: f64[3] = reduce_sum[axes=(0,), keepdims=False] %0
  %2: i32[3,2] = transpose[perm=(1, 0)] %x
  %3: i32[6] = reshape[shape=(6,)] %2
  return %1, %3
}"""


def test_golden_promotion_reduction_and_shape_ops():
    x = np.ones((2, 3), np.int32)
    y = np.ones(3, f32)
    assert lowered(mixed, x, y) == GOLDEN_MIXED


def pytree_fn(p, s):
    return {"a": np.maximum(p["a"], 0.0) * s, "b": np.where(p["m"], p["a"], -p["a"])}


GOLDEN_PYTREE = """\
graph(%p__a__: f32[2,2], %p__m__: bool[2,2], %s: f64~[]) {
  %0: f32[2,2] = maximum %p__a__, 0.0
  %1: f32[2,2] = multiply %0, %s
  %2: f32[2,2] = negative %p__a__
  %3: f32[2,2] = where %p__m__, %p__a__, %2
  return %1, %3
}"""


def test_golden_pytree_and_traced_scalar():
    p = {"a": np.ones((2, 2), f32), "m": np.ones((2, 2), bool)}
    assert lowered(pytree_fn, p, 0.5) == GOLDEN_PYTREE


@braze.composite("braze.test.ir.affine")
def affine(x, *, a=2.0, b=1.0):
    return x * a + b


GOLDEN_COMPOSITE = """\
graph(%x: f32[4]) {
  %0: f32[4] = composite[braze.test.ir.affine, a=3.0, b=1.0] %x
    graph(%arg0: f32[4]) {
      %0: f32[4] = multiply %arg0, 3.0
      %1: f32[4] = add %0, 1.0
      return %1
    }
  %1: f32[4] = exp %0
  return %1
}"""


def test_golden_composite_node():
    text = lowered(lambda x: np.exp(affine(x, a=3.0)), np.ones(4, f32))
    assert text == GOLDEN_COMPOSITE


# ---------------------------------------------------------------------------
# structural hash
# ---------------------------------------------------------------------------

def _f1(x, y):
    return np.tanh(x * y) + 1.0


def _f1_again(x, y):
    return np.tanh(x * y) + 1.0


def _f2(x, y):
    return np.tanh(x * y) - 1.0


def test_same_function_traced_twice_gives_equal_graphs_and_hash():
    x, y = np.ones((2, 3), f32), np.ones(3, f32)
    g1, g2 = braze.trace(_f1, x, y), braze.trace(_f1, x, y)
    assert g1 is not g2
    assert g1 == g2
    assert hash(g1) == hash(g2)
    assert str(g1) == str(g2)


def test_hash_is_structural_not_by_identity():
    x, y = np.ones((2, 3), f32), np.ones(3, f32)
    g1, g2 = braze.trace(_f1, x, y), braze.trace(_f1_again, x, y)
    assert g1 == g2 and hash(g1) == hash(g2)


def test_different_function_gives_different_hash():
    x, y = np.ones((2, 3), f32), np.ones(3, f32)
    g1, g2 = braze.trace(_f1, x, y), braze.trace(_f2, x, y)
    assert g1 != g2
    assert hash(g1) != hash(g2)


def test_different_shape_or_dtype_gives_different_hash():
    g = braze.trace(_f1, np.ones((2, 3), f32), np.ones(3, f32))
    g_shape = braze.trace(_f1, np.ones((4, 3), f32), np.ones(3, f32))
    g_dtype = braze.trace(_f1, np.ones((2, 3)), np.ones(3))
    assert len({hash(g), hash(g_shape), hash(g_dtype)}) == 3
    assert g != g_shape and g != g_dtype


def test_different_constant_gives_different_hash():
    def plus_one(x):
        return x + 1.0

    def plus_two(x):
        return x + 2.0

    x = np.ones(3, f32)
    assert hash(braze.trace(plus_one, x)) != hash(braze.trace(plus_two, x))


# ---------------------------------------------------------------------------
# passes
# ---------------------------------------------------------------------------

def test_dead_code_is_eliminated():
    def fn(x):
        unused = np.sin(x) * 3.0  # noqa: F841
        return np.cos(x)

    x = np.ones(5, f32)
    text = lowered(fn, x)
    assert "sin" not in ops_in(text), text
    assert len(ops_in(text)) == 1 and ops_in(text)[0] == "cos", text
    np.testing.assert_array_equal(braze.compile(fn, target="generic")(x), np.cos(x))


def test_common_subexpressions_are_shared():
    def fn(x):
        return np.exp(x) + np.exp(x)

    x = np.linspace(0, 1, 5, dtype=f32)
    text = lowered(fn, x)
    assert ops_in(text).count("exp") == 1, text
    np.testing.assert_allclose(braze.compile(fn, target="generic")(x), 2 * np.exp(x))


def test_cse_does_not_merge_different_inputs():
    def fn(x):
        return np.exp(x) + np.exp(-x)

    text = lowered(fn, np.ones(3, f32))
    assert ops_in(text).count("exp") == 2, text


def test_scalar_constants_are_folded():
    def fn(x):
        # braze sees both multiplies of constants (Python does not fold these)
        c = bnp.multiply(bnp.add(2.0, 1.0), 2.0)
        return x * c

    x = np.arange(4, dtype=f32)
    text = lowered(fn, x)
    assert ops_in(text).count("multiply") == 1, text
    assert "add" not in ops_in(text), text
    assert "6.0" in text, text
    got, want = braze.compile(fn, target="generic")(x), fn(x)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == want.dtype  # NumPy scalars are strong: float64


def test_constant_made_inside_the_function_is_folded():
    def fn(x):
        c = np.ones((), dtype=x.dtype) * 2.0 * 3.0
        return x * c

    x = np.arange(4, dtype=f32)
    text = lowered(fn, x)
    assert ops_in(text).count("multiply") == 1, text
    got, want = braze.compile(fn, target="generic")(x), fn(x)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == want.dtype == f32


def test_printed_graph_is_one_op_per_line():
    x, w, b = np.ones((4, 8), f32), np.ones((8, 16), f32), np.ones(16, f32)
    text = lowered(layer, x, w, b)
    lines = text.rstrip("\n").splitlines()
    assert lines[0].startswith("graph(%x: f32[4,8], %w: f32[8,16], %b: f32[16])")
    assert lines[-1] == "}"
    assert re.match(r"^  return %\S+$", lines[-2])
    body = lines[1:-2]
    assert body and all(re.match(r"^  %\d+: \w+\[[\d,]*\] = \w+", ln) for ln in body), text


# ---------------------------------------------------------------- hash-consing and scale


def test_nodes_are_interned_so_equality_is_identity():
    from braze.aval import Aval
    from braze.graph import Node

    a = Node.make("input", (), Aval((3,), np.dtype(np.float32)), index=0)
    b = Node.make("input", (), Aval((3,), np.dtype(np.float32)), index=1)
    add1 = Node.make("add", (a, b), Aval((3,), np.dtype(np.float32)))
    add2 = Node.make("add", (a, b), Aval((3,), np.dtype(np.float32)))
    other = Node.make("add", (b, a), Aval((3,), np.dtype(np.float32)))
    assert add1 is add2 and add1 == add2 and hash(add1) == hash(add2)
    assert add1 is not other and add1 != other
    assert add1.replace((a, b)) is add1          # a rewrite that changes nothing returns the node
    assert add1.replace((b, a)) is other


def test_a_rewrite_that_changes_nothing_returns_the_same_graph_nodes():
    from braze.passes import rewrite

    g = braze.trace(lambda x: np.exp(x) * 2.0 + np.tanh(x), np.ones(4, f32))
    same = rewrite(g, lambda n: n)
    assert all(a is b for a, b in zip(same.outputs, g.outputs))


def test_a_100000_op_chain_traces_runs_and_differentiates_without_recursion():
    def chain(x):
        for _ in range(100_000):
            x = x * 1.0000001
        return x

    x = np.ones(3)
    g = braze.trace(chain, x)
    assert len(g.nodes) == 100_002  # the input, the constant, the multiplies
    np.testing.assert_allclose(braze.compile(chain, target="generic")(x), 1.0000001 ** 100_000)
    np.testing.assert_allclose(braze.grad(lambda x: chain(x).sum())(x), 1.0000001 ** 100_000)


def test_indices_traced_from_the_whole_history_are_looked_at_once(monkeypatch):
    """A loop indexing with a value computed from all the iterations before
    (Viterbi's backtrack, ``psi[t + 1, path[t + 1]]``) asks at each index
    whether the value is a constant: the walks that answer (and that compute
    a graph break's values) stop at nodes already known, so the trace visits
    each node a bounded number of times, not the whole graph per iteration
    (a 400-step decoder traced in 9.8 s, now 0.4)."""
    from braze import tracing

    visited = [0]
    walk = tracing._unknown_upstream

    def counting(root, memo):
        order = walk(root, memo)
        visited[0] += len(order)
        return order

    monkeypatch.setattr(tracing, "_unknown_upstream", counting)

    def backtrack(psi, start):
        path = [start]
        for t in range(psi.shape[0] - 1, 0, -1):
            path.append(psi[t, path[-1]] + 0)  # (a new node per step: the index depends on every one before)
        return np.stack(path)

    psi = np.random.default_rng(0).integers(0, 4, (600, 4))
    g = braze.trace(backtrack, psi, np.int64(2))
    assert visited[0] <= 2 * len(g.nodes), (visited[0], len(g.nodes))
    got = braze.compile(backtrack, target="cpu")(psi, np.int64(2))
    np.testing.assert_array_equal(got, backtrack(psi, np.int64(2)))


def test_thousands_of_nested_views():
    def views(x):
        for i in range(3000):
            x = x[1:] if i % 2 == 0 else x[:-1]
        x[...] = 2.0
        return x.sum()

    a = np.ones(7000)
    assert braze.compile(views, target="generic")(a.copy()) == views(a.copy()) == 8000.0


def test_a_kernel_fusing_a_long_chain_is_generated_without_recursion(monkeypatch):
    import braze.fusion

    monkeypatch.setattr(braze.fusion, "MAX_KERNEL_OPS", 10**6)  # one kernel of all 3,000 ops

    def chain(x):
        for k in range(3000):
            x = x * 1.0001 if k % 2 else x + 0.5
        return x

    from braze.fusion import Loop, fuse
    from braze.passes import inline_composites, run_passes
    from braze.targets.cpu_codegen import generate

    graph, _ = run_passes(inline_composites(braze.trace(chain, np.ones(8)), {}))
    (loop,) = [s for s in fuse(graph).steps if isinstance(s, Loop)]
    assert len(loop.members) == 3000 and "def kernel(" in generate(loop).source


def test_a_long_chain_fuses_into_capped_kernels_that_share_one_source():
    """Fusion stops a kernel at MAX_KERNEL_OPS (numba compiles big functions in
    superlinear time); the pieces of a regular chain are the same source, so a
    chain of 3,000 ops compiles as few numba functions as one of 300."""
    from braze.fusion import MAX_KERNEL_OPS, Loop, fuse
    from braze.passes import inline_composites, run_passes
    from braze.targets.cpu_codegen import generate

    def sources(n):
        def chain(x):
            for k in range(n):
                x = x * 1.0001 if k % 2 else np.tanh(x) + 0.5
            return x

        graph, _ = run_passes(inline_composites(braze.trace(chain, np.ones(8)), {}))
        loops = [s for s in fuse(graph).steps if isinstance(s, Loop)]
        assert all(len(loop.members) <= MAX_KERNEL_OPS for loop in loops)
        assert sum(len(loop.members) for loop in loops) == len([m for m in graph.nodes if m.op not in
                                                                  ("input", "const")])
        return len(loops), {generate(loop).source for loop in loops}

    few, few_sources = sources(300)
    many, many_sources = sources(3000)
    assert many >= 3000 * 3 // 2 // MAX_KERNEL_OPS  # tanh, add, multiply: 1.5 ops per step
    assert len(many_sources) <= len(few_sources) <= 4

    def chain(x):
        for k in range(3000):
            x = x * 1.0001 if k % 2 else np.tanh(x) + 0.5
        return x

    x = np.linspace(-2, 2, 8)
    np.testing.assert_allclose(braze.compile(chain, target="cpu")(x), chain(x), rtol=1e-13)  # tanh: braze's


def test_the_cycle_collector_pauses_while_compiling_and_resumes_after():
    """Compiling a big graph allocates millions of long-lived objects; the
    cycle collector re-traversing them made passes superlinear, so it pauses
    for a compile (in any thread, re-entrantly) and comes back as it was."""
    import gc

    from braze.graph import collector_paused

    class Probe:  # (an attribute's list: appending to a list the function names would run it as NumPy)
        seen = []

    seen = Probe().seen

    def fn(x):
        Probe.seen.append(gc.isenabled())
        return np.tanh(x) + 1.0

    assert gc.isenabled()
    braze.compile(fn, target="cpu")(np.ones(3))
    braze.compile(lambda x: fn(x).sum(), target="cpu").vjp(np.ones(4))  # the paired programs' trace
    assert len(seen) == 2 and not any(seen) and gc.isenabled()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # a user who turned it off keeps it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _matmuls(f, *args):
    return [line for line in f.lower(*args).graph.splitlines() if "= matmul" in line]


def test_column_loop_matvecs_become_one_matrix_product():
    """A covariance written as a loop over columns: 2n matrix-vector products of
    columns with column windows of one matrix are one matmul (then slices)."""
    def cov(data):
        n, m = data.shape
        data = data - data.mean(axis=0)
        out = np.zeros((m, m))
        for i in range(m):
            out[i:m, i] = out[i, i:m] = data[:, i] @ data[:, i:m] / (n - 1.0)
        return out

    def gram_rows(a, b):  # rows of a with column windows of b, and with b
        return np.concatenate([a[r] @ b[:, : 3 + r] for r in range(10)] + [a[r] @ b for r in range(10)])

    data = np.random.default_rng(0).standard_normal((30, 12))
    for target in ("cpu", "generic"):
        f = braze.compile(cov, target=target)
        np.testing.assert_allclose(f(data), cov(data), rtol=1e-13, atol=1e-15)
        assert len(_matmuls(f, data)) == 1
    a, b = np.random.default_rng(1).standard_normal((2, 10, 10))
    f = braze.compile(gram_rows, target="cpu")
    np.testing.assert_allclose(f(a, b), gram_rows(a, b), rtol=1e-13, atol=1e-14)
    assert len(_matmuls(f, a, b)) == 1


def test_few_or_wasteful_matvecs_stay_as_written():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 400))

    def few(x):  # fewer than BATCH_MATVECS
        return [x[:, i] @ x[:, i:] for i in range(4)]

    def sparse(x):  # one column each, far apart: the product would waste 50x
        return [x[:, i] @ x[:, 50 * i:50 * i + 1] for i in range(8)]

    def partial_rows(x):  # windows of some rows only: not entries of one product
        return [x[:10, i] @ x[:10, i:i + 5] for i in range(10)]

    for fn, n in ((few, 4), (sparse, 8), (partial_rows, 10)):
        f = braze.compile(fn, target="cpu")
        for got, want in zip(f(x), fn(x)):
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        assert len(_matmuls(f, x)) == n, fn.__name__
