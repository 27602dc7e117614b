"""The standard composite library (braze.nn): bodies against NumPy, every
target against the generic one, and every registered kernel verified."""
import math

import numpy as np
import pytest

import braze
from braze.kernels import nn

from _compare import assert_same

RNG = np.random.default_rng(0)
X32 = (RNG.standard_normal((6, 11)) * 3).astype(np.float32)
X64 = RNG.standard_normal((3, 4, 9)) * 3


def ref_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


REFERENCES = {
    "softmax": (nn.softmax, lambda x: ref_softmax(x)),
    "log_softmax": (nn.log_softmax, lambda x: np.log(ref_softmax(x))),
    "logsumexp": (nn.logsumexp, lambda x: np.log(np.exp(x).sum(-1))),
    "sigmoid": (nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "silu": (nn.silu, lambda x: x / (1 + np.exp(-x))),
    "gelu": (nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("x", [X32, X64], ids=["f32", "f64"])
@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_unary_ops_match_numpy(name, x, target):
    op, ref = REFERENCES[name]
    with np.errstate(all="ignore"):
        assert_same(braze.compile(op, target=target)(x), ref(x).astype(x.dtype), rtol=3e-5 if x.dtype == np.float32 else 1e-10)
        assert_same(op(x), ref(x).astype(x.dtype), rtol=3e-5 if x.dtype == np.float32 else 1e-10)  # eagerly


def test_gelu_exact_and_norms_and_cross_entropy():
    x, g, b = X64, RNG.standard_normal(9), RNG.standard_normal(9)
    erf = np.vectorize(math.erf)
    assert_same(braze.compile(lambda x: nn.gelu(x, approximate=False), target="cpu")(x), 0.5 * x * (1 + erf(x / math.sqrt(2))))
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_same(braze.compile(nn.layer_norm, target="cpu")(x, g, b), (x - mu) / np.sqrt(var + 1e-5) * g + b)
    assert_same(braze.compile(nn.rms_norm, target="cpu")(x, g), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g)
    logits, labels = RNG.standard_normal((10, 7)), RNG.integers(0, 7, 10)
    want = -np.log(ref_softmax(logits))[np.arange(10), labels].mean()
    assert_same(braze.compile(nn.softmax_cross_entropy, target="cpu")(logits, labels), np.float64(want))


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal):
    q, k, v = (RNG.standard_normal(s) for s in ((2, 6, 8), (2, 6, 8), (2, 6, 4)))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(8)
    if causal:
        s = np.where(np.tri(6, dtype=bool), s, -np.inf)
    want = ref_softmax(s) @ v
    assert_same(braze.compile(lambda q, k, v: nn.attention(q, k, v, causal=causal), target="cpu")(q, k, v), want)


def test_row_ops_are_single_kernels_on_cpu():
    for op in (nn.softmax, nn.log_softmax, nn.logsumexp, nn.rms_norm):
        args = (X32,) if op is not nn.rms_norm else (X32, np.ones(11, np.float32))
        plan = braze.compile(op, target="cpu").lower(*args).plan
        assert plan.count("kernel over") == 1, plan


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_every_registered_kernel_matches_its_body(target):
    from braze import registry

    braze.compile(nn.softmax, target=target)  # instantiating the target registers its library kernels
    library = {f"braze.nn.{name}" for name in nn.__all__}
    reports = [r for r in braze.verify(targets=target) if r.name in library]
    registered = {(e.name, e.label) for name in nn.__all__ for e in registry.kernels(f"braze.nn.{name}", target)}
    kernels = {(r.name, r.kernel) for r in reports if not r.kernel.startswith("body")}
    assert kernels == registered  # every kernel checked, none skipped
    if target != "generic":  # and the body of every composite as the target compiles it
        assert {(r.name, r.kernel) for r in reports if r.kernel.startswith("body")} == {
            (f"braze.nn.{name}", kind) for name in nn.__all__ for kind in ("body (inlined, fused)", "body backward")}
    bad = [str(r) for r in reports if not r.ok]
    assert not bad, "\n".join(bad)


def test_every_library_op_has_examples_and_a_docstring():
    for name in nn.__all__:
        op = getattr(nn, name)
        assert op.name == f"braze.nn.{name}" and op.__doc__ and op.examples is not None
        assert len(op.examples()) >= 3


def test_nested_composites_with_captured_arrays_inline_correctly():
    table = np.arange(5.0)

    @braze.composite("braze.test.lib_inner")
    def inner(x):
        return x * table + np.tri(5)[0]

    @braze.composite("braze.test.lib_outer")
    def outer(x):
        return inner(x) + nn.softmax(x * np.linspace(0, 1, 5))

    x = RNG.standard_normal((3, 5))
    want = x * table + np.tri(5)[0] + ref_softmax(x * np.linspace(0, 1, 5))
    for target in ("generic", "cpu"):
        assert_same(braze.compile(outer, target=target)(x), want)
