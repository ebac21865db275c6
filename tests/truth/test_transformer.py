"""The transformer's truth and bound rules (attention_ports/truth/transformer.py), proved both ways.

* the values against an independent computation of the same math in mpmath at 50 digits;
* sound: several correct float64 formulations (NumPy with other layer-norm, gelu and summation
  choices, torch float64's own kernels, fused QKV, Welford's variance, ``x * rsqrt``) are within
  the bound at every element, over several seeds;
* useful: the porting bugs (no causal mask, unbiased variance, eps outside the square root, the
  other gelu, post-norm, a missing residual, heads split interleaved) fail, and so does a 1e-8
  relative error.
Sizes are small (d = 8 or 16, 2 heads, L = 8, vocab 12): the whole module runs in seconds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb, ctx

from attention_ports.spec.ops import BLOCK_PARAMS, FFN_PARAMS
from attention_ports.spec.precision import FORMATS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, engine, exact, precision, transformer
from attention_ports.truth.exact import InputError

SEEDS = (0, 1, 2)
ERF = np.vectorize(math.erf, otypes=[np.float64])
K_TANH = math.sqrt(2 / math.pi)


# -------------------------------------------------------------------- inputs


def ffn_inputs(rng: np.random.Generator, n: int = 8, d: int = 16, d_ff: int = 64) -> dict[str, np.ndarray]:
    return {
        "x": rng.normal(size=(n, d)),
        "w_1": rng.normal(size=(d, d_ff)) / math.sqrt(d),
        "b_1": rng.normal(size=d_ff) * 0.1,
        "w_2": rng.normal(size=(d_ff, d)) / math.sqrt(d_ff),
        "b_2": rng.normal(size=d) * 0.1,
    }


def block_arrays(rng: np.random.Generator, d: int = 16, d_ff: int = 64, lead: tuple[int, ...] = ()) -> dict:
    """One block's parameters (``lead``: a leading block axis, gpt_forward's stacks)."""
    p = {
        "ln1_w": 1 + 0.1 * rng.normal(size=(*lead, d)),
        "ln1_b": 0.1 * rng.normal(size=(*lead, d)),
        "ln2_w": 1 + 0.1 * rng.normal(size=(*lead, d)),
        "ln2_b": 0.1 * rng.normal(size=(*lead, d)),
        "w_1": rng.normal(size=(*lead, d, d_ff)) / math.sqrt(d),
        "b_1": 0.1 * rng.normal(size=(*lead, d_ff)),
        "w_2": rng.normal(size=(*lead, d_ff, d)) / math.sqrt(d_ff),
        "b_2": 0.1 * rng.normal(size=(*lead, d)),
    }
    for s in "qkvo":
        p[f"w_{s}"] = rng.normal(size=(*lead, d, d)) / math.sqrt(d)
        p[f"b_{s}"] = 0.1 * rng.normal(size=(*lead, d))
    return p


def block_inputs(rng: np.random.Generator, n: int = 8, d: int = 16, d_ff: int = 64) -> dict[str, np.ndarray]:
    p = block_arrays(rng, d, d_ff)
    return {"x": rng.normal(size=(n, d)), **{f"params.{k}": v for k, v in p.items()}}


def gpt_inputs(
    rng: np.random.Generator, n: int = 8, d: int = 16, d_ff: int = 64, n_layer: int = 2, vocab: int = 12
) -> dict[str, np.ndarray]:
    p = {
        "wte": rng.normal(size=(vocab, d)),
        "wpe": 0.5 * rng.normal(size=(n + 2, d)),
        **block_arrays(rng, d, d_ff, (n_layer,)),
        "lnf_w": 1 + 0.1 * rng.normal(size=d),
        "lnf_b": 0.1 * rng.normal(size=d),
        "w_head": rng.normal(size=(d, vocab)) / math.sqrt(d),
    }
    return {"tokens": rng.integers(0, vocab, size=n), **{f"params.{k}": v for k, v in p.items()}}


def params_of(inputs: dict) -> dict[str, np.ndarray]:
    return {k.split(".", 1)[1]: v for k, v in inputs.items() if k.startswith("params.")}


# -------------------------------------------------------------------- formulations (float64 NumPy)


def gelu_np(x: np.ndarray, form: str, how: str = "plain") -> np.ndarray:
    if form == "tanh":
        a = K_TANH * (x + 0.044715 * x**3)
        if how == "sigmoid":
            return x / (1 + np.exp(np.minimum(-2 * a, 700)))
        return 0.5 * x * (1 + np.tanh(a))
    if how == "phi":  # x Phi(x) through erfc, as R's x * pnorm(x)
        return x * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2)) / 2
    return 0.5 * x * (1 + ERF(x / math.sqrt(2)))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, order: str = "blas") -> np.ndarray:
    """``x w + b``: BLAS, or a sequential sum over the inner dimension in reverse, the bias first."""
    if order == "blas":
        y = x @ w
        return y if b is None else y + b
    acc = np.zeros((x.shape[0], w.shape[1])) if b is None else np.tile(b, (x.shape[0], 1))
    for k in reversed(range(w.shape[0])):
        acc = acc + x[:, k : k + 1] * w[k : k + 1, :]
    return acc


def ffn_np(x, p, form, order="blas", gelu_how="plain", wrong_form=False):
    hidden = linear(x, p["w_1"], p["b_1"], order)
    use = ("none" if form == "tanh" else "tanh") if wrong_form else form
    return linear(gelu_np(hidden, use, gelu_how), p["w_2"], p["b_2"], order)


def ffn_torch(x, p, form):
    import torch
    import torch.nn.functional as F

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in p.items()}
    h = F.linear(torch.tensor(x, dtype=torch.float64), t["w_1"].T, t["b_1"])
    return F.linear(F.gelu(h, approximate=form), t["w_2"].T, t["b_2"]).numpy()


def layer_norm_np(x, w, b, eps, how="two_pass"):
    mu = x.mean(axis=1, keepdims=True)
    c = x - mu
    if how == "welford":
        var = np.empty((x.shape[0], 1))
        for i, row in enumerate(x):
            m = s2 = 0.0
            for k, v in enumerate(row, start=1):
                delta = v - m
                m += delta / k
                s2 += delta * (v - m)
            var[i] = s2 / len(row)
    elif how == "unbiased":  # bug
        var = (c * c).sum(axis=1, keepdims=True) / (x.shape[1] - 1)
    else:
        var = (c * c).mean(axis=1, keepdims=True)
    if how == "rsqrt":
        y = c * (1.0 / np.sqrt(var + eps))
    elif how == "fused":  # torch's CPU kernel: x s - mu s
        s_ = 1.0 / np.sqrt(var + eps)
        y = x * s_ - mu * s_
    elif how == "eps_outside":  # bug
        y = c / (np.sqrt(var) + eps)
    else:
        y = c / np.sqrt(var + eps)
    return y * w + b


def attention_np(a, p, h, how=()):
    """Causal multi-head attention with the output projection; ``how``: the knobs below."""
    n, d = a.shape
    dh = d // h
    if "fused_qkv" in how:
        qkv = a @ np.concatenate([p["w_q"], p["w_k"], p["w_v"]], axis=1) + np.concatenate(
            [p["b_q"], p["b_k"], p["b_v"]]
        )
        q, k, v = qkv[:, :d], qkv[:, d : 2 * d], qkv[:, 2 * d :]
    else:
        q, k, v = (linear(a, p[f"w_{s}"], p[f"b_{s}"], "seq" if "seq" in how else "blas") for s in "qkv")
    out = np.zeros((n, d))
    for i in range(h):
        cols = np.arange(i, d, h) if "interleaved" in how else np.arange(i * dh, (i + 1) * dh)  # bug: interleaved
        qi, ki, vi = q[:, cols], k[:, cols], v[:, cols]
        if "scale_q" in how:
            s = (qi / math.sqrt(dh)) @ ki.T
        else:
            s = qi @ ki.T / math.sqrt(dh)
        if "no_causal" not in how:  # bug when absent
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w = w / w.sum(axis=1, keepdims=True)
        out[:, cols] = w @ vi
    return linear(out, p["w_o"], p["b_o"], "seq" if "seq" in how else "blas")


def block_np(x, p, h, eps, form, ln="two_pass", how=()):
    def ln1(z):
        return layer_norm_np(z, p["ln1_w"], p["ln1_b"], eps, ln)

    def ln2(z):
        return layer_norm_np(z, p["ln2_w"], p["ln2_b"], eps, ln)

    order = "seq" if "seq" in how else "blas"
    if "post_norm" in how:  # bug: the original transformer's order
        mid = ln1(x + attention_np(x, p, h, how))
        return ln2(mid + ffn_np(mid, p, form, order))
    mid = attention_np(ln1(x), p, h, how) + (0 if "no_attn_residual" in how else x)
    return ffn_np(ln2(mid), p, form, order) + (0 if "no_ffn_residual" in how else mid)


def block_torch(x, p, h, eps, form):
    import torch

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in p.items()}
    x = torch.tensor(x, dtype=torch.float64)
    return _block_torch(x, t, h, eps, form).numpy()


def _block_torch(x, t, h, eps, form):
    import torch.nn.functional as F

    n, d = x.shape
    a = F.layer_norm(x, (d,), t["ln1_w"], t["ln1_b"], eps)
    q, k, v = (F.linear(a, t[f"w_{s}"].T, t[f"b_{s}"]).reshape(n, h, d // h).transpose(0, 1) for s in "qkv")
    z = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(n, d)
    mid = x + F.linear(z, t["w_o"].T, t["b_o"])
    m = F.layer_norm(mid, (d,), t["ln2_w"], t["ln2_b"], eps)
    return mid + F.linear(F.gelu(F.linear(m, t["w_1"].T, t["b_1"]), approximate=form), t["w_2"].T, t["b_2"])


def gpt_np(tokens, p, h, eps, form, ln="two_pass", how=()):
    n = len(tokens)
    x = p["wte"][tokens] + p["wpe"][1 : n + 1] if "positions_from_1" in how else p["wte"][tokens] + p["wpe"][:n]
    for b in range(p["w_q"].shape[0]):
        x = block_np(x, {k: p[k][b] for k in BLOCK_PARAMS}, h, eps, form, ln, how)
    if "no_final_norm" not in how:
        x = layer_norm_np(x, p["lnf_w"], p["lnf_b"], eps, ln)
    return linear(x, p["w_head"], None, "seq" if "seq" in how else "blas")


def gpt_torch(tokens, p, h, eps, form):
    import torch
    import torch.nn.functional as F

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in p.items()}
    ids = torch.tensor(tokens)
    x = F.embedding(ids, t["wte"]) + F.embedding(torch.arange(len(tokens)), t["wpe"])
    for b in range(p["w_q"].shape[0]):
        x = _block_torch(x, {k: t[k][b] for k in BLOCK_PARAMS}, h, eps, form)
    return (F.layer_norm(x, (x.shape[1],), t["lnf_w"], t["lnf_b"], eps) @ t["w_head"]).numpy()


# -------------------------------------------------------------------- helpers


def truth(op: str, inputs: dict, options: dict, out: str) -> tuple[np.ndarray, np.ndarray]:
    res = engine.compute_detailed(op, inputs, options, memo=False).outputs
    return res[out]


def fraction(expected: np.ndarray, got: np.ndarray, bound: np.ndarray) -> float:
    """The worst element's |got - expected| / bound (> 1: outside the bound)."""
    return float(np.max(np.abs(got - expected) / bound))


def rounded(x) -> float:
    """An mpmath number rounded to the nearest double (via exact rationals)."""
    m, e = abs(mpmath.mpf(x)).man_exp
    value = float(Fraction(int(m)) * Fraction(2) ** int(e)) if m else 0.0
    return -value if x < 0 else value


def mp(a: np.ndarray) -> mpmath.matrix:
    return mpmath.matrix(np.atleast_2d(a).tolist())


def mp_gelu(x, form: str):
    if form == "tanh":
        return x / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3)))
    return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))


def mp_affine(x: mpmath.matrix, w: np.ndarray, b: np.ndarray | None) -> mpmath.matrix:
    y = x * mp(w)
    if b is not None:
        for i in range(y.rows):
            for j in range(y.cols):
                y[i, j] += mpmath.mpf(b[j])
    return y


def mp_ffn(x: mpmath.matrix, p: dict, form: str) -> mpmath.matrix:
    h = mp_affine(x, p["w_1"], p["b_1"])
    return mp_affine(h.apply(lambda v: mp_gelu(v, form)), p["w_2"], p["b_2"])


def mp_layer_norm(x: mpmath.matrix, w: np.ndarray, b: np.ndarray, eps: float) -> mpmath.matrix:
    y = x.copy()
    for i in range(x.rows):
        row = [x[i, j] for j in range(x.cols)]
        mu = mpmath.fsum(row) / len(row)
        r = 1 / mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in row) / len(row) + mpmath.mpf(eps))
        for j in range(x.cols):
            y[i, j] = (row[j] - mu) * r * mpmath.mpf(w[j]) + mpmath.mpf(b[j])
    return y


def mp_block(x: mpmath.matrix, p: dict, h: int, eps: float, form: str) -> mpmath.matrix:
    n, d = x.rows, x.cols
    dh = d // h
    a = mp_layer_norm(x, p["ln1_w"], p["ln1_b"], eps)
    q, k, v = (mp_affine(a, p[f"w_{s}"], p[f"b_{s}"]) for s in "qkv")
    z = mpmath.matrix(n, d)
    for hd in range(h):
        cols = range(hd * dh, (hd + 1) * dh)
        for i in range(n):
            s = [mpmath.fsum(q[i, c] * k[j, c] for c in cols) / mpmath.sqrt(dh) for j in range(i + 1)]
            m = max(s)
            ex = [mpmath.exp(v_ - m) for v_ in s]
            tot = mpmath.fsum(ex)
            for c in cols:
                z[i, c] = mpmath.fsum(ex[j] * v[j, c] for j in range(i + 1)) / tot
    mid = x + mp_affine(z, p["w_o"], p["b_o"])
    return mid + mp_ffn(mp_layer_norm(mid, p["ln2_w"], p["ln2_b"], eps), p, form)


def to_double(m: mpmath.matrix) -> np.ndarray:
    return np.array([[rounded(m[i, j]) for j in range(m.cols)] for i in range(m.rows)])


# -------------------------------------------------------------------- feed_forward


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_feed_forward_values_are_the_exact_result_rounded(form: str) -> None:
    p = ffn_inputs(np.random.default_rng(7), n=3, d=4, d_ff=8)
    expected, _ = truth("feed_forward", p, {"approximate": form}, "y")
    with mpmath.workdps(50):
        want = to_double(mp_ffn(mp(p["x"]), p, form))
    np.testing.assert_array_equal(expected, want)


FFN_CORRECT = {
    "numpy": lambda x, p, f: ffn_np(x, p, f),
    "reverse sums, bias first": lambda x, p, f: ffn_np(x, p, f, order="seq"),
    "erfc / sigmoid gelu": lambda x, p, f: ffn_np(x, p, f, gelu_how="sigmoid" if f == "tanh" else "phi"),
    "torch": ffn_torch,
}


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_every_correct_feed_forward_is_within_the_bound_and_bugs_are_not(form: str) -> None:
    worst = 0.0
    for seed in SEEDS:
        p = ffn_inputs(np.random.default_rng(seed))
        expected, bound = truth("feed_forward", p, {"approximate": form}, "y")
        x, params = p["x"], {k: p[k] for k in FFN_PARAMS}
        for name, impl in FFN_CORRECT.items():
            frac = fraction(expected, impl(x, params, form), bound)
            assert frac <= 1, f"{name}, seed {seed}: {frac:.3g} of the bound"
            worst = max(worst, frac)
        assert fraction(expected, ffn_np(x, params, form, wrong_form=True), bound) > 1
        assert fraction(expected, expected * (1 + 1e-8), bound) > 1
    assert worst > 1e-3  # the bound is not vacuous: correct formulations use a visible part of it


def test_feed_forward_bad_inputs_are_named() -> None:
    p = ffn_inputs(np.random.default_rng(0), n=2, d=4, d_ff=8)
    with pytest.raises(InputError, match=r"w_2 must have shape \(8, 4\)"):
        exact.run_graph("feed_forward", {**p, "w_2": np.ones((4, 8))}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="w_1 must be"):
        exact.run_graph("feed_forward", {**p, "w_1": np.ones((3, 8))}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="approximate must be one of"):
        exact.run_graph("feed_forward", p, {"approximate": "erf"}, prec=128, track=False)


# -------------------------------------------------------------------- decoder_block


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_decoder_block_values_are_the_exact_result_rounded(form: str) -> None:
    inputs = block_inputs(np.random.default_rng(11), n=3, d=4, d_ff=8)
    options = {"num_heads": 2, "approximate": form, "eps": 1e-5}
    expected, _ = truth("decoder_block", inputs, options, "y")
    with mpmath.workdps(50):
        want = to_double(mp_block(mp(inputs["x"]), params_of(inputs), 2, 1e-5, form))
    np.testing.assert_array_equal(expected, want)


# the correct NumPy formulations: (layer norm, attention knobs)
BLOCK_CORRECT = {
    "numpy": ("two_pass", ()),
    "Welford, fused QKV": ("welford", ("fused_qkv",)),
    "fused norm, scaled q, reverse sums": ("fused", ("scale_q", "seq")),
    "x * rsqrt": ("rsqrt", ()),
}
BLOCK_BUGS = {
    "no causal mask": ("two_pass", ("no_causal",)),
    "unbiased variance": ("unbiased", ()),
    "eps outside the square root": ("eps_outside", ()),
    "post-norm": ("two_pass", ("post_norm",)),
    "no attention residual": ("two_pass", ("no_attn_residual",)),
    "no feed-forward residual": ("two_pass", ("no_ffn_residual",)),
    "heads interleaved": ("two_pass", ("interleaved",)),
}


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_every_correct_decoder_block_is_within_the_bound_and_bugs_are_not(form: str) -> None:
    worst = 0.0
    for seed in SEEDS:
        inputs = block_inputs(np.random.default_rng(seed))
        options = {"num_heads": 2, "approximate": form}
        expected, bound = truth("decoder_block", inputs, options, "y")
        x, p = inputs["x"], params_of(inputs)
        correct = {n: block_np(x, p, 2, 1e-5, form, ln, how) for n, (ln, how) in BLOCK_CORRECT.items()}
        for name, got in {**correct, "torch": block_torch(x, p, 2, 1e-5, form)}.items():
            frac = fraction(expected, got, bound)
            assert frac <= 1, f"{name}, seed {seed}: {frac:.3g} of the bound"
            worst = max(worst, frac)
        for name, (ln, how) in BLOCK_BUGS.items():
            assert fraction(expected, block_np(x, p, 2, 1e-5, form, ln, how), bound) > 1, name
        other = "tanh" if form == "none" else "none"
        assert fraction(expected, block_np(x, p, 2, 1e-5, other), bound) > 1, "the other gelu"
        useful(expected, bound)
    assert worst > 1e-4  # measured: 8e-4 to 1.8e-3


def useful(expected: np.ndarray, bound: np.ndarray) -> None:
    """A 1e-8 relative error is caught at nearly every element."""
    assert np.mean(1e-8 * np.abs(expected) > bound) > 0.95


def test_decoder_block_bad_inputs_are_named() -> None:
    inputs = block_inputs(np.random.default_rng(0), n=2, d=4, d_ff=8)
    with pytest.raises(InputError, match=r"params.ln2_b must have shape \(4,\)"):
        exact.run_graph(
            "decoder_block", {**inputs, "params.ln2_b": np.ones(5)}, {"num_heads": 2}, prec=128, track=False
        )
    with pytest.raises(InputError, match="num_heads=3 must be a positive divisor of d_model=4"):
        exact.run_graph("decoder_block", inputs, {"num_heads": 3}, prec=128, track=False)
    with pytest.raises(InputError, match=r"missing input 'params\.w_o'"):
        del inputs["params.w_o"]
        exact.run_graph("decoder_block", inputs, {"num_heads": 2}, prec=128, track=False)


# -------------------------------------------------------------------- gpt_forward


def mp_gpt(tokens, p: dict, h: int, eps: float, form: str) -> mpmath.matrix:
    x = mp(p["wte"][tokens]) + mp(p["wpe"][: len(tokens)])
    for b in range(p["w_q"].shape[0]):
        x = mp_block(x, {k: p[k][b] for k in BLOCK_PARAMS}, h, eps, form)
    return mp_layer_norm(x, p["lnf_w"], p["lnf_b"], eps) * mp(p["w_head"])


def test_gpt_forward_values_are_the_exact_result_rounded() -> None:
    inputs = gpt_inputs(np.random.default_rng(5), n=3, d=4, d_ff=8, n_layer=2, vocab=5)
    options = {"num_heads": 2, "approximate": "tanh", "eps": 1e-5}
    expected, _ = truth("gpt_forward", inputs, options, "logits")
    with mpmath.workdps(50):
        want = to_double(mp_gpt(inputs["tokens"], params_of(inputs), 2, 1e-5, "tanh"))
    np.testing.assert_array_equal(expected, want)


GPT_BUGS = {
    "no causal mask": ("two_pass", ("no_causal",)),
    "unbiased variance": ("unbiased", ()),
    "heads interleaved": ("two_pass", ("interleaved",)),
    "positions from 1": ("two_pass", ("positions_from_1",)),
    "no final norm": ("two_pass", ("no_final_norm",)),
}


@pytest.mark.parametrize(("form", "seeds"), [("none", SEEDS[:1]), ("tanh", SEEDS[1:])])
def test_every_correct_gpt_forward_is_within_the_bound_and_bugs_are_not(form: str, seeds: tuple[int, ...]) -> None:
    worst = 0.0
    for seed in seeds:  # 0.6 s a case
        inputs = gpt_inputs(np.random.default_rng(seed))
        expected, bound = truth("gpt_forward", inputs, {"num_heads": 2, "approximate": form}, "logits")
        tokens, p = inputs["tokens"], params_of(inputs)
        correct = {n: gpt_np(tokens, p, 2, 1e-5, form, ln, how) for n, (ln, how) in BLOCK_CORRECT.items()}
        for name, got in {**correct, "torch": gpt_torch(tokens, p, 2, 1e-5, form)}.items():
            frac = fraction(expected, got, bound)
            assert frac <= 1, f"{name}, seed {seed}: {frac:.3g} of the bound"
            worst = max(worst, frac)
        for name, (ln, how) in GPT_BUGS.items():
            assert fraction(expected, gpt_np(tokens, p, 2, 1e-5, form, ln, how), bound) > 1, name
        useful(expected, bound)
    assert worst > 1e-5  # measured: 5e-5 to 2.5e-4


def test_node_by_node_carrying_is_sound_and_looser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_DIRECTIONS the error is carried node by node (layer_norm_carried, gelu_carried,
    the projections): still every correct formulation within the bound, the sublayers' Jacobian
    tighter than it."""
    inputs = gpt_inputs(np.random.default_rng(2), n=4, d=8, d_ff=16)
    options = {"num_heads": 2, "approximate": "tanh"}
    expected, tight = truth("gpt_forward", inputs, options, "logits")
    monkeypatch.setattr(transformer, "MAX_DIRECTIONS", 0)
    same, loose = truth("gpt_forward", inputs, options, "logits")
    np.testing.assert_array_equal(same, expected)
    assert np.median(loose / tight) > 10  # measured: ~40
    tokens, p = inputs["tokens"], params_of(inputs)
    for ln, how in BLOCK_CORRECT.values():
        assert fraction(expected, gpt_np(tokens, p, 2, 1e-5, "tanh", ln, how), loose) <= 1
    assert fraction(expected, gpt_torch(tokens, p, 2, 1e-5, "tanh"), loose) <= 1


def test_a_jacobian_unbounded_over_the_error_ball_is_refused() -> None:
    """A row that the carried error can make constant, under eps = 0: no bound, not an infinite one."""
    inputs = block_inputs(np.random.default_rng(0), n=2, d=4, d_ff=8)
    (p,) = transformer.block_params(inputs, 4, stacked=False)
    x = exact.T(am.from_array(np.array([[1.0, 1.0 + 2**-40, 1.0, 1.0], [0.5, -1.0, 2.0, 0.0]])), am.full(2, 4, 1e-9))
    with pytest.raises(bounds.BoundError, match="unbounded over its input's error ball"):
        transformer.carried(x, lambda t: transformer.t_ffn_sublayer(t, p, arb(0), "none"))


def test_gpt_forward_bad_inputs_are_named() -> None:
    inputs = gpt_inputs(np.random.default_rng(0), n=3, d=4, d_ff=8, n_layer=2, vocab=5)
    opts = {"num_heads": 2}
    with pytest.raises(InputError, match=r"tokens must be 0-based ids in \[0, 4\]"):
        exact.run_graph("gpt_forward", {**inputs, "tokens": np.array([0, 5])}, opts, prec=128, track=False)
    with pytest.raises(InputError, match=r"more than params\.wpe's n_ctx = 5"):
        exact.run_graph("gpt_forward", {**inputs, "tokens": np.zeros(6, dtype=int)}, opts, prec=128, track=False)
    with pytest.raises(InputError, match=r"params.ln1_w must have shape \(n_layer, 4\)"):
        bad = {**inputs, "params.ln1_w": np.ones((3, 4))}
        exact.run_graph("gpt_forward", bad, opts, prec=128, track=False)
    with pytest.raises(InputError, match=r"params.w_head must have shape \(d, vocab\)"):
        exact.run_graph("gpt_forward", {**inputs, "params.w_head": np.ones((5, 4))}, opts, prec=128, track=False)


@pytest.mark.parametrize("sublayer", ["attention", "ffn"])
def test_an_error_carried_through_a_sublayer_is_bounded_by_its_jacobian_and_reaches_it(sublayer: str) -> None:
    """``transformer.carried``: |f(x + dx) - f(x)| <= |J| e for every |dx| <= e (the sublayer run
    exactly at moved inputs), and the signs of J's row reach 0.99 of it: the bound is the exact
    first-order sensitivity, not an estimate of it."""
    rng = np.random.default_rng(4)
    inputs = block_inputs(rng, n=4, d=4, d_ff=8)
    (p,) = transformer.block_params(inputs, 4, stacked=False)
    eps, x_arr = arb(1e-5), inputs["x"]
    e_arr = 1e-7 * (np.abs(x_arr) + 0.5)
    g0 = exact.Graph(track=False)
    if sublayer == "attention":
        f, tangent = (
            lambda x: transformer.attention_sublayer(g0, x, p, 2, eps),
            lambda t: transformer.t_attention_sublayer(t, p, 2, eps),
        )
    else:
        f, tangent = (
            lambda x: transformer.ffn_sublayer(g0, x, p, eps, "tanh"),
            lambda t: transformer.t_ffn_sublayer(t, p, eps, "tanh"),
        )
    old = ctx.prec
    ctx.prec = 128
    try:
        x = exact.T(am.from_array(x_arr), am.from_array(e_arr))
        bound = mids(transformer.carried(x, tangent), upper=True)
        jac = mids(tangent(transformer.Tangent.seed(x.v)).d).reshape(16, 16)  # (direction, output)
        y = f(exact.T(x.v)).v

        def moved(signs: np.ndarray) -> np.ndarray:
            return mids(f(exact.T(x.v + am.from_array(signs * e_arr))).v - y)

        for _ in range(5):
            assert np.all(np.abs(moved(rng.choice([-1.0, 1.0], size=(4, 4)))) <= bound)
        for out in (0, 7, 15):
            diff = moved(np.sign(jac[:, out]).reshape(4, 4))
            assert abs(diff.reshape(-1)[out]) >= 0.99 * bound.reshape(-1)[out]
    finally:
        ctx.prec = old


def mids(m, upper: bool = False) -> np.ndarray:
    """An arb_mat as a float array: the balls' midpoints, or their upper ends."""
    return np.array([float(z.upper() if upper else z.mid()) for z in m.entries()]).reshape(m.nrows(), m.ncols())


def test_layer_norm_with_input_errors_bounds_every_point_of_its_ball() -> None:
    """norms.layer_norm_carried contains |y(x') - y(x)| for x' anywhere within e of x (exact, in
    arb), and moved along the signs of the Jacobian's row the change reaches a third of it."""
    from attention_ports.truth import norms

    rng = np.random.default_rng(9)
    eps = arb(1e-5)
    old = ctx.prec
    ctx.prec = 128
    try:
        for scale in (1.0, 1e3):
            x_arr = scale * rng.normal(size=6) + scale * 0.5
            e_arr = 1e-9 * scale * (1 + rng.random(6))
            x, e = [arb(v) for v in x_arr], [arb(v) for v in e_arr]

            def y(row: list) -> list:
                c = [(6 * xj - sum(row, arb(0))) / 6 for xj in row]
                r = (sum((cj * cj for cj in c), arb(0)) / 6 + eps).rsqrt()
                return [cj * r for cj in c]

            c = [(6 * xj - sum(x, arb(0))) / 6 for xj in x]
            v = sum((cj * cj for cj in c), arb(0)) / 6
            bound = [float(b.upper()) for b in norms.layer_norm_carried(x, e, c, v, eps)]
            y0 = y(x)
            yhat = np.array([float(t.mid()) for t in y0])
            for j in range(6):
                jac = (np.eye(6)[j] - 1 / 6 - yhat[j] * yhat / 6) * 1.0  # d y_j / d x_k, up to r > 0
                for signs in (np.sign(jac), rng.choice([-1.0, 1.0], size=6)):
                    moved = y([xi + arb(s * ei) for xi, s, ei in zip(x, signs, e_arr, strict=True)])
                    diff = abs(float((moved[j] - y0[j]).mid()))
                    assert diff <= bound[j]
                adversarial = y([xi + arb(s * ei) for xi, s, ei in zip(x, np.sign(jac), e_arr, strict=True)])
                assert abs(float((adversarial[j] - y0[j]).mid())) >= bound[j] / 3  # measured: 0.41 to 0.83
    finally:
        ctx.prec = old


def test_gelu_with_an_input_error_bounds_every_point_of_its_ball() -> None:
    """The carried rule contains |gelu(x') - gelu(x)| for x' anywhere within e of x."""
    from attention_ports.truth import activations

    for form in ("none", "tanh"):
        for x in (-7.5, -1.25, -0.3, 0.0, 0.7, 2.5, 9.0):
            e = 1e-9 * max(abs(x), 1)
            bound = float(activations.gelu_carried(arb(x), arb(e), form).upper())
            with mpmath.workdps(40):
                g0 = mp_gelu(mpmath.mpf(x), form)
                moved = max(abs(mp_gelu(mpmath.mpf(x) + s * mpmath.mpf(e), form) - g0) for s in (-1, 1))
            assert float(moved) <= bound <= 1.05 * float(moved) + 1e-14 * max(abs(x), 1), (form, x)


def test_the_float32_tier_scales_the_feed_forward_bound() -> None:
    p = ffn_inputs(np.random.default_rng(3))
    base = exact.run_graph("feed_forward", p, {}, prec=engine.BOUND_PREC, track=True)["y"].t.e
    with precision.rules(FORMATS["float32"]):
        wide = exact.run_graph("feed_forward", p, {}, prec=engine.BOUND_PREC, track=True)["y"].t.e
    ratio = [float((w / b).mid()) for w, b in zip(wide.entries(), base.entries(), strict=True)]
    assert min(ratio) > 2**28  # u went from 2^-53 to 2^-24
    assert float(bounds.U.mid()) == 2.0**-53  # and back


def _float32(inputs: dict) -> dict:
    """The inputs rounded to float32 (a float32 tier's inputs), held as float64."""
    return {k: v.astype(np.float32).astype(np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()}


def test_torch_float32_is_within_the_float32_tiers_bound(form: str = "tanh") -> None:
    """The same rules at float32's constants (truth/precision.py) hold torch's float32 kernels."""
    import torch
    import torch.nn.functional as F

    block, gpt = _float32(block_inputs(np.random.default_rng(1))), _float32(gpt_inputs(np.random.default_rng(1)))
    options = {"num_heads": 2, "approximate": form}
    with precision.rules(FORMATS["float32"]):
        exp_block, bound_block = truth("decoder_block", block, options, "y")
        exp_gpt, bound_gpt = truth("gpt_forward", gpt, options, "logits")

    def t32(arrays: dict) -> dict:
        return {k: torch.tensor(v, dtype=torch.float32) for k, v in arrays.items()}

    x = torch.tensor(block["x"], dtype=torch.float32)
    got_block = _block_torch(x, t32(params_of(block)), 2, 1e-5, form).double().numpy()
    t = t32(params_of(gpt))
    h = F.embedding(torch.tensor(gpt["tokens"]), t["wte"]) + t["wpe"][: len(gpt["tokens"])]
    for b in range(t["w_q"].shape[0]):
        h = _block_torch(h, {k: t[k][b] for k in BLOCK_PARAMS}, 2, 1e-5, form)
    got_gpt = (F.layer_norm(h, (h.shape[1],), t["lnf_w"], t["lnf_b"], 1e-5) @ t["w_head"]).double().numpy()
    assert fraction(exp_block, got_block, bound_block) <= 1  # measured: 1.3e-3
    assert fraction(exp_gpt, got_gpt, bound_gpt) <= 1  # measured: 8.5e-5
