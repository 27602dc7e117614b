"""``np.searchsorted`` of a short sorted array, ``np.bincount`` of a few bins
and ``np.interp`` on a short table, written as comparisons, sums and
selects (braze.numpy): NumPy's values and dtypes on every input, the guards
that keep them (an array no longer sorted, a new number of bins, a negative
label) and NumPy's own call for everything else."""
import numpy as np
import pytest

import braze
from braze.numpy import BINCOUNT_SUMS, BINCOUNT_UNROLLED, INTERP_UNROLLED, SEARCH_UNROLLED

from _compare import assert_same

TARGETS = ["cpu", "generic"]


def _search(a, v):
    return np.searchsorted(a, v), np.searchsorted(a, v, side="right"), a.searchsorted(v, "left")


def _broke(f, *args) -> bool:
    return "graph break" in braze.explain(f, *args)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["float64", "float32 keys", "float32 table, float64 keys", "int", "uint8 and int",
                                  "bool", "nan and inf", "signed zeros"])
def test_searchsorted_of_a_short_sorted_array_is_numpys(target, case):
    r = np.random.default_rng(7)
    tables = {
        "float64": (np.array([-1.5, 0.0, 0.0, 0.25, 3.0]), r.choice([-1.5, 0.0, 0.25, 3.0, 2.0, -9.0], (40, 3))),
        "float32 keys": (np.linspace(0, 1, 16).astype(np.float32), r.random(300).astype(np.float32)),
        "float32 table, float64 keys": (np.array([0.1, 0.2], np.float32), np.array([0.1, 0.2, 0.15])),
        "int": (np.array([-3, 0, 0, 7]), r.integers(-5, 9, 64)),
        "uint8 and int": (np.array([1, 2, 250], np.uint8), np.array([300, -1, 2, 250])),
        "bool": (np.array([False, True, True]), np.array([True, False, True])),
        "nan and inf": (np.array([-np.inf, 1.0, np.inf, np.nan, np.nan]),
                        np.array([np.nan, np.inf, -np.inf, 1.0, 0.5, 5.0])),
        "signed zeros": (np.array([-0.0, 0.0, 1.0]), np.array([0.0, -0.0, 1e-300])),
    }
    a, v = tables[case]
    f = braze.compile(_search, target=target)
    for keys in (v, v[::-1].copy(), v.ravel()[:1].reshape(()), v.ravel()[:0]):
        assert_same(f(a, keys), _search(a, keys))
    assert not _broke(f, a, v)


def test_searchsorted_with_python_and_numpy_scalars():
    a = np.array([0.1, 0.2], np.float32)
    f = braze.compile(lambda a, x: (np.searchsorted(a, 0.1, "right"), np.searchsorted(a, np.float32(0.1), "right"),
                                    np.searchsorted(a, x, "right")), target="cpu")
    for x in (0.1, np.float32(0.1), np.float64(0.2)):
        want = (np.searchsorted(a, 0.1, "right"), np.searchsorted(a, np.float32(0.1), "right"),
                np.searchsorted(a, x, "right"))
        assert_same(f(a, x), want)


@pytest.mark.parametrize("target", TARGETS)
def test_an_array_no_longer_sorted_gets_numpys_search(target):
    """Sorted at the first call, then not: the guard finds it, and the call is
    NumPy's (whose result for an unsorted array is its binary search's own)."""
    r = np.random.default_rng(1)
    v = r.random(500)
    a = np.linspace(0.1, 0.9, 6)
    f = braze.compile(_search, target=target)
    assert_same(f(a, v), _search(a, v))
    shuffled = a[[0, 3, 1, 5, 2, 4]]
    assert_same(f(shuffled, v), _search(shuffled, v))
    nan_first = np.array([np.nan, 0.2, 0.5])
    assert_same(f(nan_first, v), _search(nan_first, v))
    assert_same(f(a, v), _search(a, v))


def test_longer_arrays_and_sorters_are_numpys_call():
    r = np.random.default_rng(2)
    v = r.random(100)
    long = np.sort(r.random(SEARCH_UNROLLED + 1))
    f = braze.compile(lambda a, v: np.searchsorted(a, v), target="cpu")
    assert_same(f(long, v), np.searchsorted(long, v))
    assert _broke(f, long, v)
    a = r.random(6)
    g = braze.compile(lambda a, v, s: np.searchsorted(a, v, sorter=s), target="cpu")
    assert_same(g(a, v, np.argsort(a)), np.searchsorted(a, v, sorter=np.argsort(a)))
    assert not _broke(f, long[:SEARCH_UNROLLED], v)


def test_buckets_of_computed_edges_fuse_into_one_pass():
    """Edges computed inside (a constant to the kernel) and keys computed too:
    the search is one elementwise kernel with its producers; the counts that
    follow are sums in one pass over it."""
    def buckets(x):
        edges = np.linspace(0.1, 0.9, 5)
        idx = np.searchsorted(edges, np.tanh(x))
        return idx, np.bincount(idx, minlength=len(edges) + 1)

    x = np.random.default_rng(3).standard_normal(100_000)  # (smaller: each count its own pass, one kernel)
    f = braze.compile(buckets, target="cpu")
    assert_same(f(x), buckets(x))
    lowered = f.lower(x)
    assert "host_call" not in lowered.plan and lowered.counts["kernels"] <= 2, lowered.plan


def _counts(x, w):
    return np.bincount(x), np.bincount(x, weights=w), np.bincount(x, minlength=9), np.bincount(x, w, 12)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,wdtype", [(np.int64, np.float64), (np.int32, np.float32), (np.uint8, np.int16),
                                          (np.bool_, np.bool_), (np.int64, np.float32)])
def test_bincount_of_a_few_bins_is_numpys(target, dtype, wdtype):
    r = np.random.default_rng(4)
    x = r.integers(0, 2 if dtype == np.bool_ else 7, 1000).astype(dtype)
    w = (r.standard_normal(1000) * 1e3).astype(wdtype)
    f = braze.compile(_counts, target=target)
    for xs, ws in ((x, w), (x[::-1], w[::-1]), (x[:1], w[:1])):
        got, want = f(xs, ws), _counts(xs, ws)
        # (weighted bins are sums: NumPy's adds in order, braze's compensated)
        assert_same(got, want, rtol=1e-12, atol=1e-9)
    assert not _broke(f, x, w)


@pytest.mark.parametrize("target", TARGETS)
def test_bincount_guards_its_number_of_bins_and_sign(target):
    f = braze.compile(lambda x: np.bincount(x, minlength=3) * 2, target=target)
    x = np.array([0, 1, 1, 4])
    assert_same(f(x), np.bincount(x, minlength=3) * 2)
    more = np.array([0, 1, 1, 6, 6])  # a new number of bins: traced again
    assert_same(f(more), np.bincount(more, minlength=3) * 2)
    fewer = np.array([1, 1, 0])  # minlength's bins
    assert_same(f(fewer), np.bincount(fewer, minlength=3) * 2)
    with pytest.raises(ValueError, match="negative"):
        f(np.array([0, -1, 4]))
    assert_same(f(np.zeros(0, np.int64)), np.bincount(np.zeros(0, np.int64), minlength=3) * 2)
    g = braze.compile(lambda x, w: (np.bincount(x, weights=w), np.bincount(x, w, minlength=2)), target=target)
    empty = (np.zeros(0, np.int64), np.zeros(0))  # (NumPy's quirk: intp zeros, weights or not)
    assert_same(g(*empty), (np.bincount(*empty), np.bincount(*empty, minlength=2)))
    many = np.arange(BINCOUNT_UNROLLED + 5)
    assert_same(f(many), np.bincount(many, minlength=3) * 2)
    with pytest.raises(TypeError):
        f(np.array([1.0]))


@pytest.mark.parametrize("bins", [4, BINCOUNT_SUMS + 3])  # (a sum per bin; a scatter-add)
def test_gradient_of_weighted_bins_matches_finite_differences(bins):
    labels = np.array([0, 2, 2, 1, 0, 2, bins - 1, bins - 2])

    def loss(w):
        return np.sum(np.bincount(labels, weights=w, minlength=bins) ** 2 * np.arange(bins))

    w = np.random.default_rng(5).standard_normal(8)
    g = braze.grad(loss)(w)
    eps = 1e-6
    fd = np.array([(loss(w + eps * e) - loss(w - eps * e)) / (2 * eps) for e in np.eye(8)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(w), fd, rtol=1e-6, atol=1e-8)


def _interp(x, xp, fp):
    return np.interp(x, xp, fp), np.interp(x, xp, fp, left=-1.0, right=np.inf) * 2


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m", [1, 2, 11, INTERP_UNROLLED])
def test_interp_on_a_short_table_is_numpys_bit_for_bit(target, m):
    """Values at, between and outside the points, NaN and infinite x, and
    tables holding -0.0, inf and NaN values (NumPy's other-direction retry,
    its value at a point): the same bits as NumPy's loop."""
    r = np.random.default_rng(m)
    xp = np.cumsum(r.random(m) + 0.1) - 1.0
    fps = [r.standard_normal(m) * 10, np.where(np.arange(m) % 3 == 0, -0.0, xp ** 2)]
    if m > 3:
        special = fps[0].copy()
        special[1], special[2] = np.inf, np.nan
        fps.append(special)
    x = np.concatenate([r.random(200) * (xp[-1] - xp[0] + 2) + xp[0] - 1, xp, [np.nan, np.inf, -np.inf, -0.0]])
    f = braze.compile(_interp, target=target)
    for fp in fps:
        for got, want in zip(f(x, xp, fp), _interp(x, xp, fp)):
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
            assert np.array_equal(np.signbit(got), np.signbit(want))
    assert not _broke(f, x, xp, fps[0])


def test_interp_dtypes_scalars_and_what_stays_numpys():
    xp, fp = np.arange(5), np.arange(5) ** 2  # (ints: NumPy interpolates in float64)
    f = braze.compile(lambda x, xp, fp: np.interp(x, xp, fp), target="cpu")
    for x in (np.float32(2.5), np.array(1.25), np.arange(6, dtype=np.int8), np.linspace(-1, 5, 7).reshape(7, 1)):
        got, want = f(x, xp, fp), np.interp(x, xp, fp)
        assert type(got) is type(want) and got.dtype == want.dtype and np.array_equal(got, want)
    for xp2 in (np.array([0.0, 2.0, 1.0, 3.0, 4.0]), np.array([0.0, 1.0, 1.0, 3.0, 4.0]),
                np.arange(INTERP_UNROLLED + 1.0)):  # unsorted, repeated, long: NumPy's own call
        fp2 = np.arange(len(xp2)) ** 2.0
        np.testing.assert_array_equal(f(np.linspace(-1, 5, 13), xp2, fp2), np.interp(np.linspace(-1, 5, 13), xp2, fp2))
    np.testing.assert_array_equal(f(np.linspace(-1, 5, 13), xp, fp), np.interp(np.linspace(-1, 5, 13), xp, fp))
    g = braze.compile(lambda x: np.interp(x, [0.0, 1.0, 2.0], [0.0, 1.0, 0.0], period=2.0), target="cpu")
    np.testing.assert_array_equal(g(np.linspace(-3, 3, 9)), np.interp(np.linspace(-3, 3, 9), [0.0, 1.0, 2.0],
                                                                        [0.0, 1.0, 0.0], period=2.0))


def test_gradient_of_interp_in_x_and_the_values():
    xp = np.array([0.0, 1.0, 2.5, 4.0])

    def loss(x, fp):
        return np.sum(np.interp(x, xp, fp) ** 2)

    r = np.random.default_rng(6)
    x, fp = r.random(7) * 5 - 0.5, r.standard_normal(4)  # (none at a point: the kinks)
    gx, gf = braze.grad(loss, argnums=(0, 1))(x, fp)
    eps = 1e-6
    fdx = np.array([(loss(x + eps * e, fp) - loss(x - eps * e, fp)) / (2 * eps) for e in np.eye(7)])
    fdf = np.array([(loss(x, fp + eps * e) - loss(x, fp - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(gx, fdx, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gf, fdf, rtol=1e-6, atol=1e-8)
    assert np.all(gx[(x > 0) & (x < 4)] != 0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bins", [np.array([0.0, 5.0, 10.0, 15.0, 20.0]), np.array([20.0, 15.0, 10.0, 5.0, 0.0]),
                                  np.array([1, 1, 3]), np.array([3.0, 3.0, 1.0])],
                         ids=["up", "down", "ties", "down ties"])
def test_digitize_is_numpys_in_either_direction(target, bins):
    x = np.array([-1.0, 0.0, 1.2, 5.0, 10.0, 12.4, 15.5, 20.0, 25.0, np.nan, 1.0, 3.0])
    f = braze.compile(lambda x, b: (np.digitize(x, b), np.digitize(x, b, right=True)), target=target)
    want = (np.digitize(x, bins), np.digitize(x, bins, right=True))
    assert_same(f(x, bins), want)
    assert not _broke(f, x, bins)
    equal = np.full(3, bins[0])  # (increasing to NumPy, even after decreasing bins: guarded; probe 10)
    assert_same(f(x, equal), (np.digitize(x, equal), np.digitize(x, equal, right=True)))
    assert_same(f(x, bins), want)
    flipped = bins[::-1].copy()  # (the other direction at a later call: guarded, then NumPy's)
    assert_same(f(x, flipped), (np.digitize(x, flipped), np.digitize(x, flipped, right=True)))
    with pytest.raises(ValueError, match="monotonically"):
        f(x, np.array([1.0, 3.0, 2.0]))
