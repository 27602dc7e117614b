"""The cuda target against NumPy and the generic target: every kernel
skeleton (elementwise, rows, global), views, externs, gradients, device
arrays in and out. Tiny shapes (see conftest)."""
import numpy as np
import pytest

import braze
import braze.numpy as bnp
from braze.workloads import layer_norm as _layer_norm, softmax as _softmax
from tests._compare import assert_same, check, run_both

rng = np.random.default_rng(7)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _f64(*shape):
    return rng.standard_normal(shape)


def _special(dtype=np.float64):
    x = rng.standard_normal((3, 9)).astype(dtype)
    x[0, 2], x[1, :], x[2, 4], x[2, 7] = np.nan, -np.inf, np.inf, -0.0
    return x


CASES = {
    # elementwise and broadcasting
    "chain f32": (lambda a, b, c, d: a * b + c * np.exp(-d), [_f32(37), _f32(37), _f32(37), _f32(37)]),
    "chain f64 broadcast": (lambda a, b: np.tanh(a) * b + 1.0, [_f64(4, 1, 5), _f64(3, 1)]),
    "special values": (lambda x: (np.exp(x), np.log(x), np.sqrt(x), x / 0.0, np.floor(x), np.rint(x * 2.5),
                                  np.maximum(x, 0.0), np.sign(x), np.isnan(x), np.isinf(x)), [_special()]),
    "linalg and compositions": (lambda a: (np.linalg.inv(a), np.linalg.det(a), np.linalg.cholesky(a @ a.T),
                                           np.linalg.norm(a, axis=1), np.roll(np.flip(a, 0), 1), np.diff(a),
                                           np.pad(a, 1, mode="reflect")),
                                [_f64(3, 3) + 3 * np.eye(3)]),
    "decompositions": (lambda a: (*np.linalg.qr(a), np.linalg.eigh(a @ a.T)[0], np.linalg.svd(a, compute_uv=False),
                                  np.partition(a, 1, axis=None)), [_f64(4, 3)]),
    "heaviside": (lambda x, h: (np.heaviside(x, h), np.heaviside(x.astype(np.float32), np.float32(0.5))),
                  [_special(), _f64(3, 9)]),
    "logs of negatives": (lambda x: (np.log2(x), np.log10(x), np.logaddexp(x, x * 2), np.logaddexp2(x, x * 2),
                                     np.logaddexp2(x.astype(np.float32), np.float32(3.0)),
                                     x.astype(np.float32) * np.float16(0.1)),  # (numba has no float16 argument)
                          [np.array([-1.0, 0.0, 2.0, 800.0, np.nan])]),
    "special f32": (lambda x: (np.expm1(x), np.log1p(x), np.cbrt(x), np.trunc(x), np.ceil(x), np.arctan2(x, 1.5),
                               np.hypot(x, x), np.minimum(x, -1.0), x % 1.5, x // 0.7), [_special(np.float32)]),
    "trig": (lambda x: (np.sin(x), np.cos(x * 1e20), np.tan(x), np.arcsinh(x), np.erf(x) if hasattr(np, "erf")
                        else np.sinh(x)), [_special()]),
    "ints": (lambda a, b: (a // b, a % b, a * b - 3, np.abs(a), a ** 2, a & b, np.maximum(a, b), np.fmod(a, b),
                           np.fmod(b, a), np.reciprocal(b), np.reciprocal(b.astype(np.int8))),
             [np.array([[7, -7, 0, 2**31 - 1], [5, -(2**31), 9, 1]], np.int32),
              np.array([2, -3, 0, -1], np.int32)]),
    "int64 extremes": (lambda a, b: (a // b, a % b, a + b), [np.array([np.iinfo(np.int64).min, 7, -9]),
                                                          np.array([-1, 0, 4])]),
    "uint8 and bool": (lambda a, m: (np.where(m, a, a * 2), a + 250, ~m, m & (a > 3), m.astype(np.float32)),
                       [np.arange(6, dtype=np.uint8), np.array([True, False, True, True, False, False])]),
    "scalar (0-d)": (lambda a, b: np.exp(a) + b * 2, [np.float64(1.5), np.array(2.0)]),
    "empty": (lambda a: np.exp(a) + 1.0, [np.zeros((0, 3))]),
    "size-1 dims": (lambda a, b: np.tanh(a) + b, [_f64(1, 1, 4), _f64(3, 1, 1)]),
    "float16 on the host": (lambda x: np.power(np.exp(x), 2) + 1, [np.array([[False, True]])]),
    "mixed dtypes": (lambda a, b: a * b + 1, [np.arange(5, dtype=np.int16), _f32(5)]),
    # rows
    "softmax f32": (_softmax, [_f32(5, 40)]),
    "softmax special": (_softmax, [_special()]),
    "layer norm f64": (_layer_norm, [_f64(6, 33), _f64(33), _f64(33)]),
    "logsumexp 3-D": (lambda x: np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1),
                      [_f32(2, 3, 17)]),
    "row reductions": (lambda x: (x.sum(-1), x.max(-1), x.min(-1, keepdims=True), x.prod(-1), np.argmax(x, -1),
                                  np.argmin(x, -1), (x > 0).any(-1), (x > -5).all(-1), x.mean((1, 2))),
                       [_f64(4, 5, 6)]),
    "row reductions special": (lambda x: (x.max(-1), x.min(-1), np.argmax(x, -1), np.argmin(x, -1), x.sum(-1)),
                               [_special()]),
    "int row reductions": (lambda x: (x.sum(-1), x.max(-1), x.min(-1), x.prod(-1), np.argmax(x, -1)),
                           [rng.integers(-100, 100, (3, 7)).astype(np.int32)]),
    "empty rows": (lambda x: (x.sum(-1), x.prod(-1), (x > 0).any(-1), x.mean(0)), [np.zeros((3, 0))]),
    "zero rows": (lambda x: (x.sum(-1), _softmax(x)), [np.zeros((0, 4), np.float32)]),
    "row longer than a block": (_softmax, [_f32(2, 700)]),
    # global (full) reductions
    "full reductions": (lambda x: (x.sum(), x.max(), x.min(), np.argmax(x), np.argmin(x), x.std(), x.prod()),
                        [_f64(7, 9)]),
    "full reductions special": (lambda x: (x.sum(), x.max(), x.min(), np.argmax(x), np.argmin(x)), [_special()]),
    "full reduction long": (lambda x: (x.sum(), x.max(), np.argmax(x), (x - x.mean()).var()), [_f32(3000)]),
    "full bool": (lambda x: ((x > 0).any(), (x > 0).all(), (x > 0).sum()), [_f64(50)]),
    "full empty": (lambda x: (x.sum(), x.prod()), [np.zeros((0, 5))]),
    # transposed reductions and views
    "column sums": (lambda x: (x.sum(0), x.max(0), np.argmax(x, 0), x.mean((0, 2))), [_f64(5, 3, 4)]),
    "views": (lambda x: (x[::2, 1:].T * 2, x.T.reshape(-1)[::3] + 1, x[::-1, ::-2], x.reshape(3, 4, 2)[1]),
              [_f64(6, 4)]),
    "broadcast view": (lambda x, b: np.broadcast_to(b, (3, 4)) * x.T, [_f64(4, 3), _f64(4)]),
    # externs
    # (contracting more than passes.SMALL_CONTRACTION elements: the device matmul, not products written out)
    "matmul": (lambda a, b: (a @ b, a.T @ a, np.tanh(a @ b) + 1), [_f32(7, 17), _f32(17, 3)]),
    "matmul batched and vectors": (lambda a, b, v: (a @ b, v @ b, a @ v[:, None], v @ b[0]),
                                   [_f64(2, 3, 8), _f64(2, 8, 5), _f64(8)]),
    "short contractions": (lambda a, b: (a @ b, np.einsum("ij,jk->ki", a, b)), [_f64(5, 3), _f64(3, 4)]),
    "gather and updates": (lambda x, i: (x[i], np.take_along_axis(x, np.abs(i[:, None]) % 4, axis=-1),
                                         np.concatenate([x, x * 2], axis=0)), [_f64(5, 4), np.array([0, 3, -1, 2, 4])]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_numpy_and_generic(name):
    fn, args = CASES[name]
    got = check(fn, *args, target="cuda")
    want, _ = run_both(fn, *args, target="generic")
    assert_same(got, want)


def test_slice_update_and_non_contiguous_inputs():
    def f(x, y):
        t = x.copy()
        t[1:, ::2] = np.tanh(y[1:, ::2])
        return t * 2, t.sum(-1)

    x = np.asfortranarray(_f64(4, 6))
    y = _f64(6, 4).T
    check(f, x, y, target="cuda")


def test_in_place_update_of_a_numpy_input():
    def f(x):
        x[1:] = x[:-1] * 2.0
        return x.sum()

    x = _f64(5)
    want = x.copy()
    f(want)
    got_sum = braze.compile(f, target="cuda")(x)
    assert_same(x, want)
    assert np.isclose(got_sum, want.sum())


def test_device_arrays_in_and_out():
    from numba import cuda

    f = braze.compile(lambda x, y: (_softmax(x) * y, (x * y).sum()), target="cuda")
    x, y = _f32(3, 8), _f32(8)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    out, total = f(dx, dy)
    assert hasattr(out, "copy_to_host") and hasattr(total, "copy_to_host")
    assert_same(out.copy_to_host(), _softmax(x) * y)
    assert np.isclose(total.copy_to_host()[()], (x * y).sum(), rtol=1e-5)
    # mixing a device array and a NumPy array keeps the results on the device
    out2, _ = f(dx, y)
    assert hasattr(out2, "copy_to_host")
    assert_same(out2.copy_to_host(), _softmax(x) * y)


def test_device_array_updated_in_place():
    from numba import cuda

    def f(x):
        x[0] = 7.0
        return x * 2

    x = _f64(4)
    dx = cuda.to_device(x)
    out = braze.compile(f, target="cuda")(dx)
    x[0] = 7.0
    assert_same(dx.copy_to_host(), x)
    assert_same(out.copy_to_host(), x * 2)


def test_composites_fused():
    x = _f32(4, 12)
    g, b = _f32(12), _f32(12)
    f = lambda x, g, b: (braze.nn.softmax(x), braze.nn.layer_norm(x, g, b), braze.nn.gelu(x),  # noqa: E731
                         braze.nn.logsumexp(x, axis=-1))
    with braze.disable_kernels():
        got = braze.compile(f, target="cuda")(x, g, b)
    want = braze.compile(f, target="generic")(x, g, b)
    assert_same(got, want)


def test_gradients():
    x = _f64(3, 7)
    g, b = _f64(7), _f64(7)
    w = _f64(3, 7)

    def loss(x, g, b):
        return (braze.nn.layer_norm(x, g, b) * w).sum() + braze.nn.softmax(x)[:, 0].sum()

    with braze.disable_kernels():
        got = braze.compile(braze.grad(loss, argnums=(0, 1, 2)), target="cuda")(x, g, b)
        want = braze.compile(braze.grad(loss, argnums=(0, 1, 2)), target="generic")(x, g, b)
    assert_same(got, want)


def test_gradient_of_elementwise_chain_matches_finite_differences():
    x = _f64(6)

    def loss(x):
        return (np.sin(x) * np.exp(x / 3)).sum()

    got = braze.compile(braze.grad(loss), target="cuda")(x)
    eps = 1e-6
    num = np.array([(loss(x + eps * e) - loss(x - eps * e)) / (2 * eps) for e in np.eye(6)])
    assert np.allclose(got, num, rtol=1e-6, atol=1e-8)


def test_auto_picks_cuda_when_available():
    f = braze.compile(lambda x: x + 1, target="auto")
    f(np.ones(3))
    assert f.target.name == "cuda"


def test_explain_names_the_kernels_and_host_steps():
    def f(x, i):
        y = x.copy()
        y[i] = 0.0  # a scatter: evaluated on the host
        return _softmax(x), y

    f = braze.compile(f, target="cuda")
    text = braze.explain(f, _f32(3, 5), np.array([0, 2]))
    assert "rows kernel" in text and "extern scatter -> f32[3,5] (on the host with NumPy" in text
    lowered = f.lower(_f32(3, 5), np.array([0, 2]))
    assert "@cuda.jit" in lowered.source and "cuda.syncthreads()" in lowered.source


def test_kernel_variants_follow_input_layout():
    """A transposed input takes the strided variant; a contiguous one the flat one."""
    f = braze.compile(lambda x: np.exp(x) + 1, target="cuda")
    x = _f64(4, 5)
    check(lambda x: np.exp(x) + 1, x, target="cuda")
    assert_same(f(x.T.copy()), np.exp(x.T) + 1)
    assert_same(f(np.ascontiguousarray(x.T)), np.exp(x.T) + 1)
    y = _f64(5, 4)
    assert_same(f(y.T), np.exp(y.T) + 1)


def test_device_array_given_to_the_cpu_target_is_a_clear_error():
    from numba import cuda

    f = braze.compile(lambda x: x + 1, target="generic")
    with pytest.raises(braze.TargetError, match="GPU array.*target='cuda'"):
        f(cuda.to_device(np.ones(3)))
    assert_same(f(np.ones(3)), np.ones(3) + 1)  # the next call works


def test_repeated_calls_reuse_buffers_without_mixing_results():
    """Intermediates and host-bound results reuse device buffers across calls;
    device results are fresh, so an earlier result is never overwritten."""
    from numba import cuda

    def f(x):
        y = _softmax(x) * 2
        return y + y.sum(-1, keepdims=True), (x * x).sum()

    g = braze.compile(f, target="cuda")
    a, b = _f32(3, 9), _f32(3, 9)
    ra, rb = g(a), g(b)
    assert_same(ra, f(a))
    assert_same(rb, f(b))
    da = g(cuda.to_device(a))
    db = g(cuda.to_device(b))
    assert_same(da[0].copy_to_host(), f(a)[0])
    assert_same(db[0].copy_to_host(), f(b)[0])


def test_device_externs_update_concatenate_take_along_axis():
    def f(x, i):
        t = x * 2.0
        t[1:, ::2] = np.tanh(x[:-1, ::2])
        c = np.concatenate([t, x.astype(np.float32)[:2]], axis=0)
        return c, np.take_along_axis(x, i, axis=-1) + 1.0, np.concatenate([x, x], axis=1)

    x = _f64(4, 5)
    i = np.array([[0], [4], [-1], [2]])
    check(f, x, i, target="cuda")
    text = braze.explain(braze.compile(f, target="cuda"), x, i)
    assert "on the host" not in text and "gather kernel" in text and "strided write kernels" in text


def test_take_along_axis_out_of_range_is_a_clear_error():
    f = braze.compile(lambda x, i: np.take_along_axis(x, i, axis=-1), target="cuda")
    x = _f64(2, 3)
    with pytest.raises(braze.BrazeError, match="out of range for axis 1 of size 3"):
        f(x, np.array([[0], [3]]))
    with pytest.raises(IndexError):
        f(x, np.array([[-4], [0]]))
    assert_same(f(x, np.array([[2], [-3]])), np.take_along_axis(x, np.array([[2], [-3]]), axis=-1))


@pytest.mark.parametrize("name", ["softmax f32", "softmax special", "layer norm f64", "logsumexp 3-D",
                                  "row reductions", "row reductions special", "int row reductions",
                                  "row longer than a block", "column sums"])
def test_split_rows_match_numpy(name, monkeypatch):
    """Few long rows run with several blocks per row (the split kernel); here
    thresholds are lowered so that the tiny test rows take that path too."""
    from braze.targets import cuda as cuda_target

    monkeypatch.setattr(cuda_target, "SPLIT_MIN", 2)
    monkeypatch.setattr(cuda_target, "SPLIT_ROWS_PER_SM", 1000)
    fn, args = CASES[name]
    f = braze.compile(fn, target="cuda")
    assert "split kernel" in f.lower(*args).source
    got = f(*args)
    want, _ = run_both(fn, *args, target="generic")
    assert_same(got, want)


def test_strided_device_array_input_is_copied_on_the_device():
    from numba import cuda

    x = _f64(3, 5)
    dxt = cuda.to_device(x).T  # a non-contiguous device array
    out = braze.compile(lambda a: np.exp(a) * 2, target="cuda")(dxt)
    assert_same(out.copy_to_host(), np.exp(x.T) * 2)


@pytest.mark.parametrize("case", ["rows", "cols", "two adjacent", "two apart", "negative", "2-D index"])
def test_device_gather_and_its_gradient(case):
    x = _f64(5, 4, 3)
    fns = {
        "rows": lambda x, i: x[i],
        "cols": lambda x, i: x[:, i],
        "two adjacent": lambda x, i: x[:, i, i % 3],
        "two apart": lambda x, i: x[i, :, i % 3],
        "negative": lambda x, i: x[-i - 1, 1:],
        "2-D index": lambda x, i: x[i.reshape(2, 2)],
    }
    i = np.array([0, 3, 3, 1])
    fn = fns[case]
    check(fn, x, i, target="cuda")
    text = braze.explain(braze.compile(fn, target="cuda"), x, i)
    assert "gather kernel" in text and "on the host" not in text
    w = _f64(*np.shape(fn(x, i)))
    loss = lambda x, i: (fn(x, i) * w).sum()  # noqa: E731
    got = braze.compile(braze.grad(loss), target="cuda")(x, i)  # scatter_add, with a repeated index
    want = braze.compile(braze.grad(loss), target="generic")(x, i)
    assert_same(got, want)
    assert "atomic scatter-add kernel" in braze.explain(braze.compile(braze.grad(loss), target="cuda"), x, i)


def test_device_gather_out_of_range_is_a_clear_error():
    f = braze.compile(lambda x, i: x[i], target="cuda")
    with pytest.raises(braze.IndexOutOfRangeError, match="gather: an index is out of range"):
        f(_f64(3, 2), np.array([0, 3]))
    assert_same(f(np.eye(3), np.array([2, -3])), np.eye(3)[[2, -3]])


def test_gather_from_an_empty_array_still_checks_indices():
    """Found by the cuda fuzz leg: a gather with no elements ran no kernel, so
    an out-of-range index went unreported where NumPy raises IndexError."""
    f = braze.compile(lambda x, i: (x @ x.T)[i], target="cuda")
    with pytest.raises(braze.IndexOutOfRangeError):
        f(np.zeros((0, 1)), np.array([0]))
    assert f(np.zeros((2, 1)), np.array([1])).shape == (1, 2)


def test_donated_device_array_takes_the_result():
    """donate_argnums on cuda (as on cpu): the result is written into the
    donated input's device memory; without donation, a fresh buffer."""
    from numba import cuda

    def f(x, y):
        return np.tanh(x) * y + 1.0

    x, y = _f32(6, 5), _f32(6, 5)
    want = np.tanh(x) * y + 1.0
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    out = braze.compile(f, target="cuda", donate_argnums=0)(dx, dy)
    assert_same(out.copy_to_host(), want)
    assert np.shares_memory(out._ary, dx._ary) if hasattr(out, "_ary") else \
        out.__cuda_array_interface__["data"][0] == dx.__cuda_array_interface__["data"][0]
    dx = cuda.to_device(x)
    out = braze.compile(f, target="cuda")(dx, dy)
    assert_same(out.copy_to_host(), want)
    assert_same(dx.copy_to_host(), x)  # not donated: untouched
    # the same device array passed twice (donated once) is not overwritten while read
    dx = cuda.to_device(x)
    out = braze.compile(lambda a, b: a * 2.0 + b[::-1], target="cuda", donate_argnums=0)(dx, dx)
    assert_same(out.copy_to_host(), x * 2.0 + x[::-1])


def test_graph_breaks_run_on_the_host_between_device_regions():
    def f(x):
        inside = x[x > 0.5]                  # data-dependent length
        h, _ = np.histogram(x, bins=3)       # no rule: as called
        if inside.sum() > 1.0:               # a guard
            return inside * 2.0, h + 1
        return inside - 1.0, h - 1

    g = braze.compile(f, target="cuda")
    rng = np.random.default_rng(0)
    for n in (8, 9, 8):
        x = rng.random(n)
        for got, want in zip(g(x), f(x)):
            assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12)
