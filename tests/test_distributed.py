"""Compiled functions over Dask arrays, on a real cluster: a
``dask.distributed.LocalCluster`` of 2 worker processes that compile their
block programs from braze's persistent cache. Results equal NumPy's on the
gathered arrays; gradients work through the same partitioning."""
import os

import numpy as np
import pytest

import braze
from _compare import central_differences

da = pytest.importorskip("dask.array", reason="the dask extra is not installed (pip install -e '.[dask]')")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """2 worker processes sharing this session's braze cache directory."""
    os.environ.setdefault("BRAZE_CACHE_DIR", str(tmp_path_factory.mktemp("braze-cache")))
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       memory_limit="1GiB")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def chain(a, b):
    return np.tanh(a) * b + np.sqrt(np.abs(a)) * 2.0


def weighted_total(a, b):
    return np.sum(np.exp(-a * a) * b)


def mean_square(a):
    return np.sum(a * a) / a.size  # (a constant from the extent: the reduced axes stay whole)


def mlp(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def column_max(a):
    return a.max(axis=0), a.min(axis=1)


def two_layers(x, w1, w2):
    h = x @ w1
    h += 1.0  # (updates the product in place: Dask's block of it must not change)
    return np.tanh(h) @ w2, x.T @ x  # (a Gram matrix: contracted over the chunked rows)


def batched(q, r):
    return (q @ r) * 2 + 1


def contractions(x, w, t):
    return np.einsum("ij,jk->ik", x, w) + np.tensordot(t, w, axes=([1], [0])).sum(axis=1)


def first_only(x, y):
    return x * 2  # (y is not read)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((300, 40))
Y = RNG.standard_normal((300, 40))
W, B = RNG.standard_normal((40, 8)), RNG.standard_normal(8)

CASES = {
    "softmax rows": (softmax, [X.astype(np.float32)], [(64, 10)]),
    "elementwise chain": (chain, [X, Y], [(100, 20), (64, 40)]),
    "tree reduction": (weighted_total, [X, Y], [(64, 16), (100, 40)]),
    "mean (whole)": (mean_square, [X], [(64, 16)]),
    "mlp rows, numpy weights": (mlp, [X, W, B], [(50, 40), None, None]),
    "two reductions": (column_max, [X], [(64, 16)]),
    "blocked matmuls": (two_layers, [X, RNG.standard_normal((40, 30)), RNG.standard_normal((30, 5))],
                        [(64, 16), None, (10, 5)]),
    "batched int matmul": (batched, [RNG.integers(-5, 5, (4, 30, 20)),
                                     RNG.integers(-5, 5, (4, 20, 6)).astype(np.int32)], [(2, 10, 20), (1, 5, 6)]),
    "blocked einsum": (contractions, [X, RNG.standard_normal((40, 30)), RNG.standard_normal((300, 40, 3))],
                       [(64, 16), None, (100, 20, 3)]),
    "an argument not read": (first_only, [X, Y], [(100, 40), (100, 40)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_dask_arrays_in_dask_arrays_out_on_the_cluster(client, name):
    fn, args, chunks = CASES[name]
    dargs = [da.from_array(a, chunks=c) if c else a for a, c in zip(args, chunks)]
    f = braze.compile(fn, target="cpu")
    got = f(*dargs)
    want = fn(*args)
    got_leaves = got if isinstance(got, tuple) else (got,)
    want_leaves = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, da.Array)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
        value = g.compute()
        assert value.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(value, w, rtol=1e-5 if value.dtype == np.float32 else 1e-10, atol=1e-12)


def test_explain_says_which_axes_were_made_whole_and_why():
    f = braze.compile(softmax, target="cpu")
    text = braze.explain(f, da.from_array(X, chunks=(100, 10)))
    assert "argument 0 axis 1: rechunked to one chunk (reduce_max along the axis)" in text
    assert "axis 0" not in text
    text = braze.explain(braze.compile(weighted_total, target="cpu"), da.from_array(X, chunks=(100, 10)), Y)
    assert "tree reduction" in text and "rechunked" not in text


def test_matmuls_run_as_dasks_blocked_matmul_and_the_rest_keeps_its_chunks():
    x = da.from_array(X, chunks=(50, 40))
    f = braze.compile(mlp, target="cpu")
    got = f(x, W, B)
    assert got.chunks == ((50,) * 6, (8,))  # (the rows stay chunked: no block holds all of x)
    np.testing.assert_allclose(got.compute(scheduler="threads"), mlp(X, W, B), rtol=1e-12)
    text = braze.explain(f, x, W, B)
    assert "matmul 0: (300, 40) @ (40, 8) as Dask's blocked matmul" in text and "rechunked" not in text

    def same_product_twice(x, w):
        return x @ w, np.exp(x @ w)

    g = braze.compile(same_product_twice, target="cpu")
    p, q = g(x, W)
    np.testing.assert_allclose(q.compute(scheduler="threads"), np.exp(X @ W), rtol=1e-12)
    assert braze.explain(g, x, W).count("blocked matmul") == 1  # (one node in the graph: one Dask matmul)


def test_gradients_through_blocked_matmuls():
    def loss(x, w):
        return np.sum(np.tanh(x @ w))

    w = RNG.standard_normal((40, 30))
    grad = braze.compile(braze.grad(loss, argnums=(0, 1)), target="cpu")
    x, wd = da.from_array(X, chunks=(64, 16)), da.from_array(w, chunks=(16, 10))
    gx, gw = grad(x, wd)
    assert gx.chunks == x.chunks and gw.chunks == wd.chunks
    t = 1 - np.tanh(X @ w) ** 2
    np.testing.assert_allclose(gx.compute(scheduler="threads"), t @ w.T, rtol=1e-10)
    np.testing.assert_allclose(gw.compute(scheduler="threads"), X.T @ t, rtol=1e-10)
    assert braze.explain(grad, x, wd).count("blocked matmul") == 3  # (the product, and one per cotangent)


def positive_roots(x):
    return np.sqrt(x[x > 0])  # (a length only the data decides)


def branchy(x):
    if x.sum() > 0:  # (control flow on a traced value)
        return x * 2
    return x[:5] * 3


def histogram_counts(x):
    return np.histogram(x, bins=5)[0], np.unique(np.round(x))


@pytest.mark.parametrize("fn", [positive_roots, branchy, histogram_counts])
def test_graph_breaks_run_the_whole_program_as_one_task_with_unknown_extents(fn):
    x = da.from_array(X, chunks=(100, 20))
    f = braze.compile(fn, target="cpu")
    got = f(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), fn(X) if isinstance(got, tuple) else (fn(X),)):
        assert all(np.isnan(d) for d in g.shape)  # (never an extent the data may contradict)
        np.testing.assert_array_equal(g.compute(scheduler="threads"), w)
    assert "graph breaks: the whole program runs as one task" in braze.explain(f, x)


def test_each_call_follows_its_own_data_through_a_branch():
    f = braze.compile(branchy, target="cpu")
    for data in (X + 1, X - 1):  # (sums of either sign: both branches)
        got = f(da.from_array(data, chunks=(100, 20))).compute(scheduler="threads")
        np.testing.assert_array_equal(got, branchy(data))


def test_writing_into_a_dask_argument_is_refused():
    def bump(x):
        x += 1
        return x

    with pytest.raises(braze.distributed.DaskPlanError, match="writes into its argument"):
        braze.compile(bump, target="cpu")(da.from_array(X, chunks=(100, 20)))


def test_a_constant_made_from_a_chunked_extent_keeps_that_axis_whole():
    def centered(a):
        return a - a.sum() / a.shape[0] / a.shape[1]  # (NumPy code computing a mean by hand)

    f = braze.compile(centered, target="cpu")
    got = f(da.from_array(X, chunks=(64, 16)))
    np.testing.assert_allclose(got.compute(scheduler="threads"), centered(X), rtol=1e-12)


def test_gradients_over_dask_arrays_on_the_cluster(client):
    def loss(x, y):
        return np.sum(np.tanh(x) * y)

    grad = braze.compile(braze.grad(loss), target="cpu")
    got = grad(da.from_array(X, chunks=(64, 20)), da.from_array(Y, chunks=(64, 20)))
    assert isinstance(got, da.Array) and got.chunks == ((64, 64, 64, 64, 44), (20, 20))
    np.testing.assert_allclose(got.compute(), (1 - np.tanh(X) ** 2) * Y, rtol=1e-12)
    small = X[:5, :3]
    value_and_grad = braze.compile(braze.value_and_grad(loss), target="cpu")
    v, g = value_and_grad(da.from_array(small, chunks=(2, 3)), small * 2)
    np.testing.assert_allclose(v.compute(), loss(small, small * 2), rtol=1e-12)
    np.testing.assert_allclose(g.compute(), central_differences(lambda x: loss(x, small * 2), small), rtol=1e-6)


def test_workers_compile_the_block_programs_with_the_clients_cache_directory(client):
    f = braze.compile(chain, target="cpu")
    np.testing.assert_allclose(f(da.from_array(X, chunks=(150, 40)), Y).compute(), chain(X, Y), rtol=1e-12)
    directories = client.run(lambda: os.environ.get("BRAZE_CACHE_DIR"))
    assert set(directories.values()) == {os.environ["BRAZE_CACHE_DIR"]}

    def compiled_here():
        from braze import distributed as d

        return sorted(c.__name__ for c in d._compiled.values())

    assert all("call" in names for names in client.run(compiled_here).values())  # each worker compiled


def test_a_call_with_the_same_arguments_reuses_its_program():
    f = braze.compile(chain, target="cpu")
    x = da.from_array(X, chunks=(100, 40))
    f(x, Y).compute(scheduler="threads")
    before = len(braze.distributed._compiled)
    f(x, Y).compute(scheduler="threads")
    np.testing.assert_allclose(f(x, Y * 2).compute(scheduler="threads"), chain(X, Y * 2), rtol=1e-12)
    assert len(braze.distributed._compiled) == before


@pytest.mark.parametrize("fn", [lambda x: (x > 0).sum(dtype=np.int8), lambda x: (x > 0).sum(axis=0, dtype=np.int8),
                                lambda x: (x > 0).sum(axis=0, dtype=bool),
                                lambda x: (x > -9).prod(axis=0, dtype=np.int8),
                                lambda x: (x > 0).sum(dtype=np.uint8, keepdims=True)],
                         ids=["int8 sum", "int8 sum axis 0", "bool sum", "int8 prod", "uint8 keepdims"])
def test_chunked_sums_combine_in_the_dtype_asked_for(fn):
    """The parts of a sum(dtype=int8) combine in int8 (wrapping as the whole
    sum does), of a bool sum as their any: they were combined by NumPy's sum,
    which promotes to int64 (300 where NumPy's int8 sum wraps to 44)."""
    ones = np.ones((300, 3))
    f = braze.compile(fn, target="cpu")
    for chunks in ((100, 3), (300, 3), (70, 2)):
        got, want = f(da.from_array(ones, chunks=chunks)).compute(scheduler="threads"), fn(ones)
        assert got.dtype == want.dtype and np.array_equal(got, want), (chunks, got, want)


@pytest.mark.parametrize("fn", [lambda x: np.argmax(x), lambda x: np.argmin(x) + 1,
                                lambda x: x.argmax(axis=None, keepdims=True)])
def test_argmax_of_the_whole_array_is_its_flat_index(fn):
    f = braze.compile(fn, target="cpu")
    got = f(da.from_array(X, chunks=(64, 16))).compute(scheduler="threads")
    np.testing.assert_array_equal(got, fn(X))
