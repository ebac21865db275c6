"""One GPT training step's gradients in float64 NumPy, by hand as llm.c's ``train_gpt2.c``: ``gpt_grads``.

``loss = lm_loss(gpt_forward(tokens, params), targets, ignore_index)`` and ``d loss / d p`` for every
parameter p (ports/CONTRACT.md, "gpt_grads"). The forward keeps what the backward reads (each layer
norm's normalised rows and 1/sqrt(var + eps), the attention weights, the pre-activations); the
backward is reverse mode written out, layer by layer:

    d logits_i   = (softmax(logits_i) - onehot(targets_i)) / count     (0 where targets_i is ignored)
    layer norm   dx = r (g - mean(g) - yhat mean(g yhat)),  g = dy w;  dw = sum dy yhat, db = sum dy
    gelu         dh = dy gelu'(h)
    attention    dA = dz V^T, dV = A^T dz, dS = A (dA - rowsum(dA A)), dq = s dS k, dk = s dS^T q
    embeddings   grads.wte[t] += dx_i for every position i holding token t; grads.wpe[i] = dx_i

Layout as ``gpt_forward``: tokens and targets 0-based ids, weights (d_in x d_out), per-block
parameters stacked along a leading block axis. float32 parameters are computed in float32 (the float32
tier's reference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from attention_ports.reference.activations import APPROXIMATIONS, TANH_CUBIC, _erf, gelu
from attention_ports.reference.losses import lm_loss
from attention_ports.reference.transformer import BLOCK_PARAMS, GPT_PARAMS
from attention_ports.reference.validate import float_dtype

_K_TANH = math.sqrt(2 / math.pi)


def gelu_grad(h: np.ndarray, approximate: str = "none") -> np.ndarray:
    """gelu'(h): ``Phi(h) + h phi(h)``, or the tanh form's derivative."""
    if approximate == "tanh":
        t = np.tanh(_K_TANH * (h + TANH_CUBIC * h**3))
        return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * _K_TANH * (1 + 3 * TANH_CUBIC * h * h)
    cdf = 0.5 * (1 + _erf(h / math.sqrt(2))).astype(h.dtype)  # the C library's erf is float64's
    return cdf + h * np.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)


def _norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    mu = x.mean(axis=1, keepdims=True)
    c = x - mu
    r = 1.0 / np.sqrt((c * c).mean(axis=1, keepdims=True) + eps)
    yhat = c * r
    return yhat * w + b, {"yhat": yhat, "r": r, "w": w}


def _norm_back(dy: np.ndarray, cache: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    yhat, r = cache["yhat"], cache["r"]
    g = dy * cache["w"]
    dx = r * (g - g.mean(axis=1, keepdims=True) - yhat * (g * yhat).mean(axis=1, keepdims=True))
    return dx, (dy * yhat).sum(axis=0), dy.sum(axis=0)


def _causal(n: int) -> np.ndarray:
    """Query i keeps keys 0..i."""
    return np.tril(np.ones((n, n), dtype=bool))


def _dlogits(logits: np.ndarray, ys: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """``(softmax(logits_i) - onehot(y_i)) / count`` on the counted rows, 0 elsewhere."""
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    out = np.zeros_like(logits)
    rows = np.flatnonzero(counted)
    out[rows] = prob[rows]
    out[rows, ys[rows]] -= 1.0
    return out / rows.size


def _embedding_back(dx: np.ndarray, ids: np.ndarray, wte: np.ndarray, wpe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """grads.wte (a repeated token accumulates every position's gradient) and grads.wpe."""
    d_wte = np.zeros_like(wte)
    np.add.at(d_wte, ids, dx)
    d_wpe = np.zeros_like(wpe)
    d_wpe[: dx.shape[0]] = dx
    return d_wte, d_wpe


def _params(params: Mapping[str, Any], tokens: np.ndarray) -> dict[str, np.ndarray]:
    missing = [k for k in GPT_PARAMS if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}; gpt_grads needs {', '.join(GPT_PARAMS)}")
    dt = float_dtype(params["wte"])
    p = {k: np.asarray(params[k], dtype=dt) for k in GPT_PARAMS}
    vocab, d = p["wte"].shape
    n_layer = p["w_q"].shape[0]
    for k in BLOCK_PARAMS:
        if p[k].ndim < 2 or p[k].shape[0] != n_layer:
            raise ValueError(f"params.{k} must carry a leading block axis of n_layer = {n_layer}; got {p[k].shape}")
    if p["wpe"].shape[1] != d or p["w_head"].shape != (d, vocab):
        raise ValueError(f"params.wpe must be (n_ctx, {d}) and params.w_head ({d}, {vocab})")
    if tokens.ndim != 1 or tokens.size == 0 or tokens.size > p["wpe"].shape[0]:
        raise ValueError(f"tokens must be a vector of 1..{p['wpe'].shape[0]} ids (n_ctx); got shape {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(f"tokens must be 0-based ids in [0, {vocab - 1}]; got {tokens.min()}..{tokens.max()}")
    for k, v in p.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"params.{k} must be finite")
    return p


def gpt_grads(
    tokens: np.ndarray,
    targets: np.ndarray,
    params: Mapping[str, Any],
    num_heads: int,
    ignore_index: int | np.ndarray | None = None,
    eps: float = 1e-5,
    approximate: str = "none",
) -> dict[str, Any]:
    """``{"loss": 0-D array, "grads": {name: array shaped as params[name]}}``."""
    approximate = "none" if approximate is None else approximate
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {', '.join(map(repr, APPROXIMATIONS))}; got {approximate!r}")
    ids = np.asarray(tokens)
    if ids.dtype.kind == "f":
        if not np.all(ids == np.round(ids)):
            raise ValueError("tokens must hold integer ids")
    ids = ids.astype(np.int64)
    p = _params(params, ids)
    dt = p["wte"].dtype
    n, d = ids.size, p["wte"].shape[1]
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1 or d % num_heads:
        raise ValueError(f"num_heads={num_heads!r} must be a positive divisor of d_model={d}")
    h, dh = int(num_heads), d // int(num_heads)
    s = 1.0 / math.sqrt(dh)
    causal = _causal(n)

    # ---- forward, keeping what the backward reads
    x = p["wte"][ids] + p["wpe"][:n]
    caches = []
    for b in range(p["w_q"].shape[0]):
        q_ = {k: p[k][b] for k in BLOCK_PARAMS}
        a, ln1 = _norm(x, q_["ln1_w"], q_["ln1_b"], eps)
        q, k, v = (a @ q_[f"w_{t}"] + q_[f"b_{t}"] for t in "qkv")
        weights, z = [], np.empty((n, d), dtype=dt)
        for i in range(h):
            cols = slice(i * dh, (i + 1) * dh)
            sc = np.where(causal, q[:, cols] @ k[:, cols].T * s, -np.inf)
            e = np.exp(sc - sc.max(axis=1, keepdims=True))
            att = e / e.sum(axis=1, keepdims=True)
            weights.append(att)
            z[:, cols] = att @ v[:, cols]
        x_mid = x + z @ q_["w_o"] + q_["b_o"]
        m, ln2 = _norm(x_mid, q_["ln2_w"], q_["ln2_b"], eps)
        hid = m @ q_["w_1"] + q_["b_1"]
        act = gelu(hid, approximate=approximate).astype(dt)
        caches.append(
            {"a": a, "ln1": ln1, "q": q, "k": k, "v": v, "att": weights, "z": z, "m": m, "ln2": ln2, "hid": hid}
            | {"act": act}
        )
        x = x_mid + act @ q_["w_2"] + q_["b_2"]
    xf, lnf = _norm(x, p["lnf_w"], p["lnf_b"], eps)
    logits = xf @ p["w_head"]
    loss = lm_loss(logits, targets, ignore_index)

    # ---- backward
    ys = np.asarray(targets).astype(np.int64)  # lm_loss validated them
    counted = np.ones(n, dtype=bool) if ignore_index is None else ys != int(np.asarray(ignore_index).reshape(()))
    if not counted.any():
        raise ValueError("every target equals ignore_index: the loss is 0 / 0 and has no gradient")
    dlogits = _dlogits(logits, ys, counted)
    g: dict[str, Any] = {"w_head": xf.T @ dlogits}
    dx, g["lnf_w"], g["lnf_b"] = _norm_back(dlogits @ p["w_head"].T, lnf)
    blocks: list[dict[str, np.ndarray]] = []
    for b in reversed(range(p["w_q"].shape[0])):
        c, q_ = caches[b], {k: p[k][b] for k in BLOCK_PARAMS}
        gb: dict[str, np.ndarray] = {"w_2": c["act"].T @ dx, "b_2": dx.sum(axis=0)}
        dhid = (dx @ q_["w_2"].T) * gelu_grad(c["hid"], approximate)
        gb["w_1"], gb["b_1"] = c["m"].T @ dhid, dhid.sum(axis=0)
        dm, gb["ln2_w"], gb["ln2_b"] = _norm_back(dhid @ q_["w_1"].T, c["ln2"])
        dmid = dx + dm
        gb["w_o"], gb["b_o"] = c["z"].T @ dmid, dmid.sum(axis=0)
        dz = dmid @ q_["w_o"].T
        dq, dk, dv = (np.zeros((n, d), dtype=dt) for _ in range(3))
        for i in range(h):
            cols = slice(i * dh, (i + 1) * dh)
            att = c["att"][i]
            datt = dz[:, cols] @ c["v"][:, cols].T
            dv[:, cols] = att.T @ dz[:, cols]
            dsc = att * (datt - (datt * att).sum(axis=1, keepdims=True))
            dq[:, cols] = dsc @ c["k"][:, cols] * s
            dk[:, cols] = dsc.T @ c["q"][:, cols] * s
        for t, dproj in (("q", dq), ("k", dk), ("v", dv)):
            gb[f"w_{t}"], gb[f"b_{t}"] = c["a"].T @ dproj, dproj.sum(axis=0)
        da = dq @ q_["w_q"].T + dk @ q_["w_k"].T + dv @ q_["w_v"].T
        dxa, gb["ln1_w"], gb["ln1_b"] = _norm_back(da, c["ln1"])
        dx = dmid + dxa
        blocks.append(gb)
    blocks.reverse()
    for k in BLOCK_PARAMS:
        g[k] = np.stack([gb[k] for gb in blocks])
    g["wte"], g["wpe"] = _embedding_back(dx, ids, p["wte"], p["wpe"])
    return {"loss": loss, "grads": {k: g[k] for k in GPT_PARAMS}}
