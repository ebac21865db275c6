"""A walkthrough port with the Python kit: softmax, scaled_dot_product_attention and
multi_head_attention in plain NumPy at float64 (swap ``np`` for ``jax.numpy`` for a JAX port).

    attention-ports verify --port py=ports/kits/python/example/port.py
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the kit: ports/kits/python
from attention_port import serve


def softmax(x):
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"softmax: x {x.shape} contains NaN or +Inf")
    with np.errstate(invalid="ignore"):  # an all -inf row is NaN (0/0), as the reference's
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return {"y": e / e.sum(axis=-1, keepdims=True)}


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    # a Python float: NumPy's float64 scalar (np.sqrt's) would turn a float32 port's scores float64
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    scores = (q @ k.T) * scale
    if mask is not None:
        scores = scores + mask  # additive: 0 keeps, -inf removes
    dead = np.all(np.isneginf(scores), axis=-1)  # masked_query = "zeros"
    weights = softmax(scores)["y"]
    weights[dead] = 0.0
    return {"output": weights @ v, "weights": weights}


def multi_head_attention(
    query, key, value, w_q, w_k, w_v, w_o, num_heads, b_q=None, b_k=None, b_v=None, b_o=None, mask=None
):
    def project(x, w, b):
        return x @ w if b is None else x @ w + b

    q, k, v = project(query, w_q, b_q), project(key, w_k, b_k), project(value, w_v, b_v)
    d_head = q.shape[1] // num_heads
    heads = [
        scaled_dot_product_attention(q[:, s], k[:, s], v[:, s], mask)
        for s in (slice(h * d_head, (h + 1) * d_head) for h in range(num_heads))
    ]
    concat = np.concatenate([h["output"] for h in heads], axis=1)
    return {"output": project(concat, w_o, b_o), "weights": np.stack([h["weights"] for h in heads])}


if __name__ == "__main__":
    serve(
        {
            "softmax": softmax,
            "scaled_dot_product_attention": scaled_dot_product_attention,
            "multi_head_attention": multi_head_attention,
        },
        description=f"Python kit walkthrough port 1.0 (NumPy {np.__version__})",
    )
