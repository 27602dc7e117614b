"""Whole programs written in plain NumPy, run unchanged through braze.compile.

Each test runs the same function twice: once on NumPy directly (the reference)
and once through ``braze.compile(..., target="generic")``, and compares
dtype, shape and values.  The models are deliberately written the way people
write NumPy (picoGPT style for the transformer, slice-assignment for the
stencil) rather than in a braze-friendly way.
"""

import math

import numpy as np
import pytest

import braze

TOL = {
    np.float32: dict(rtol=2e-5, atol=2e-6),
    np.float64: dict(rtol=1e-12, atol=1e-13),
}


def assert_same(got, want, dtype):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, **TOL[dtype])


# ---------------------------------------------------------------------------
# (1) GPT-style transformer block (plain NumPy, parameters as a nested dict)
# ---------------------------------------------------------------------------

def layer_norm(x, g, b, eps=1e-5):
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(variance + eps) + b


def gelu(x):
    # math.sqrt keeps the constant a weak Python float, so float32 stays float32
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def linear(x, w, b):
    return x @ w + b


def attention(q, k, v, mask):
    return softmax(q @ k.T / math.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)                                    # [T, 3D]
    qkv = np.split(x, 3, axis=-1)                              # 3 x [T, D]
    qkv_heads = list(map(lambda t: np.split(t, n_head, axis=-1), qkv))
    causal_mask = (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10
    out_heads = [attention(q, k, v, causal_mask) for q, k, v in zip(*qkv_heads)]
    x = np.hstack(out_heads)                                   # [T, D]
    return linear(x, **c_proj)


def ffn(x, c_fc, c_proj):
    return linear(gelu(linear(x, **c_fc)), **c_proj)


def transformer_block(x, params, n_head):
    x = x + mha(layer_norm(x, **params["ln_1"]), **params["attn"], n_head=n_head)
    x = x + ffn(layer_norm(x, **params["ln_2"]), **params["mlp"])
    return x


def make_params(rng, d_model, dtype):
    def lin(n_in, n_out):
        return {
            "w": (rng.standard_normal((n_in, n_out)) / math.sqrt(n_in)).astype(dtype),
            "b": (0.1 * rng.standard_normal(n_out)).astype(dtype),
        }

    def ln():
        return {
            "g": (1 + 0.1 * rng.standard_normal(d_model)).astype(dtype),
            "b": (0.1 * rng.standard_normal(d_model)).astype(dtype),
        }

    return {
        "ln_1": ln(),
        "attn": {"c_attn": lin(d_model, 3 * d_model), "c_proj": lin(d_model, d_model)},
        "ln_2": ln(),
        "mlp": {"c_fc": lin(d_model, 4 * d_model), "c_proj": lin(4 * d_model, d_model)},
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transformer_block_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    seq, d_model, n_head = 8, 16, 2
    params = make_params(rng, d_model, dtype)
    x = rng.standard_normal((seq, d_model)).astype(dtype)

    want = transformer_block(x, params, n_head)
    assert want.dtype == dtype  # the reference itself must not upcast

    f = braze.compile(transformer_block, target="generic")
    got = f(x, params, n_head)
    assert_same(got, want, dtype)

    # second call with new values hits the cache and is still right
    x2 = rng.standard_normal((seq, d_model)).astype(dtype)
    assert_same(f(x2, params, n_head), transformer_block(x2, params, n_head), dtype)
    info = f.cache_info()
    assert (info.misses, info.hits, info.size) == (1, 1, 1)


def test_transformer_block_is_causal():
    # Changing the last token must not change any earlier position's output.
    rng = np.random.default_rng(1)
    params = make_params(rng, 16, np.float64)
    x = rng.standard_normal((8, 16))
    f = braze.compile(transformer_block, target="generic")
    y1 = np.asarray(f(x, params, 2))
    x_changed = x.copy()
    x_changed[-1] += 1.0
    y2 = np.asarray(f(x_changed, params, 2))
    np.testing.assert_allclose(y1[:-1], y2[:-1], rtol=1e-12, atol=1e-12)
    assert not np.allclose(y1[-1], y2[-1])


def test_transformer_block_new_sequence_length_and_heads_retrace():
    rng = np.random.default_rng(2)
    params = make_params(rng, 16, np.float32)
    f = braze.compile(transformer_block, target="generic")
    for seq, n_head in [(8, 2), (5, 2), (8, 4)]:
        x = rng.standard_normal((seq, 16)).astype(np.float32)
        assert_same(f(x, params, n_head), transformer_block(x, params, n_head), np.float32)
    info = f.cache_info()
    assert (info.misses, info.size) == (3, 3)
    assert "new shape" in info.reasons[1]
    assert "new static" in info.reasons[2]


def test_transformer_block_graph_has_the_expected_ops():
    rng = np.random.default_rng(3)
    params = make_params(rng, 16, np.float32)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    text = braze.compile(transformer_block, target="generic").lower(x, params, 2).graph
    assert isinstance(text, str)
    for op in ["matmul", "tanh", "exp", "sqrt"]:
        assert op in text, op
    # 2 heads x (q@k.T, a@v) + 4 linear layers = 8 matmuls, all unrolled
    matmuls = [ln for ln in text.splitlines() if " matmul " in ln]
    assert len(matmuls) == 8, text


# ---------------------------------------------------------------------------
# (2) Stencil loops that update slices of their INPUT arrays in place
# ---------------------------------------------------------------------------

def jacobi_heat(u, v, steps, alpha):
    """Explicit 2-D heat equation, two buffers swapped every step."""
    for _ in range(steps):
        v[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (
            u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
        )
        # insulated (Neumann) boundaries: copy the neighbouring row/column
        v[0, :] = v[1, :]
        v[-1, :] = v[-2, :]
        v[:, 0] = v[:, 1]
        v[:, -1] = v[:, -2]
        u, v = v, u
    return u, u.sum()


def heat_1d(u, steps, alpha):
    """1-D heat equation updated in place with ``+=`` on a slice."""
    energy = []
    for _ in range(steps):
        u[1:-1] += alpha * (u[2:] - 2 * u[1:-1] + u[:-2])
        energy.append((u * u).sum())
    return energy


def _grid(rng, dtype, shape=(7, 9)):
    u = rng.random(shape).astype(dtype)
    v = np.zeros(shape, dtype=dtype)
    return u, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("steps", [3, 4])
def test_jacobi_stencil_updates_inputs_like_numpy(dtype, steps):
    rng = np.random.default_rng(steps)
    u, v = _grid(rng, dtype)
    u_ref, v_ref = u.copy(), v.copy()

    want_field, want_total = jacobi_heat(u_ref, v_ref, steps, 0.2)
    f = braze.compile(jacobi_heat, target="generic")
    got_field, got_total = f(u, v, steps, 0.2)

    assert_same(got_field, want_field, dtype)
    assert_same(got_total, want_total, dtype)
    # the caller's arrays were mutated exactly as NumPy mutates them
    assert u.dtype == dtype and v.dtype == dtype
    assert_same(u, u_ref, dtype)
    assert_same(v, v_ref, dtype)


def test_jacobi_stencil_second_call_writes_back_too():
    # The cached (second) call must also write back into the new inputs.
    rng = np.random.default_rng(10)
    f = braze.compile(jacobi_heat, target="generic")
    for _ in range(2):
        u, v = _grid(rng, np.float64)
        u_ref, v_ref = u.copy(), v.copy()
        jacobi_heat(u_ref, v_ref, 3, 0.1)
        f(u, v, 3, 0.1)
        assert_same(u, u_ref, np.float64)
        assert_same(v, v_ref, np.float64)
    assert f.cache_info().hits == 1


def test_jacobi_stencil_new_alpha_does_not_retrace():
    rng = np.random.default_rng(11)
    f = braze.compile(jacobi_heat, target="generic")
    for alpha in (0.1, 0.2, 0.05):
        u, v = _grid(rng, np.float64)
        u_ref, v_ref = u.copy(), v.copy()
        want = jacobi_heat(u_ref, v_ref, 2, alpha)
        got = f(u, v, 2, alpha)
        assert_same(got[0], want[0], np.float64)
        assert_same(u, u_ref, np.float64)
        assert_same(v, v_ref, np.float64)
    assert f.cache_info().misses == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_heat_1d_plus_equals_on_slice(dtype):
    rng = np.random.default_rng(5)
    u = rng.random(12).astype(dtype)
    u_ref = u.copy()
    want = heat_1d(u_ref, 5, 0.25)
    got = braze.compile(heat_1d, target="generic")(u, 5, 0.25)
    assert isinstance(got, list) and len(got) == 5
    for g, w in zip(got, want):
        assert_same(g, w, dtype)
    assert_same(u, u_ref, dtype)


# ---------------------------------------------------------------------------
# (3) The issue's `layer` example
# ---------------------------------------------------------------------------

def layer(x, w, b):
    h = np.tanh(x @ w + b)
    return h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_issue_layer_example(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8)).astype(dtype)
    w = rng.standard_normal((8, 16)).astype(dtype)
    b = rng.standard_normal(16).astype(dtype)

    f = braze.compile(layer, target="generic")
    assert_same(f(x, w, b), layer(x, w, b), dtype)

    text = f.lower(x, w, b).graph
    assert isinstance(text, str)
    lines = text.strip().splitlines()
    assert lines[0].startswith("graph(") and lines[-1].strip() == "}"
    assert lines[-2].strip().startswith("return ")
    body = "\n".join(lines[1:-2])
    for op in ["matmul", "add", "tanh", "multiply", "sum", "sqrt", "divide"]:
        assert op in body, op

    g = braze.trace(layer, x, w, b)
    assert isinstance(g, braze.Graph)
    assert str(g).startswith("graph(")
    assert "tanh" in str(g) and "matmul" in str(g)
