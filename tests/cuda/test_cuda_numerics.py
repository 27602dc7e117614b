"""The numerics contract on the cuda target (simulator; tiny arrays): the
elementwise chains bitwise, the MLP with logits in the millions, a layer norm
with gamma 1e30, and the semantics cases of tests/test_numerics.py."""
import warnings

import numpy as np
import pytest

import braze
from tests.test_numerics import (SEMANTICS, _chains, _layer_norm, _mlp, bits_equal, full_range, layer_norm_case,
                                 mlp_case)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_chains_are_bitwise_numpy(dtype):
    a, b, c = (full_range(64, dtype, seed) for seed in (1, 2, 3))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = _chains(a, b, c)
        got = braze.compile(_chains, target="cuda")(a, b, c)
    bad = [k for k, (g, w) in enumerate(zip(got, want)) if not bits_equal(g, w)]
    assert not bad, bad


def test_mlp_with_logits_in_the_millions():
    args = mlp_case(rows=3, width=24, inputs=16)
    z = np.maximum(np.maximum(args[0] @ args[1] + args[2], 0) @ args[3] + args[4], 0) @ args[5] + args[6]
    assert np.abs(z).max() > 1e6
    np.testing.assert_allclose(braze.compile(_mlp, target="cuda")(*args), _mlp(*args), rtol=0, atol=1e-6)


def test_layer_norm_with_gamma_1e30():
    x, g, b = layer_norm_case()
    args = (x[:4], g, b)
    want = _layer_norm(*args)
    got = braze.compile(_layer_norm, target="cuda")(*args)
    atol = 8 * np.finfo(np.float32).eps * np.abs(want).max(axis=-1, keepdims=True)
    assert np.isfinite(got).all() and (np.abs(got - want) <= atol).all()


@pytest.mark.parametrize("name", ["clip_int8_out_of_range_bounds", "sign_of_nan_and_zeros", "int8_overflow_wraps",
                                  "nan_in_max_min", "nan_in_argmax_argmin", "zero_times_inf_in_product",
                                  "signed_zero_results", "fix_truncates", "numpy_scalar_vs_python_scalar"])
def test_numpy_semantics(name):
    fn, args = SEMANTICS[name]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = fn(*args)
        got = braze.compile(fn, target="cuda")(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert all(bits_equal(g, w) for g, w in zip(got, want)), (got, want)
