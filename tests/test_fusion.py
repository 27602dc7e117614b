"""The fusion pass (no compiler): which ops land in which kernel."""
import numpy as np
import pytest

import braze
from braze.fusion import Extern, Loop, View, fuse
from braze.passes import inline_composites, run_passes

from _compare import assert_same


def program(fn, *args):
    graph = braze.trace(fn, *args)
    return fuse(run_passes(inline_composites(graph))[0])


def loops(p):
    return [s for s in p.steps if isinstance(s, Loop)]


X = np.ones((8, 16), np.float32)
G = np.ones(16, np.float32)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x):
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def logsumexp(x):
    m = x.max(-1)
    return m + np.log(np.exp(x - m[:, None]).sum(-1))


def layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def rms_norm(x, g):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


@pytest.mark.parametrize("fn,args", [
    (softmax, (X,)), (log_softmax, (X,)), (logsumexp, (X,)), (layer_norm, (X, G, G)), (rms_norm, (X, G)),
    (lambda a, b, c, d: a * b + c * np.exp(-d), (X, X, X, X)),
])
def test_row_patterns_are_one_kernel(fn, args):
    p = program(fn, *args)
    assert len(loops(p)) == 1, p.describe()
    assert not [s for s in p.steps if isinstance(s, Extern)]


def test_softmax_kernel_has_three_passes_worth_of_ops():
    (k,) = loops(program(softmax, X))
    assert [m.op for m in k.members] == ["reduce_max", "subtract", "exp", "reduce_sum", "divide"]
    assert k.domain == (8, 16) and k.ninner == 1 and k.perm is None


def test_matmul_is_extern_and_the_elementwise_after_it_fuses():
    w = np.ones((16, 4), np.float32)
    p = program(lambda x, w, b: np.tanh(x @ w + b) * 2.0, X, w, np.ones(4, np.float32))
    kinds = [type(s).__name__ for s in p.steps]
    assert kinds == ["Extern", "Loop"], p.describe()
    assert [m.op for m in p.steps[1].members] == ["add", "tanh", "multiply"]


def test_reduction_over_leading_axis_is_a_transposed_loop():
    (k,) = loops(program(lambda x: (x * 2).sum(axis=0), X))
    assert k.perm == (1, 0) and k.domain == (16, 8)


def test_layout_ops_over_inputs_are_views_not_copies():
    p = program(lambda x: x.T[::2] + 1.0, X)
    assert [type(s) for s in p.steps] == [View, View, Loop]


def test_siblings_reading_one_input_share_a_kernel():
    p = program(lambda x: (x.max(-1), x.min(-1), x.mean(-1), x.var(-1), x * 2), X)
    assert len(loops(p)) == 1


def test_values_used_twice_are_computed_once():
    p = program(lambda x: (np.exp(x) * 2, np.exp(x).sum(axis=-1)), X)
    ops = [m.op for k in loops(p) for m in k.members]
    assert ops.count("exp") == 1


def test_cross_entropy_is_two_kernels_and_a_gather():
    def xent(x, y):
        m = x.max(-1, keepdims=True)
        lse = np.log(np.exp(x - m).sum(-1, keepdims=True)) + m
        return (lse - np.take_along_axis(x, y[:, None], -1)).mean()

    p = program(xent, X, np.zeros(8, np.int64))
    assert len(loops(p)) == 2
    order = [s.name for s in p.steps]
    extern = next(s for s in p.steps if isinstance(s, Extern))
    last = loops(p)[-1]
    assert order.index(extern.name) < order.index(last.name)  # producers run first


def test_composites_are_inlined_and_fused():
    @braze.composite("braze.test.fusion_softmax")
    def sm(x, *, axis=-1):
        return softmax(x)

    p = program(lambda x: sm(x) * 3.0, X)
    assert len(loops(p)) == 1


def test_reshape_of_a_leaf_is_a_view_not_a_kernel_member():
    """Found by fuzzing: (5,) -> (5,1) inside a kernel indexed the leaf with the
    inner index."""
    def prog(x):
        t0 = x.sum(axis=-1)[..., None] * 1.0 + 0 * x
        return t0.sum() + 0 * t0

    x = np.arange(25, dtype=np.int32).reshape(5, 5)
    p = program(prog, x)
    for k in loops(p):
        for m in k.members:
            assert m.op not in ("reshape", "broadcast_to") or any(m.inputs[0] is n for n in k.members)
    np.testing.assert_array_equal(braze.compile(prog, target="cpu")(x), prog(x))


def test_small_vectors_built_from_scalars_are_computed_as_scalars():
    """np.array([x, y, z]) stepped in time: the elementwise work over the three
    elements is done element by element (bit for bit NumPy's) and the scalars
    taken out again are the ones that went in: no concatenate or slice between
    steps, one concatenate at the end."""

    def step(state, dt, steps):
        for _ in range(steps):
            x, y, z = state[0], state[1], state[2]
            k = np.array([10.0 * (y - x), x * (28.0 - z) - y, x * y - 2.5 * z])
            state = state + dt * k
        return state

    for dtype in (np.float64, np.float32):
        state = np.array([1.0, 1.5, 20.0], dtype)
        want = step(state, 0.01, 30)
        for target in ("generic", "cpu"):
            f = braze.compile(step, target=target, static_argnames=("steps",))
            got = f(state, 0.01, steps=30)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    plan = braze.compile(step, target="cpu", static_argnames=("steps",)).lower(state, 0.01, steps=30).plan
    assert plan.count("concatenate") == 1 and "slice" not in plan, plan


def test_a_kernel_reading_what_another_computes_joins_it():
    """Black-Scholes' put reads the CDFs the call's chain computes: one kernel,
    two outputs, the CDFs never written out."""
    def prices(S, X, T):
        d1 = (np.log(S / X) + 0.02 * T) / np.sqrt(T)
        c1 = np.where(d1 > 0, 1.0 - np.exp(-d1 * d1), np.exp(-d1 * d1))
        c2 = np.where(d1 > 1, 1.0 - np.exp(-d1), np.exp(d1 - 1))
        return S * c1 - X * c2, X * (1.0 - c2) - S * (1.0 - c1)

    r = np.random.default_rng(0)
    S, X, T = r.uniform(5, 30, 500), r.uniform(1, 100, 500), r.uniform(0.25, 10, 500)
    f = braze.compile(prices, target="cpu")
    for got, want in zip(f(S, X, T), prices(S, X, T)):
        assert_same(got, want)  # (exp and log within the contract's few ulps)
    lowered = f.lower(S, X, T)
    assert lowered.counts["kernels"] == 1, lowered.plan


def test_a_consumer_that_also_reads_the_producer_through_a_reduction_stays_apart():
    def f(x):
        y = np.exp(x) * 2.0          # kernel a
        s = y.sum()                  # a reduction of a's value
        return y * 3.0 - s / y       # reads a directly and through the reduction

    x = np.linspace(-2, 2, 301)
    np.testing.assert_allclose(braze.compile(f, target="cpu")(x), f(x), rtol=1e-13)


def nbody_forces(pos, mass, soft=0.01):
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d ** 2).sum(-1) + soft ** 2
    return (d * (mass[None, :, None] * (r2 ** -1.5)[:, :, None])).sum(1)


def test_a_middle_axis_sum_over_a_short_tail_fuses_with_what_it_sums():
    """The N-body sum over j of an (i, j, 3) value: a transposed kernel that
    recomputes the pairwise differences from ``pos`` and the weights
    ``mass[j] * w[i, j]`` at each element, instead of a NumPy reduction over a
    materialized (n, n, 3) product; the (n, n, 3) differences are never written."""
    r = np.random.default_rng(1)
    pos, mass = r.standard_normal((160, 3)), r.random(160) + 0.5   # 76,800 elements: a "big" reduction
    f = braze.compile(nbody_forces, target="cpu")
    assert_same(f(pos, mass), nbody_forces(pos, mass))
    lowered = f.lower(pos, mass)
    assert "extern reduce_sum" not in lowered.plan, lowered.plan
    ks = loops(program(nbody_forces, pos, mass))
    (summed,) = [k for k in ks if k.perm]
    assert [m.op for m in summed.members].count("subtract") == 1  # recomputed, not read
    big = [o for k in ks for o in k.outputs if o.aval.shape == (160, 160, 3)]
    assert not big, [o.op for o in big]


def test_a_recomputed_value_the_program_returns_is_still_written():
    def f(pos, mass):
        d = pos[None, :, :] - pos[:, None, :]
        return d, (d * mass[None, :, None]).sum(1)

    r = np.random.default_rng(2)
    pos, mass = r.standard_normal((150, 3)), r.random(150)
    for got, want in zip(braze.compile(f, target="cpu")(pos, mass), f(pos, mass)):
        assert_same(got, want)


def upwind(q, vel, steps, dt=0.2):
    for _ in range(steps):
        v = vel[1:-1]
        dq = q[2:] - q[1:-1]
        q[1:-1] = q[1:-1] - np.where(v >= 0.0, (1.0 - v * dt) * dq, (1.0 + v * dt) * dq) * 0.5
    return q


def test_loop_invariant_cheap_values_are_recomputed_from_the_window_each_step_reads():
    """``1.0 - v * dt``, ``1.0 + v * dt`` and ``v >= 0`` do not change between
    iterations, so hash-consing computes them once, in the first step's kernel;
    reading three arrays back in every later step costs more than recomputing
    them from ``v``, which each step reads anyway (the limited-advection
    program's flux kernel: 1.07 -> 0.53 ms a step). Bitwise NumPy's values."""
    r = np.random.default_rng(4)
    q, vel = r.standard_normal((300, 40)), r.standard_normal((300, 40))
    f = braze.compile(upwind, target="cpu", static_argnames=("steps",))
    assert_same(f(q.copy(), vel, steps=4), upwind(q.copy(), vel, 4))
    ks = [k for k in loops(program(lambda q, vel: upwind(q, vel, 4), q, vel)) if k.domain == (298, 40)]
    assert len(ks) == 4
    for k in ks:
        assert {leaf.op for leaf in k.leaves} <= {"slice", "input"}, [leaf.op for leaf in k.leaves]
        assert len(k.outputs) == 1  # the first kernel no longer writes the invariants out
    for dtype, dt in ((np.float32, 0.2), (np.float64, np.float32(0.3))):  # weak and strong scalars
        qd, vd = q.astype(dtype), vel.astype(dtype)
        assert_same(braze.compile(upwind, target="cpu", static_argnames=("steps",))(qd.copy(), vd, steps=3, dt=dt),
                    upwind(qd.copy(), vd, 3, dt))


def test_a_column_sum_with_a_long_tail_stays_numpys_reduction():
    """Summing the rows of a big (n, m) array: the transposed loop would walk
    memory across rows; NumPy adds whole rows at a time."""
    x = np.random.default_rng(3).standard_normal((400, 300))
    f = braze.compile(lambda x: (x * 2.0).sum(0), target="cpu")
    assert_same(f(x), (x * 2.0).sum(0))
    assert "extern reduce_sum" in f.lower(x).plan


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_middle_axis_reductions_over_short_tails_match_numpy(dtype):
    r = np.random.default_rng(4)
    x = (r.random((90, 300, 4)) * 100).astype(dtype)  # (no cancellation: float32 sums agree to ulps)
    if dtype != np.int64:
        x[3, 7, 1], x[5, :, 2], x[8, 9, 3] = np.nan, np.inf, -np.inf
    w = (r.random((90, 300, 1)) * 3).astype(dtype)
    fns = [lambda x, w: (x * w).sum(1), lambda x, w: (x + w).max(1), lambda x, w: (x - w).min(axis=1),
           lambda x, w: (x * w).sum(axis=(0, 1))]
    for fn in fns:
        assert_same(braze.compile(fn, target="cpu")(x, w), fn(x, w))
