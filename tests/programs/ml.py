"""Machine-learning layers and training steps in plain NumPy, as tutorials
and course notebooks write them."""
import numpy as np


def softmax_cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels].mean()


def batch_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=0)
    var = x.var(axis=0)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def causal_attention(q, k, v):
    t, d = q.shape
    scores = q @ k.T / np.sqrt(d)
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    scores = np.where(mask, -np.inf, scores)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    return w @ v


def logistic_regression(X, y, lr, steps):
    w = np.zeros(X.shape[1])
    b = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(X @ w + b)))
        grad_w = X.T @ (p - y) / len(y)
        grad_b = np.mean(p - y)
        w -= lr * grad_w
        b -= lr * grad_b
    return w, b


def kmeans_step(points, centers):
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
    assign = d.argmin(axis=1)
    new = np.empty_like(centers)
    for c in range(centers.shape[0]):
        members = points[assign == c]
        new[c] = members.mean(axis=0) if len(members) else centers[c]
    return new, assign


def mlp_forward(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0)
    return h @ w2 + b2


def _rng():
    return np.random.default_rng(5)


def _mlp(n):
    r = _rng()
    return (r.standard_normal((n, 8)), r.standard_normal((8, 16)) * 0.3, np.zeros(16),
            r.standard_normal((16, 3)) * 0.3, np.zeros(3))


EXAMPLES = {
    "softmax_cross_entropy": (softmax_cross_entropy, lambda n: (_rng().standard_normal((n, 10)) * 3,
                                                                 _rng().integers(0, 10, n)), {}, 6, 4096),
    "batch_norm": (batch_norm, lambda n: (_rng().standard_normal((n, 4)), np.ones(4) * 1.5, np.zeros(4)), {},
                   8, 100_000),
    "causal_attention": (causal_attention, lambda n: tuple(_rng().standard_normal((n, 8)) for _ in range(3)), {},
                         5, 512),
    "logistic_regression": (logistic_regression, lambda n: (_rng().standard_normal((n, 3)),
                                                             (_rng().random(n) > 0.5).astype(float), 0.1),
                            {"steps": 25}, 20, 10_000),
    "kmeans_step": (kmeans_step, lambda n: (_rng().standard_normal((n, 2)), _rng().standard_normal((3, 2))), {},
                    15, 100_000),
    "mlp_forward": (mlp_forward, _mlp, {}, 4, 4096),
}
