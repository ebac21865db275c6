"""Hypothesis strategies: one per operation, each drawing a whole generated case.

A drawn case is what a catalogue case is (an operation, its input arrays in the reference layout,
its options), so it is judged exactly like a fixture (``attention_ports.tiers.random``). The draws
aim at what breaks ports, not at uniform coverage:

- shapes whose sizes are all distinct (``_sizes``), so no transpose or swapped axis can hide, and
  with 1 among them often enough (one query, one key, one feature, one head);
- every mask: none, boolean, causal with any diagonal (bottom-right alignment included), key
  padding, additive 0/-inf, finite additive values, rows of order -1e3, fully masked queries;
- scales: none (1/sqrt(d_k)), 1, and others (0 included);
- magnitudes across the numeric regimes: ordinary values, arrays scaled by 2^k (k = 4, 6, 8) so
  scaled logits pass exp's overflow at 709, opposite offsets on queries and keys that push a whole row of logits
  below exp's underflow at -745, few distinct values (ties), identical keys;
- for the classifier, the regimes of its output softmax (large feed-forward weights), frozen
  parameters, empty sentences in a training set; trajectories with a saturated output softmax
  and with large learning rates, on purpose (``TRAIN_REGIMES``).

Every value is a double drawn by hypothesis and scaled by a power of two (exact), so shrinking
gives small, readable cases: zeros, small integers, the fewest rows. Magnitudes stop where float64
attention is still well conditioned enough for the error analysis to bound it (``bounds`` refuses
a first-order bound past that; such a draw is counted and not judged, as one the truth cannot
certify).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attention_ports.spec import ops, pairing

MAX_SIZE = 6  # every size is drawn from 1..MAX_SIZE (heads: fewer), so a case costs milliseconds
CLASSES = 3  # seed 003's classifier: negative, neutral, positive


@dataclass(frozen=True)
class Drawn:
    """One generated case: an operation, its inputs (reference layout) and its options."""

    op: str
    inputs: dict[str, np.ndarray]
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        shapes = ", ".join(f"{n} {a.dtype.name}{list(a.shape)}" for n, a in self.inputs.items())
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.op}({shapes}{'; ' + opts if opts else ''})"


# ---------------------------------------------------------------- values


COARSE = (0.0, 1.0, -1.0, 0.5, -0.5, 2.0)
# Arrays up to this many elements are drawn element by element (hypothesis shrinks each value);
# larger ones from a drawn seed with NumPy's generator (drawing thousands of elements one by one is
# most of a run's time; shrinking still makes them smaller, and then element-wise).
ELEMENTWISE = 24


@functools.cache  # strategies are immutable: built (and validated by hypothesis) once, not per draw
def _elements(kind: str) -> st.SearchStrategy[float]:
    if kind == "coarse":  # few distinct values: tied scores, exact zeros, identical rows
        return st.sampled_from(COARSE)
    if kind == "edgy":  # hypothesis's own choice of awkward doubles: -0.0, subnormals, 1 - 2^-53, ...
        return st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)
    # Every bit of the significand in use (a port that rounds through float32 cannot hide): +-m 2^e,
    # m a 53-bit significand, |value| in [1/8, 2). Shrinks to 1.0. (Not integers(-2^53, 2^53) * 2^-52:
    # hypothesis favours small integers, which would make most values ~1e-15.)
    return st.builds(
        _double, st.sampled_from([1.0, -1.0]), st.integers(2**52, 2**53 - 1), st.sampled_from([0, -1, -2, -3])
    )


def _double(sign: float, significand: int, exponent: int) -> float:
    return sign * significand * 2.0 ** (exponent - 52)  # exact: a 53-bit integer times a power of two


@functools.cache  # as _elements: one strategy per shape and kind (validating it was ~20% of a draw)
def _float_arrays(shape: tuple[int, ...], kind: str) -> st.SearchStrategy[np.ndarray]:
    # fill=nothing: every element drawn on its own (hypothesis otherwise fills most with one value)
    return hnp.arrays(np.float64, shape, elements=_elements(kind), fill=st.nothing())


@st.composite
def values(draw: st.DrawFn, shape: tuple[int, ...], big: bool = False, exponents=(4, 6, 8)) -> np.ndarray:
    """A float64 array of ``shape``: ordinary values, or (``big``) scaled by 2^k, k one of ``exponents``."""
    # Listed simplest first: hypothesis shrinks towards the first, so a minimal case reads 0, 1, -0.5.
    kind = draw(st.sampled_from(["coarse", "edgy", "full", "full", "full"]))
    if int(np.prod(shape)) <= ELEMENTWISE:
        arr = draw(_float_arrays(tuple(shape), kind))
    else:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if kind == "coarse":
            arr = rng.choice(np.array(COARSE), shape)
        else:
            significand = rng.integers(2**52, 2**53, shape) * 2.0 ** (rng.integers(-3, 1, shape) - 52)
            arr = np.where(rng.integers(0, 2, shape) == 1, significand, -significand)
    exponent = draw(st.sampled_from(exponents)) if big else 0
    return arr * 2.0**exponent  # exact: a power of two


def _sizes(draw: st.DrawFn, count: int, high: int = MAX_SIZE) -> list[int]:
    """``count`` sizes, all distinct (so no transposition goes unnoticed)."""
    return draw(st.lists(st.integers(1, high), min_size=count, max_size=count, unique=True))


# ---------------------------------------------------------------- masks

MASK_KINDS = ("none", "bool", "causal", "padding", "inf", "finite", "low")


@st.composite
def masks(draw: st.DrawFn, n_q: int, n_k: int) -> np.ndarray | None:
    """A mask of shape (n_q, n_k), or None. Boolean masks keep True; additive ones add to the scores."""
    kind = draw(st.sampled_from(MASK_KINDS))
    if kind == "none":
        return None
    if kind in ("bool", "inf"):
        keep = draw(hnp.arrays(bool, (n_q, n_k), fill=st.nothing()))
    elif kind == "causal":  # key j kept for query i when j <= i + k; k < 0 leaves the first queries no key
        # 1 - n_q <= k <= n_k - 2: some key masked, and the last query sees one (k = n_k - n_q: bottom right)
        keep = np.tril(np.ones((n_q, n_k), dtype=bool), k=draw(st.integers(1 - n_q, max(n_k - 2, 1 - n_q))))
    elif kind == "padding":  # the first `valid` keys are real, the rest padding (at least one of each)
        keep = np.zeros((n_q, n_k), dtype=bool)
        keep[:, : draw(st.integers(1, n_k - 1)) if n_k > 1 else 1] = True
    else:  # finite additive values, of order 1 or (low) of order -1e3: a row below exp's underflow
        low, high = (-1100.0, -1000.0) if kind == "low" else (-4.0, 4.0)
        add = draw(hnp.arrays(np.float64, (n_q, n_k), elements=st.floats(low, high), fill=st.nothing()))
        if draw(st.booleans()):  # some -inf entries as well
            add = np.where(draw(hnp.arrays(bool, (n_q, n_k), fill=st.nothing())), -np.inf, add)
        return _with_dead_rows(draw, add, n_q)
    if kind != "causal":  # a causal mask's negative diagonals leave queries without a key already
        keep = _with_dead_rows(draw, keep, n_q)
    if kind == "inf" or draw(st.booleans()):  # the additive 0/-inf form
        return np.where(keep, 0.0, -np.inf)
    return keep


def _with_dead_rows(draw: st.DrawFn, mask: np.ndarray, n_q: int) -> np.ndarray:
    """Sometimes remove every key of some queries (the masked-query conventions decide those rows)."""
    if draw(st.integers(0, 3)) != 0:
        return mask
    dead = draw(st.lists(st.integers(0, n_q - 1), min_size=1, max_size=n_q, unique=True))
    out = mask.copy()
    out[dead] = False if out.dtype == bool else -np.inf
    return out


def scales() -> st.SearchStrategy[float | None]:
    return st.one_of(st.none(), st.just(1.0), st.floats(0.0, 4.0, allow_nan=False))


# ---------------------------------------------------------------- operations


@st.composite
def softmax_cases(draw: st.DrawFn) -> Drawn:
    rows, cols = _sizes(draw, 2, high=7)
    x = draw(values((rows, cols), big=draw(st.booleans())))
    if draw(st.booleans()):  # -inf entries: masked positions, sometimes whole rows (NaN by definition)
        removed = draw(hnp.arrays(bool, (rows, cols), fill=st.nothing()))
        x = np.where(removed, -np.inf, x)
    if draw(st.integers(0, 3)) == 0:  # a whole row far below exp's underflow, or above its overflow
        x[draw(st.integers(0, rows - 1))] += draw(st.sampled_from([-2048.0, 1024.0]))
    return Drawn("softmax", {"x": x})


def _offsets(draw: st.DrawFn, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Opposite offsets for queries and keys: every logit of order -c^2 width, below exp's underflow."""
    if draw(st.integers(0, 3)):
        return None
    c = draw(st.sampled_from([32.0, 64.0]))
    return np.full(width, c), np.full(width, -c)


@st.composite
def sdpa_cases(draw: st.DrawFn) -> Drawn:
    n_q, n_k, d_k, d_v = _sizes(draw, 4)
    big = draw(st.booleans())
    q = draw(values((n_q, d_k), big=big))
    k = draw(values((n_k, d_k), big=big))
    if draw(st.integers(0, 4)) == 0:  # identical keys: every score of a query ties
        k = np.repeat(k[:1], n_k, axis=0)
    shift = _offsets(draw, d_k)
    if shift is not None:
        q, k = q + shift[0], k + shift[1]
    inputs = {"q": q, "k": k, "v": draw(values((n_k, d_v)))}
    mask = draw(masks(n_q, n_k))
    if mask is not None:
        inputs["mask"] = mask
    return Drawn("scaled_dot_product_attention", inputs, {"scale": draw(scales())})


def _biases(draw: st.DrawFn, names: tuple[str, ...], width: int) -> dict[str, np.ndarray]:
    return {f"b_{n}": draw(values((width,))) for n in names if draw(st.booleans())}


@st.composite
def self_attention_cases(draw: st.DrawFn) -> Drawn:
    n, d_in, d_k, d_v = _sizes(draw, 4)
    big = draw(st.booleans())
    inputs = {
        "x": draw(values((n, d_in), big=big, exponents=(2, 3))),
        "w_q": draw(values((d_in, d_k), big=big)),
        "w_k": draw(values((d_in, d_k), big=big)),
        "w_v": draw(values((d_in, d_v))),
    }
    inputs.update(_biases(draw, ("q", "k"), d_k))
    inputs.update(_biases(draw, ("v",), d_v))
    shift = _offsets(draw, d_k)
    if shift is not None:
        inputs["b_q"], inputs["b_k"] = shift
    mask = draw(masks(n, n))
    if mask is not None:
        inputs["mask"] = mask
    return Drawn("self_attention", inputs, {"scale": draw(scales())})


@st.composite
def multi_head_cases(draw: st.DrawFn) -> Drawn:
    n_q, n_k, heads, d_head = _sizes(draw, 4, high=5)
    d = heads * d_head
    big = draw(st.booleans())
    inputs = {
        "query": draw(values((n_q, d))),
        "key": draw(values((n_k, d))),
        "value": draw(values((n_k, d))),
        "w_q": draw(values((d, d), big=big)),
        "w_k": draw(values((d, d), big=big)),
        "w_v": draw(values((d, d))),
        "w_o": draw(values((d, d))),
    }
    inputs.update(_biases(draw, ("q", "k", "v", "o"), d))
    shift = _offsets(draw, d)
    if shift is not None:
        inputs["b_q"], inputs["b_k"] = shift
    mask = draw(masks(n_q, n_k))
    if mask is not None:
        inputs["mask"] = mask
    return Drawn("multi_head_attention", inputs, {"num_heads": heads})


def _params(draw: st.DrawFn, e: int, big_f: bool | None = None) -> dict[str, np.ndarray]:
    d = e + 1  # the classifier appends each token's position as one more feature
    if big_f is None:  # feed-forward weights that push the pooled logits past exp's range
        big_f = draw(st.integers(0, 2)) == 0
    shapes = {"w_q": (d, d), "b_q": (d,), "w_k": (d, d), "b_k": (d,), "w_v": (d, d), "b_v": (d,)}
    shapes.update({"w_f": (d, CLASSES), "b_f": (CLASSES,)})
    # 2^9..2^11 on w_f and b_f: pooled logits past 709 (or below -745) in a good share of the draws
    return {
        f"params.{n}": draw(values(s, big=big_f and n in ("w_f", "b_f"), exponents=(9, 10, 11)))
        for n, s in shapes.items()
    }


def _frozen(draw: st.DrawFn) -> list[str]:
    return draw(st.lists(st.sampled_from(ops.CLASSIFIER_PARAMS), unique=True, max_size=3))


def _lr(draw: st.DrawFn) -> float:
    return draw(st.sampled_from([0.1, 0.5, 0.01, 1.0]))


@st.composite
def classifier_forward_cases(draw: st.DrawFn) -> Drawn:
    n, e = _sizes(draw, 2, high=5)
    return Drawn("classifier_forward", {"x_emb": draw(values((n, e))), **_params(draw, e)})


@st.composite
def classifier_step_cases(draw: st.DrawFn) -> Drawn:
    n, e = _sizes(draw, 2, high=5)
    inputs = {"x_emb": draw(values((n, e))), "label": np.array(draw(st.integers(0, CLASSES - 1)), dtype=np.int64)}
    inputs.update(_params(draw, e))
    return Drawn("classifier_step", inputs, {"lr": _lr(draw), "frozen": _frozen(draw)})


# The trajectories a step's bound alone misjudges, drawn on purpose: a saturated output softmax
# (p - 1 computed to an absolute u, far above its exact size, then carried into the next steps)
# and learning rates large enough for the dynamics to amplify an earlier step's error.
TRAIN_REGIMES = ("ordinary", "saturated", "large_lr")
LARGE_LR = (1.0, 2.0)


@st.composite
def classifier_train_cases(draw: st.DrawFn) -> Drawn:
    regime = draw(st.sampled_from(TRAIN_REGIMES))
    e = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3).filter(lambda ls: sum(ls) > 0))
    inputs = {
        "tokens": draw(values((sum(lengths), e))),
        "lengths": np.array(lengths, dtype=np.int64),
        "labels": np.array(
            draw(st.lists(st.integers(0, CLASSES - 1), min_size=len(lengths), max_size=len(lengths))), dtype=np.int64
        ),
    }
    inputs.update(_params(draw, e, big_f=True if regime == "saturated" else None))
    lr = draw(st.sampled_from(LARGE_LR)) if regime == "large_lr" else _lr(draw)
    options = {"lr": lr, "epochs": draw(st.integers(1, 2)), "frozen": _frozen(draw)}
    return Drawn("classifier_train", inputs, options)


# ---------------------------------------------------------------- normalisation layers

NORM_EPS = (None, 1e-12, 1e-3, 1.0)  # torch's default 1e-5, negligible, and dominating small rows


@st.composite
def _norm_x(draw: st.DrawFn, n: int, d: int) -> np.ndarray:
    """Rows to normalise: ordinary, large or small magnitudes, or nearly constant rows with a large
    mean (x 2^-k + 2^m: exact), where a one-pass variance cancels."""
    regime = draw(st.sampled_from(["ordinary", "big", "small", "offset"]))
    x = draw(values((n, d)))
    if regime == "big":
        return x * 2.0**20
    if regime == "small":
        return x * 2.0**-20
    if regime == "offset":
        return x * 2.0 ** -draw(st.integers(4, 12)) + 2.0 ** draw(st.integers(4, 12))
    return x


@st.composite
def layer_norm_cases(draw: st.DrawFn) -> Drawn:
    n, d = _sizes(draw, 2)
    inputs = {"x": draw(_norm_x(n, d))}
    if draw(st.booleans()):
        inputs["weight"] = draw(values((d,)))
    if draw(st.booleans()):
        inputs["bias"] = draw(values((d,)))
    return Drawn("layer_norm", inputs, {"eps": draw(st.sampled_from(NORM_EPS))})


@st.composite
def rms_norm_cases(draw: st.DrawFn) -> Drawn:
    n, d = _sizes(draw, 2)
    inputs = {"x": draw(_norm_x(n, d))}
    if draw(st.booleans()):
        inputs["weight"] = draw(values((d,)))
    return Drawn("rms_norm", inputs, {"eps": draw(st.sampled_from(NORM_EPS))})


@st.composite
def gelu_cases(draw: st.DrawFn) -> Drawn:
    n, d = _sizes(draw, 2)
    x = draw(values((n, d), big=draw(st.booleans()), exponents=(2, 4, 5)))  # out to the tails, +-64
    return Drawn("gelu", {"x": x}, {"approximate": draw(st.sampled_from([None, "none", "tanh"]))})


BASES = (None, 100.0, 10000.0, 500000.0)  # None: the default 10000; 500000 is Llama 3's
MAX_POSITION = 8192


@st.composite
def sinusoidal_cases(draw: st.DrawFn) -> Drawn:
    options: dict[str, Any] = {"n": draw(st.integers(1, 40)), "d": 2 * draw(st.integers(1, 8))}
    base = draw(st.sampled_from(BASES))
    if base is not None:
        options["base"] = base
    return Drawn("sinusoidal_positions", {}, options)


@st.composite
def rotary_cases(draw: st.DrawFn) -> Drawn:
    n, d = draw(st.integers(1, MAX_SIZE)), 2 * draw(st.integers(1, 8))
    inputs = {"x": draw(values((n, d)))}
    if draw(st.booleans()):  # explicit positions, large ones included (the angle's rounding grows with p)
        inputs["positions"] = np.array(draw(st.lists(st.integers(0, MAX_POSITION), min_size=n, max_size=n)), float)
    options: dict[str, Any] = {"pairing": draw(st.sampled_from(pairing.PAIRINGS))}
    base = draw(st.sampled_from(BASES))
    if base is not None:
        options["base"] = base
    return Drawn("rotary_embedding", inputs, options)


# ---------------------------------------------------------------- the transformer

APPROXIMATIONS = (None, "none", "tanh")  # gelu's form: absent (erf), named erf, GPT-2's tanh


def _options(draw: st.DrawFn, heads: int) -> dict[str, Any]:
    options: dict[str, Any] = {"num_heads": heads}
    for name, choice in (("eps", NORM_EPS), ("approximate", APPROXIMATIONS)):
        value = draw(st.sampled_from(choice))
        if value is not None:
            options[name] = value
    return options


@st.composite
def _block_params(draw: st.DrawFn, d: int, d_ff: int, stack: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """One block's parameters (``stack``: gpt_forward's leading block axis), ordinary values."""
    shapes = {"w_1": (d, d_ff), "b_1": (d_ff,), "w_2": (d_ff, d), **{w: (d, d) for w in ("w_q", "w_k", "w_v", "w_o")}}
    return {f"params.{n}": draw(values(stack + shapes.get(n, (d,)))) for n in ops.BLOCK_PARAMS}


@st.composite
def feed_forward_cases(draw: st.DrawFn) -> Drawn:
    n, d, d_ff = _sizes(draw, 3)
    inputs = {
        "x": draw(values((n, d), big=draw(st.booleans()), exponents=(2, 4))),  # pre-activations in gelu's tails
        "w_1": draw(values((d, d_ff))),
        "b_1": draw(values((d_ff,))),
        "w_2": draw(values((d_ff, d))),
        "b_2": draw(values((d,))),
    }
    approximate = draw(st.sampled_from(APPROXIMATIONS))
    return Drawn("feed_forward", inputs, {} if approximate is None else {"approximate": approximate})


@st.composite
def decoder_block_cases(draw: st.DrawFn) -> Drawn:
    n, heads, d_head, d_ff = _sizes(draw, 4, high=5)
    d = heads * d_head
    inputs = {"x": draw(_norm_x(n, d)), **draw(_block_params(d, d_ff))}  # the norm regimes into ln1
    return Drawn("decoder_block", inputs, _options(draw, heads))


@st.composite
def gpt_forward_cases(draw: st.DrawFn) -> Drawn:
    vocab, heads, d_head, d_ff = _sizes(draw, 4, high=5)
    d = heads * d_head
    n = draw(st.integers(1, MAX_SIZE))
    n_ctx = n + draw(st.integers(0, 2))  # a full context, or fewer tokens than positions
    n_layer = draw(st.integers(1, 2))
    # token ids shrink to 0: a repeated token, whose rows differ only by their positions
    tokens = np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    inputs = {
        "tokens": tokens,
        "params.wte": draw(_norm_x(vocab, d)),  # the norm regimes, into the first block's ln1
        "params.wpe": draw(values((n_ctx, d))),
        **draw(_block_params(d, d_ff, (n_layer,))),
        "params.lnf_w": draw(values((d,))),
        "params.lnf_b": draw(values((d,))),
        "params.w_head": draw(values((d, vocab))),
    }
    return Drawn("gpt_forward", inputs, _options(draw, heads))


# ---------------------------------------------------------------- losses

LM_VOCAB = 12  # the catalogue's vocabulary size
# lm_loss's regimes: ordinary logits; logits shifted by +-2^10 (exp overflows, or underflows for a
# whole row, unless the maximum is subtracted); targets 2^5 to 2^10 below their row's maximum
# (their probability tiny or underflowing: -log(softmax) is Inf there).
LM_REGIMES = ("ordinary", "overflow", "underflow", "unlikely")
LM_IGNORE = (None, "token", "outside")  # ignore_index absent, a token id (padding), or -1 / -100


@st.composite
def lm_loss_cases(draw: st.DrawFn) -> Drawn:
    n, vocab = draw(st.integers(1, 8)), draw(st.integers(1, LM_VOCAB))
    regime = draw(st.sampled_from(LM_REGIMES))
    logits = draw(values((n, vocab), big=draw(st.booleans()), exponents=(1, 2, 3)))
    targets = np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)), dtype=np.int64)
    if regime == "overflow":
        logits = logits + 2.0**10
    elif regime == "underflow":
        logits = logits - 2.0**10
    elif regime == "unlikely":
        gaps = draw(st.lists(st.sampled_from([32.0, 512.0, 1024.0]), min_size=n, max_size=n))
        logits[np.arange(n), targets] = logits.max(axis=1) - np.array(gaps)
    inputs = {"logits": logits, "targets": targets}
    kind = draw(st.sampled_from(LM_IGNORE))
    if kind is not None:
        ignore = draw(st.integers(0, vocab - 1)) if kind == "token" else draw(st.sampled_from([-1, -100]))
        ignored = draw(st.lists(st.booleans(), min_size=n, max_size=n))  # every one, at times: NaN
        targets[np.array(ignored)] = ignore
        inputs["ignore_index"] = np.array(ignore, dtype=np.int64)
    return Drawn("lm_loss", inputs)


# ---------------------------------------------------------------- the optimizer

ADAM_STEPS = (1, 2, 3, 10, 1000)  # the first step (largest correction), 1 - beta2^2's cancellation, a late one


@st.composite
def adamw_cases(draw: st.DrawFn) -> Drawn:
    """One AdamW step: a matrix or a vector; a fresh state or moments from earlier steps (v >= 0);
    gradients at one scale or spread over 2^-30 .. 2^6 (where eps dominates some entries); each
    option absent (torch's default) or drawn, weight_decay 0 (plain Adam) among them."""
    # A vector may have length 1: R returns it as a number, and its adapter gives it back the
    # parameter's shape (attention_ports/runtimes/r/adapter.py, _length_one_shape).
    shape = (draw(st.integers(1, MAX_SIZE)),) if draw(st.booleans()) else tuple(_sizes(draw, 2))
    p = draw(values(shape))
    g = draw(values(shape))
    if draw(st.booleans()):  # gradients across magnitudes: 2^k, k in -30 .. 6 per entry (exact)
        g = g * 2.0 ** np.array(draw(st.lists(st.integers(-30, 6), min_size=g.size, max_size=g.size))).reshape(shape)
    if draw(st.booleans()):
        m, v = np.zeros(shape), np.zeros(shape)
    else:
        m = draw(values(shape)) * 2.0**-2
        v = np.abs(draw(values(shape))) * np.abs(g) ** 2 + draw(values(shape)) ** 2 * 2.0**-4
    options: dict[str, Any] = {"step": draw(st.sampled_from(ADAM_STEPS))}
    for name, choices in (
        ("lr", (1e-3, 0.01, 0.1)),
        ("beta1", (0.0, 0.5, 0.9, 0.95)),
        ("beta2", (0.9, 0.99, 0.999)),
        ("eps", (1e-8, 1e-6, 1e-12)),
        ("weight_decay", (0.0, 0.01, 0.5)),
    ):
        if draw(st.booleans()):
            options[name] = draw(st.sampled_from(choices))
    return Drawn("adamw_step", {"param": p, "grad": g, "m": m, "v": v}, options)


@st.composite
def gpt_grads_cases(draw: st.DrawFn) -> Drawn:
    """A GPT step: tokens (repeats shrink in: id 0), targets (some ignored at times), one or two
    blocks, the gelu form and eps drawn; ordinary values, every size distinct."""
    vocab, heads, d_head, d_ff = _sizes(draw, 4, high=5)
    d = heads * d_head
    n = draw(st.integers(1, MAX_SIZE))
    n_ctx = n + draw(st.integers(0, 2))  # a full context, or fewer tokens than positions
    stack = (draw(st.integers(1, 2)),)
    ids = st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n)
    tokens, targets = (np.array(draw(ids), dtype=np.int64) for _ in range(2))
    shapes = {"w_1": (d, d_ff), "b_1": (d_ff,), "w_2": (d_ff, d), **{w: (d, d) for w in ("w_q", "w_k", "w_v", "w_o")}}
    inputs = {
        "tokens": tokens,
        "targets": targets,
        "params.wte": draw(values((vocab, d))),
        "params.wpe": draw(values((n_ctx, d))),
        **{f"params.{p}": draw(values(stack + shapes.get(p, (d,)))) for p in ops.BLOCK_PARAMS},
        "params.lnf_w": draw(values((d,))),
        "params.lnf_b": draw(values((d,))),
        "params.w_head": draw(values((d, vocab))),
    }
    if draw(st.booleans()):  # ignore_index -1 on some positions, never on all (no gradient then)
        ignored = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(lambda b: not all(b)))
        targets[np.array(ignored)] = -1
        inputs["ignore_index"] = np.array(-1, dtype=np.int64)
    options: dict[str, Any] = {"num_heads": heads}
    for name, choice in (("eps", NORM_EPS), ("approximate", APPROXIMATIONS)):
        value = draw(st.sampled_from(choice))
        if value is not None:
            options[name] = value
    return Drawn("gpt_grads", inputs, options)


@st.composite
def gpt_train_cases(draw: st.DrawFn) -> Drawn:
    """A few AdamW steps of a GPT: gpt_grads' draw (tokens, targets, blocks, gelu form, eps), one or
    two steps (more leave the carried bound's first order on today's gradient bounds:
    truth/transformer_train.py), Adam's options absent or drawn, weight_decay 0 among them."""
    step = draw(gpt_grads_cases())
    options: dict[str, Any] = {**step.options, "steps": draw(st.integers(1, 2))}
    for name, choices in (
        ("lr", (1e-3, 0.01)),
        ("beta1", (0.8, 0.9)),
        ("beta2", (0.95, 0.999)),
        ("weight_decay", (0.0, 0.01, 0.1)),
    ):
        if draw(st.booleans()):
            options[name] = draw(st.sampled_from(choices))
    return Drawn("gpt_train", step.inputs, options)


STRATEGIES: dict[str, Callable[[], st.SearchStrategy[Drawn]]] = {
    "softmax": softmax_cases,
    "scaled_dot_product_attention": sdpa_cases,
    "self_attention": self_attention_cases,
    "multi_head_attention": multi_head_cases,
    "classifier_forward": classifier_forward_cases,
    "classifier_step": classifier_step_cases,
    "classifier_train": classifier_train_cases,
    "layer_norm": layer_norm_cases,
    "rms_norm": rms_norm_cases,
    "gelu": gelu_cases,
    "sinusoidal_positions": sinusoidal_cases,
    "rotary_embedding": rotary_cases,
    "feed_forward": feed_forward_cases,
    "decoder_block": decoder_block_cases,
    "gpt_forward": gpt_forward_cases,
    "lm_loss": lm_loss_cases,
    "adamw_step": adamw_cases,
    "gpt_grads": gpt_grads_cases,
    "gpt_train": gpt_train_cases,
}
assert set(STRATEGIES) == set(ops.OPS), "every contract operation needs a strategy"


def cases(operations: list[str] | None = None) -> st.SearchStrategy[Drawn]:
    """Generated cases of ``operations`` (default: every contract operation)."""
    chosen = list(operations or STRATEGIES)
    unknown = [o for o in chosen if o not in STRATEGIES]
    if unknown:
        raise ValueError(f"no strategy for operation(s) {unknown}; known: {', '.join(STRATEGIES)}")
    # The operation first, uniformly (shrinking prefers the first listed), then its own strategy.
    return st.sampled_from(chosen).flatmap(lambda op: STRATEGIES[op]())
