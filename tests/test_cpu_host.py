"""Host calls the cpu target runs its own faster way: NumPy's results exactly.

``np.unique`` of integers is a tally on the cpu target (``cpu_host.unique``):
every dtype, range, shape, layout and combination of its ``return_*`` flags
gives NumPy's arrays, dtypes and shapes; a range too wide for a tally, floats,
an axis or a small array go to NumPy itself."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import braze
from braze.targets import cpu_host


def _same(got, want):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def _keys(dtype, n, seed=0, top=False):
    """n keys of ``dtype`` in a narrow range (a tally's): the whole range of an
    8-bit type, else 40 values at the low end of the type (``top``: the high end)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(n) < 0.3
    info = np.iinfo(dtype)
    if info.bits == 8:
        return rng.integers(info.min, int(info.max) + 1, n).astype(dtype)
    base = int(info.max) - 40 if top else int(info.min) + 5
    return np.array(base, dtype) + rng.integers(0, 40, n).astype(dtype)


FLAGS = list(itertools.product([False, True], repeat=3))


@pytest.mark.parametrize("top", [False, True])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint32", "uint64", "bool"])
def test_unique_of_integers_is_numpys(dtype, top, monkeypatch):
    calls = []
    real = cpu_host._tally
    monkeypatch.setattr(cpu_host, "_tally", lambda *a: calls.append(1) or real(*a))
    keys = _keys(dtype, cpu_host.UNIQUE_MIN + 3, top=top)
    for index, inverse, counts in FLAGS:
        kw = dict(return_index=index, return_inverse=inverse, return_counts=counts)
        _same(cpu_host.unique(keys, **kw), np.unique(keys, **kw))
    assert len(calls) == len(FLAGS)  # (each a tally)


def test_unique_takes_the_tally_where_it_holds_and_numpy_elsewhere(monkeypatch):
    calls = []
    real = cpu_host._tally
    monkeypatch.setattr(cpu_host, "_tally", lambda *a: calls.append(1) or real(*a))
    n = cpu_host.UNIQUE_MIN * 2
    cases = {
        "2-d, strided": (np.arange(4 * n).reshape(4, n)[:, ::2] % 97, True),
        "a wide range": (np.arange(n) * 1000, False),
        "floats": (np.arange(n) % 7 * 0.5, False),
        "small": (np.arange(100) % 7, False),
    }
    for name, (keys, tallied) in cases.items():
        calls.clear()
        _same(cpu_host.unique(keys, return_inverse=True, return_counts=True),
              np.unique(keys, return_inverse=True, return_counts=True))
        assert bool(calls) == tallied, name
    keys = np.arange(n).reshape(2, -1) % 5
    calls.clear()
    _same(cpu_host.unique(keys, axis=1), np.unique(keys, axis=1))  # (an axis: NumPy's)
    assert not calls


def test_a_group_by_on_the_cpu_target_tallies_and_is_numpys():
    def group_means(keys, values):
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, np.bincount(inverse, weights=values) / np.bincount(inverse)

    f = braze.compile(group_means, target="cpu")
    rng = np.random.default_rng(3)
    for keys in (rng.integers(-3, 9, 40_000), rng.integers(0, 50, 60_000).astype(np.int16)):
        values = rng.standard_normal(keys.shape).ravel()
        got, want = f(keys, values), group_means(keys, values)
        _same(got, want)
    lowered = f.lower(keys, values)
    host = [n for n in lowered.ir.nodes if n.op == "host_call"]
    assert host and cpu_host.faster(host[0].kw)["call"].fn is cpu_host.unique


def _add_at(x, v, i):
    out = x.copy()
    np.add.at(out, i, v)
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int8", "uint32"])
@pytest.mark.parametrize("shape", [(7,), (50, 3), (9, 2, 4)])
def test_scatter_add_is_numpys_add_at(dtype, shape, monkeypatch):
    calls = []
    for name in ("_add_rows", "_add_elements"):
        real = getattr(cpu_host, name)
        monkeypatch.setattr(cpu_host, name, lambda *a, real=real: calls.append(1) or real(*a))
    rng = np.random.default_rng(7)
    n = cpu_host.SCATTER_MIN + 5
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    before = x.copy()
    i = rng.integers(-shape[0], shape[0], n)  # (negative indices wrap, as NumPy's)
    v = (rng.standard_normal((n,) + shape[1:]) * 1e3).astype(dtype)  # (int8 wraps, as NumPy's)
    for values in (v, v[::-1], np.broadcast_to(v[0], v.shape)):  # (strided, and a stride-0 broadcast)
        got = cpu_host.scatter_add(x, values, i, axes=(0,))
        want = _add_at(x, values, i)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)  # (the same order of additions: bit for bit)
    assert len(calls) == 3
    with pytest.raises(IndexError):  # (NumPy's own error, from NumPy's call)
        cpu_host.scatter_add(x, v, np.where(np.arange(n) == n - 1, shape[0], i), axes=(0,))
    np.testing.assert_array_equal(x, before)  # (a copy is added into)


def test_scatter_add_on_the_cpu_target_compiles_an_embedding_gradient():
    def loss(E, ids):
        return (np.tanh(E[ids]) ** 2).sum()

    rng = np.random.default_rng(2)
    E, ids = rng.standard_normal((50, 8)), rng.integers(0, 50, cpu_host.SCATTER_MIN + 1)
    g = braze.compile(braze.grad(loss), target="cpu")(E, ids)
    want = np.zeros_like(E)
    np.add.at(want, ids, 2 * np.tanh(E[ids]) * (1 - np.tanh(E[ids]) ** 2))
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=0)
    assert cpu_host.impl("scatter_add") is cpu_host.scatter_add
