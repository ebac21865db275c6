"""``attention-ports init r|julia PATH``: a port skeleton with every contract operation.

``init julia --precision float32``: the same skeleton, Float32-ready (the declaration says
``precision = "float32"``; the header's recipes keep constants in the element type T; adamw_step's
note says how its betas arrive): :data:`_FLOAT32_EDITS`, :data:`FLOAT32_NOTES`.

Names, argument order, defaults and returned names come from :mod:`attention_ports.spec.ops` (the table
the adapters call ports with), so a skeleton cannot drift from the contract. The shapes written at
each argument come from :data:`SHAPES` below, in the reference layout, which is R's; Julia's is
derived through each array's layout role (every 2-D and 3-D role reverses the axes, as the Julia
adapter does). A test checks that every array of every operation has a shape here.

The file declares ``attention_ports`` with no operations, so every stub is reported ``missing``
until its author lists it (the port declaration of ports/CONTRACT.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from attention_ports.core.io import current_umask
from attention_ports.spec import ops, pairing
from attention_ports.spec.ops import Role

LANGUAGES = ("r", "julia")
EXTENSIONS = {"r": (".R", ".r"), "julia": (".jl",)}

_PARAMS = {"w_q": ("d", "d"), "w_k": ("d", "d"), "w_v": ("d", "d"), "w_f": ("d", "c")}
_PARAMS.update({b: ("d",) for b in ("b_q", "b_k", "b_v")})
_PARAMS["b_f"] = ("c",)
_MHA_W = {w: ("d_model", "d_model") for w in ("w_q", "w_k", "w_v", "w_o")}
_MHA_B = {b: ("d_model",) for b in ("b_q", "b_k", "b_v", "b_o")}

#: Every array's axes in the reference (= R) layout, by operation; () is a scalar. Group members
#: ("params.w_q") and grouped outputs ("grads.w_q") are looked up by their last name.
_FFN = {"w_1": ("d", "d_ff"), "b_1": ("d_ff",), "w_2": ("d_ff", "d"), "b_2": ("d",)}
_BLOCK = {
    **{n: ("d",) for n in ("ln1_w", "ln1_b", "b_q", "b_k", "b_v", "b_o", "ln2_w", "ln2_b")},
    **{n: ("d", "d") for n in ("w_q", "w_k", "w_v", "w_o")},
    **_FFN,
}
SHAPES: dict[str, dict[str, tuple[str, ...]]] = {
    "softmax": {"x": ("n", "m"), "y": ("n", "m")},
    "scaled_dot_product_attention": {
        "q": ("n_q", "d_k"),
        "k": ("n_k", "d_k"),
        "v": ("n_k", "d_v"),
        "mask": ("n_q", "n_k"),
        "output": ("n_q", "d_v"),
        "weights": ("n_q", "n_k"),
    },
    "self_attention": {
        "x": ("n", "d_in"),
        "w_q": ("d_in", "d_k"),
        "w_k": ("d_in", "d_k"),
        "w_v": ("d_in", "d_v"),
        "b_q": ("d_k",),
        "b_k": ("d_k",),
        "b_v": ("d_v",),
        "mask": ("n", "n"),
        "q": ("n", "d_k"),
        "k": ("n", "d_k"),
        "v": ("n", "d_v"),
        "weights": ("n", "n"),
        "output": ("n", "d_v"),
    },
    "multi_head_attention": {
        "query": ("n_q", "d_model"),
        "key": ("n_k", "d_model"),
        "value": ("n_k", "d_model"),
        **_MHA_W,
        **_MHA_B,
        "mask": ("n_q", "n_k"),
        "output": ("n_q", "d_model"),
        "weights": ("num_heads", "n_q", "n_k"),
    },
    "classifier_forward": {
        "x_emb": ("n", "e"),
        **_PARAMS,
        "x": ("n", "d"),
        "q": ("n", "d"),
        "k": ("n", "d"),
        "v": ("n", "d"),
        "weights": ("n", "n"),
        "z": ("n", "d"),
        "f": ("n", "c"),
        "pooled": ("c",),
        "probs": ("c",),
    },
    "classifier_step": {"x_emb": ("n", "e"), "label": (), **_PARAMS, "loss": (), "probs": ("c",)},
    "classifier_train": {
        "tokens": ("N", "e"),
        "lengths": ("n_sentences",),
        "labels": ("n_sentences",),
        **_PARAMS,
        "epoch_losses": ("epochs",),
    },
    "layer_norm": {"x": ("n", "d"), "weight": ("d",), "bias": ("d",), "y": ("n", "d")},
    "rms_norm": {"x": ("n", "d"), "weight": ("d",), "y": ("n", "d")},
    "gelu": {"x": ("n", "d"), "y": ("n", "d")},
    "sinusoidal_positions": {"table": ("n", "d")},
    "rotary_embedding": {"x": ("n", "d"), "positions": ("n",), "output": ("n", "d")},
    "feed_forward": {**_FFN, "x": ("n", "d"), "y": ("n", "d")},
    "decoder_block": {**_BLOCK, "x": ("n", "d"), "y": ("n", "d")},
    "gpt_forward": {
        "tokens": ("n",),
        "wte": ("vocab", "d"),
        "wpe": ("n_ctx", "d"),
        **{k: ("n_layer", *v) for k, v in _BLOCK.items()},
        "lnf_w": ("d",),
        "lnf_b": ("d",),
        "w_head": ("d", "vocab"),
        "logits": ("n", "vocab"),
    },
    "gpt_grads": {
        "tokens": ("n",),
        "targets": ("n",),
        "ignore_index": (),
        "loss": (),
        "wte": ("vocab", "d"),
        "wpe": ("n_ctx", "d"),
        **{k: ("n_layer", *v) for k, v in _BLOCK.items()},
        "lnf_w": ("d",),
        "lnf_b": ("d",),
        "w_head": ("d", "vocab"),
    },
    "gpt_train": {
        "tokens": ("n",),
        "targets": ("n",),
        "ignore_index": (),
        "losses": ("steps",),
        "wte": ("vocab", "d"),
        "wpe": ("n_ctx", "d"),
        **{k: ("n_layer", *v) for k, v in _BLOCK.items()},
        "lnf_w": ("d",),
        "lnf_b": ("d",),
        "w_head": ("d", "vocab"),
    },
    "lm_loss": {"logits": ("n", "vocab"), "targets": ("n",), "ignore_index": (), "loss": ()},
    "adamw_step": {"param": ("r", "c"), "grad": ("r", "c"), "m": ("r", "c"), "v": ("r", "c")},
}

#: What each scalar option is, and its default (None: the language's "absent").
OPTIONS: dict[str, tuple[str, dict[str, str] | None]] = {
    "scale": ("a number, or absent for 1 / sqrt(d_k)", None),
    "num_heads": ("an integer dividing d_model; each head is d_head = d_model / num_heads wide", None),
    "lr": ("the learning rate, a number", None),
    "epochs": ("an integer", None),
    "steps": ("the number of AdamW steps, an integer >= 1", None),
    "frozen": (
        "names of parameters not to update (their gradients are still returned)",
        {"r": "character(0)", "julia": "String[]"},
    ),
    "approximate": (
        '"none" (0.5 x (1 + erf(x / sqrt(2)))) or "tanh" (GPT-2\'s approximation), as torch',
        {"r": '"none"', "julia": '"none"'},
    ),
    "eps": (
        "a number >= 0: a norm adds it inside the square root (absent: 1e-5), adamw_step to it (absent: 1e-8)",
        None,
    ),
    "step": ("the step's number t >= 1, an integer (a count, not an index)", None),
    "beta1": ("the first moment's decay, 0.9 when absent", None),
    "beta2": ("the second moment's decay, 0.999 when absent", None),
    "weight_decay": ("decoupled weight decay, 0.01 when absent (0: plain Adam)", None),
    "n": ("the number of positions (rows of the table), an integer", None),
    "d": ("the number of features, an even integer", None),
    "base": ("the frequencies' base, a number, or absent for 10000", None),
}

_ABSENT = {"r": "NULL", "julia": "nothing"}
# An optimizer updates a parameter elementwise, it does not apply it (a weight's role note would say
# "applied as x %*% W"): its arrays are the parameter as the model stores it.
_FAMILY_NOTES = {
    "optimizer": {
        "r": "elementwise: the parameter's own shape, a matrix or a vector",
        "julia": "elementwise: the parameter's own shape, a matrix or a vector",
    }
}
# What a role's layout means in each language, after the shape: never the sizes again (the shape
# line has them, and an operation's own sizes, d_ff say, would contradict a restated generic one).
_ROLE_NOTES = {
    Role.TOKENS: {"r": "one token per row", "julia": "one token per column"},
    Role.WEIGHT: {"r": "applied as x %*% W", "julia": "applied as W * x"},
    Role.SCORES: {"r": "queries x keys", "julia": "keys x queries"},
    Role.ROWS: {"r": "normalise each row", "julia": "normalise each column"},
    Role.INDEX: {"r": "1-based index (a class or token id)", "julia": "1-based index (a class or token id)"},
    Role.BLOCK_WEIGHT: {
        "r": "block first, each slice applied as x %*% W",
        "julia": "block last, each slice applied as W * x",
    },
    Role.BLOCK_VECTOR: {"r": "a row per block", "julia": "a column per block"},
    Role.LOGITS: {"r": "one position per row", "julia": "one position per column"},
    Role.TOKEN_TABLE: {"r": "row t: token id t's embedding", "julia": "column t: token id t's embedding"},
    Role.POSITION_TABLE: {"r": "row p: position p's embedding", "julia": "column p: position p's embedding"},
}

#: What each operation computes (ports/CONTRACT.md), written above its stub.
NOTES: dict[str, str] = {
    "softmax": "Stable: subtract the maximum first. A slice that is entirely -Inf gives NaN (0/0).",
    "scaled_dot_product_attention": "weights = softmax over the keys of (scale * q.k + mask); output = weights . v",
    "self_attention": "q, k, v = x projected by w_q, w_k, w_v (+ biases); then scaled dot-product attention.",
    "multi_head_attention": (
        "Packed heads, as torch's nn.MultiheadAttention computes them, but every weight in this\n"
        "contract's layout and applied like every other weight (below), not in torch's storage: R's\n"
        "w_q, w_k, w_v, w_o are torch's in_proj / out_proj blocks transposed, Julia's are torch's\n"
        "blocks as they are. Head i (1-based) uses projected features ((i-1)*d_head+1):(i*d_head)\n"
        "(columns in R, rows in Julia), scale 1/sqrt(d_head), the same mask; head outputs are\n"
        "concatenated in head order, then projected by w_o (+ b_o)."
    ),
    "classifier_forward": (
        "Seed 003's classifier: x = x_emb with the positions 0..n-1 appended as a last feature\n"
        "(d = e + 1); self-attention with biases, scale 1/sqrt(d); f = feed-forward to c = 3 classes;\n"
        "pooled = mean of f over the tokens; probs = softmax(pooled)."
    ),
    "classifier_step": (
        "One SGD step on one sentence: loss = cross-entropy of probs at label; every parameter not\n"
        "named in frozen becomes p - lr * grad. loss and probs are those before the update."
    ),
    "classifier_train": (
        "Sentence i is the next lengths[i] tokens of tokens (0: a sentence with no known words: skip it).\n"
        "For each epoch, one classifier_step per sentence in order, positions restarting at 0;\n"
        "epoch_losses = the mean pre-update loss over the trained sentences."
    ),
    "layer_norm": (
        "Each token (x's row in R, column in Julia) normalised over its d features:\n"
        "(x - mean) / sqrt(var + eps) * weight + bias, var the biased variance (divided by d), eps inside\n"
        "the square root. Compute var in two passes (the mean, then the mean of (x - mean)^2): the\n"
        "one-pass mean(x^2) - mean^2 cancels on nearly constant tokens with a large mean."
    ),
    "gelu": (
        'Elementwise. approximate = "none": 0.5 x (1 + erf(x / sqrt(2))) (R: x * pnorm(x));\n'
        '"tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).'
    ),
    "rms_norm": (
        "Each token normalised by its root mean square: x / sqrt(mean(x^2) + eps) * weight (no centring,\nno bias)."
    ),
    "sinusoidal_positions": (
        "Vaswani et al.: feature 2i of position p (0-based, both) is sin(p * base^(-2i/d)), feature 2i+1\n"
        "its cos. Positions 0..n-1."
    ),
    "rotary_embedding": (
        "RoPE: each feature pair (a, b) of the token at position p becomes (a cos - b sin, b cos + a sin)\n"
        "of the angle p * base^(-2i/d), i = 0..d/2-1; positions default to 0..n-1 (values, not indices).\n"
        'Pairs are (i, i + d/2) ("halves", the default); a port pairing 2i with 2i+1 declares\n'
        'rope_pairing = "interleaved" in attention_ports. The port takes no pairing argument.'
    ),
    "feed_forward": "Position-wise: y = gelu(x W_1 + b_1) W_2 + b_2, gelu as asked by approximate.",
    "decoder_block": (
        "GPT-2's pre-norm block: h = x + attn(layer_norm(x; ln1_w, ln1_b)), y = h + feed_forward(layer_norm(h;\n"
        "ln2_w, ln2_b)); attn is causal multi-head self-attention (as multi_head_attention, query i sees keys\n"
        "1..i) with its output projection w_o, b_o."
    ),
    "gpt_forward": (
        "x = wte[tokens] + wpe[positions 1..n]; every block in order (block b's parameters are slice b of\n"
        "each stacked array); logits = layer_norm(x; lnf_w, lnf_b) W_head: a row of logits per position."
    ),
    "gpt_grads": (
        "loss = lm_loss(gpt_forward(tokens, params), targets, ignore_index); returns the loss and grads, a\n"
        "collection with every parameter's gradient (same names and shapes as params)."
    ),
    "gpt_train": (
        "steps AdamW steps on the same batch: each step gpt_grads' loss and gradients, then adamw_step on\n"
        "every parameter (step t = 1, 2, ...; m and v start at 0 and are carried; the decay on every\n"
        "parameter; Adam's eps 1e-8, eps being the norms'). Returns losses (each step's, before its update)\n"
        "and params (the final ones); lr absent: 1e-3."
    ),
    "lm_loss": (
        "Next-token cross-entropy: the mean over counted positions of logsumexp(logits_i) - logits_i[targets_i];\n"
        "a position whose target equals ignore_index is not counted (none counted: NaN, 0/0 as torch).\n"
        "Use a stable log-sum-exp (logits of 1e3 overflow exp)."
    ),
    "adamw_step": (
        "m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad^2; param = param (1 - lr wd)\n"
        "- lr (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps). Returns param, m, v; lr absent: 1e-3."
    ),
}


def _base(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def shape(op: str, name: str, lang: str) -> str:
    """``"n_q x d_k"`` in ``lang``'s layout (R: the reference's; Julia: reversed per the role)."""
    spec = ops.get(op)
    dims = SHAPES[op][_base(name)]
    role = spec.role(name)
    if lang == "julia" and role not in (Role.VECTOR, Role.SCALAR):
        dims = tuple(reversed(dims))
    if not dims:
        text = "an integer" if role is Role.INDEX else "a number"
    elif len(dims) == 1:
        text = f"vector, length {dims[0]}"
    else:
        text = " x ".join(dims)
    note = _FAMILY_NOTES.get(spec.family, _ROLE_NOTES.get(role, {})).get(lang)
    return f"{text}; {note}" if note else text


def port_options(spec: ops.OpSpec) -> list[str]:
    """The named options a port takes: the rotary pairing is declared, not passed (spec/pairing.py)."""
    return [o for o in spec.options if not (spec.name in pairing.OPS and o == pairing.OPTION)]


def kit_comment(
    spec: ops.OpSpec,
    c: str,
    shape: Callable[[str, str], str],
    *,
    prefix: str = "",
    group: Callable[[str, tuple[str, ...]], list[str]] | None = None,
    outputs: str | None = None,
) -> list[str]:
    """The comment above a kit skeleton's stub (C, Octave, Rust, JavaScript, Python): the call, its
    notes, each argument with its shape, the outputs. ``c`` starts a comment line, ``prefix`` names
    an argument (Octave's ``a.``), ``shape(op, name)`` says an array's shape in the kit's terms;
    ``group`` and ``outputs`` replace the default lines for a group and for the outputs."""
    optional = [f"[{k}]" for k in (*spec.kwargs, *port_options(spec))]
    lines = [f"{c} {spec.name}({', '.join([*spec.args, *spec.groups, *spec.positional_options, *optional])})"]
    lines += [f"{c} {line}" for line in NOTES[spec.name].splitlines()]
    for a in spec.args:
        lines.append(f"{c}   {prefix}{a}: {shape(spec.name, a)}")
    for name, members in spec.groups.items():
        if group is not None:
            lines += group(name, members)
        else:
            lines.append(f"{c}   {prefix}{name}: a group of {', '.join(members)}, each shaped like its parameter")
    for o in spec.positional_options:
        lines.append(f"{c}   {prefix}{o}: {OPTIONS[o][0]}")
    for k in spec.kwargs:
        lines.append(f"{c}   {prefix}{k} (optional): {shape(spec.name, k)}")
    for o in port_options(spec):
        lines.append(f"{c}   {prefix}{o} (optional): {OPTIONS[o][0]}")
    lines.append(f"{c} outputs: {outputs if outputs is not None else ', '.join(spec.outputs) + ' (by these names)'}")
    return lines


def signature(spec: ops.OpSpec, lang: str) -> str:
    """The function's parameter list, in the order the adapters call it."""
    positional = [*spec.args, *spec.groups, *spec.positional_options]
    named = [f"{k} = {_ABSENT[lang]}" for k in spec.kwargs]
    for opt in port_options(spec):
        default = OPTIONS[opt][1]
        named.append(f"{opt} = {default[lang] if default else _ABSENT[lang]}")
    if lang == "r":
        return ", ".join(positional + named)
    return ", ".join(positional) + (f"; {', '.join(named)}" if named else "")


def _argument_lines(spec: ops.OpSpec, lang: str) -> list[str]:
    absent = _ABSENT[lang]
    rows: list[tuple[str, str]] = [(a, shape(spec.name, a, lang)) for a in spec.args]
    for group, members in spec.groups.items():
        kind = "named list" if lang == "r" else "NamedTuple"
        rows.append((group, f"{kind} of {', '.join(members)}:"))
        rows += [(f"  {group}{'$' if lang == 'r' else '.'}{m}", shape(spec.name, m, lang)) for m in members]
    rows += [(o, OPTIONS[o][0]) for o in spec.positional_options]
    for k in spec.kwargs:
        what = shape(spec.name, k, lang)
        if k == "mask":
            what += ", additive (0 keeps, -Inf removes)"
        rows.append((k, f"{what}, or {absent}"))
    rows += [(o, OPTIONS[o][0].replace("absent", absent)) for o in port_options(spec)]
    width = max(len(n) for n, _ in rows)
    return [f"#   {n:<{width}}  {what}" for n, what in rows]


def _returns(spec: ops.OpSpec, lang: str) -> list[str]:
    """``# returns list(output = <n_q x d_v>, ...)`` / ``(output = <d_v x n_q>, ...)`` comment lines."""
    parts: list[str] = []
    grouped: dict[str, list[str]] = {}
    for out in spec.outputs:
        if "." in out:
            group, member = out.split(".", 1)
            if group not in grouped:
                grouped[group] = []
                parts.append(group)
            grouped[group].append(member)
        else:
            parts.append(out)
    if len(spec.outputs) == 1:  # a single output comes back bare, not in a list
        what = shape(spec.name, spec.outputs[0], lang).split(";")[0]
        if not SHAPES[spec.name][_base(spec.outputs[0])]:  # 0-D (lm_loss's loss): a number, not an array
            return [f"# returns {spec.outputs[0]}, {what}, itself"]
        return [f"# returns the {what} array itself"]
    open_, close = ("list(", ")") if lang == "r" else ("(", ")")

    def one(name: str) -> str:
        if name in grouped:
            return f"{name} = {open_}{', '.join(grouped[name])}: each shaped like its parameter{close}"
        return f"{name} = <{shape(spec.name, name, lang).split(';')[0]}>"

    items = [one(p) for p in parts]
    flat = f"# returns {open_}{', '.join(items)}{close}"
    if len(flat) <= 100:
        return [flat]
    return [f"# returns {open_}", *(f"#   {item}," for item in items[:-1]), f"#   {items[-1]}{close}"]


_R_HEADER = """\
# An R port for attention-ports, generated by `attention-ports init r`.
#
# Fill in an operation, list its name in `attention_ports$operations` below, then run
#   attention-ports verify --port r={path}
# An operation not listed is reported `missing` (its stub is never called); one that is listed and
# raises (stop()) is an `error` for its cases, with your message. The contract:
# ports/CONTRACT.md of attention-ports (`python -c "from attention_ports.core import paths; print(paths.CONTRACT)"`).
#
# Layout: R is token-major, like the reference: one token per ROW (x is n x d), weights are
# d_in x d_out applied as x %*% W, attention weights are n_q x n_k with each ROW summing to 1.
# Numbers are doubles; only base R is needed.
#
# Recipes:
# * scale: NULL means 1 / sqrt(d_k) with d_k = ncol(q); in multi-head attention d_k is the
#   width of one head, d_model / num_heads (not d_model, and not sqrt(length(q))):
#     if (is.null(scale)) scale <- 1 / sqrt(ncol(q))
#     scores <- scale * (q %*% t(k))                  # n_q x n_k
# * mask: the suite passes an additive numeric n_q x n_k matrix (0 keeps a key, -Inf removes
#   it, a finite value biases it) or NULL:  if (!is.null(mask)) scores <- scores + mask
#   from a logical keep-mask (TRUE = attend, torch's scaled_dot_product_attention):
#     additive <- ifelse(keep, 0, -Inf)
#   from a logical "ignore" mask (TRUE = masked out, torch's nn.MultiheadAttention):
#     additive <- ifelse(masked, -Inf, 0)
#   causal (query i sees keys 1..i):   additive <- ifelse(col(scores) > row(scores), -Inf, 0)
#   key padding (keys 1..len valid):   additive <- matrix(ifelse(seq_len(n_k) <= len, 0, -Inf), n_q, n_k, byrow = TRUE)
# * softmax must be stable (scores of 1e3 must work): subtract each row's maximum first:
#     e <- exp(x - apply(x, 1, max)); e / rowSums(e)
#   a row that is entirely -Inf gives NaN (0/0): that is the expected softmax.
# * a query whose mask removes every key: the default convention (masked_query = "zeros") wants
#   zero weights and a zero output row, not NaN:
#     dead <- apply(scores == -Inf, 1, all); weights[dead, ] <- 0
# * class labels are 1-based (negative 1, neutral 2, positive 3).

# Which operations this file implements: list each one as you write it, e.g.
#   attention_ports <- list(operations = c("softmax", "scaled_dot_product_attention"))
# Add masked_query = "nan" (NaN rows, as NNlib.jl and torch < 2.5) or "uniform" (1/n_k weights,
# as the CRAN `attention` package) if your port does not return zeros for a fully masked query.
attention_ports <- list(operations = character(0))
"""

_JULIA_HEADER = """\
# A Julia port for attention-ports, generated by `attention-ports init julia`.
#
# Fill in an operation, list its name in `attention_ports.operations` below, then run
#   attention-ports verify --port julia={path}
# An operation not listed is reported `missing` (its stub is never called); one that is listed and
# throws is an `error` for its cases, with your message. The contract: ports/CONTRACT.md of
# attention-ports (`python -c "from attention_ports.core import paths; print(paths.CONTRACT)"`).
#
# Layout: Julia is feature-major, like seed 003 and NNlib: one token per COLUMN (x is d x n),
# weights are d_out x d_in applied as W * x, attention weights are n_k x n_q (keys x queries)
# with each COLUMN summing to 1; per-head weights are n_k x n_q x num_heads. Float64 throughout;
# the standard library only (Julia 1.5 to 1.11).
#
# Recipes:
# * scale: nothing means 1 / sqrt(d_k) with d_k = size(q, 1); in multi-head attention d_k is the
#   width of one head, d_model / num_heads (not d_model, and not sqrt(length(q)): seed 003's bug):
#     s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale
#     scores = s .* (k' * q)                          # n_k x n_q
# * mask: the suite passes an additive Float64 n_k x n_q matrix (0 keeps a key, -Inf removes it,
#   a finite value biases it) or nothing:  mask === nothing || (scores = scores .+ mask)
#   from a Bool keep-mask (true = attend, NNlib's convention):  additive = ifelse.(keep, 0.0, -Inf)
#   from a Bool "ignore" mask (true = masked out):             additive = ifelse.(masked, -Inf, 0.0)
#   a mask written queries x keys (R, NumPy, torch) must be transposed first: permutedims(m)
#   causal (query j sees keys 1..j):  additive = [i <= j ? 0.0 : -Inf for i in 1:n_k, j in 1:n_q]
# * softmax must be stable (scores of 1e3 must work): subtract each column's maximum first:
#     e = exp.(x .- maximum(x; dims = 1)); e ./ sum(e; dims = 1)
#   a column that is entirely -Inf gives NaN (0/0): that is the expected softmax.
# * a query whose mask removes every key: the default convention (masked_query = "zeros") wants
#   zero weights and a zero output column, not NaN:
#     dead = vec(all(scores .== -Inf; dims = 1)); weights[:, dead] .= 0
# * class labels are 1-based (negative 1, neutral 2, positive 3).

# Which operations this file implements: list each one as you write it, e.g.
#   const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)
# Add masked_query = "nan" (NaN columns, as NNlib.jl and torch < 2.5) or "uniform" (1/n_k weights,
# as the CRAN `attention` package) if your port does not return zeros for a fully masked query.
const attention_ports = (operations = String[],)
"""


# `init julia --precision float32`: the Julia header's Float64 statements and literals, each edited
# to its Float32 form (a Float64 literal or default promotes a Float32 computation to Float64:
# `0.5 * x` is a Float64 array for a Float32 x). Each edit must apply exactly once (julia_header).
_FLOAT32_EDITS: tuple[tuple[str, str], ...] = (
    (
        "num_heads. Float64 throughout;\n# the standard library only (Julia 1.5 to 1.11).",
        "num_heads. The standard\n# library only (Julia 1.5 to 1.11).\n#\n"
        '# Float32 (precision = "float32", declared below): the suite sends every real array and real\n'
        "# option as Float32 and judges the port on the float32 tier, with float32's bounds\n"
        "# (ports/CONTRACT.md, the port declaration). Write each function over the element type,\n"
        "#     function softmax(x::AbstractMatrix{T}) where {T<:AbstractFloat}\n"
        "# and keep every constant in T: a Float64 literal or default promotes the computation to Float64\n"
        "# (0.5 .* x is Float64 for a Float32 x). Write T(0.5), one(T), zero(T), 1f-5, inv(sqrt(T(d))),\n"
        "# and an absent option's default in T too: eps === nothing ? T(1e-5) : eps.",
    ),
    (
        "#     s = scale === nothing ? 1 / sqrt(size(q, 1)) : scale",
        "#     s = scale === nothing ? inv(sqrt(T(size(q, 1)))) : T(scale)",
    ),
    ("the suite passes an additive Float64 n_k x n_q matrix", "the suite passes an additive Float32 n_k x n_q matrix"),
    ("ifelse.(keep, 0.0, -Inf)", "ifelse.(keep, zero(T), T(-Inf))"),
    ("ifelse.(masked, -Inf, 0.0)", "ifelse.(masked, T(-Inf), zero(T))"),
    ("[i <= j ? 0.0 : -Inf for", "[i <= j ? zero(T) : T(-Inf) for"),
    (
        '#   const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"],)',
        '#   const attention_ports = (operations = ["softmax", "scaled_dot_product_attention"], precision = "float32")',
    ),
    (
        "const attention_ports = (operations = String[],)",
        'const attention_ports = (operations = String[], precision = "float32")',
    ),
)
PRECISIONS = ("float64", "float32")  # what `init julia --precision` writes (R has only double)

#: What an operation's author needs to know at float32, below its note (`init julia --precision float32`).
FLOAT32_NOTES: dict[str, str] = {
    "adamw_step": (
        "Float32: the float32 tier passes lr, beta1, beta2, eps and weight_decay always, each a Float32\n"
        "(the defaults too: beta2 = Float32(0.999)), and 1 - beta of a Float32 beta >= 1/2 is exact: converting\n"
        "the betas to T first (Optimisers.jl's T.(o.beta), beta^t a running product in T) or forming 1 - beta\n"
        "and the bias corrections in Float64 and converting (torch) both pass (docs/truth-and-bounds.md,\n"
        '"Optimizer: adamw_step").'
    ),
}


def julia_header(precision: str) -> str:
    """The Julia skeleton's header at ``precision`` (one of :data:`PRECISIONS`)."""
    if precision == "float64":
        return _JULIA_HEADER
    text = _JULIA_HEADER
    for old, new in _FLOAT32_EDITS:
        if text.count(old) != 1:  # the header changed under an edit: fix the edit, never skip it
            raise AssertionError(f"skeleton: the Float32 edit of {old!r} matches {text.count(old)} times")
        text = text.replace(old, new)
    return text


def render(lang: str, path_hint: str = "PATH", precision: str = "float64") -> str:
    """The skeleton's text for ``lang`` ("r" or "julia"), at ``precision`` (float32: Julia's only)."""
    if lang not in LANGUAGES:
        raise ValueError(f"init takes one of {', '.join(LANGUAGES)}, not {lang!r}")
    check_precision(lang, precision)
    blocks = [(_R_HEADER if lang == "r" else julia_header(precision)).replace("{path}", path_hint)]
    for spec in ops.OPS.values():
        sig = signature(spec, lang)
        lines = [f"# {spec.name}({sig})"]
        lines += [f"# {line}" for line in NOTES[spec.name].splitlines()]
        if precision == "float32" and spec.name in FLOAT32_NOTES:
            lines += [f"# {line}" for line in FLOAT32_NOTES[spec.name].splitlines()]
        lines += [*_argument_lines(spec, lang), *_returns(spec, lang)]
        if lang == "r":
            lines += [
                f"{spec.name} <- function({sig}) {{",
                f'  stop("{spec.name} is not written yet")',
                "}",
            ]
        else:
            lines += [f"function {spec.name}({sig})", f'    error("{spec.name} is not written yet")', "end"]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


class InitError(Exception):
    """A skeleton cannot be written (bad language, precision or file name, an existing file)."""


def check_precision(lang: str, precision: str) -> None:
    """Refuse a precision ``lang``'s skeleton cannot be written in (R computes in double only)."""
    if precision not in PRECISIONS:
        raise InitError(f"--precision {precision}: init writes {' or '.join(PRECISIONS)}")
    if precision != "float64" and lang != "julia":
        raise InitError(
            f"--precision {precision}: R computes in double only (a port declaring float32 gets a load error); "
            "a float32 skeleton is for julia: attention-ports init julia --precision float32 PATH.jl"
        )


def write(lang: str, path: Path, precision: str = "float64") -> Path:
    """Write the skeleton to ``path``; never overwrite a file, never leave half a file behind."""
    if lang not in LANGUAGES:
        raise InitError(f"init takes one of {', '.join(LANGUAGES)}, not {lang!r}")
    check_precision(lang, precision)
    if path.suffix not in EXTENSIONS[lang]:
        raise InitError(f"{path}: a {lang} port file must end in {' or '.join(EXTENSIONS[lang])}")
    return atomic_create(path, render(lang, str(path), precision))


def atomic_create(path: Path, text: str) -> Path:
    """Create ``path`` holding ``text``: never over an existing file, never half written."""
    if path.exists() or path.is_symlink():
        raise InitError(f"{path} already exists; not overwriting it (choose another path or remove it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # mkstemp makes the file 0600: give it the mode a plain open() would (0644 under umask 022)
            os.fchmod(fh.fileno(), 0o666 & ~current_umask())
            fh.write(text)
        # link() refuses an existing target: no race with a file created meanwhile.
        os.link(tmp, path)
    except FileExistsError:
        raise InitError(f"{path} already exists; not overwriting it (choose another path or remove it)") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def main(lang: str, path: Path, precision: str = "float64") -> int:
    try:
        written = write(lang, path, precision)
    except InitError as exc:
        print(f"attention-ports init: {exc}", file=sys.stderr)
        return 2
    declared = ', declared precision = "float32"' if precision == "float32" else ""
    print(f"wrote {written}: every contract operation as a stub, none listed in attention_ports yet{declared}")
    print(f"next: fill one in, add its name to attention_ports, run: attention-ports verify --port {lang}={written}")
    return 0
