"""PyTorch as an independent oracle, in float64 (in float32 for the float32 tier: ``dtype``).

Attention goes through torch's own kernels, not a transcription of the reference:
``F.scaled_dot_product_attention`` (its ``scale`` and ``attn_mask``) and ``nn.MultiheadAttention``
loaded with the case's weights. SDPA does not return its weights, so they are obtained from the
same kernel by attending over an identity value matrix (``weights @ I = weights``), which keeps
torch's own masking semantics, fully masked rows included: their convention differs between the
two kernels, and ``masked_query_for`` says which each follows (``MASKED_QUERY``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from attention_ports.runtimes.impl import Arrays, Implementation, ImplementationUnavailable, OperationMissing
from attention_ports.spec.ops import BLOCK_PARAMS, GPT_PARAMS

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:  # torch is an optional extra for users
    raise ImplementationUnavailable(f"torch is not installed ({exc}); pip install 'attention-ports[torch]'") from exc


def _t(a: np.ndarray, dtype: Any = np.float64) -> torch.Tensor:
    if isinstance(dtype, torch.dtype):  # a storage dtype NumPy lacks (bfloat16): from float64, exact
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(dtype)  # for storage values
    return torch.from_numpy(np.ascontiguousarray(a, dtype=dtype))


def _mask(mask: np.ndarray | None, dtype: type = np.float64) -> torch.Tensor | None:
    if mask is None:
        return None
    return torch.from_numpy(np.ascontiguousarray(mask)) if mask.dtype == bool else _t(mask, dtype)


# Above this many keys the identity trick (n_q n_k^2 work, an n_k x n_k identity) costs too much
# (the scale tier goes to 16384 keys): the weights come from torch.softmax of the same scores, a
# query with no key left getting zero weights as SDPA gives it.
EYE_MAX_KEYS = 1024


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if k.shape[-2] <= EYE_MAX_KEYS:
        eye = torch.eye(k.shape[-2], dtype=v.dtype)
        return out, F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1)
    del scores
    if mask is not None:
        keep = mask if mask.dtype == torch.bool else ~torch.isneginf(mask)
        weights[~keep.any(dim=-1)] = 0.0  # NaN (0/0) for a query with no key left
    return out, weights


def _linear(x: torch.Tensor, w: np.ndarray, b: np.ndarray | None, dtype: type = np.float64) -> torch.Tensor:
    # The reference's x @ W is torch's linear with weight W^T.
    return F.linear(x, _t(w, dtype).T, None if b is None else _t(b, dtype))


def _version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# torch's own conventions for a query whose mask removes every key (attention_ports/spec/conventions.py),
# declared, never patched over: F.scaled_dot_product_attention gives it zero weights and output
# since torch 2.5 (NaN before); nn.MultiheadAttention takes the softmax of an all -inf row itself and
# returns NaN weights and a NaN output row. Its outputs are judged against what each implies.
SDPA_MASKED_QUERY = "zeros" if _version() >= (2, 5) else "nan"
MASKED_QUERY = {
    "scaled_dot_product_attention": SDPA_MASKED_QUERY,
    "self_attention": SDPA_MASKED_QUERY,
    "multi_head_attention": "nan",
}


class TorchImplementation(Implementation):
    name = "torch"
    masked_query = SDPA_MASKED_QUERY
    # The dtype every tensor is made in: float64, or float32 for the float32 tier
    # (runtimes/precision.py); the same code either way.
    dtype: type = np.float64

    def masked_query_for(self, op: str) -> str:
        return MASKED_QUERY.get(op, self.masked_query)

    def __init__(self, dtype: type = np.float64) -> None:
        self.dtype = dtype
        # One intra-op thread (process-wide): the fixture cases are small, where torch's spinning
        # thread pool costs far more than it gives (measured on 2 busy cores: the two training cases
        # 2.7 s with one thread, 25 s with two), and verify runs the implementations side by side.
        torch.set_num_threads(1)

    def describe(self) -> str:
        return (
            f"torch {torch.__version__} ({np.dtype(self.dtype).name}, CPU); masked_query = {SDPA_MASKED_QUERY} "
            f"(scaled_dot_product_attention), {MASKED_QUERY['multi_head_attention']} (nn.MultiheadAttention)"
        )

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise OperationMissing(f"{op} is not defined in the torch implementation")
        with torch.enable_grad() if op.startswith("classifier_") else torch.no_grad():
            out = handler(inputs, options)
        return {k: v.detach().numpy().copy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in out.items()}

    def _op_softmax(self, inputs, options):
        return {"y": torch.softmax(_t(inputs["x"], self.dtype), dim=-1)}

    def _op_scaled_dot_product_attention(self, inputs, options):
        q, k, v = (_t(inputs[n], self.dtype) for n in "qkv")
        out, w = _sdpa(q, k, v, _mask(inputs.get("mask"), self.dtype), options.get("scale"))
        return {"output": out, "weights": w}

    def _op_self_attention(self, inputs, options):
        x = _t(inputs["x"], self.dtype)
        q, k, v = (_linear(x, inputs[f"w_{n}"], inputs.get(f"b_{n}"), self.dtype) for n in "qkv")
        out, w = _sdpa(q, k, v, _mask(inputs.get("mask"), self.dtype), options.get("scale"))
        return {"q": q, "k": k, "v": v, "weights": w, "output": out}

    def _op_layer_norm(self, inputs, options):
        x = _t(inputs["x"], self.dtype)
        w, b = inputs.get("weight"), inputs.get("bias")
        eps = options.get("eps")
        y = F.layer_norm(
            x,
            (x.shape[-1],),
            None if w is None else _t(w, self.dtype),
            None if b is None else _t(b, self.dtype),
            1e-5 if eps is None else eps,
        )
        return {"y": y}

    def _op_rms_norm(self, inputs, options):
        x = _t(inputs["x"], self.dtype)
        w = inputs.get("weight")
        eps = options.get("eps")
        return {
            "y": F.rms_norm(x, (x.shape[-1],), None if w is None else _t(w, self.dtype), 1e-5 if eps is None else eps)
        }

    def _op_gelu(self, inputs, options):
        return {"y": F.gelu(_t(inputs["x"], self.dtype), approximate=options.get("approximate") or "none")}

    def _op_multi_head_attention(self, inputs, options):
        d = inputs["w_q"].shape[0]
        has_bias = any(f"b_{n}" in inputs for n in "qkvo")
        mha = torch.nn.MultiheadAttention(
            d, int(options["num_heads"]), bias=has_bias, batch_first=True, dtype=_t(np.zeros(0), self.dtype).dtype
        )
        zeros = np.zeros(d)
        mha.in_proj_weight.copy_(torch.cat([_t(inputs[f"w_{n}"], self.dtype).T for n in "qkv"]))
        mha.out_proj.weight.copy_(_t(inputs["w_o"], self.dtype).T)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([_t(inputs.get(f"b_{n}", zeros), self.dtype) for n in "qkv"]))
            mha.out_proj.bias.copy_(_t(inputs.get("b_o", zeros), self.dtype))
        mask = inputs.get("mask")
        # nn.MultiheadAttention's boolean masks mean True = *blocked*, the opposite of SDPA's;
        # an additive float mask means the same thing to both, so always pass that.
        additive = None if mask is None else np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask
        attn_mask = None if additive is None else _t(additive, self.dtype)
        out, w = mha(
            _t(inputs["query"], self.dtype)[None],
            _t(inputs["key"], self.dtype)[None],
            _t(inputs["value"], self.dtype)[None],
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=False,
        )
        return {"output": out[0], "weights": w[0]}


# ------------------------------------------------------------------ seed 003's classifier
# The forward is written with torch ops and the gradients come from autograd, so the reference's
# hand-written backward is checked against an implementation that never derived one.
_CLF_PARAMS = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_f", "b_f")


def _clf_params(inputs: Mapping[str, np.ndarray], grad: bool, dtype: type) -> dict[str, torch.Tensor]:
    return {n: _t(inputs[f"params.{n}"], dtype).clone().requires_grad_(grad) for n in _CLF_PARAMS}


def _clf_forward(x_emb: torch.Tensor, p: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    n = x_emb.shape[0]
    x = torch.cat([x_emb, torch.arange(n, dtype=x_emb.dtype)[:, None]], dim=1)  # (n, d)
    q, k, v = (F.linear(x, p[f"w_{s}"].T, p[f"b_{s}"]) for s in "qkv")
    weights = torch.softmax(q @ k.T / x.shape[1] ** 0.5, dim=-1)  # (n, n)
    z = weights @ v
    f = F.linear(z, p["w_f"].T, p["b_f"])  # (n, c)
    pooled = f.mean(dim=0)
    return {"x": x, "q": q, "k": k, "v": v, "weights": weights, "z": z, "f": f, "pooled": pooled}


def _clf_step(x_emb: np.ndarray, label: int, params: dict[str, torch.Tensor], lr: float, frozen: set[str]):
    p = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
    fw = _clf_forward(torch.from_numpy(np.ascontiguousarray(x_emb)).to(p["w_q"].dtype), p)
    loss = F.cross_entropy(fw["pooled"][None], torch.tensor([label]))
    grads = dict(zip(_CLF_PARAMS, torch.autograd.grad(loss, [p[n] for n in _CLF_PARAMS]), strict=True))
    with torch.no_grad():
        new = {n: p[n] if n in frozen else p[n] - lr * grads[n] for n in _CLF_PARAMS}
        probs = torch.softmax(fw["pooled"], dim=0)
    return loss.detach(), probs, grads, {n: t.detach() for n, t in new.items()}


def _op_classifier_forward(self, inputs, options):
    p = _clf_params(inputs, False, self.dtype)
    fw = _clf_forward(_t(inputs["x_emb"], self.dtype), p)
    return {**fw, "probs": torch.softmax(fw["pooled"], dim=0)}


def _op_classifier_step(self, inputs, options):
    frozen = set(options.get("frozen") or ())
    loss, probs, grads, new = _clf_step(
        inputs["x_emb"], int(inputs["label"]), _clf_params(inputs, False, self.dtype), options["lr"], frozen
    )
    return {
        "loss": loss,
        "probs": probs,
        **{f"grads.{n}": g for n, g in grads.items()},
        **{f"params.{n}": t for n, t in new.items()},
    }


def _op_classifier_train(self, inputs, options):
    frozen = set(options.get("frozen") or ())
    params = _clf_params(inputs, False, self.dtype)
    offsets = np.concatenate([[0], np.cumsum(inputs["lengths"])]).astype(int)
    sentences = [
        (inputs["tokens"][a:b], int(lab)) for a, b, lab in zip(offsets[:-1], offsets[1:], inputs["labels"], strict=True)
    ]
    epoch_losses = []
    for _ in range(int(options["epochs"])):
        total, count = 0.0, 0
        for x_emb, label in sentences:
            if x_emb.shape[0] == 0:  # a sentence with no known words is skipped, as in seed 003
                continue
            loss, _, _, params = _clf_step(x_emb, label, params, options["lr"], frozen)
            total += float(loss)
            count += 1
        epoch_losses.append(total / count)
    return {"epoch_losses": np.array(epoch_losses), **{f"params.{n}": t for n, t in params.items()}}


# torch.no_grad() in run() would stop autograd: the classifier ops manage gradients themselves.
TorchImplementation._op_classifier_forward = _op_classifier_forward
TorchImplementation._op_classifier_step = _op_classifier_step
TorchImplementation._op_classifier_train = _op_classifier_train


# Position operations, written as the models that made them popular write them (the oracle
# checks the formulas, not the reference's code): the Annotated Transformer's sinusoidal table
# (frequencies by exp of a log), Hugging Face Llama's rotate_half for the halves pairing and
# Meta's Llama complex product (torch.polar, view_as_complex) for the interleaved one.
def _op_sinusoidal_positions(self, inputs, options):
    n, d = int(options["n"]), int(options["d"])
    base = float(options.get("base") or 10000.0)
    dt = _t(np.zeros(0), self.dtype).dtype
    position = torch.arange(n, dtype=dt).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=dt) * -(math.log(base) / d))
    pe = torch.zeros(n, d, dtype=dt)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return {"table": pe}


def _op_rotary_embedding(self, inputs, options):
    x = _t(inputs["x"], self.dtype)
    n, d = x.shape
    base = float(options.get("base") or 10000.0)
    pos = torch.arange(n, dtype=x.dtype) if "positions" not in inputs else _t(inputs["positions"], self.dtype)
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    freqs = torch.outer(pos, inv_freq)
    if (options.get("pairing") or "halves") == "halves":
        emb = torch.cat((freqs, freqs), dim=-1)
        rotated = torch.cat((-x[:, d // 2 :], x[:, : d // 2]), dim=-1)  # rotate_half
        return {"output": x * emb.cos() + rotated * emb.sin()}
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    x_c = torch.view_as_complex(x.reshape(n, d // 2, 2).contiguous())
    return {"output": torch.view_as_real(x_c * freqs_cis).reshape(n, d)}


TorchImplementation._op_sinusoidal_positions = _op_sinusoidal_positions
TorchImplementation._op_rotary_embedding = _op_rotary_embedding


# The transformer (ports/CONTRACT.md, "The transformer"), written as GPT-2 is in torch (nanoGPT's
# Block): F.layer_norm, F.gelu with its approximate option, a fused q/k/v projection split into
# heads and F.scaled_dot_product_attention(is_causal=True): torch's own kernels, not a transcription
# of the reference's per-head loop.
def _ffn(x: torch.Tensor, w_1, b_1, w_2, b_2, approximate: str, dtype: type) -> torch.Tensor:
    return _linear(F.gelu(_linear(x, w_1, b_1, dtype), approximate=approximate), w_2, b_2, dtype)


def _gpt_block(x: torch.Tensor, p: Mapping[str, np.ndarray], heads: int, eps: float, approximate: str, dtype: type):
    n, d = x.shape

    def ln(t: torch.Tensor, w: np.ndarray, b: np.ndarray) -> torch.Tensor:
        return F.layer_norm(t, (d,), _t(w, dtype), _t(b, dtype), eps)

    a = ln(x, p["ln1_w"], p["ln1_b"])
    w_qkv = np.concatenate([p["w_q"], p["w_k"], p["w_v"]], axis=1)  # (d, 3d): one projection
    b_qkv = np.concatenate([p["b_q"], p["b_k"], p["b_v"]])
    q, k, v = _linear(a, w_qkv, b_qkv, dtype).split(d, dim=1)
    q, k, v = (t.view(n, heads, d // heads).transpose(0, 1) for t in (q, k, v))  # (h, n, d_head)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(d_head)
    h = x + _linear(y.transpose(0, 1).reshape(n, d), p["w_o"], p["b_o"], dtype)
    return h + _ffn(ln(h, p["ln2_w"], p["ln2_b"]), p["w_1"], p["b_1"], p["w_2"], p["b_2"], approximate, dtype)


def _transformer_options(options: Mapping[str, Any]) -> tuple[float, str]:
    eps = options.get("eps")
    return (1e-5 if eps is None else float(eps)), (options.get("approximate") or "none")


def _op_feed_forward(self, inputs, options):
    _, approximate = _transformer_options(options)
    x = _t(inputs["x"], self.dtype)
    return {"y": _ffn(x, inputs["w_1"], inputs["b_1"], inputs["w_2"], inputs["b_2"], approximate, self.dtype)}


def _op_decoder_block(self, inputs, options):
    eps, approximate = _transformer_options(options)
    p = {k.split(".", 1)[1]: a for k, a in inputs.items() if k.startswith("params.")}
    x = _t(inputs["x"], self.dtype)
    return {"y": _gpt_block(x, p, int(options["num_heads"]), eps, approximate, self.dtype)}


def _op_gpt_forward(self, inputs, options):
    eps, approximate = _transformer_options(options)
    p = {k.split(".", 1)[1]: a for k, a in inputs.items() if k.startswith("params.")}
    ids = torch.from_numpy(np.asarray(inputs["tokens"]).astype(np.int64))
    wte, wpe = _t(p["wte"], self.dtype), _t(p["wpe"], self.dtype)
    x = F.embedding(ids, wte) + wpe[: ids.numel()]
    for b in range(p["ln1_w"].shape[0]):
        block = {m: p[m][b] for m in p if m not in ("wte", "wpe", "lnf_w", "lnf_b", "w_head")}
        x = _gpt_block(x, block, int(options["num_heads"]), eps, approximate, self.dtype)
    x = F.layer_norm(x, (x.shape[1],), _t(p["lnf_w"], self.dtype), _t(p["lnf_b"], self.dtype), eps)
    return {"logits": _linear(x, p["w_head"], None, self.dtype)}


TorchImplementation._op_feed_forward = _op_feed_forward
TorchImplementation._op_decoder_block = _op_decoder_block
TorchImplementation._op_gpt_forward = _op_gpt_forward


# The next-token loss: torch's own cross_entropy (log_softmax, then the targets' entries, then the
# mean over the positions not ignored). Absent, ignore_index matches no target: every position counts.
def _op_lm_loss(self, inputs, options):
    targets = torch.from_numpy(np.ascontiguousarray(inputs["targets"], dtype=np.int64))
    ignore = int(np.asarray(inputs["ignore_index"]).reshape(())) if "ignore_index" in inputs else -100
    if "ignore_index" not in inputs and bool((targets == ignore).any()):
        raise ValueError(f"targets hold {ignore}, torch's default ignore_index, and no ignore_index is given")
    return {"loss": F.cross_entropy(_t(inputs["logits"], self.dtype), targets, ignore_index=ignore)}


TorchImplementation._op_lm_loss = _op_lm_loss


def _op_adamw_step(self, inputs, options):
    """torch.optim.AdamW itself (single-tensor path): the moments and the step count set as its state
    before the step (``state["step"]`` counts the steps taken, t - 1; step() increments it first)."""
    param = torch.nn.Parameter(_t(inputs["param"], self.dtype).clone())
    defaults = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}
    o = {k: float(default if options.get(k) is None else options[k]) for k, default in defaults.items()}
    opt = torch.optim.AdamW(
        [param], lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["weight_decay"], foreach=False
    )
    opt.state[param] = {
        "step": torch.tensor(float(int(options["step"]) - 1), dtype=torch.float64),
        "exp_avg": _t(inputs["m"], self.dtype).clone(),
        "exp_avg_sq": _t(inputs["v"], self.dtype).clone(),
    }
    param.grad = _t(inputs["grad"], self.dtype).clone()
    opt.step()
    state = opt.state[param]
    return {"param": param.detach(), "m": state["exp_avg"], "v": state["exp_avg_sq"]}


TorchImplementation._op_adamw_step = _op_adamw_step
# gpt_grads: torch's autograd through its own kernels (F.embedding, F.layer_norm, the causal
# F.scaled_dot_product_attention, F.gelu, F.cross_entropy), the way a PyTorch GPT-2 trains; the
# oracle checks the gradients, not the reference's by-hand backward.


def _gpt_loss(p: Mapping[str, torch.Tensor], inputs, options) -> torch.Tensor:
    """lm_loss(gpt_forward(tokens, p), targets, ignore_index) through torch's own kernels."""
    h = int(options["num_heads"])
    eps = 1e-5 if options.get("eps") is None else float(options["eps"])
    form = options.get("approximate") or "none"
    ids = torch.from_numpy(np.ascontiguousarray(inputs["tokens"], dtype=np.int64))
    n, d = len(ids), p["wte"].shape[1]
    x = F.embedding(ids, p["wte"]) + F.embedding(torch.arange(n), p["wpe"])
    for b in range(p["w_q"].shape[0]):
        t = {k: p[k][b] for k in BLOCK_PARAMS}
        a = F.layer_norm(x, (d,), t["ln1_w"], t["ln1_b"], eps)
        q, k, v = (F.linear(a, t[f"w_{s}"].T, t[f"b_{s}"]).reshape(n, h, d // h).transpose(0, 1) for s in "qkv")
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(n, d)
        x = x + F.linear(z, t["w_o"].T, t["b_o"])
        m = F.layer_norm(x, (d,), t["ln2_w"], t["ln2_b"], eps)
        x = x + F.linear(F.gelu(F.linear(m, t["w_1"].T, t["b_1"]), approximate=form), t["w_2"].T, t["b_2"])
    logits = F.layer_norm(x, (d,), p["lnf_w"], p["lnf_b"], eps) @ p["w_head"]
    targets = torch.from_numpy(np.ascontiguousarray(inputs["targets"], dtype=np.int64))
    ignore = int(np.asarray(inputs["ignore_index"]).reshape(())) if "ignore_index" in inputs else -100
    return F.cross_entropy(logits, targets, ignore_index=ignore)


def _op_gpt_grads(self, inputs, options):
    with torch.enable_grad():  # run() holds no_grad
        p = {n: _t(inputs[f"params.{n}"], self.dtype).requires_grad_(True) for n in GPT_PARAMS}
        loss = _gpt_loss(p, inputs, options)
        grads = torch.autograd.grad(loss, [p[k] for k in GPT_PARAMS])
    return {"loss": loss.detach(), **{f"grads.{k}": g for k, g in zip(GPT_PARAMS, grads, strict=True)}}


TorchImplementation._op_gpt_grads = _op_gpt_grads
# gpt_train: a PyTorch training loop as people write it: zero_grad, the loss, backward, then
# torch.optim.AdamW over every parameter (its defaults' eps 1e-8; decay on every parameter).


def _op_gpt_train(self, inputs, options):
    defaults = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 1e-2}
    o = {k: float(default if options.get(k) is None else options[k]) for k, default in defaults.items()}
    p = {n: torch.nn.Parameter(_t(inputs[f"params.{n}"], self.dtype).clone()) for n in GPT_PARAMS}
    opt = torch.optim.AdamW(
        list(p.values()), lr=o["lr"], betas=(o["beta1"], o["beta2"]), weight_decay=o["weight_decay"], foreach=False
    )
    losses = []
    with torch.enable_grad():  # run() holds no_grad
        for _ in range(int(options["steps"])):
            opt.zero_grad()
            loss = _gpt_loss(p, inputs, options)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
    return {"losses": torch.stack(losses), **{f"params.{k}": p[k].detach() for k in GPT_PARAMS}}


TorchImplementation._op_gpt_train = _op_gpt_train
