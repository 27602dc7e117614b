"""``braze.nn``: standard composite ops for neural networks.

Each op is a ``@braze.composite`` whose body is the reference implementation
(plain NumPy, so it also runs eagerly and on every target) and whose
``examples`` feed ``braze.verify``. Target kernels registered for these names
live beside this module (``nn_cpu``) and are swapped in by the selection
pass; bodies compile through fusion into single kernels on the ``cpu``
target (softmax, log_softmax, logsumexp, layer_norm, rms_norm: one row
kernel each).

>>> import numpy as np
>>> from braze.kernels import nn
>>> nn.softmax(np.array([[0.0, np.log(3.0)]]))
array([[0.25, 0.75]])
"""
from __future__ import annotations

import math

import numpy as np

import braze.numpy as bnp
from braze.autodiff import stop_gradient
from braze.composite import composite


def _rng():
    return np.random.default_rng(1234)


def _rows(*shapes, scale=3.0):
    """Examples: float32 and float64 versions of random arrays of these shapes."""
    def examples():
        rng = _rng()
        out = []
        for dtype in (np.float64, np.float32):
            for shape in shapes:
                x = (rng.standard_normal(shape) * scale).astype(dtype)
                out.append((x,))
        x = (rng.standard_normal((5, 7)) * scale)
        x[1, 2] = np.nan
        x[2, :] = -np.inf
        x[3, 0] = np.inf
        out.append((x,))
        return out
    return examples


@composite("braze.nn.softmax", examples=_rows((4, 9), (3, 2, 17), (1, 1)))
def softmax(x, *, axis=-1):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    e = np.exp(x - stop_gradient(x.max(axis=axis, keepdims=True)))
    return e / e.sum(axis=axis, keepdims=True)


@composite("braze.nn.log_softmax", examples=_rows((4, 9), (3, 2, 17), (1, 1)))
def log_softmax(x, *, axis=-1):
    """``x - logsumexp(x)`` along ``axis``, computed stably."""
    s = x - stop_gradient(x.max(axis=axis, keepdims=True))
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


@composite("braze.nn.logsumexp", examples=_rows((4, 9), (3, 2, 17), (1, 1)))
def logsumexp(x, *, axis=-1, keepdims=False):
    """``log(sum(exp(x)))`` along ``axis``; rows of all ``-inf`` give ``-inf``."""
    m = stop_gradient(x.max(axis=axis, keepdims=True))  # the shift changes no derivative
    m = np.where(np.isfinite(m), m, 0)
    out = m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _norm_examples():
    rng = _rng()
    out = []
    for dtype in (np.float64, np.float32):
        for shape in ((4, 16), (2, 3, 33), (1, 1)):
            x = rng.standard_normal(shape).astype(dtype) * 2 + 0.5
            g = rng.standard_normal(shape[-1]).astype(dtype)
            b = rng.standard_normal(shape[-1]).astype(dtype)
            out.append(((x, g, b), {}))
            out.append(((x, g, b), {"eps": 1e-3}))
    return out


@composite("braze.nn.layer_norm", examples=_norm_examples)
def layer_norm(x, gamma, beta, *, eps=1e-5):
    """Normalize over the last axis to zero mean and unit variance, then scale
    by ``gamma`` and shift by ``beta``."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def _rms_examples():
    return [((x, g), attrs) for (x, g, _), attrs in _norm_examples()]


@composite("braze.nn.rms_norm", examples=_rms_examples)
def rms_norm(x, gamma, *, eps=1e-6):
    """``x / sqrt(mean(x**2) + eps) * gamma`` over the last axis."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gamma


def _gelu_examples():
    base = _rows((4, 9), (1000,), scale=4.0)()
    return [(args, {"approximate": a}) for args in base for a in (True, False)]


@composite("braze.nn.gelu", examples=_gelu_examples)
def gelu(x, *, approximate=True):
    """GELU: the tanh approximation (``approximate=True``) or exact, with erf."""
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + bnp.erf(x * (1.0 / math.sqrt(2.0))))


@composite("braze.nn.sigmoid", examples=_rows((4, 9), (1000,), scale=8.0))
def sigmoid(x):
    """``1 / (1 + exp(-x))``."""
    return 1.0 / (1.0 + np.exp(-x))


@composite("braze.nn.silu", examples=_rows((4, 9), (1000,), scale=8.0))
def silu(x):
    """``x * sigmoid(x)``."""
    return x / (1.0 + np.exp(-x))


def _xent_examples():
    rng = _rng()
    out = []
    for dtype in (np.float64, np.float32):
        for n, c in ((8, 5), (3, 17), (1, 1)):
            logits = (rng.standard_normal((n, c)) * 3).astype(dtype)
            labels = rng.integers(0, c, n)
            out.append((logits, labels))
    return out


@composite("braze.nn.softmax_cross_entropy", examples=_xent_examples)
def softmax_cross_entropy(logits, labels):
    """Mean over the batch of ``-log softmax(logits)[label]``; ``logits`` is
    (N, C), ``labels`` (N,) integers in ``[0, C)``."""
    m = stop_gradient(logits.max(axis=-1, keepdims=True))
    lse = np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)) + m
    picked = np.take_along_axis(logits, labels[:, None], axis=-1)
    return (lse - picked).mean()


def _attention_examples():
    rng = _rng()
    out = []
    for dtype in (np.float64, np.float32):
        q = rng.standard_normal((2, 5, 8)).astype(dtype)
        k = rng.standard_normal((2, 7, 8)).astype(dtype)
        v = rng.standard_normal((2, 7, 4)).astype(dtype)
        out.append(((q, k, v), {}))
        out.append(((q[:, :5], k[:, :5], v[:, :5]), {"causal": True}))
    return out


@composite("braze.nn.attention", examples=_attention_examples)
def attention(q, k, v, *, causal=False, scale=None):
    """Scaled dot-product attention ``softmax(q @ k^T * scale) @ v`` over the
    last two axes (``scale`` defaults to ``1/sqrt(d)``); ``causal`` masks
    keys after each query position."""
    d = q.shape[-1]
    s = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(d) if scale is None else scale)
    if causal:
        tq, tk = s.shape[-2], s.shape[-1]
        s = np.where(np.tri(tq, tk, tk - tq, dtype=bool), s, -np.inf)
    return softmax(s) @ v


__all__ = ["softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm", "gelu", "sigmoid", "silu",
           "softmax_cross_entropy", "attention"]
