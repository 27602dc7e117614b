"""Re-rolling (``braze.reroll``): a Python loop writing one region per iteration,
unrolled by tracing, runs as one loop again: on cpu one numba function
calling the iteration's kernel, parallel when the iterations are independent,
in order when an iteration reads what an earlier one wrote. Results are the
unrolled program's, bit for bit."""
import copy

import numpy as np
import pytest

import braze
from braze.pipeline import _inlined
from braze.reroll import MIN_RUN, reroll
from braze.targets.generic import lower_graph
from programs.everyday import lorenz_arrays  # three arrays per iteration, each reading the others
from programs.everyday import tridiag_solve as thomas  # two arrays per iteration, from a value both read
from programs.polybench import conv2d
from programs.science import lorenz_rk4
from programs.sims import pendulum_rk4


def recurrence(x, a):
    y = np.zeros_like(x)
    y[0] = x[0]
    for i in range(1, x.shape[0]):
        y[i] = a * y[i - 1] + x[i]
    return y


def columns(x, w):
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = np.tanh(x[:, j]) * w[j] + x[:, j]
    return out


def reverse_in_place(x):
    n = x.shape[0]
    for i in range(n):
        x[i] = x[n - 1 - i]  # the second half reads what the first half wrote
    return x


def overlapping(x):
    out = np.zeros(x.shape[0] + 2, x.dtype)
    for i in range(x.shape[0]):
        out[i:i + 3] = x[i] * np.ones(3, x.dtype)  # later writes win
    return out


def strided_rows(x):
    out = np.zeros((2 * x.shape[0], 2 * x.shape[1]), x.dtype)
    for i in range(x.shape[0]):
        out[2 * i, ::2] = np.maximum(x[i], 0) - 0.5 * x[i]
    return out


def counts(x):
    out = np.zeros(x.shape[0], np.int64)
    for i in range(x.shape[0]):
        out[i] = np.sum(x[i] > 0)
    return out


def short_loop(x):
    out = np.zeros_like(x)
    for i in range(MIN_RUN - 1):
        out[i] = x[i] * 2
    return out


def growing(x):  # windows of an extent that shrinks each iteration: the extent is a table column
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = np.sum(x[i:])
    return out


def back_substitution(U, b):  # reads the elements it stored, a window of a shrinking extent (gauss_pivot's)
    n = len(b)
    x = np.zeros(n, np.result_type(U, b))
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - U[i, i + 1:] @ x[i + 1:]) / U[i, i]
    return x


def prefix_means(x):  # a mean's count changes with the extent: a constant of the table
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[:i + 1].mean()
    return out


def triangle_rows(x):  # regions of a growing extent: the scratch buffer is the longest row's
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, :i + 2] = x[i, :i + 2] * 0.5 + x[0, :i + 2]
    return out


def shrinking_columns(x):  # a column below the diagonal, less the diagonal element
    out = np.zeros_like(x)
    for j in range(x.shape[1]):
        out[j:, j] = x[j:, j] - x[j, j]
    return out


def symmetric_fill(x):  # one value stored twice an iteration (a covariance's loop over columns)
    out = np.zeros((x.shape[1], x.shape[1]), x.dtype)
    for i in range(x.shape[1]):
        out[i:, i] = out[i, i:] = x[i, i:] * 2 - 1
    return out


def row_then_column(x):  # two stores an iteration, a later row over an earlier column: in order
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, :] = x[i] + 1
        out[:, i] = x[:, i] * 3
    return out


def reads_between_stores(x):  # each store reads what the one before stored, whichever pair is an iteration:
    out = np.zeros(2 * x.shape[0] + 1, x.dtype)  # not re-rolled, the right answer
    for i in range(x.shape[0]):
        out[2 * i] = out[2 * i - 1] * 0.5 + x[i]
        out[2 * i + 1] = out[2 * i - 1:2 * i + 1].sum()
    return out


def column_extrema(x):  # each iteration a reduction over a window's first axis: a transposed loop
    out = np.empty((x.shape[0], x.shape[2]), x.dtype)
    for t in range(x.shape[0]):
        out[t] = x[t].max(axis=0) - x[t].min(axis=0)
    return out


def zigzag(x):  # extents that go up and down: not re-rolled (the code is checked at the two ends only)
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = np.sum(x[:(i * 5) % 9 + 9])
    return out


def trace_loop(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    return trace


def horner(c, x):  # an array carried: each iteration reads the last whole
    acc = np.zeros_like(x)
    for i in range(c.shape[0]):
        acc = acc * x + c[i]
    return acc


def dot_loop(x, y):  # a NumPy scalar carried, strong from the start
    s = x.dtype.type(0)
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


def two_bodies(x):  # the body changes half way: two runs
    s = x[0] * 0
    for i in range(x.shape[0]):
        s = s + x[i] if i < x.shape[0] // 2 else s * 0.5 - x[i]
    return s


def index_scaled(x):  # constants that change with the iteration: a table of them
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * i + 0.5 * i
    return out


def shared_constants(x):  # at i = 2 every constant is the one node 2: each position keeps its own
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = (x[i] + i) * 2 + i * 2
    return out


def weighted_columns(x):  # NumPy scalars of the array's dtype, strong, different each column
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] * x.dtype.type(j + 1) - x.dtype.type(j) / 3
    return out


def wrapping_trace(a):  # i % n past n: tanh(a[k, k]) interned once, read by two iterations
    trace = 0.0
    for i in range(3 * a.shape[0] + 2):
        trace += np.tanh(a[i % a.shape[0], i % a.shape[0]])
    return trace


def wrapping_rows(a):  # a vector carried, each row's term shared by the iterations i and i + n
    out = np.zeros(a.shape[1], a.dtype)
    for i in range(2 * a.shape[0] + 3):
        out = out + np.tanh(a[i % a.shape[0]]) * 0.5
    return out


def wrapping_updates(x):  # an update chain whose stored values repeat
    out = np.empty((4 * x.shape[0], x.shape[1]), x.dtype)
    for i in range(out.shape[0]):
        out[i] = np.exp(x[i % x.shape[0]]) - 1
    return out


def coupled_rows(x, y):  # each row of two arrays from the rows of both before it
    p, q = np.zeros_like(x), np.zeros_like(x)
    p[0], q[0] = x[0], y[0]
    for i in range(1, x.shape[0]):
        p[i] = 0.6 * p[i - 1] - 0.8 * q[i - 1] + x[i]
        q[i] = 0.8 * p[i - 1] + 0.6 * q[i - 1] + y[i]
    return p - 2 * q


def reads_current(x):  # the second array reads the first's row of the same iteration: the first rolls alone
    a, b = np.zeros_like(x), np.zeros_like(x)
    for i in range(1, len(x)):
        a[i] = a[i - 1] * 0.5 + x[i]
        b[i] = b[i - 1] + a[i]
    return a * b


def recorded_rk4(x0):  # RK4 on a 2-vector (its elements carried as scalars), the path stored: a stepped loop
    return pendulum_rk4(x0[0], x0[1], x0.dtype.type(0.05), 39)  # (float32 state, float64 path: stores widen)


def final_state_rk4(s):  # RK4 on x, y, z returning only its last state: nothing stored, an arrayless stepped loop
    return lorenz_rk4(s, 0.01, 40)


def forced_oscillator(f):  # two scalars carried from Python floats, a window of f and i a step, two stores
    x, v = 1.0, 0.0
    path = np.zeros((f.shape[0], 2), f.dtype)
    for i in range(f.shape[0]):
        a = -x - 0.1 * v + f[i]
        v = v + 0.01 * a
        x = x + 0.01 * v * (1 + 0.001 * i)
        path[i, 0] = x
        path[i, 1] = v
    return path


def peeked_state(f):  # a carried value read after the loop mid-way: no stepped run, the right answer
    x, out, seen = f[0] * 0, np.zeros_like(f), 0.0
    for i in range(f.shape[0]):
        x = x * 0.9 + f[i]
        out[i] = x * x
        if i == f.shape[0] // 2:
            seen = x
    return out + seen


def _conv_args(dtype, rng):
    return (rng.standard_normal((12, 11)).astype(dtype), rng.standard_normal((3, 2)).astype(dtype))


CASES = {
    "conv2d": (conv2d, lambda d, r: _conv_args(d, r), True),
    "recurrence": (recurrence, lambda d, r: (r.standard_normal(40).astype(d), 0.5), True),
    "columns": (columns, lambda d, r: (r.standard_normal((7, 12)).astype(d), r.standard_normal(12).astype(d)), True),
    "reverse_in_place": (reverse_in_place, lambda d, r: (r.standard_normal(17).astype(d),), True),
    "overlapping": (overlapping, lambda d, r: (r.standard_normal(10).astype(d),), True),
    "strided_rows": (strided_rows, lambda d, r: (r.standard_normal((9, 3)).astype(d),), True),
    "counts": (counts, lambda d, r: ((r.standard_normal((10, 5)) * 1e30).astype(d),), True),
    "short_loop": (short_loop, lambda d, r: (r.standard_normal(10).astype(d),), False),
    "growing": (growing, lambda d, r: (r.standard_normal(12).astype(d),), True),
    "back_substitution": (back_substitution, lambda d, r: ((np.triu(r.random((24, 24))) + 4 * np.eye(24)).astype(d),
                                                           r.standard_normal(24).astype(d)), True),
    "prefix_means": (prefix_means, lambda d, r: (r.standard_normal(20).astype(d),), True),
    "triangle_rows": (triangle_rows, lambda d, r: (r.standard_normal((12, 14)).astype(d),), True),
    "shrinking_columns": (shrinking_columns, lambda d, r: (r.standard_normal((14, 11)).astype(d),), True),
    "symmetric_fill": (symmetric_fill, lambda d, r: (r.standard_normal((14, 12)).astype(d),), True),
    "row_then_column": (row_then_column, lambda d, r: (r.standard_normal((11, 11)).astype(d),), True),
    "reads_between_stores": (reads_between_stores, lambda d, r: (r.standard_normal(12).astype(d),), False),
    "column_extrema": (column_extrema, lambda d, r: (r.standard_normal((12, 6, 5)).astype(d),), True),
    "zigzag": (zigzag, lambda d, r: (r.standard_normal(20).astype(d),), False),
    "trace_loop": (trace_loop, lambda d, r: ((r.standard_normal((30, 30)) * 3).astype(d),), True),
    "horner": (horner, lambda d, r: (r.standard_normal(12).astype(d), r.standard_normal(7).astype(d)), True),
    "dot_loop": (dot_loop, lambda d, r: (r.standard_normal(25).astype(d), r.standard_normal(25).astype(d)), True),
    "two_bodies": (two_bodies, lambda d, r: (r.standard_normal(40).astype(d),), True),
    "index_scaled": (index_scaled, lambda d, r: (r.standard_normal(30).astype(d),), True),
    "shared_constants": (shared_constants, lambda d, r: (r.standard_normal(20).astype(d),), True),
    "weighted_columns": (weighted_columns, lambda d, r: (r.standard_normal((5, 30)).astype(d),), True),
    "wrapping_trace": (wrapping_trace, lambda d, r: ((r.standard_normal((9, 9)) * 3).astype(d),), True),
    "wrapping_rows": (wrapping_rows, lambda d, r: (r.standard_normal((9, 6)).astype(d),), True),
    "wrapping_updates": (wrapping_updates, lambda d, r: (r.standard_normal((5, 3)).astype(d),), True),
    "thomas": (thomas, lambda d, r: (r.random(30).astype(d), (r.random(30) + 4).astype(d), r.random(30).astype(d),
                                     r.standard_normal(30).astype(d)), True),
    "coupled_rows": (coupled_rows, lambda d, r: (r.standard_normal((20, 3)).astype(d),
                                                 r.standard_normal((20, 3)).astype(d)), True),
    "reads_current": (reads_current, lambda d, r: (r.standard_normal(30).astype(d),), True),
    "recorded_rk4": (recorded_rk4, lambda d, r: (np.array([1.2, 0.3], d),), True),
    "forced_oscillator": (forced_oscillator, lambda d, r: (r.standard_normal(50).astype(d),), True),
    "final_state_rk4": (final_state_rk4, lambda d, r: (np.array([1.0, 1.0, 1.0], d),), True),
    "peeked_state": (peeked_state, lambda d, r: (r.standard_normal(30).astype(d),), True),
}


def _args(name, dtype):
    return CASES[name][1](dtype, np.random.default_rng(7))


def _rolled_nodes(graph):
    return [n for n in graph.nodes if n.op == "rolled"]


# Not bitwise NumPy's, by the numerics contract: np.tanh is braze's vector tanh (within
# its documented 2 ulp), a float sum's accumulation order is braze's own.
APPROXIMATE = {"columns", "conv2d", "growing", "back_substitution", "prefix_means", "zigzag", "trace_loop", "wrapping_trace", "wrapping_rows", "wrapping_updates",
               "recorded_rk4"}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_matches_numpy_and_the_unrolled_program(name, dtype, monkeypatch):
    fn, _, rolls = CASES[name]
    args = _args(name, dtype)
    f = braze.compile(fn, target="cpu")
    want = fn(*copy.deepcopy(args))
    got = f(*copy.deepcopy(args))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert ("rolled" in f.lower(*args).plan) == rolls
    if name in APPROXIMATE:
        scale = np.prod([np.abs(a).max() + 1 for a in args]) * 16  # (bounds the terms that cancel)
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(dtype).eps * scale)
    else:
        np.testing.assert_array_equal(got, want)
    monkeypatch.setattr("braze.reroll.MIN_RUN", 10**9)  # the same program unrolled: the same bits
    unrolled = braze.compile(fn, target="cpu")
    assert "rolled" not in unrolled.lower(*args).plan
    np.testing.assert_array_equal(got, unrolled(*copy.deepcopy(args)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_template_run_with_numpy_matches_unrolled(name):
    """The pass alone (the template run with NumPy, no target) changes no bit."""
    fn, _, rolls = CASES[name]
    args = _args(name, np.float64)
    graph = _inlined(braze.compile(fn, target="cpu").lower(*args).ir)
    rolled = reroll(graph)
    assert bool(_rolled_nodes(rolled)) == rolls
    arrays = [np.asarray(a) for a in args]
    want = lower_graph(graph).run(copy.deepcopy(arrays))
    got = lower_graph(rolled).run(copy.deepcopy(arrays))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_independent_and_in_order_runs_are_told_apart():
    def spec(fn, *args):
        graph = reroll(_inlined(braze.compile(fn, target="cpu").lower(*args).ir))
        (node,) = _rolled_nodes(graph)
        return node.kw["spec"]

    rng = np.random.default_rng(0)
    assert spec(conv2d, *_conv_args(np.float64, rng)).independent
    assert not spec(recurrence, rng.standard_normal(20), 0.5).independent
    assert not spec(overlapping, rng.standard_normal(10)).independent
    assert not spec(reverse_in_place, rng.standard_normal(10)).independent


def test_a_loop_of_many_iterations_compiles_one_kernel():
    rng = np.random.default_rng(1)
    image, weights = rng.standard_normal((60, 60)), rng.standard_normal((3, 3))
    f = braze.compile(conv2d, target="cpu")
    lowered = f.lower(image, weights)
    assert lowered.counts["kernels"] == 0 and lowered.counts["rolled loops"] == 1
    assert "rolled loop, 3364 iterations, independent" in lowered.source and "def rolled(" in lowered.source
    np.testing.assert_allclose(f(image, weights), conv2d(image, weights), rtol=1e-13, atol=1e-13)


def test_shared_iteration_values_are_computed_again_only_to_make_a_run():
    """A value two iterations share (interned once, ``tanh(a[i % n])``) is
    computed again in the loop, one run instead of none; a value every
    iteration reads alike (hoisted by the author: ``c = np.tanh(w)``) stays
    outside it, computed once."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((9, 6))
    (node,) = _rolled_nodes(reroll(_inlined(braze.compile(wrapping_rows, target="cpu").lower(a).ir)))
    assert node.kw["table"].rows.shape[0] == 2 * 9 + 3 - 1  # (the first iteration starts the carry)
    assert "tanh" in [n.op for n in node.kw["spec"].template.nodes]

    def hoisted(x, w):
        c = np.tanh(w)
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * c
        return out

    x, w = rng.standard_normal((20, 6)), rng.standard_normal(6)
    (node,) = _rolled_nodes(reroll(_inlined(braze.compile(hoisted, target="cpu").lower(x, w).ir)))
    assert "tanh" not in [n.op for n in node.kw["spec"].template.nodes]
    np.testing.assert_allclose(braze.compile(hoisted, target="cpu")(x, w), hoisted(x, w), rtol=4e-16, atol=0)


def relu_columns(x, w):
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = np.maximum(x[:, j], 0) * w[j] + x[:, j]
    return out


def test_special_values_and_parallel_chunks():
    """NaN, inf, signed zeros through a rolled loop large enough to run in
    parallel chunks; the result is NumPy's exactly."""
    from braze.targets.cpu_reroll import compile_template

    rng = np.random.default_rng(2)
    x = rng.standard_normal((400, 1500))
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1:5, 0] = [-0.0, 0.0, np.nan, -np.inf]
    w = rng.standard_normal(1500)
    f = braze.compile(relu_columns, target="cpu")
    np.testing.assert_array_equal(f(x, w), relu_columns(x, w))
    graph = reroll(_inlined(f.lower(x, w).ir), compile_template)
    (node,) = _rolled_nodes(graph)
    assert "prange(nch)" in node.kw["spec"].runner.source


def test_in_place_update_of_an_argument():
    x = np.arange(20.0)
    f = braze.compile(reverse_in_place, target="cpu")
    want = reverse_in_place(x.copy())
    y = x.copy()
    f(y)
    np.testing.assert_array_equal(y, want)


def test_aliased_arguments_read_as_numpy_reads_them():
    """The array updated passed again as the array read: NumPy's loop reads what
    its earlier iterations wrote, and so does the compiled one."""
    def shift(out, x):
        for i in range(x.shape[0] - 1):
            out[i + 1] = x[i] * 2.0
        return out

    f = braze.compile(shift, target="cpu")
    assert "rolled" in f.lower(np.zeros(12), np.zeros(12)).plan
    want = np.arange(12.0)
    shift(want, want)  # (NumPy: each iteration reads what the one before wrote)
    got = np.arange(12.0)
    f(got, got)
    np.testing.assert_array_equal(got, want)
    separate = np.arange(12.0)
    np.testing.assert_array_equal(f(separate.copy(), separate), shift(separate.copy(), separate))


def test_carried_values_roll_into_one_loop_in_order():
    """A value carried from iteration to iteration (``trace += np.tanh(a[i, i])``)
    is one ``rolled`` node: the iteration's kernel called in a numba loop that
    hands each value to the next; the first iteration, which starts from a weak
    Python float, stays outside the run (its aval differs)."""
    a = np.random.default_rng(3).standard_normal((500, 500))
    f = braze.compile(trace_loop, target="cpu")
    lowered = f.lower(a)
    assert lowered.counts["rolled loops"] == 1 and lowered.counts["kernels"] == 1, lowered.counts
    assert "rolled loop, 499 iterations, in order" in lowered.source
    got = f(a)
    assert type(got) is type(trace_loop(a)) and got.dtype == np.float64
    graph = reroll(_inlined(lowered.ir))
    (node,) = _rolled_nodes(graph)
    assert node.kw["spec"].carry and not node.kw["spec"].independent
    # the template looped with NumPy: the unrolled graph's bits (the compiled loop's tanh is braze's own)
    np.testing.assert_array_equal(lower_graph(graph).run([a])[0], lower_graph(_inlined(lowered.ir)).run([a])[0])


def alternating_steps(x):
    for i in range(200):
        x = np.tanh(x) * 0.9 if i % 2 else x * 1.0001 + 0.5
    return x


def test_alternating_steps_roll_once_and_walk_each_iteration_once(monkeypatch):
    """Two different steps alternating: the multiplies link alternately (no
    run), the adds every two steps (a run), and the tanhs inside that run are
    not walked again: about one walk per two steps, not four."""
    import braze.reroll as rr

    walks = []
    real = rr._iteration_of
    monkeypatch.setattr(rr, "_iteration_of", lambda *a, **k: walks.append(1) or real(*a, **k))
    x = np.random.default_rng(7).standard_normal(64)
    f = braze.compile(alternating_steps, target="cpu")
    lowered = f.lower(x)
    assert lowered.counts["rolled loops"] == 1, lowered.counts
    assert len(walks) <= 110, len(walks)
    np.testing.assert_allclose(f(x), alternating_steps(x), rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.bool_])
def test_carried_integers_wrap_as_numpys(dtype):
    def mix(x):
        s = x[0]
        for i in range(1, x.shape[0]):
            s = s * x[i] + x[i - 1] if dtype != np.bool_ else s ^ x[i]
        return s

    x = np.random.default_rng(4).integers(0, 200, 64).astype(dtype)
    f = braze.compile(mix, target="cpu")
    with np.errstate(over="ignore"):
        want = mix(x)
    got = f(x)
    assert got.dtype == want.dtype and got == want
    assert f.lower(x).counts["rolled loops"] == 1


def test_a_carried_value_read_elsewhere_is_not_rolled():
    def partials(x):
        s, out = 0.0, []
        for i in range(x.shape[0]):
            s = s + x[i]
            out.append(s)  # every partial sum is a result: nothing is carried privately
        return np.array(out)

    x = np.random.default_rng(5).standard_normal(30)
    f = braze.compile(partials, target="cpu")
    np.testing.assert_array_equal(f(x), partials(x))


def test_special_values_through_a_carried_loop():
    x = np.random.default_rng(6).standard_normal(50)
    x[[3, 17, 30]] = [np.nan, np.inf, -np.inf]
    for fn in (dot_loop, two_bodies):
        args = (x, x[::-1].copy()) if fn is dot_loop else (x,)
        got, want = braze.compile(fn, target="cpu")(*args), fn(*args)
        np.testing.assert_array_equal(got, want)


def test_gradient_through_a_carried_loop_matches_finite_differences():
    def loss(a):
        s = 0.0
        for i in range(a.shape[0]):
            s = s * 0.9 + np.tanh(a[i, i]) * a[i, (i + 1) % a.shape[0]]
        return s

    a = np.random.default_rng(8).standard_normal((20, 20))
    g = braze.compile(braze.grad(loss), target="cpu")(a)
    eps, num = 1e-6, np.zeros_like(a)
    for i, j in [(0, 0), (5, 5), (5, 6), (19, 0), (3, 9)]:
        d = np.zeros_like(a)
        d[i, j] = eps
        num[i, j] = (loss(a + d) - loss(a - d)) / (2 * eps)
        np.testing.assert_allclose(g[i, j], num[i, j], rtol=1e-6, atol=1e-8)


def test_constants_that_change_with_the_iteration_are_a_table():
    """``x[i] * i``: one rolled loop whose template takes the iteration's
    constants from a float64 table, typed as they were (a weak Python int, a
    strong float32); the constants the same in every iteration stay literals."""
    x = np.random.default_rng(9).standard_normal((5, 30)).astype(np.float32)
    graph = reroll(_inlined(braze.compile(weighted_columns, target="cpu").lower(x).ir))
    (node,) = _rolled_nodes(graph)
    spec, consts = node.kw["spec"], node.kw["consts"].rows
    assert [np.dtype(a.dtype) for a in spec.params] == [np.float32, np.float32] and not any(a.weak for a in spec.params)
    np.testing.assert_array_equal(consts[:, 0], np.arange(1, 31))
    assert consts.shape == (30, 2)
    graph = reroll(_inlined(braze.compile(index_scaled, target="cpu").lower(x[0].astype(np.float64)).ir))
    (node,) = _rolled_nodes(graph)
    assert [a.weak for a in node.kw["spec"].params] == [True, True]  # i, and 0.5 * i folded to a weak float


def test_a_huge_integer_constant_leaves_the_loop_unrolled():
    def big(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] + (2 ** 60 + i)
        return out

    x = np.arange(20, dtype=np.int64)
    f = braze.compile(big, target="cpu")
    np.testing.assert_array_equal(f(x), big(x))
    assert f.lower(x).counts["rolled loops"] == 0  # (2**60 + i does not survive a float64 table)


@pytest.mark.parametrize("name", ["thomas", "coupled_rows"])
def test_two_arrays_updated_in_lockstep_roll_into_one_loop(name):
    """Each iteration updates two arrays from values both read (the Thomas
    algorithm's ``m``) or from each other's rows before it (``q[i]`` reads
    ``p[i - 1]`` after ``p[i]`` was stored): one loop over both, in order."""
    fn, make, _ = CASES[name]
    args = make(np.float64, np.random.default_rng(5))
    graph = reroll(_inlined(braze.compile(fn, target="cpu").lower(*args).ir))
    lockstep = [n for n in _rolled_nodes(graph) if n.kw["spec"].lockstep]
    assert len(lockstep) == 1
    (node,) = lockstep
    assert not node.kw["spec"].independent and len(node.aval) == 2
    # every iteration but the set-up before the loop (and, where one array reads the other after its
    # update, the first, whose count of those reads cannot be told from the set-up's)
    assert node.kw["table"].rows.shape[0] >= args[0].shape[0] - 2


def test_a_long_computation_before_a_loop_is_read_as_leaves():
    """A loop reading arrays that 1,000 updates computed (the Thomas
    algorithm's back substitution after its sweep) still rolls: the walk for
    an iteration's nodes stops at what came before its array's last update."""
    a, b, c, d = (np.random.default_rng(1).random(1000) + k for k in (0, 4, 0, 0))
    f = braze.compile(thomas, target="cpu")
    np.testing.assert_array_equal(f(a, b, c, d), thomas(a, b, c, d))
    assert f.lower(a, b, c, d).counts["rolled loops"] == 2


def test_three_arrays_in_lockstep_roll_into_one_loop():
    f = braze.compile(lorenz_arrays, target="cpu", static_argnames=("n",))
    args = (1.0, 1.0, 1.0, 0.01)
    for got, want in zip(f(*args, n=200), lorenz_arrays(*args, n=200)):
        np.testing.assert_array_equal(got, want)
    graph = reroll(_inlined(f.lower(*args, n=200).ir))
    (node,) = _rolled_nodes(graph)
    assert len(node.aval) == 3 and len(node.kw["spec"].lockstep) == 2


@pytest.mark.parametrize("name", ["recorded_rk4", "forced_oscillator"])
def test_a_loop_carrying_scalars_and_storing_them_rolls_into_one_loop(name):
    """A time loop whose state is scalars (a 2-vector taken apart, or two
    Python floats) and which stores them each step (``path[i + 1] = state``) is
    one stepped ``rolled`` node: the scalars carried, the stores made, in order;
    every iteration alike is in it."""
    fn, make, _ = CASES[name]
    args = make(np.float64, np.random.default_rng(5))
    graph = reroll(_inlined(braze.compile(fn, target="cpu").lower(*args).ir))
    (node,) = _rolled_nodes(graph)
    spec = node.kw["spec"]
    assert len(spec.carried) == 2 and len(node.aval) == 3 and not spec.independent
    assert node.kw["table"].rows.shape[0] >= 37
    lowered = braze.compile(fn, target="cpu").lower(*args)
    assert lowered.counts["rolled loops"] == 1 and lowered.counts["kernels"] <= 2, lowered.counts


def test_a_huge_sin_argument_in_a_rolled_loop_reruns_its_iteration_with_libm():
    """A rolled iteration's sin/cos beyond the vector range (|x| >= 2**48) is
    computed again with libm, as the unrolled kernel's launcher would."""
    def spiral(x0):
        x = x0
        out = np.zeros(60)
        for i in range(60):
            x = x * 1.9
            out[i] = np.sin(x) + np.cos(x)
        return out

    x0 = np.float64(3e7)  # past 2**48 after 25 steps
    f = braze.compile(spiral, target="cpu")
    assert f.lower(x0).counts["rolled loops"] == 1
    got, want = f(x0), spiral(x0)
    assert np.abs(x0 * 1.9 ** 60) > 2.0 ** 48
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * np.finfo(np.float64).eps)


def test_a_loop_carrying_scalars_and_storing_nothing_rolls_into_one_loop():
    """RK4 on ``x, y, z`` returning its last state: each result element followed
    back through the same op gives a value per iteration, and the program
    between two of them is an iteration; alike ones are one stepped loop with
    no array, whose results are its last values."""
    s = np.array([1.0, 1.0, 1.0])
    graph = reroll(_inlined(braze.compile(final_state_rk4, target="cpu").lower(s).ir))
    (node,) = _rolled_nodes(graph)
    spec = node.kw["spec"]
    assert spec.arrayless and len(node.aval) == len(spec.carried) >= 3
    assert node.kw["table"].rows.shape[0] >= 35
    f = braze.compile(final_state_rk4, target="cpu")
    assert f.lower(s).counts["rolled loops"] == 1
    np.testing.assert_array_equal(f(s), final_state_rk4(s))


# ---------------------------------------------------------------- generated time loops

_UPDATES = (  # how a state element is stepped from the state (s), the forcing (f) and the step (i)
    lambda s, j, f, i: s[j] + 0.01 * (s[(j + 1) % len(s)] - s[j]),
    lambda s, j, f, i: s[j] * 0.99 - 0.02 * s[(j + 1) % len(s)] * s[j] + f,
    lambda s, j, f, i: (s[j] + f) / (1.5 + s[(j + 2) % len(s)] * s[(j + 2) % len(s)]),
    lambda s, j, f, i: s[j] - 0.001 * i * s[j],
    lambda s, j, f, i: np.where(s[j] > 0, s[j] * 0.5, s[j] + 1.0),
)


def _time_loop(kinds, store, peek, as_vector):
    """A time loop over a state of ``len(kinds)`` scalars (or one small vector,
    taken apart by braze), each stepped by ``_UPDATES[kind]``, storing the state
    every step (``store``), read half way by what follows (``peek``)."""
    def loop(x0, forcing):
        state = [x0[j] for j in range(len(kinds))]
        path = np.zeros((forcing.shape[0], len(kinds)), x0.dtype)
        seen = x0[0] * 0
        for i in range(forcing.shape[0]):
            f = forcing[i]
            new = [_UPDATES[k](state, j, f, i) for j, k in enumerate(kinds)]
            state = list(np.array(new)) if as_vector else new
            if store:
                if as_vector:
                    path[i] = np.array(state)
                else:
                    for j in range(len(kinds)):
                        path[i, j] = state[j]
            if peek and i == forcing.shape[0] // 2:
                seen = state[0]
        return np.array(state) + seen, path

    return loop


@pytest.mark.parametrize("seed", range(8))
def test_generated_time_loops_match_numpy_bit_for_bit(seed):
    """Time loops carrying 1-3 scalars, with and without per-step stores, a
    mid-loop read and a state vector: compiled (rolled where they roll) they
    give NumPy's bits, as unrolled they do."""
    rng = np.random.default_rng(seed)
    kinds = tuple(int(k) for k in rng.integers(0, len(_UPDATES), rng.integers(1, 4)))
    store, peek, as_vector = (bool(b) for b in rng.integers(0, 2, 3))
    dtype = (np.float64, np.float32)[seed % 2]
    loop = _time_loop(kinds, store, peek, as_vector)
    x0 = rng.uniform(-1, 1, len(kinds)).astype(dtype)
    forcing = rng.uniform(-0.1, 0.1, 30).astype(dtype)
    want = loop(x0, forcing)
    f = braze.compile(loop, target="cpu")
    got = f(x0, forcing)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w, err_msg=f"kinds {kinds} store {store} peek {peek} vector {as_vector}")
    if store and len(kinds) > 1:  # (several values carried and stored: a stepped loop, at least one)
        assert f.lower(x0, forcing).counts["rolled loops"] >= 1


def eliminate_below(A, b):
    """Row operations of Gaussian elimination, written as in a textbook: each
    ``A[i, k:] -= ...`` updates a view of the row (which writes through), then
    Python stores the view back into ``A``."""
    A, b = A.copy(), b.copy()
    n = len(b)
    for k in range(n - 1):
        for i in range(k + 1, n):
            f = A[i, k] / A[k, k]
            A[i, k:] -= f * A[k, k:]
            b[i] -= f * b[k]
    return A, b


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_an_augmented_row_update_stores_each_region_once(target):
    rng = np.random.default_rng(8)
    A, b = rng.random((12, 12)) + 12 * np.eye(12), rng.random(12)
    f = braze.compile(eliminate_below, target=target)
    for got, want in zip(f(A, b), eliminate_below(A, b)):
        np.testing.assert_array_equal(got, want)
    stores = sum(n.op == "update_slice" for n in f.lower(A, b).ir.nodes)
    assert stores <= 2 * (12 * 11 // 2), stores  # (one per statement: not the view's write and then the store)


def test_rows_and_elements_updated_in_lockstep_roll_into_one_loop_for_every_extent():
    """Each k's sweep ``A[i, k:] -= f * A[k, k:]`` calls two kernels (the
    factor's, an element, and the row's: two domains); the sweeps differ in
    the row's extent, which shrinks steadily: all of them are one loop over
    (k, i), the extent a column of its table."""
    from braze.targets.cpu_reroll import compile_template

    rng = np.random.default_rng(9)
    A, b = rng.random((24, 24)) + 24 * np.eye(24), rng.random(24)
    A[20, 22], b[22] = np.inf, np.nan  # (late: the rows before stay finite)
    f = braze.compile(eliminate_below, target="cpu")
    with np.errstate(invalid="ignore"):
        expected = eliminate_below(A, b)
    for got, want in zip(f(A, b), expected):
        np.testing.assert_array_equal(got, want)
    assert f.lower(A, b).counts["rolled loops"] == 1
    graph = reroll(_inlined(f.lower(A, b).ir), compile_template)
    (node,) = _rolled_nodes(graph)
    assert node.kw["table"].rows.shape[0] == 24 * 23 // 2 and node.kw["spec"].varying
    assert "kernel1_serial(" in node.kw["spec"].runner.source


def test_a_viterbi_decoder_rolls_both_loops():
    """The forward sweep updates ``delta`` and ``psi`` in lockstep (their chains
    apart in the program: ``path``'s head comes between), each step's row of
    ``log_b`` picked by the observation it reads (a gather by a scalar, checked
    as NumPy's indexing is), ``delta[t - 1][:, None]`` a window's axes moved and
    the max and argmax over axis 0 a transposed loop; the backtrack reads the
    element it stored (``path[t] = psi[t + 1, path[t + 1]]``). Both are one
    rolled loop, bit for bit NumPy's."""
    from programs.classic import _hmm, viterbi

    log_a, log_b, log_pi, obs = _hmm(40)
    f = braze.compile(viterbi, target="cpu")
    for o in (obs, (obs + 2) % 5, obs - 5):  # (negative observations wrap, as NumPy's indexing does)
        got, want = f(log_a, log_b, log_pi, o), viterbi(log_a, log_b, log_pi, o)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]
    assert f.lower(log_a, log_b, log_pi, obs).counts["rolled loops"] == 2
    bad = obs.copy()
    bad[20] = 5
    with pytest.raises(IndexError):
        viterbi(log_a, log_b, log_pi, bad)
    with pytest.raises(IndexError):
        f(log_a, log_b, log_pi, bad)


def test_a_chain_storing_a_call_per_iteration_is_not_tried_and_one_call_stored_still_rolls():
    import scipy.linalg

    from braze import reroll

    L = np.triu(np.random.default_rng(3).random((4, 4))) + 2

    def per_row(b):
        out = np.empty_like(b)
        for i in range(b.shape[0]):
            out[i] = scipy.linalg.solve_triangular(L, b[i])
        return out

    def one_call(b):
        x = scipy.linalg.solve_triangular(L, b[0])
        out = np.empty_like(b)
        for i in range(b.shape[0]):
            out[i] = x * i
        return out

    b = np.random.default_rng(4).random((12, 4))
    for fn, called in ((per_row, True), (one_call, False)):
        f = braze.compile(fn, target="cpu")
        np.testing.assert_allclose(f(b), fn(b), rtol=1e-13)
        chains = [n for n in braze.trace(fn, b).nodes if n.op == "update_slice"]
        first = [n for n in chains if n.inputs[0].op != "update_slice"][0]
        chain = [first]
        while True:
            after = [n for n in chains if n.inputs[0] is chain[-1]]
            if not after:
                break
            chain.append(after[0])
        assert reroll._called_each_time(chain) is called
    assert f.lower(b).counts["rolled loops"] == 1  # (one_call: x * i, i = 0..11, one loop)
    tried = []
    real = reroll._iteration_of
    try:
        reroll._iteration_of = lambda *a, **k: tried.append(1) or real(*a, **k)
        braze.compile(per_row, target="cpu").lower(b)
    finally:
        reroll._iteration_of = real
    assert not tried  # (not cut into iterations at all)
