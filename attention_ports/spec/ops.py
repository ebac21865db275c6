"""What each operation takes and returns, declared once.

Every adapter is driven by this table instead of hand-writing each call: which arrays are
positional, which are optional keywords, which scalar options exist, which arrays travel grouped
into a parameter collection, what comes back, and the *layout role* of each array so the Julia
adapter can convert between the reference layout (tokens as rows) and Julia's feature-major one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Role(Enum):
    """How an array's axes map between the reference layout and Julia's feature-major layout."""

    TOKENS = "tokens"  # (n, d) reference  <-> (d, n) Julia: transpose
    WEIGHT = "weight"  # (d_in, d_out)     <-> (d_out, d_in): transpose
    SCORES = "scores"  # (n_q, n_k)        <-> (n_k, n_q): transpose (masks and attention weights)
    HEAD_SCORES = "head_scores"  # (h, n_q, n_k) <-> (n_k, n_q, h): reverse the axes
    VECTOR = "vector"  # 1-D: identical
    SCALAR = "scalar"  # 0-D: identical
    ROWS = "rows"  # a matrix softmax normalises along its last axis: transpose, like TOKENS
    INDEX = "index"  # integer class indices: 0-based in the reference, 1-based in R and Julia
    # A stack of per-block parameters (gpt_forward): the block axis first here, last in Julia.
    BLOCK_WEIGHT = "block_weight"  # (n_layer, d_in, d_out) <-> (d_out, d_in, n_layer): reverse the axes
    BLOCK_VECTOR = "block_vector"  # (n_layer, d)           <-> (d, n_layer): transpose
    # The language model's own matrices, transposed like TOKENS but named for what they index (a
    # message says "vocabulary entry x position", not "feature x token", for Julia's logits).
    LOGITS = "logits"  # (n, vocab) <-> (vocab, n): one row of next-token logits per position
    TOKEN_TABLE = "token_table"  # (vocab, d) <-> (d, vocab): row t is token id t's embedding
    POSITION_TABLE = "position_table"  # (n_ctx, d) <-> (d, n_ctx): row p is position p's embedding


# What each axis of an array of a role indexes, in the reference layout; a language with another
# layout permutes these with the array (failure messages and heatmaps name a port's axes this way).
AXIS_NAMES: dict[Role, tuple[str, ...]] = {
    Role.TOKENS: ("token", "feature"),
    Role.WEIGHT: ("input feature", "output feature"),
    Role.SCORES: ("query", "key"),
    Role.HEAD_SCORES: ("head", "query", "key"),
    Role.VECTOR: ("entry",),
    Role.SCALAR: (),
    Role.ROWS: ("vector", "entry"),  # each vector (a reference row) is one softmax
    Role.INDEX: ("entry",),
    Role.BLOCK_WEIGHT: ("block", "input feature", "output feature"),
    Role.BLOCK_VECTOR: ("block", "entry"),
    Role.LOGITS: ("position", "vocabulary entry"),
    Role.TOKEN_TABLE: ("token id", "feature"),
    Role.POSITION_TABLE: ("position", "feature"),
}


@dataclass(frozen=True)
class OpSpec:
    name: str
    args: tuple[str, ...]  # required arrays, in positional order
    kwargs: tuple[str, ...] = ()  # optional arrays, passed by name when present
    options: tuple[str, ...] = ()  # scalar options (None = absent), passed by name
    positional_options: tuple[str, ...] = ()  # scalar options that are positional, after args
    outputs: tuple[str, ...] = ()
    roles: dict[str, Role] = field(default_factory=dict)
    # name of a collection argument -> the arrays that travel inside it (R named list, Julia Dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The family whose coverage features apply (attention_ports/tools/coverage.py, FEATURES): the
    # attention operations and the classifier share "attention", the normalisation layers "norm".
    family: str = "attention"

    def role(self, array_name: str) -> Role:
        base = array_name.rsplit(".", 1)[-1]
        if base not in self.roles:
            raise KeyError(f"{self.name}: no layout role declared for array {array_name!r}")
        return self.roles[base]


_ATTN_ROLES = {
    "q": Role.TOKENS,
    "k": Role.TOKENS,
    "v": Role.TOKENS,
    "x": Role.TOKENS,
    "query": Role.TOKENS,
    "key": Role.TOKENS,
    "value": Role.TOKENS,
    "output": Role.TOKENS,
    "mask": Role.SCORES,
    "w_q": Role.WEIGHT,
    "w_k": Role.WEIGHT,
    "w_v": Role.WEIGHT,
    "w_o": Role.WEIGHT,
    "b_q": Role.VECTOR,
    "b_k": Role.VECTOR,
    "b_v": Role.VECTOR,
    "b_o": Role.VECTOR,
}

OPS: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in OPS:
        raise ValueError(f"operation {spec.name!r} declared twice")
    OPS[spec.name] = spec
    return spec


register(OpSpec("softmax", args=("x",), outputs=("y",), roles={"x": Role.ROWS, "y": Role.ROWS}))
register(
    OpSpec(
        "scaled_dot_product_attention",
        args=("q", "k", "v"),
        kwargs=("mask",),
        options=("scale",),
        outputs=("output", "weights"),
        roles={**_ATTN_ROLES, "weights": Role.SCORES},
    )
)
register(
    OpSpec(
        "self_attention",
        args=("x", "w_q", "w_k", "w_v"),
        kwargs=("b_q", "b_k", "b_v", "mask"),
        options=("scale",),
        outputs=("q", "k", "v", "weights", "output"),
        roles={**_ATTN_ROLES, "weights": Role.SCORES},
    )
)
register(
    OpSpec(
        "multi_head_attention",
        args=("query", "key", "value", "w_q", "w_k", "w_v", "w_o"),
        positional_options=("num_heads",),
        kwargs=("b_q", "b_k", "b_v", "b_o", "mask"),
        outputs=("output", "weights"),
        roles={**_ATTN_ROLES, "weights": Role.HEAD_SCORES},
    )
)


def get(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown operation {name!r}; known: {', '.join(OPS)}") from None


# Seed 003's attention classifier (reference/classifier.py). The parameters travel as one group
# "params" (inputs "params.w_q", ...); their natural call order is the required arrays, then the
# group, then the positional options, then the named options, e.g.
# classifier_step(x_emb, label, params, lr, frozen = <names>). Labels are 0-based class indices
# (negative 0, neutral 1, positive 2). "frozen" is a list of parameter names, possibly empty.
CLASSIFIER_PARAMS: tuple[str, ...] = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_f", "b_f")
_CLASSIFIER_ROLES = {
    **_ATTN_ROLES,
    "x_emb": Role.TOKENS,  # (n, e): the embeddings *without* the positional column
    "weights": Role.SCORES,
    "z": Role.TOKENS,
    "f": Role.TOKENS,  # (n, c)
    "pooled": Role.VECTOR,
    "probs": Role.VECTOR,
    "loss": Role.SCALAR,
    "label": Role.INDEX,  # 0-D: the class index (0-based here, 1-based in R and Julia)
    "w_f": Role.WEIGHT,
    "b_f": Role.VECTOR,
    "tokens": Role.TOKENS,  # (N_total, e): every sentence's rows stacked in dataset order
    "lengths": Role.VECTOR,  # integer-valued: rows per sentence (0 = an empty sentence, skipped)
    "labels": Role.INDEX,  # the class index of each sentence
    "epoch_losses": Role.VECTOR,
}
register(
    OpSpec(
        "classifier_forward",
        args=("x_emb",),
        outputs=("x", "q", "k", "v", "weights", "z", "f", "pooled", "probs"),
        roles=_CLASSIFIER_ROLES,
        groups={"params": CLASSIFIER_PARAMS},
    )
)
register(
    OpSpec(
        "classifier_step",
        args=("x_emb", "label"),
        positional_options=("lr",),
        options=("frozen",),
        outputs=(
            "loss",
            "probs",
            *(f"grads.{p}" for p in CLASSIFIER_PARAMS),
            *(f"params.{p}" for p in CLASSIFIER_PARAMS),
        ),
        roles=_CLASSIFIER_ROLES,
        groups={"params": CLASSIFIER_PARAMS},
    )
)
register(
    OpSpec(
        "classifier_train",
        args=("tokens", "lengths", "labels"),
        positional_options=("lr", "epochs"),
        options=("frozen",),
        outputs=("epoch_losses", *(f"params.{p}" for p in CLASSIFIER_PARAMS)),
        roles=_CLASSIFIER_ROLES,
        groups={"params": CLASSIFIER_PARAMS},
    )
)


# The normalisation layers (reference/norms.py): rows are tokens, each normalised over its features.
# eps (default 1e-5, as torch) is added inside the square root; weight (gain) and bias are vectors of
# the feature width, optional.
_NORM_ROLES = {"x": Role.TOKENS, "weight": Role.VECTOR, "bias": Role.VECTOR, "y": Role.TOKENS}
register(
    OpSpec(
        "layer_norm",
        args=("x",),
        kwargs=("weight", "bias"),
        options=("eps",),
        outputs=("y",),
        roles=_NORM_ROLES,
        family="norm",
    )
)
register(
    OpSpec(
        "rms_norm", args=("x",), kwargs=("weight",), options=("eps",), outputs=("y",), roles=_NORM_ROLES, family="norm"
    )
)


# The activations (reference/activations.py): elementwise, rows are tokens. approximate is torch's
# option, "none" (erf, the default when absent) or "tanh" (GPT-2's approximation).
register(
    OpSpec(
        "gelu",
        args=("x",),
        options=("approximate",),
        outputs=("y",),
        roles={"x": Role.TOKENS, "y": Role.TOKENS},
        family="activation",
    )
)


# Position operations (reference/positions.py). ``positions`` holds position values (0 for the
# first token), not indices: identical in every language. ``pairing`` is the rotary pairing a
# case's truth uses; a port declares the one it implements instead of taking it as an argument
# (attention_ports/spec/pairing.py, ports/CONTRACT.md "Rotary pairing").
_POSITION_ROLES = {"x": Role.TOKENS, "positions": Role.VECTOR, "output": Role.TOKENS, "table": Role.TOKENS}
register(
    OpSpec(
        "sinusoidal_positions",
        args=(),
        positional_options=("n", "d"),
        options=("base",),
        outputs=("table",),
        roles=_POSITION_ROLES,
        family="position",
    )
)
register(
    OpSpec(
        "rotary_embedding",
        args=("x",),
        kwargs=("positions",),
        options=("base", "pairing"),
        outputs=("output",),
        roles=_POSITION_ROLES,
        family="position",
    )
)


# The transformer (issue 18; reference/transformer.py): GPT-2's pre-norm decoder, biases everywhere,
# layer norms with eps inside the square root, causal multi-head attention (heads as in
# multi_head_attention: contiguous blocks of d / num_heads projected features, scale 1/sqrt(d_head)),
# a position-wise feed-forward x W_1 + b_1 -> gelu -> W_2 + b_2 (d_ff wide). ``approximate`` is
# gelu's option ("none" when absent; GPT-2 uses "tanh"), ``eps`` the layer norms' (1e-5 when absent).
FFN_PARAMS: tuple[str, ...] = ("w_1", "b_1", "w_2", "b_2")
BLOCK_PARAMS: tuple[str, ...] = (
    "ln1_w",
    "ln1_b",
    "w_q",
    "b_q",
    "w_k",
    "b_k",
    "w_v",
    "b_v",
    "w_o",
    "b_o",
    "ln2_w",
    "ln2_b",
    *FFN_PARAMS,
)
# gpt_forward's parameters: the token table wte (vocab x d), the learned positions wpe (n_ctx x d),
# every block's parameters stacked along a leading block axis (w_q: n_layer x d x d; ln1_w:
# n_layer x d), the final norm and an untied LM head (d x vocab).
GPT_PARAMS: tuple[str, ...] = ("wte", "wpe", *BLOCK_PARAMS, "lnf_w", "lnf_b", "w_head")
_BLOCK_ROLES = {
    "x": Role.TOKENS,
    "y": Role.TOKENS,
    **{n: (Role.WEIGHT if n.startswith("w_") else Role.VECTOR) for n in BLOCK_PARAMS},
}
register(
    OpSpec(
        "feed_forward",
        args=("x", *FFN_PARAMS),
        options=("approximate",),
        outputs=("y",),
        roles=_BLOCK_ROLES,
        family="transformer",
    )
)
register(
    OpSpec(
        "decoder_block",
        args=("x",),
        positional_options=("num_heads",),
        options=("eps", "approximate"),
        outputs=("y",),
        roles=_BLOCK_ROLES,
        groups={"params": BLOCK_PARAMS},
        family="transformer",
    )
)
_GPT_ROLES = {
    "tokens": Role.INDEX,  # token ids: 0-based here, 1-based in R and Julia
    "targets": Role.INDEX,  # the next token ids (gpt_grads), like tokens
    "ignore_index": Role.INDEX,  # 0-D: a target id that is not counted, in the targets' base
    "logits": Role.LOGITS,  # (n, vocab): one row of next-token logits per position
    "loss": Role.SCALAR,
    "wte": Role.TOKEN_TABLE,  # (vocab, d): row t is token t's embedding (Julia: d x vocab, as Flux)
    "wpe": Role.POSITION_TABLE,  # (n_ctx, d): row p is position p's embedding (Julia: d x n_ctx)
    **{n: (Role.BLOCK_WEIGHT if n.startswith("w_") else Role.BLOCK_VECTOR) for n in BLOCK_PARAMS},
    "lnf_w": Role.VECTOR,
    "lnf_b": Role.VECTOR,
    "w_head": Role.WEIGHT,  # (d, vocab)
}
register(
    OpSpec(
        "gpt_forward",
        args=("tokens",),
        positional_options=("num_heads",),
        options=("eps", "approximate"),
        outputs=("logits",),
        roles=_GPT_ROLES,
        groups={"params": GPT_PARAMS},
        family="transformer",
    )
)
# Every parameter's gradient of lm_loss(gpt_forward(tokens, params), targets, ignore_index) (the
# loss of llm.c's test_gpt2 step): the loss and grads.<name> shaped as params.<name>.
register(
    OpSpec(
        "gpt_grads",
        args=("tokens", "targets"),
        kwargs=("ignore_index",),
        positional_options=("num_heads",),
        options=("eps", "approximate"),
        outputs=("loss", *(f"grads.{p}" for p in GPT_PARAMS)),
        roles=_GPT_ROLES,
        groups={"params": GPT_PARAMS},
        family="transformer",
    )
)


# A few AdamW steps of the GPT (reference/transformer_train.py), classifier_train's counterpart:
# ``steps`` times on the same batch, gpt_grads' loss and gradients, then adamw_step on every
# parameter (moments from 0, carried; step t's bias corrections; decay on every parameter; Adam's
# eps torch's 1e-8, ``eps`` being the layer norms'). Returns each step's pre-update loss and the
# final parameters.
register(
    OpSpec(
        "gpt_train",
        args=("tokens", "targets"),
        kwargs=("ignore_index",),
        positional_options=("num_heads", "steps"),
        options=("eps", "approximate", "lr", "beta1", "beta2", "weight_decay"),
        outputs=("losses", *(f"params.{p}" for p in GPT_PARAMS)),
        roles={**_GPT_ROLES, "losses": Role.VECTOR},
        groups={"params": GPT_PARAMS},
        family="transformer",
    )
)


# Next-token cross-entropy (reference/losses.py): the mean over the counted positions of
# logsumexp(logits_i) - logits_i[targets_i]. targets are token ids (0-based here, 1-based in R and
# Julia); positions whose target equals ignore_index (an index like the targets, in the same base:
# a padding token's id, or one below the first id) are not counted. ignore_index absent: every
# position counts.
register(
    OpSpec(
        "lm_loss",
        args=("logits", "targets"),
        kwargs=("ignore_index",),
        outputs=("loss",),
        roles={"logits": Role.LOGITS, "targets": Role.INDEX, "ignore_index": Role.INDEX, "loss": Role.SCALAR},
        family="loss",
    )
)
# One AdamW step (Loshchilov and Hutter; torch.optim.AdamW) on one parameter array: m and v are the
# moment estimates before the step, step the step's number t >= 1 (a count, not an index: the same
# in every language), bias-corrected moments, weight decay decoupled (param * (1 - lr * wd)); plain
# Adam is weight_decay = 0. Returns the updated param, m and v.
register(
    OpSpec(
        "adamw_step",
        args=("param", "grad", "m", "v"),
        positional_options=("step",),
        options=("lr", "beta1", "beta2", "eps", "weight_decay"),
        outputs=("param", "m", "v"),
        roles={"param": Role.WEIGHT, "grad": Role.WEIGHT, "m": Role.WEIGHT, "v": Role.WEIGHT},
        family="optimizer",
    )
)
