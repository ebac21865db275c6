"""The stored error bounds against the issue's requirements, on every committed fixture output.

(a) every correct implementation passes every case: ``test_cases.py`` (every implementation) and
    ``test_truth_bytes.py`` (the reference under other BLAS kernels);
(b) a 1e-9 relative error in any output of a non-degenerate case fails at least one element;
(c) a 1e-14 relative error passes every element, exactly representable results included.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from flint import arb, arb_mat

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.compare import compare
from attention_ports.spec.ops import CLASSIFIER_PARAMS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact

CASES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}


def outputs():
    for case_id, entry in CASES.items():
        case = load_case(REPO_FIXTURES, entry)
        for name, exp in case.expected.items():
            yield case_id, name, exp


ALL = list(outputs())


def test_every_output_has_a_finite_non_negative_bound_of_its_shape() -> None:
    for case_id, name, exp in ALL:
        assert exp.bound.shape == exp.array.shape and exp.bound.dtype == np.float64, (case_id, name)
        assert np.all(np.isfinite(exp.bound)) and np.all(exp.bound >= 0), (case_id, name)
        finite = np.isfinite(exp.array)
        assert np.all(exp.bound[~finite] == 0), (case_id, name)  # NaN and inf match only themselves
        assert np.all(exp.bound[finite] > 0), (case_id, name)  # zero is never demanded exactly


# gpt_train's b_k, whose gradient is exactly 0 and computed as rounding noise that Adam divides by
# eps = 1e-8: correct implementations' b_k differ by up to lr times that noise / eps, and the bound
# (lr times the noise rule's bound / eps) allows it: it catches 4.7e-8 (gpt_train_tanh_plain_adam, lr
# 0.005, four steps; 9.4e-8 when that case ran two steps at lr 0.02) to 4e-10 relative. Every other
# output of gpt_train is held to the requirement.
LOOSE_BY_NATURE = {("gpt_train", "params.b_k"): 1e-7}


def test_a_1e_minus_9_relative_error_fails_every_non_degenerate_output() -> None:
    checked = 0
    for case_id, name, exp in ALL:
        if not np.any(np.isfinite(exp.array) & (exp.array != 0)):
            continue  # degenerate: all zero or NaN (a zero gradient, a fully masked row)
        r = LOOSE_BY_NATURE.get((CASES[case_id]["op"], name), 1e-9)
        res = compare(exp.array, exp.array * (1 + r), exp.bound)
        assert not res.ok, f"{case_id}.{name}: a {r:g} relative error passes every element"
        checked += 1
    assert checked > 250


def test_a_1e_minus_14_relative_error_passes_every_element() -> None:
    for case_id, name, exp in ALL:
        for sign in (1, -1):
            res = compare(exp.array, exp.array * (1 + sign * 1e-14), exp.bound)
            assert res.ok, f"{case_id}.{name}: {res.describe(case_id, name)}"


@pytest.mark.parametrize(("case", "name", "floor"), [("softmax_large_logits", "y", 1e-13)])
def test_large_scores_get_the_bound_every_correct_softmax_needs(case: str, name: str, floor: float) -> None:
    # Scores of 1e3: the shift s - max has a rounding of u|s - max| that exp turns into a relative
    # error of the weight. The bound's u|t| term is what lets correct implementations pass here.
    exp = load_case(REPO_FIXTURES, CASES[case]).expected[name]
    resolved = exp.array > 1e-300
    assert np.max(exp.bound[resolved] / exp.array[resolved]) > floor


def test_a_3e_minus_10_relative_error_fails_every_non_degenerate_output() -> None:
    # The requirement is 1e-9; this keeps a margin on it, so that a bound that loosens (a rule
    # losing a cancellation again) is seen before it lets a 1e-9 error through. Measured: every
    # output catches 2e-11 except four, the query gradients (w_q, b_q) of
    # clf_step_shifted_large_logits and clf_step_shifted_underflow_frozen_w_q, which catch 2.63e-10:
    # their attention logits are ~700 and their keys share a common part of ~16, and a log-domain
    # softmax (FlashAttention's backward recomputes P = exp(S - lse)) scales each row's weights by
    # a common 1 + 2u|lse| that dS = A (dA - rowsum(dA A)) no longer cancels, so d_q meets that
    # common key part (bounds.py, "Softmax"), against gradients that are small beside their terms.
    # One output is held to the requirement itself, not the margin: gpt_near_constant_embeddings'
    # logits, whose embeddings (mean 3, spread 1e-3, eps 1e-12) make the first norm's centring
    # ill-conditioned: correct implementations err there by 3.5e-11 (torch) and 4.5e-11 (the
    # reference) relative, and the bound, 600 times that, catches 1e-9 but not 3e-10.
    # And eight outputs of gpt_grads_two_blocks, the first block's attention and ln_1 gradients and
    # the embeddings', which catch 4.1e-10 to 7.2e-10: the forward's bound of the second block's
    # attention weights (~1e3 wider than correct implementations' errors) is carried into the
    # backward as those nodes' widths (truth/transformer_grads.py, "What is left loose"); correct
    # implementations use at most 2.5e-4 of the backward's bound.
    # And gpt_train_one_token_decay's b_q: on one token the q and k gradients are exactly 0 (dS = 0),
    # computed as rounding noise by a flash kernel, which Adam divides by eps over three steps; its
    # bound catches 3.6e-10. gpt_train's b_k is held to its own level (LOOSE_BY_NATURE, above).
    held_to_requirement = {
        ("gpt_near_constant_embeddings", "logits"),
        ("gpt_train_one_token_decay", "params.b_q"),
    } | {("gpt_grads_two_blocks", f"grads.{n}") for n in ("ln1_w", "ln1_b", "w_q", "b_q", "w_k", "b_v", "wte", "wpe")}
    for case_id, name, exp in ALL:
        if not np.any(np.isfinite(exp.array) & (exp.array != 0)):
            continue
        r = 1e-9 if (case_id, name) in held_to_requirement else 3e-10
        r = LOOSE_BY_NATURE.get((CASES[case_id]["op"], name), r)
        res = compare(exp.array, exp.array * (1 + r), exp.bound)
        assert not res.ok, f"{case_id}.{name}: a {r:g} relative error passes every element"


# ---------------------------------------------------------------- the analysis where rounding shows
# At float64, correct implementations err by ~1e-16 relative and use a few percent of their
# bounds at most, which says little about the rules that exploit cancellations (the softmax's
# normalisation, the per-row centres). Evaluated for float32 (u = 2^-24), the same rules bound
# errors of ~1e-7 that float32 implementations (NumPy's BLAS, torch's kernels and autograd, two
# softmax formulations, the scale on the scores or on q) really make: a rule that claimed a
# cancellation that is not there would be exceeded here by orders of magnitude.

F32_U = 2.0**-24


@pytest.fixture
def float32_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounds, "U", arb(F32_U))
    monkeypatch.setattr(bounds, "MAX_FIRST_ORDER", arb(2.0**-8))  # float32's logit errors are ~1e-6


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float64)  # exactly representable in float32


def _raw(op: str, inputs: dict, options: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(exact value, bound B before the safety factor) per output, at the patched u."""
    outs = exact.run_graph(op, inputs, options, prec=128, track=True)
    result = {}
    for name, out in outs.items():
        value = np.array([float(x.mid()) for x in out.t.v.entries()]).reshape(out.shape)
        bound = np.array([float(x.upper()) for x in out.t.e.entries()]).reshape(out.shape)
        result[name] = (value, bound)
    return result


def _softmax32(s: np.ndarray, lse: bool) -> np.ndarray:
    t = s - s.max(axis=-1, keepdims=True)
    if lse:
        return np.exp(t - np.log(np.exp(t).sum(axis=-1, keepdims=True)))
    e = np.exp(t)
    return e / e.sum(axis=-1, keepdims=True)


def _clf_numpy32(inputs: dict, lse: bool) -> dict[str, np.ndarray]:
    """Seed 003's classifier step in float32 NumPy with a hand-written backward."""
    p = {n: inputs[f"params.{n}"].astype(np.float32) for n in CLASSIFIER_PARAMS}
    label = int(inputs["label"])
    xe = inputs["x_emb"].astype(np.float32)
    n = xe.shape[0]
    x = np.concatenate([xe, np.arange(n, dtype=np.float32)[:, None]], axis=1)
    s = np.float32(1) / np.sqrt(np.float32(x.shape[1]))
    q, k, v = (x @ p[f"w_{c}"] + p[f"b_{c}"] for c in "qkv")
    a = _softmax32((q * s) @ k.T if lse else (q @ k.T) * s, lse)
    z = a @ v
    pooled = (z @ p["w_f"] + p["b_f"]).sum(axis=0) / np.float32(n)
    probs = _softmax32(pooled, lse)
    t = pooled - pooled.max()
    loss = np.log(np.exp(t).sum()) - t[label]
    d_f = np.tile((probs - np.eye(len(probs), dtype=np.float32)[label]) / np.float32(n), (n, 1))
    d_z = d_f @ p["w_f"].T
    d_a = d_z @ v.T
    d_s = a * (d_a - (d_a * a).sum(axis=1, keepdims=True))
    d_q, d_k, d_v = (d_s * s) @ k, (d_s.T * s) @ q, a.T @ d_z
    grads = {"w_f": z.T @ d_f, "b_f": d_f.sum(axis=0), "w_v": x.T @ d_v, "b_v": d_v.sum(axis=0)}
    grads |= {"w_q": x.T @ d_q, "b_q": d_q.sum(axis=0), "w_k": x.T @ d_k, "b_k": d_k.sum(axis=0)}
    return {"loss": loss, "probs": probs, **{f"grads.{g}": grads[g] for g in CLASSIFIER_PARAMS}}


def _clf_torch32(torch, inputs: dict) -> dict[str, np.ndarray]:
    """The same step in float32 torch: its own softmax, cross-entropy and autograd."""
    import torch.nn.functional as F

    p = {n: torch.tensor(inputs[f"params.{n}"], dtype=torch.float32, requires_grad=True) for n in CLASSIFIER_PARAMS}
    xe = torch.tensor(inputs["x_emb"], dtype=torch.float32)
    x = torch.cat([xe, torch.arange(xe.shape[0], dtype=torch.float32)[:, None]], dim=1)
    q, k, v = (F.linear(x, p[f"w_{c}"].T, p[f"b_{c}"]) for c in "qkv")
    z = torch.softmax(q @ k.T / x.shape[1] ** 0.5, dim=-1) @ v
    pooled = F.linear(z, p["w_f"].T, p["b_f"]).mean(dim=0)
    loss = F.cross_entropy(pooled[None], torch.tensor([int(inputs["label"])]))
    grads = torch.autograd.grad(loss, [p[n] for n in CLASSIFIER_PARAMS])
    out = {"loss": loss.detach().numpy(), "probs": torch.softmax(pooled, dim=0).detach().numpy()}
    return out | {f"grads.{n}": g.numpy() for n, g in zip(CLASSIFIER_PARAMS, grads, strict=True)}


def _clf_case(seed: int, n: int, b_q: float, b_k: float, w_k: float) -> dict[str, np.ndarray]:
    """A classifier step whose attention logits are shifted by b_q . b_k (the keys' common part)."""
    rng = np.random.default_rng(seed)
    d = 9
    inputs = {
        "x_emb": rng.standard_normal((n, d - 1)),
        "params.w_q": 0.3 * rng.standard_normal((d, d)),
        "params.b_q": b_q + 0.1 * rng.standard_normal(d),
        "params.w_k": w_k * rng.standard_normal((d, d)),
        "params.b_k": b_k + 0.1 * rng.standard_normal(d),
        "params.w_v": 0.3 * rng.standard_normal((d, d)),
        "params.b_v": 0.2 * rng.standard_normal(d),
        "params.w_f": 0.3 * rng.standard_normal((d, 3)),
        "params.b_f": 0.2 * rng.standard_normal(3),
    }
    return {k: _f32(v) for k, v in inputs.items()} | {"label": np.array(1)}


def _worst(raw: dict, actual: dict[str, np.ndarray]) -> tuple[float, str]:
    """The largest |actual - exact| / B over every element (an exact zero bound demands an exact value)."""
    ratios = {}
    for name, (value, bound) in raw.items():
        if name in actual:
            err = np.abs(np.asarray(actual[name], dtype=np.float64).reshape(value.shape) - value)
            assert np.all(err[bound == 0] == 0), f"{name}: an error where the bound is 0"
            ratios[name] = float(np.max(err[bound > 0] / bound[bound > 0]))
    name = max(ratios, key=ratios.__getitem__)
    return ratios[name], name


def _torch():
    """torch is optional for users (skip without it) but required on CI (fail without it)."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        import torch

        return torch
    return pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("seed", "n", "b_q", "b_k", "w_k"),
    [(0, 12, 0.0, 0.0, 0.3), (1, 12, 2.5, 2.5, 0.05), (2, 30, 2.0, -2.0, 0.05), (3, 20, 3.0, 3.0, 0.02)],
)
def test_the_gradient_bounds_hold_at_float32_rounding(float32_analysis, seed, n, b_q, b_k, w_k) -> None:
    torch = _torch()
    inputs = _clf_case(seed, n, b_q, b_k, w_k)
    raw = _raw("classifier_step", inputs, {"lr": 0.0, "frozen": []})
    for label, actual in (
        ("numpy exp/sum", _clf_numpy32(inputs, lse=False)),
        ("numpy log-sum-exp, scale on q", _clf_numpy32(inputs, lse=True)),
        ("torch autograd", _clf_torch32(torch, inputs)),
    ):
        ratio, name = _worst(raw, actual)
        assert ratio <= 1, f"{label}: {name} exceeds its float32 bound ({ratio:.3g} x)"
        assert ratio > 1e-3, f"{label}: float32 errors should be visible against the bound ({ratio:.3g})"


def _sdpa_numpy32(q, k, v, mask, scale, lse: bool) -> dict[str, np.ndarray]:
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    s = np.float32(scale)
    scores = (q * s) @ k.T if lse else (q @ k.T) * s
    if mask.dtype == bool:
        scores = np.where(mask, scores, np.float32(-np.inf))
    else:
        scores = scores + mask.astype(np.float32)
    a = _softmax32(scores, lse)
    return {"output": a @ v, "weights": a}


@pytest.mark.parametrize("mask_kind", ["causal", "additive"])
def test_the_attention_bounds_hold_at_float32_rounding(float32_analysis, mask_kind: str) -> None:
    rng = np.random.default_rng(11)
    n_q, n_k, d = 9, 12, 8
    q, k, v = (
        _f32(2 * rng.standard_normal((n_q, d))),
        _f32(2 * rng.standard_normal((n_k, d))),
        _f32(rng.standard_normal((n_k, 5))),
    )
    if mask_kind == "causal":
        mask = np.tril(np.ones((n_q, n_k), dtype=bool), k=3)
    else:
        mask = _f32(-0.75 * np.abs(np.arange(n_q)[:, None] - np.arange(n_k)[None, :]))
    scale = 0.7
    raw = _raw("scaled_dot_product_attention", {"q": q, "k": k, "v": v, "mask": mask}, {"scale": scale})
    for lse in (False, True):
        ratio, name = _worst(raw, _sdpa_numpy32(q, k, v, mask, scale, lse))
        assert 1e-3 < ratio <= 1, f"lse={lse}: {name} uses {ratio:.3g} of its float32 bound"


# ---------------------------------------------------------------- the softmax rules, one by one
# The rules for softmax weights and the products that consume them bound the effect of the logit
# errors eta (|eta| <= eta^) and of dA's error G by their exact first-order sensitivities. With
# every rounding switched off (u = 0), the only errors left are these: an adversary that gives
# each error its bound with the sign of its sensitivity reaches the largest first-order change
# of one chosen output element. That change must stay within the rule's bound (no cancellation
# is claimed that does not happen) and reach most of it (the rule is not loose).


def _pattern(rng, n: int, scale: float):
    return [[arb(float(x)) for x in row] for row in scale * rng.standard_normal((n, n))]


def _forward_backward(s_rows, v, k, q, d_a) -> dict[str, arb_mat]:
    """Exact A, Y = A V, P = dS K, D = dS^T Q for the logits ``s_rows`` (arb, no tracking)."""
    g = exact.Graph(track=False)
    a = g.softmax_rows(exact.T(arb_mat(s_rows)), None, "nan").a.v
    n = a.ncols()
    ds = am.emul(a, d_a - am.bcast_cols(am.rowsum(am.emul(d_a, a)), n))
    return {"A": a, "Y": a * v, "P": ds * k, "D": ds.transpose() * q}


def _adversarial_change(base, s_rows, d_a_rows, errs, v, k, q, out: str, at: tuple[int, int], on: str) -> arb:
    """|out(perturbed) - out| at ``at`` when every entry of the logits (``on="S"``) or of dA
    (``on="dA"``) moves by its bound ``errs`` with the sign of its own effect there (finite
    differences at high precision): the largest first-order change of that element."""
    n = len(s_rows)
    h = arb(2.0**-120)

    def run(s_m, d_m):
        val = _forward_backward(s_m, v, k, q, arb_mat(d_m))[out]
        return val.entries()[at[0] * val.ncols() + at[1]]

    ref = base[out].entries()[at[0] * base[out].ncols() + at[1]]
    moved = {"S": [row[:] for row in s_rows], "dA": [row[:] for row in d_a_rows]}
    for i in range(n):
        for j in range(n):
            probe = {"S": [row[:] for row in s_rows], "dA": [row[:] for row in d_a_rows]}
            probe[on][i][j] = probe[on][i][j] + h
            sign = 1 if run(probe["S"], probe["dA"]) - ref >= 0 else -1
            moved[on][i][j] = moved[on][i][j] + sign * errs[i][j]
    return abs(run(moved["S"], moved["dA"]) - ref)


@pytest.mark.parametrize("shift", [0.0, 6.0])
def test_the_softmax_rules_are_the_exact_first_order_sensitivities(monkeypatch, shift: float) -> None:
    from flint import ctx

    monkeypatch.setattr(bounds, "U", arb(0))
    old = ctx.prec
    ctx.prec = 300
    try:
        rng = np.random.default_rng(5)
        n, d = 6, 3

        def mat(scale: float, rows: int, cols: int, plus: float = 0.0) -> list[list[arb]]:
            return [[arb(float(x) + plus) for x in row] for row in scale * rng.standard_normal((rows, cols))]

        s_rows = mat(2.0, n, n)
        # keys and values with a large common part (shift): the cancellations the rules rely on
        k, q, v = arb_mat(mat(0.5, n, d, shift)), arb_mat(mat(1.0, n, d)), arb_mat(mat(1.0, n, d, shift))
        d_a_rows = mat(1.0, n, n)
        d_a = arb_mat(d_a_rows)
        eta_hat = [[arb(1e-9 * (1 + float(x))) for x in row] for row in rng.random((n, n))]
        g_hat = [[arb(1e-9 * (1 + float(x))) for x in row] for row in rng.random((n, n))]
        base = _forward_backward(s_rows, v, k, q, d_a)
        sm = exact.Graph(track=True).softmax_rows(exact.T(arb_mat(s_rows), arb_mat(eta_hat)), None, "nan")
        _, e_p, _, e_dk = bounds.attention_grads(sm.err, d_a, None, q, None, k, None, 0)
        exact_sm = exact.Graph(track=True).softmax_rows(exact.T(arb_mat(s_rows)), None, "nan")
        _, g_p, _, g_dk = bounds.attention_grads(exact_sm.err, d_a, arb_mat(g_hat), q, None, k, None, 0)
        checks = [  # (what moves, its bounds, output, the rule's bound)
            ("S", eta_hat, "A", sm.err.err),
            ("S", eta_hat, "Y", bounds.weighted_values(sm.err, am.eabs(v), None, v, base["Y"])),
            ("S", eta_hat, "P", e_p),
            ("S", eta_hat, "D", e_dk),
            ("dA", g_hat, "P", g_p),
            ("dA", g_hat, "D", g_dk),
        ]
        for on, errs, out, b in checks:
            cols = b.ncols()
            ents = [x.upper() for x in b.entries()]
            for flat in sorted(range(len(ents)), key=lambda i: -float(ents[i].mid()))[:3]:
                at = (flat // cols, flat % cols)
                change = _adversarial_change(base, s_rows, d_a_rows, errs, v, k, q, out, at, on)
                ratio = float((change / ents[flat]).mid())
                where = f"{out}{list(at)} under errors of {on}"
                assert ratio <= 1, f"{where}: the adversary moves it {ratio:.4g} x its bound"
                assert ratio >= 0.99, f"{where}: the bound is {1 / ratio:.3g} x the largest change"
    finally:
        ctx.prec = old
