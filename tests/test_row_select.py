"""Row selections ``X[labels == k]`` (a mask of the leading axes) and the
k-means style program around them: a ``compress`` of rows whose guard is the
count alone (a sum of the mask, checked after the run); a sum (or mean) of the selected rows is a masked
sum over ``X`` (``passes.masked_sums``) that never gathers them, and the
masked sums of one ``X`` by several masks are one pass; a short sum another
reduction reads is additions inside that reduction's kernel
(``passes.unroll_short_sums``); two reductions of one computed row value are
one kernel (``fusion._merge_consumers``)."""
import warnings

import numpy as np
import pytest

import braze
from braze.fusion import Loop
from braze.pipeline import fused
from braze.suite.programs import kmeans_step as kmeans

from _compare import assert_same

TARGETS = ["generic", "cpu"]


def _clusters(n, k=5, dim=3, dtype=np.float64, seed=0):
    r = np.random.default_rng(seed)
    centers = r.standard_normal((k, dim)) * 4
    X = centers[r.integers(0, k, n)] + r.standard_normal((n, dim))
    return X.astype(dtype), X[:k].copy().astype(dtype)


def _loops(fn, *args):
    f = braze.compile(fn, target="cpu")
    f(*args)
    return [s for s in fused(f.lower(*args).ir).steps if isinstance(s, Loop)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kmeans_matches_numpy(target, dtype):
    f = braze.compile(kmeans, target=target)
    for seed in range(3):  # other counts each call: the guard traces again, never a stale count
        X, C = _clusters(300, dtype=dtype, seed=seed)
        for got, want in zip(f(X, C), kmeans(X, C)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == np.float64 else 1e-5)


def test_kmeans_on_cpu_is_two_passes_and_gathers_nothing():
    X, C = _clusters(20000)  # (480 KB: the masked sums merge to read X once; alike kernels reading
    f = braze.compile(kmeans, target="cpu")  # a small value stay apart, compiled once)
    f(X, C)
    steps = "\n".join(line for line in f.lower(X, C).plan.splitlines() if line[:1] in "kxv")
    assert "gather" not in steps and "host_call" not in steps and "compress" not in steps, steps
    loops = _loops(kmeans, X, C)
    (first,) = [k for k in loops if any(m.op == "argmin" for m in k.members)]
    assert {"reduce_min", "argmin"} <= {m.op for m in first.members}  # one row kernel: distances never written
    assert all(o.aval.shape != (20000, 5) for o in first.outputs)
    (sums,) = [k for k in loops if k.perm is not None]  # the 5 masked sums: one pass over X and the labels
    assert sum(m.op == "reduce_sum" for m in sums.members) == 5 and len(sums.leaves) == 2
    # the guards are the 5 counts, sums of the masks fused with them: no mask is written
    # (a kernel each at this size, one source; one pass over the labels at k-means' 400k)
    assert not any(o.aval.dtype == np.bool_ and o.aval.ndim for k in loops for o in k.outputs)
    counts = [k for k in loops if {m.op for m in k.members} == {"equal", "reduce_sum"}]
    assert sum(o.aval.shape == () and o.aval.dtype.kind == "i" for k in counts for o in k.outputs) == 5
    assert "check_count" not in steps


@pytest.mark.parametrize("target", TARGETS)
def test_masked_sums_and_means_of_rows(target):
    def stats(X, m):
        rows = X[m > 0.3]
        return rows.sum(0), rows.mean(0), rows.sum(axis=0, keepdims=True), rows.sum(0, dtype=np.float64)

    r = np.random.default_rng(1)
    f = braze.compile(stats, target=target)
    for X, m in [(r.standard_normal((40, 3)).astype(np.float32), r.random(40)),
                 ((r.standard_normal((30, 2, 4)) * 1e30), r.random(30)),
                 (r.integers(-5, 5, (25, 4)), r.random(25)),
                 (r.standard_normal((10, 3)), np.zeros(10))]:  # nothing selected: sums 0, mean NaN (NumPy warns)
        if X.dtype.kind == "f" and X.size:
            X.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (NumPy's "Mean of empty slice")
            want, got = stats(X, m), f(X, m)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5 if X.dtype == np.float32 else 1e-12)


def test_rows_by_a_mask_of_two_leading_axes():
    def pick(X, m):
        return X[m], X[m].sum(0)

    r = np.random.default_rng(2)
    X, m = r.standard_normal((6, 5, 3)), r.random((6, 5)) > 0.4
    for target in TARGETS:
        for got, want in zip(braze.compile(pick, target=target)(X, m), pick(X, m)):
            assert_same(got, want) if got.ndim > 1 else np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gradient_through_selected_rows_matches_finite_differences():
    def loss(X, m):
        rows = X[m]
        return (np.tanh(rows).sum(0) ** 2).sum() + rows.mean(0).sum()

    r = np.random.default_rng(3)
    X, m = r.standard_normal((12, 3)), r.random(12) > 0.5
    g = braze.compile(braze.grad(loss), target="cpu")(X, m)
    eps = 1e-6
    for i, j in [(0, 0), (3, 2), (11, 1), (int(np.argmax(m)), 1), (int(np.argmin(m)), 0)]:
        d = np.zeros_like(X)
        d[i, j] = eps
        num = (loss(X + d, m) - loss(X - d, m)) / (2 * eps)
        np.testing.assert_allclose(g[i, j], num, rtol=1e-6, atol=1e-8)


def test_short_sums_read_by_another_reduction_are_bitwise_numpys():
    """Below 8 elements NumPy's sum is a plain loop from 0: ``0 + x0 + x1 + x2``,
    which is what the unrolled additions compute (a sum of -0.0s is 0.0)."""
    def nearest(P, Q):
        d = ((P[:, None, :] - Q[None, :, :]) ** 2).sum(-1)
        return d.argmin(1), d.min(1), d.sum(-1)

    r = np.random.default_rng(4)
    for dtype in (np.float64, np.float32, np.int64):
        for dim in (1, 2, 3, 4):
            P = (r.standard_normal((50, dim)) * 10).astype(dtype)
            Q = (r.standard_normal((7, dim)) * 10).astype(dtype)
            if dtype != np.int64:
                P[0] = -0.0
                Q[0] = 0.0
                P[1, 0] = np.nan
            with np.errstate(invalid="ignore"):
                got, want = braze.compile(nearest, target="cpu")(P, Q), nearest(P, Q)
            assert_same(got[:2], want[:2], rtol=0, atol=0, check_signed_zero=True)
            assert_same(got[2], want[2])  # (a sum over 7: braze's own order)

    def raw(x):
        s = x.sum(-1)
        return s.max(1), s

    x = r.standard_normal((6, 5, 3))
    x[0] = -0.0  # a sum of -0.0s is 0.0: NumPy's loop starts from 0
    x[1, 2] = [np.inf, -np.inf, 1.0]
    assert_same(braze.compile(raw, target="cpu")(x), raw(x), rtol=0, atol=0, check_signed_zero=True)


def test_two_reductions_of_one_computed_row_are_one_kernel():
    def two(x):
        y = np.exp(x * 2.0)
        return y.max(1), y.argmin(1), y.sum(1)

    x = np.random.default_rng(5).standard_normal((300, 17))
    got, want = braze.compile(two, target="cpu")(x), two(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    (k,) = _loops(two, x)
    assert {"reduce_max", "argmin", "reduce_sum"} <= {m.op for m in k.members}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sums_by_label_add_each_row_once_into_its_labels_partial(dtype):
    """Sums of the rows whose label equals each of several constants (k-means'
    per-cluster sums) are one pass adding each element into its label's
    partial (``sg`` in the source), not a compare, select and add per sum; the
    same values as NumPy's, with NaN, -0.0, +-inf and labels no sum asks for."""
    def by_label(X, L):
        return [X[L == k].sum(axis=0) for k in (2, 3, 5, 7, 9)]

    r = np.random.default_rng(0)
    n = 120_000  # (the sums share one kernel from a quarter MiB of rows)
    X = r.standard_normal((n, 3)).astype(dtype)
    L = r.integers(-3, 12, n)
    X[L == 5] = -0.0
    X[10], L[10] = np.nan, 9
    X[20], L[20] = np.inf, 4  # selected by no sum: must reach none
    X[30], L[30] = -np.inf, 3
    f = braze.compile(by_label, target="cpu")
    exact = by_label(X.astype(np.float64), L)  # (float32: braze's error at most NumPy's)
    for k, (got, want) in enumerate(zip(f(X, L), by_label(X, L))):
        assert got.dtype == want.dtype
        if dtype == np.float64:
            np.testing.assert_allclose(got, want, rtol=1e-12)
        else:
            scale = np.abs(X[L == (2, 3, 5, 7, 9)[k]].astype(np.float64)).sum(axis=0)
            with np.errstate(invalid="ignore"):
                ok = np.abs(got - exact[k]) <= np.abs(want - exact[k]) + 1e-7 * scale
            assert np.all(ok | (np.isnan(got) & np.isnan(want)) | (got == want)), (got, want, exact[k])
        assert np.array_equal(np.signbit(got), np.signbit(want))
    source = f.lower(X, L).source
    assert "sg" in source and ("rt.neumaier" in source or dtype == np.float32)



def _host_has_avx():
    from llvmlite import binding as llvm
    return "+avx" in llvm.get_host_cpu_features().flatten()


def _distances_argmin(X, C):
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d.argmin(axis=1), d.min(axis=1)


@pytest.mark.skipif(not _host_has_avx(), reason="needs an x86 host with AVX (masked vector stores)")
@pytest.mark.parametrize("fn, args", [
    (_distances_argmin, (np.random.default_rng(1).random((3000, 4)), np.random.default_rng(2).random((8, 4)))),
    (np.argmax, (np.random.default_rng(3).random(100_000),)),
], ids=["rows of distances", "flat"])
def test_argmin_lanes_store_no_masked_vectors(fn, args):
    """The lanes of an argmin (k-means' row of 8 distances per point; a long
    flat argmax) update by selects; each sweep writes other arrays than it
    reads, or LLVM stores the select where it loaded the unchosen value from,
    as a masked store (vmaskmovpd: tens of cycles on AMD's cores)."""
    import re

    from braze.targets import cpu_cache

    f = braze.compile(lambda *a: fn(*a), target="cpu")
    got, want = f(*args), fn(*args)
    for g, w in zip(got if isinstance(want, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_array_equal(g, w)
    (kernel,) = [part.split("\n", 1)[1] for part in f.lower(*args).source.split("\n# k") if "for r in range(" in part]
    (sig,) = cpu_cache.load(kernel, "kernel_serial").signatures
    # (compiled again, not from numba's disk cache, whose code it cannot show)
    fresh = cpu_cache.load(kernel.replace("cache=True", "cache=False"), "kernel_serial")
    fresh.compile(sig)
    asm = fresh.inspect_asm(sig)
    assert "%ymm" in asm  # (the vector loop is there to look at)
    stores = re.findall(r"\tv(?:p)?maskmov\w*\s[^\n]*,\s*-?\d*\(%\w+", asm)
    assert not stores, stores
