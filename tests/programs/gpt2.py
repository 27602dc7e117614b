"""A GPT-2 forward pass in plain NumPy, in the style of picoGPT (Jay Mody's
60-line NumPy GPT): layer norm, causal self-attention with a loop over heads,
a GELU MLP, tied embeddings, and a cross-entropy loss over next tokens."""
import numpy as np


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)


def layer_norm(x, g, b, eps: float = 1e-5):
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    x = (x - mean) / np.sqrt(variance + eps)
    return g * x + b


def linear(x, w, b):
    return x @ w + b


def ffn(x, c_fc, c_proj):
    a = gelu(linear(x, **c_fc))
    x = linear(a, **c_proj)
    return x


def attention(q, k, v, mask):
    return softmax(q @ k.T / np.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)
    qkv = np.split(x, 3, axis=-1)
    qkv_heads = list(map(lambda x: np.split(x, n_head, axis=-1), qkv))
    causal_mask = (1 - np.tri(x.shape[0], dtype=x.dtype)) * -1e10
    out_heads = [attention(q, k, v, causal_mask) for q, k, v in zip(*qkv_heads)]
    x = np.hstack(out_heads)
    x = linear(x, **c_proj)
    return x


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    x = x + ffn(layer_norm(x, **ln_2), **mlp)
    return x


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head):
    x = wte[inputs] + wpe[range(len(inputs))]
    for block in blocks:
        x = transformer_block(x, **block, n_head=n_head)
    x = layer_norm(x, **ln_f)
    return x @ wte.T


def loss(inputs, targets, wte, wpe, blocks, ln_f, n_head):
    logits = gpt2(inputs, wte, wpe, blocks, ln_f, n_head)
    logits = logits - logits.max(axis=-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -logp[np.arange(len(targets)), targets].mean()


def params(n_layer=2, n_embd=64, n_head=4, n_vocab=97, n_ctx=32, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    def ln():
        return {"g": np.ones(n_embd, dtype), "b": np.zeros(n_embd, dtype)}

    blocks = [{
        "mlp": {"c_fc": {"w": w(n_embd, 4 * n_embd), "b": w(4 * n_embd)},
                "c_proj": {"w": w(4 * n_embd, n_embd), "b": w(n_embd)}},
        "attn": {"c_attn": {"w": w(n_embd, 3 * n_embd), "b": w(3 * n_embd)},
                 "c_proj": {"w": w(n_embd, n_embd), "b": w(n_embd)}},
        "ln_1": ln(), "ln_2": ln(),
    } for _ in range(n_layer)]
    return {"wte": w(n_vocab, n_embd), "wpe": w(n_ctx, n_embd), "blocks": blocks, "ln_f": ln(), "n_head": n_head}
