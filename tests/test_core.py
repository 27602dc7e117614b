"""The core layer: the op table and its rules check, the context stack, eager use, the intercepted NumPy calls."""
import threading

import numpy as np
import pytest

import braze
import braze.numpy as bnp
from braze import core
from braze.ops.elementwise import ELEMENTWISE_OPS


def test_every_op_has_every_rule():
    assert core.missing_rules() == []
    assert len(core.PRIMITIVES) > 70
    core.check_rules()  # (what braze runs at import)


@pytest.mark.parametrize("missing", ["vjp", "scalar", "view"])
def test_the_rules_check_fails_loudly_when_an_op_lacks_a_rule(missing):
    """The check braze runs at import can fail: an op declared without a rule a
    layer needs (autodiff's vjp, the targets' scalar code, a layout op's view
    rule) makes it raise, naming the op and the rule."""
    name = f"test_op_without_{missing}"
    rules = {"vjp": lambda ct, x, *, out: (ct,), "scalar": lambda a, t: a}
    rules.pop(missing, None)
    flags = ("layout",) if missing == "view" else ()
    core.declare(name, "elementwise", abstract=lambda x: x, impl=lambda x: x, flags=flags, **rules)
    try:
        with pytest.raises(RuntimeError, match=name):
            core.check_rules()
    finally:
        for table in (core.PRIMITIVES, core.KIND, core.ABSTRACT, core.NUMPY_IMPL, core.VJP):
            table.pop(name, None)
    core.check_rules()


def test_op_groups_come_from_the_ops_flags():
    from braze import fusion, paired, passes

    assert fusion.LAYOUT_OPS == core.with_flag("layout") >= {"reshape", "transpose", "slice", "broadcast_to"}
    assert passes._IDENTITY_OPS == core.with_flag("identity")
    assert "exp" in paired._RECOMPUTABLE and "matmul" not in paired._RECOMPUTABLE


def test_every_elementwise_op_is_reachable_from_braze_numpy():
    for op in ELEMENTWISE_OPS:
        if op in ("convert", "where", "clip", "erf", "scalar_power"):  # (scalar_power: the ** of a NumPy scalar)
            continue
        assert op in bnp.UFUNCS, op


class Recorder:
    """A context that records and delegates to NumPy: ops never know which runs them."""

    def __init__(self):
        self.calls = []

    def process(self, op, args, params):
        self.calls.append(op)
        return core.NUMPY_IMPL[op](*args, **params)


def test_bind_goes_to_the_innermost_context():
    rec = Recorder()
    core.push_context(rec)
    try:
        y = bnp.mean(bnp.tanh(np.ones(3)))
    finally:
        core.pop_context(rec)
    assert rec.calls == ["tanh", "convert", "reduce_sum", "divide", "convert"]
    assert y == pytest.approx(np.tanh(1.0))


def test_contexts_must_pop_in_order():
    a, b = Recorder(), Recorder()
    core.push_context(a)
    core.push_context(b)
    with pytest.raises(braze.TraceError, match="out of order"):
        core.pop_context(a)
    core.pop_context(b)
    core.pop_context(a)
    assert isinstance(core.current_context(), core.EagerContext)


def test_eager_functions_return_numpy_arrays():
    x = np.linspace(-2, 2, 12).reshape(3, 4).astype(np.float32)
    cases = [
        (bnp.exp(x), np.exp(x)),
        (bnp.sum(x, axis=1), np.sum(x, axis=1)),
        (bnp.var(x, axis=0, ddof=1), np.var(x, axis=0, ddof=1)),
        (bnp.reshape(x, (4, 3)), x.reshape(4, 3)),
        (bnp.concatenate([x, x], axis=1), np.concatenate([x, x], axis=1)),
        (bnp.einsum("ij,kj->ik", x, x), np.einsum("ij,kj->ik", x, x)),
        (bnp.where(x > 0, x, 0.0), np.where(x > 0, x, 0.0)),
        (bnp.zeros((2, 3), np.int32), np.zeros((2, 3), np.int32)),
    ]
    for got, want in cases:
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)
    z = bnp.zeros(3)
    z[0] = 1  # eagerly created arrays are writable, like NumPy's
    assert z[0] == 1


def test_eager_composite_runs_its_body():
    @braze.composite("braze.test.core_double")
    def double(x, *, k=2):
        return x * k

    np.testing.assert_array_equal(double(np.arange(3), k=3), [0, 3, 6])


def test_tracer_that_escapes_its_trace_is_an_error():
    class Box:  # (a list the function names would be watched: compiled, f would run as NumPy)
        leaked = []

    leaked = Box.leaked

    def f(x):
        Box.leaked.append(x)
        return x + 1

    braze.compile(f, target="generic")(np.ones(2))
    assert type(leaked[0]).__name__ == "Tracer"
    h = braze.compile(lambda y: y + leaked[0], target="generic")
    with pytest.raises(braze.TraceError, match="escaped"):
        h(np.ones(2))


def test_alloc_hook_only_affects_the_tracing_thread():
    """Tracing threads get traced buffers; other threads get NumPy's arrays at the same time."""
    barrier = threading.Barrier(5)
    errors = []

    def fill(x):
        out = np.zeros((2,) + x.shape, x.dtype)
        out[0] = x
        out[1] = np.exp(x)
        barrier.wait(timeout=10)  # every thread is inside a trace here
        return out

    def tracer_thread(n):
        try:
            x = np.linspace(0, 1, n, dtype=np.float32)
            got = braze.compile(fill, target="generic")(x)
            np.testing.assert_allclose(got, np.stack([x, np.exp(x)]), rtol=1e-6)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def plain_thread():
        try:
            barrier.wait(timeout=10)
            z = np.zeros(4)
            assert type(z) is np.ndarray and np.broadcast_shapes((2, 1), (3,)) == (2, 3)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=tracer_thread, args=(n,)) for n in (3, 4, 5, 6)]
    threads.append(threading.Thread(target=plain_thread))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert np.zeros is braze.intercept._originals["zeros"]  # restored after the last trace


def test_buffer_from_untraced_constructor_gives_a_clear_error():
    from numpy import zeros as untraced_zeros  # bound before tracing: NumPy's own

    def f(x):
        out = untraced_zeros(x.shape)
        out[:] = x
        return out

    with pytest.raises(braze.ConcretizationError, match="np.zeros"):
        braze.compile(f, target="generic", fullgraph=True)(np.ones(3))  # (else: a graph break)


def test_captured_arrays_are_read_at_every_call():
    table = np.arange(4.0)
    f = braze.compile(lambda x: x * table, target="generic")
    np.testing.assert_array_equal(f(np.ones(4)), [0, 1, 2, 3])
    table[:] = 10
    np.testing.assert_array_equal(f(np.ones(4)), [10, 10, 10, 10])
    assert f.cache_info().misses == 1


def test_failed_trace_leaves_no_state_behind():
    f = braze.compile(lambda x, n: x.reshape(n, -1) + 1, target="generic")
    with pytest.raises(braze.ShapeError):
        f(np.ones(6), 4)
    assert f.cache_info().size == 0
    assert core.context_stack()[-1].__class__ is core.EagerContext
    assert np.zeros is braze.intercept._originals["zeros"]
    assert f(np.ones(6), 3).shape == (3, 2)


def test_divmod_matches_numpy():
    x = np.array([-7, -1, 0, 5, 9], np.int32)
    f = braze.compile(lambda x: (divmod(x, 3), np.divmod(x, -4), divmod(2.5, x + 10)), target="generic")
    for got, want in zip(f(x), (divmod(x, 3), np.divmod(x, -4), divmod(2.5, x + 10))):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
