"""A small LeNet-style forward pass in plain NumPy: convolution as a loop over
kernel offsets, ReLU, 2x2 max pooling by reshape, dense layers, softmax."""
import numpy as np


def conv(x, w, b):
    # x: (n, c, h, w); w: (f, c, k, k)
    f, c, k, _ = w.shape
    n, _, h, wd = x.shape
    out = np.zeros((n, f, h - k + 1, wd - k + 1), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            patch = x[:, :, i:i + h - k + 1, j:j + wd - k + 1]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def maxpool(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def relu(x):
    return np.maximum(x, 0)


def lenet(x, p):
    x = maxpool(relu(conv(x, p["c1w"], p["c1b"])))
    x = maxpool(relu(conv(x, p["c2w"], p["c2b"])))
    x = x.reshape(x.shape[0], -1)
    x = relu(x @ p["f1w"] + p["f1b"])
    logits = x @ p["f2w"] + p["f2b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def params(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(dtype)

    return {"c1w": w(6, 1, 5, 5), "c1b": np.zeros(6, dtype), "c2w": w(16, 6, 5, 5), "c2b": np.zeros(16, dtype),
            "f1w": w(16 * 4 * 4, 120), "f1b": np.zeros(120, dtype), "f2w": w(120, 10), "f2b": np.zeros(10, dtype)}


def _args(n):
    return (np.random.default_rng(1).random((n, 1, 28, 28)).astype(np.float32), params())


EXAMPLES = {"lenet": (lenet, _args, {}, 2, 64)}
