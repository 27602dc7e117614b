"""The hand-written cuda kernel pairs in ``braze.kernels.nn_cuda``, against the
composites' bodies on the generic target (forward) and the gradients of the
bodies (backward). Runs in the simulator (``NUMBA_ENABLE_CUDASIM=1``), so the
shapes are tiny; ``tests/test_cuda_ptx_nn.py`` compiles the same kernels for
real hardware."""
import numpy as np
import pytest

import braze
from braze import registry
from braze.aval import aval_of_value
from braze.kernels import nn, nn_cuda

NAMES = ("braze.nn.softmax", "braze.nn.layer_norm", "braze.nn.softmax_cross_entropy")
DTYPES = (np.float32, np.float64)
TOL = {np.float32: {"rtol": 2e-5, "atol": 2e-6}, np.float64: {"rtol": 1e-12, "atol": 1e-13}}


def _entry(name):
    (entry,) = [e for e in registry.kernels(name, "cuda") if e.fn.__module__ == nn_cuda.__name__]
    return entry


def _body(fn, *args):
    """``fn`` on the generic target with every kernel off: the composites' bodies."""
    with braze.disable_kernels(), np.errstate(all="ignore"):
        return braze.compile(fn, target="generic")(*args)


def _host(a):
    return a.copy_to_host()


def _close(got, want, dtype):
    got = _host(got) if hasattr(got, "copy_to_host") else got
    assert got.shape == np.shape(want) and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, equal_nan=True, **TOL[dtype])


@pytest.fixture(params=["one block per row, cached", "grid-strided, re-read"])
def launch(request, monkeypatch):
    """Both kernel paths: rows in shared memory with a block per row, and rows
    re-read from global memory by two blocks striding over the rows (and
    layer_norm's dgamma/dbeta summed over several blocks of rows)."""
    if request.param.startswith("grid"):
        monkeypatch.setattr(nn_cuda, "MAX_GRID", 2)
        monkeypatch.setattr(nn_cuda, "CACHE_ELEMS", 4)
        monkeypatch.setattr(nn_cuda, "LN_ROWS_PER_BLOCK", 2)
    return request.param


@pytest.mark.parametrize("name", NAMES)
def test_verify_reports_ok(name):
    reports = braze.testing.check_kernel(name, "cuda")  # asserts every report is ok
    assert sum(r.examples for r in reports if r.kernel == _entry(name).label) >= 6


def test_when_accepts_only_what_the_kernels_handle():
    def ok(name, *args, **attrs):
        return bool(_entry(name).when(*[aval_of_value(a) for a in args], **attrs))

    x = np.zeros((3, 4), np.float32)
    assert ok(NAMES[0], x) and ok(NAMES[0], x, axis=1) and ok(NAMES[0], np.zeros(5))
    assert not ok(NAMES[0], x, axis=0) and not ok(NAMES[0], x.astype(np.int64)) and not ok(NAMES[0], np.float32(1))
    g = np.ones(4, np.float32)
    assert ok(NAMES[1], x, g, g) and ok(NAMES[1], x, g, g, eps=1e-3)
    assert not ok(NAMES[1], x, np.ones((3, 4), np.float32), g) and not ok(NAMES[1], x, g.astype(np.float64), g)
    labels = np.zeros(3, np.int32)
    assert ok(NAMES[2], x, labels) and ok(NAMES[2], x.astype(np.float64), labels.astype(np.uint8))
    assert not ok(NAMES[2], x[None], labels) and not ok(NAMES[2], x, labels.astype(np.float32))
    assert not ok(NAMES[2], x, np.zeros(2, np.int64))


# ---------------------------------------------------------------- forward

def _special_rows(dtype, n=9):
    x = np.random.default_rng(0).standard_normal((6, n)).astype(dtype) * 3
    x[1, 2] = np.nan           # NaN anywhere: the row is NaN
    x[2, :] = -np.inf          # all -inf: NaN, as NumPy's -inf - -inf
    x[3, 0] = np.inf           # one +inf: NaN (inf - inf), the rest exp(-inf) = 0
    x[4, :] = dtype(80.0)      # large equal values: uniform, no overflow
    x[5, 1] = -np.inf          # one -inf: exactly 0 there
    return x


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_forward_matches_the_body_with_nan_and_inf(dtype, launch):
    x = _special_rows(dtype)
    y, (saved,) = nn_cuda.softmax_forward(x)
    want = _body(nn.softmax, x)
    _close(y, want, dtype)
    assert np.array_equal(np.isnan(_host(y)), np.isnan(want)) and np.isnan(want[1:4]).all()
    assert saved is y


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_forward_on_more_dimensions_and_device_input(dtype):
    x = np.random.default_rng(1).standard_normal((2, 3, 40)).astype(dtype)
    d = braze.kernels.nn_cuda._on_device(x)
    y, _ = nn_cuda.softmax_forward(d, axis=2)
    _close(y, _body(nn.softmax, x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_forward_matches_the_body(dtype, launch):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 11)) * 2 + 0.5).astype(dtype)
    x[1] = 3.0                 # constant row: var 0, rstd 1/sqrt(eps)
    x[2, 4] = np.nan
    x[3, 0] = np.inf
    g, b = rng.standard_normal(11).astype(dtype), rng.standard_normal(11).astype(dtype)
    y, (_, _, mean, rstd) = nn_cuda.layer_norm_forward(x, g, b, eps=1e-3)
    _close(y, _body(lambda x, g, b: nn.layer_norm(x, g, b, eps=1e-3), x, g, b), dtype)
    with np.errstate(all="ignore"):
        want_mean = x.mean(axis=-1)
        want_rstd = 1 / np.sqrt(((x - want_mean[:, None]) ** 2).mean(axis=-1) + dtype(1e-3))
    _close(mean, want_mean, dtype)
    _close(rstd, want_rstd, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_xent_forward_matches_the_body(dtype, launch):
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, 9)) * 3).astype(dtype)
    labels = np.array([0, 8, 3, -1, 4])  # a negative label counts from the end, as in NumPy
    loss, _ = nn_cuda.xent_forward(logits, labels)
    assert loss.shape == ()
    _close(loss, _body(nn.softmax_cross_entropy, logits, labels), dtype)
    for row, value in ((1, np.nan), (2, -np.inf), (3, np.inf)):
        bad = logits.copy()
        bad[row, 2] = value
        loss, _ = nn_cuda.xent_forward(bad, labels)
        _close(loss, _body(nn.softmax_cross_entropy, bad, labels), dtype)


def test_zero_rows_and_empty_rows_launch_nothing_and_match_the_body():
    for shape in ((0, 5), (6, 0), (2, 0, 3)):
        x = np.zeros(shape, np.float32)
        y, _ = nn_cuda.softmax_forward(x)
        assert y.shape == shape and y.dtype == np.float32
        (dx,) = nn_cuda.softmax_backward((y,), x)
        assert dx.shape == shape
    x = np.zeros((0, 4))
    y, res = nn_cuda.layer_norm_forward(x, np.ones(4), np.zeros(4))
    _close(y, _body(nn.layer_norm, x, np.ones(4), np.zeros(4)), np.float64)
    dx, dg, db = nn_cuda.layer_norm_backward(res, x)
    assert dx.shape == (0, 4) and _host(dg).tolist() == _host(db).tolist() == [0.0] * 4
    labels = np.zeros(0, np.int64)
    loss, res = nn_cuda.xent_forward(x.astype(np.float32), labels)
    _close(loss, _body(nn.softmax_cross_entropy, x.astype(np.float32), labels), np.float32)
    assert nn_cuda.xent_backward(res, np.float32(1))[0].shape == (0, 4)


# ---------------------------------------------------------------- backward

@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_backward_is_the_body_gradient(dtype, launch):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 2, 9)) * 2).astype(dtype)
    w = rng.standard_normal(x.shape).astype(dtype)
    _, res = nn_cuda.softmax_forward(x)
    (dx,) = nn_cuda.softmax_backward(res, nn_cuda._on_device(w))
    _close(dx, _body(braze.grad(lambda x: np.sum(nn.softmax(x) * w)), x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_backward_is_the_body_gradient(dtype, launch):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((6, 2, 7)) * 2 + 1).astype(dtype)
    g, b = rng.standard_normal(7).astype(dtype), rng.standard_normal(7).astype(dtype)
    w = rng.standard_normal(x.shape).astype(dtype)
    _, res = nn_cuda.layer_norm_forward(x, g, b, eps=1e-3)
    got = nn_cuda.layer_norm_backward(res, w, eps=1e-3)
    loss = lambda x, g, b: np.sum(nn.layer_norm(x, g, b, eps=1e-3) * w)  # noqa: E731
    want = _body(braze.grad(loss, argnums=(0, 1, 2)), x, g, b)
    for got_one, want_one in zip(got, want):
        _close(got_one, want_one, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_xent_backward_is_the_body_gradient(dtype, launch):
    rng = np.random.default_rng(6)
    logits = (rng.standard_normal((5, 9)) * 3).astype(dtype)
    labels = np.array([0, 8, 3, -1, 4], np.int32)
    _, res = nn_cuda.xent_forward(logits, labels)
    scale = nn_cuda._on_device(np.array(2.5, dtype))  # the cotangent of the scalar loss, on the device
    dlogits, dlabels = nn_cuda.xent_backward(res, scale)
    assert dlabels is None
    want = _body(braze.grad(lambda x: 2.5 * nn.softmax_cross_entropy(x, labels)), logits)
    _close(dlogits, want, dtype)


def test_pair_signature_probe_runs_the_forward_on_numpy_zeros():
    from braze.select import pair_signature

    x = aval_of_value(np.zeros((3, 5), np.float32))
    g = aval_of_value(np.zeros(5, np.float32))
    residuals = pair_signature(_entry(NAMES[1]), (x, g, g), (("eps", 1e-5),), (x,))
    assert [(r.shape, np.dtype(r.dtype).name) for r in residuals] == [
        ((3, 5), "float32"), ((5,), "float32"), ((3,), "float32"), ((3,), "float32")]


# ---------------------------------------------------------------- through the cuda target

def test_compiled_gradient_on_the_cuda_target_uses_the_pairs():
    from braze import targets

    try:
        targets.resolve("cuda")
    except braze.TargetError as exc:
        pytest.skip(f"no cuda target: {exc}")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6))
    g, b = rng.standard_normal(6), rng.standard_normal(6)
    labels = np.array([0, 5, 2, 1])

    def loss(x, g, b):
        return nn.softmax_cross_entropy(nn.softmax(nn.layer_norm(x, g, b)) * 4.0, labels)

    step = braze.compile(braze.grad(loss, argnums=(0, 1, 2)), target="cuda")
    for got, want in zip(step(x, g, b), _body(braze.grad(loss, argnums=(0, 1, 2)), x, g, b)):
        _close(np.asarray(got), want, np.float64)
    report = braze.explain(step, x, g, b)
    assert report.count("gradient from the kernel pair") >= 3
