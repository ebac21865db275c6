"""The reference for seed 003's attention classifier: gradients, training, data, and the seed's bugs.

Tolerances (measured values in comments; d = e + 1 is the model width):

* Central finite differences with h = 1e-6: truncation error ~ h**2 * |L'''| / 6 ~ 1e-13 and
  rounding error ~ eps * |L| / h ~ 2e-10 for a loss of order 1, so each gradient entry must satisfy
  |fd - g| <= 1e-8 + 1e-6 * |g| (measured max |fd - g| = 8e-10). The gradients checked are of
  order 0.1 to 1 (parameters drawn at scale 0.5 so the attention is far from uniform), so a wrong
  formula, e.g. a missing 1/sqrt(d) (off by a factor sqrt(d) >= 1.4), fails by orders of magnitude.
* torch autograd in float64 computes the same sums in a different order: |g - g_torch| <=
  1e-12 * |g_torch| + 1e-12 * G, with G the largest gradient entry of that sentence (an absolute
  floor is needed because d loss / d b_k is exactly 0 in theory, softmax being invariant to a
  shift of every key by the same vector, so both sides hold rounding noise of ~1e-17 there, and
  entries that cancel to near 0 carry rounding of the size of the terms). Measured over 300
  random cases (n <= 12, e <= 8, parameters at scale up to 2): max |g - g_torch| / G = 5.7e-14,
  loss relative error 2.8e-14.
"""

from __future__ import annotations

import importlib
import math
import os

import attention_ports.reference as reference
import numpy as np
import pytest
from attention_ports.reference.attention import softmax
from attention_ports.reference.classifier import (
    CLASS_NAMES,
    PARAM_NAMES,
    SEED_FROZEN,
    classifier_forward,
    classifier_loss_and_grads,
    classifier_step,
    classifier_train,
    init_classifier_params,
    pack_dataset,
    train_classifier,
    unpack_dataset,
)
from attention_ports.reference.sentiment import (
    ABSENT_WORDS,
    EMBED_DIM,
    LABEL_INDEX,
    PARAM_SEED,
    SEED_FROZEN_LR,
    TRAIN_EPOCHS,
    TRAIN_LR,
    build_vocabulary,
    default_embedding_table,
    embed,
    load_dataset,
    make_embedding_table,
    read_sentiment_csv,
    tokenize,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_ports.runtimes.builtin import call_reference
from attention_ports.spec import ops

FD_STEP = 1e-6
FD_ATOL, FD_RTOL = 1e-8, 1e-6
TORCH_RTOL, TORCH_FLOOR = 1e-12, 1e-12


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="module")
def torch():
    """torch is optional for users (skip without it) but required on CI (fail without it)."""
    if _ci():
        return importlib.import_module("torch")
    return pytest.importorskip("torch")


def _random_case(seed: int, n: int, e: int, c: int = 3, scale: float = 0.5):
    rng = np.random.default_rng(seed)
    x_emb = rng.standard_normal((n, e))
    params = {name: rng.standard_normal(arr.shape) * scale for name, arr in init_classifier_params(e, c).items()}
    label = int(rng.integers(c))
    return x_emb, label, params


def _torch_loss_and_grads(torch, x_emb, label, params):
    """The same model written independently with torch autograd (float64)."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    x = torch.tensor(x_emb, dtype=torch.float64)
    n = x.shape[0]
    x = torch.cat([x, torch.arange(n, dtype=torch.float64)[:, None]], dim=1)
    q = x @ p["w_q"] + p["b_q"]
    k = x @ p["w_k"] + p["b_k"]
    v = x @ p["w_v"] + p["b_v"]
    weights = torch.softmax(q @ k.T / math.sqrt(x.shape[1]), dim=-1)
    pooled = ((weights @ v) @ p["w_f"] + p["b_f"]).mean(dim=0)
    loss = torch.nn.functional.cross_entropy(pooled[None, :], torch.tensor([label]))
    loss.backward()
    return loss.item(), torch.softmax(pooled, 0).detach().numpy(), {k: t.grad.numpy() for k, t in p.items()}


def _assert_close_to_torch(torch, x_emb, label, params):
    loss, grads = classifier_loss_and_grads(x_emb, label, params)
    t_loss, t_probs, t_grads = _torch_loss_and_grads(torch, x_emb, label, params)
    assert loss == pytest.approx(t_loss, rel=TORCH_RTOL, abs=1e-15)
    np.testing.assert_allclose(classifier_forward(x_emb, params).probs, t_probs, rtol=TORCH_RTOL, atol=1e-15)
    floor = TORCH_FLOOR * max(np.abs(g).max() for g in t_grads.values())
    for name in PARAM_NAMES:
        np.testing.assert_allclose(grads[name], t_grads[name], rtol=TORCH_RTOL, atol=floor, err_msg=name)


# --------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize(("n", "e", "c"), [(1, 3, 3), (2, 3, 3), (5, 4, 3), (4, 2, 2)])
def test_gradients_match_central_differences(n, e, c):
    x_emb, label, params = _random_case(10 * n + e, n, e, c)
    _, grads = classifier_loss_and_grads(x_emb, label, params)
    for name in PARAM_NAMES:
        fd = np.zeros_like(params[name])
        for idx in np.ndindex(params[name].shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += FD_STEP
            minus[name][idx] -= FD_STEP
            l_plus = classifier_loss_and_grads(x_emb, label, plus)[0]
            l_minus = classifier_loss_and_grads(x_emb, label, minus)[0]
            fd[idx] = (l_plus - l_minus) / (2 * FD_STEP)
        np.testing.assert_allclose(grads[name], fd, rtol=FD_RTOL, atol=FD_ATOL, err_msg=name)


@pytest.mark.parametrize(("n", "e", "c", "scale"), [(1, 8, 3, 0.5), (2, 3, 3, 0.5), (7, 8, 3, 0.5), (12, 5, 4, 1.0)])
def test_loss_and_gradients_match_torch_autograd(torch, n, e, c, scale):
    x_emb, label, params = _random_case(n * 100 + e, n, e, c, scale)
    _assert_close_to_torch(torch, x_emb, label, params)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    n=st.integers(1, 6),
    e=st.integers(1, 5),
    c=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.01, 0.5, 2.0]),
)
def test_gradients_match_torch_for_any_shape(torch, n, e, c, seed, scale):
    x_emb, label, params = _random_case(seed, n, e, c, scale)
    _assert_close_to_torch(torch, x_emb, label, params)


def test_single_token_sentence():
    x_emb, label, params = _random_case(7, 1, EMBED_DIM)
    fw = classifier_forward(x_emb, params)
    assert fw.x.shape == (1, EMBED_DIM + 1) and fw.x[0, -1] == 0.0
    np.testing.assert_array_equal(fw.weights, [[1.0]])
    np.testing.assert_allclose(fw.z, fw.v, rtol=0, atol=0)
    _, grads = classifier_loss_and_grads(x_emb, label, params)
    for name in ("w_q", "b_q", "w_k", "b_k"):  # one key: the weights cannot move
        np.testing.assert_array_equal(grads[name], 0.0)
    # (n = 1 against torch: the first case of test_loss_and_gradients_match_torch_autograd)


def test_forward_stages():
    x_emb, _, params = _random_case(3, 4, 3)
    fw = classifier_forward(x_emb, params)
    np.testing.assert_array_equal(fw.x[:, :3], x_emb)
    np.testing.assert_array_equal(fw.x[:, 3], [0, 1, 2, 3])
    ref = reference.self_attention(
        fw.x, params["w_q"], params["w_k"], params["w_v"], params["b_q"], params["b_k"], params["b_v"]
    )
    np.testing.assert_allclose(fw.weights, ref.weights, rtol=1e-14)
    np.testing.assert_allclose(fw.z, ref.output, rtol=1e-14)
    np.testing.assert_allclose(fw.pooled, fw.f.mean(axis=0), rtol=1e-15)
    assert fw.probs.sum() == pytest.approx(1.0, abs=1e-15)
    loss, _ = classifier_loss_and_grads(x_emb, 1, params)
    assert loss == pytest.approx(-np.log(fw.probs[1]), rel=1e-14)


def test_loss_is_stable_for_large_logits():
    x_emb, _, params = _random_case(4, 3, 2)
    params["b_f"] = np.array([800.0, 0.0, -800.0])
    loss, grads = classifier_loss_and_grads(x_emb, 2, params)
    assert np.isfinite(loss) and loss == pytest.approx(1600.0, rel=1e-3)
    assert all(np.all(np.isfinite(g)) for g in grads.values())


# --------------------------------------------------------------------------------------------
# SGD


def test_step_is_sgd_and_leaves_frozen_and_inputs_alone():
    x_emb, label, params = _random_case(5, 4, 3)
    before = {k: v.copy() for k, v in params.items()}
    loss, grads = classifier_loss_and_grads(x_emb, label, params)
    step = classifier_step(x_emb, label, params, lr=0.1, frozen=SEED_FROZEN)
    assert step.loss == loss
    np.testing.assert_array_equal(step.probs, classifier_forward(x_emb, params).probs)
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(params[name], before[name])  # input untouched
        np.testing.assert_array_equal(step.grads[name], grads[name])  # frozen ones reported too
        assert not np.shares_memory(step.params[name], params[name])
        expected = before[name] if name in SEED_FROZEN else before[name] - 0.1 * grads[name]
        np.testing.assert_array_equal(step.params[name], expected)
    assert not np.array_equal(step.params["w_q"], before["w_q"])


@pytest.mark.parametrize("frozen", [["w_f", "b_f"], ("w_f", "b_f"), {"w_f", "b_f"}, np.array(["w_f", "b_f"])])
def test_frozen_accepts_any_collection_of_names(frozen):
    x_emb, label, params = _random_case(6, 3, 2)
    step = classifier_step(x_emb, label, params, 0.5, frozen)
    np.testing.assert_array_equal(step.params["w_f"], params["w_f"])
    np.testing.assert_array_equal(step.params["b_f"], params["b_f"])
    single = classifier_step(x_emb, label, params, 0.5, "w_f")
    np.testing.assert_array_equal(single.params["w_f"], params["w_f"])
    assert not np.array_equal(single.params["b_f"], params["b_f"])
    none = classifier_step(x_emb, label, params, 0.5, [])
    assert not np.array_equal(none.params["w_f"], params["w_f"])


def test_init_params():
    p = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    d = EMBED_DIM + 1
    assert list(p) == list(PARAM_NAMES)
    assert {k: v.shape for k, v in p.items()} == {
        "w_q": (d, d),
        "b_q": (d,),
        "w_k": (d, d),
        "b_k": (d,),
        "w_v": (d, d),
        "b_v": (d,),
        "w_f": (d, 3),
        "b_f": (3,),
    }
    for name in ("b_q", "b_k", "b_v", "b_f"):
        np.testing.assert_array_equal(p[name], 0.0)
    for name in ("w_q", "w_k", "w_v", "w_f"):
        assert 0.003 < p[name].std() < 0.03  # standard normal / 100, like the seed
    # seed 003 sets V = K; here they are separate draws and separate arrays
    assert not np.array_equal(p["w_v"], p["w_k"])
    assert not any(np.shares_memory(p[a], p[b]) for a in PARAM_NAMES for b in PARAM_NAMES if a != b)
    again = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    assert all(np.array_equal(p[k], again[k]) for k in PARAM_NAMES)


# --------------------------------------------------------------------------------------------
# training


@pytest.fixture(scope="module")
def dataset():
    return load_dataset()


def test_training_reduces_the_loss(dataset):
    assert TRAIN_EPOCHS >= 20
    params = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    result = train_classifier(dataset, params, TRAIN_LR, TRAIN_EPOCHS)
    losses = result.epoch_losses
    assert losses.shape == (TRAIN_EPOCHS,)
    # measured: 1.0868, 1.0415, 0.9759, ... 0.8189 (epoch 20) ... 0.7781 (epoch 30)
    assert np.all(np.diff(losses) < 0)
    assert losses[0] == pytest.approx(1.0868, abs=1e-3)  # near log(3) = 1.0986 with tiny weights
    assert losses[-1] < 0.8 * losses[0]
    assert losses[19] < 0.85 * losses[0]


def test_seed_configuration_trains_attention_only(dataset):
    params = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    result = train_classifier(dataset, params, SEED_FROZEN_LR, TRAIN_EPOCHS, frozen=SEED_FROZEN)
    # measured: 1.0959 -> 1.0037 (epoch 20) -> 0.9800 (epoch 30)
    assert np.all(np.diff(result.epoch_losses) < 0)
    assert result.epoch_losses[-1] < result.epoch_losses[0] - 0.1
    for name in SEED_FROZEN:
        np.testing.assert_array_equal(result.params[name], params[name])


def test_epoch_loss_is_the_mean_pre_update_loss_in_dataset_order(dataset):
    params = init_classifier_params(EMBED_DIM, seed=1)
    subset = dataset[:6]
    p, expected = params, []
    for _ in range(3):
        losses = []
        for x_emb, label, _ in subset:
            step = classifier_step(x_emb, label, p, 0.02)
            losses.append(step.loss)
            p = step.params
        expected.append(sum(losses) / len(losses))
    result = train_classifier(subset, params, 0.02, 3)
    np.testing.assert_array_equal(result.epoch_losses, expected)
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(result.params[name], p[name])


def test_empty_sentences_are_skipped_and_not_counted(dataset):
    params = init_classifier_params(EMBED_DIM, seed=2)
    subset = [(x, y) for x, y, _ in dataset[:5]]
    empty = (np.zeros((0, EMBED_DIM)), 1)
    padded = [empty, *subset[:2], empty, *subset[2:]]
    a = train_classifier(subset, params, 0.02, 2)
    b = train_classifier(padded, params, 0.02, 2)
    np.testing.assert_array_equal(a.epoch_losses, b.epoch_losses)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in PARAM_NAMES)
    with pytest.raises(ValueError, match="none with at least one token"):
        train_classifier([empty], params, 0.02, 1)


def test_divergence_is_reported(dataset):
    params = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    with pytest.raises(ValueError, match=r"training diverged .* lr = 0.5 is too large"):
        train_classifier(dataset, params, 0.5, TRAIN_EPOCHS)


def test_zero_epochs_returns_the_parameters(dataset):
    params = init_classifier_params(EMBED_DIM)
    result = train_classifier(dataset, params, 0.02, 0)
    assert result.epoch_losses.shape == (0,)
    assert all(np.array_equal(result.params[k], params[k]) for k in PARAM_NAMES)


def test_flat_encoding_round_trips_and_trains_the_same(dataset):
    pairs = [(x, y) for x, y, _ in dataset[:7]] + [(np.zeros((0, EMBED_DIM)), 0)]
    tokens, lengths, labels = pack_dataset(pairs)
    assert tokens.shape == (sum(x.shape[0] for x, _ in pairs), EMBED_DIM)
    assert lengths.dtype == labels.dtype == np.int64 and lengths[-1] == 0
    back = unpack_dataset(tokens, lengths.astype(float), labels.astype(float))
    for (x, y), (x2, y2) in zip(pairs, back, strict=True):
        np.testing.assert_array_equal(x, x2)
        assert y == y2
    params = init_classifier_params(EMBED_DIM, seed=4)
    a = train_classifier(pairs, params, 0.02, 2, SEED_FROZEN)
    b = classifier_train(tokens, lengths, labels, params, 0.02, 2, SEED_FROZEN)
    np.testing.assert_array_equal(a.epoch_losses, b.epoch_losses)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in PARAM_NAMES)


# --------------------------------------------------------------------------------------------
# the data set


def test_csv_holds_the_seed_rows_verbatim():
    rows = read_sentiment_csv()
    assert len(rows) == 39
    assert [s for s, _ in rows].count("negative") == 18
    assert [s for s, _ in rows].count("neutral") == 8
    assert [s for s, _ in rows].count("positive") == 13
    assert rows[0] == ("positive", "i love this speaker")
    assert rows[1] == ("negative", "this mouse was waste of money it broke after using it ")  # trailing space kept
    assert rows[29] == ("neutral", "thanks")
    assert rows[-1] == ("positive", "good price")
    assert LABEL_INDEX == {"negative": 0, "neutral": 1, "positive": 2}
    assert CLASS_NAMES == ("negative", "neutral", "positive")


def test_tokenizer_and_vocabulary():
    assert tokenize("great product ") == ["great", "product"]
    assert tokenize("  a  b ") == ["a", "b"]
    vocab = build_vocabulary(s for _, s in read_sentiment_csv())
    assert len(vocab) == 158 and list(vocab) == sorted(vocab) and "" not in vocab
    assert set(ABSENT_WORDS) <= set(vocab)


def test_embedding_table_is_deterministic_and_lacks_the_absent_words():
    table = default_embedding_table()
    assert len(table) == 158 - len(ABSENT_WORDS) == 153
    assert not set(ABSENT_WORDS) & set(table)
    assert all(v.shape == (EMBED_DIM,) and v.dtype == np.float64 for v in table.values())
    again = default_embedding_table()
    assert all(np.array_equal(table[w], again[w]) for w in table)
    words = ["b", "a", "c"]
    t1, t2 = make_embedding_table(words, 4, 9), make_embedding_table(reversed(words), 4, 9)
    assert all(np.array_equal(t1[w], t2[w]) for w in words)  # depends on the set, not the order
    np.testing.assert_array_equal(t1["a"], np.random.default_rng(9).standard_normal((3, 4))[0])


def test_dataset_drops_unknown_words_and_skips_empty_sentences(dataset):
    table = default_embedding_table()
    assert len(dataset) == 38
    assert "thanks" not in [ex.sentence for ex in dataset]
    assert sum(ex.x_emb.shape[0] for ex in dataset) == 301
    assert max(ex.x_emb.shape[0] for ex in dataset) == 42
    by_text = {ex.sentence: ex for ex in dataset}
    usb = next(s for s in by_text if s.startswith("the usb plug"))
    x_emb, kept = embed(usb, table)
    assert len(tokenize(usb)) == 44 and len(kept) == 42 and "playstation" not in kept  # dropped twice
    np.testing.assert_array_equal(by_text[usb].x_emb, x_emb)
    for text, word in (("the battery died", "doesn"), ("had an older jbl", "jbl"), ("does not work for ps", "ps")):
        s = next(s for s in by_text if s.startswith(text))
        _, kept = embed(s, table)
        assert word in tokenize(s) and word not in kept and len(kept) == len(tokenize(s)) - 1
    x_emb, kept = embed("thanks", table)
    assert x_emb.shape == (0, EMBED_DIM) and kept == []
    first = dataset[0]
    assert first.label == 2 and first.x_emb.shape == (4, EMBED_DIM)
    np.testing.assert_array_equal(first.x_emb[1], table["love"])


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_input_raises_value_error_naming_the_argument():
    x_emb, label, params = _random_case(8, 3, 4)
    with pytest.raises(ValueError, match=r"x_emb .*got shape \(4,\)"):
        classifier_forward(x_emb[0], params)
    with pytest.raises(ValueError, match=r"x_emb .*n >= 1.*\(0, 4\)"):
        classifier_forward(x_emb[:0], params)
    with pytest.raises(ValueError, match=r"x_emb has e = 3 .*\(3, 3\).*w_q \(5, 5\)"):
        classifier_forward(x_emb[:, :3], params)
    with pytest.raises(ValueError, match=r"x_emb .*finite"):
        classifier_forward(np.where(x_emb > 0, np.nan, x_emb), params)
    with pytest.raises(ValueError, match=r"params .*missing \['w_v'\]"):
        classifier_forward(x_emb, {k: v for k, v in params.items() if k != "w_v"})
    with pytest.raises(ValueError, match=r"unexpected \['w_o'\]"):
        classifier_forward(x_emb, {**params, "w_o": params["w_q"]})
    with pytest.raises(ValueError, match=r"b_k must have shape \(5,\)"):
        classifier_forward(x_emb, {**params, "b_k": np.zeros(4)})
    with pytest.raises(ValueError, match=r"w_f must be \(d x c\)"):
        classifier_forward(x_emb, {**params, "w_f": np.zeros((4, 3))})
    with pytest.raises(ValueError, match=r"b_f must have shape \(3,\)"):
        classifier_forward(x_emb, {**params, "b_f": np.zeros(2)})
    with pytest.raises(ValueError, match="params must be a mapping"):
        classifier_forward(x_emb, list(params.values()))
    for bad in (3, -1, 1.5, True, "1", np.array([0, 1])):
        with pytest.raises(ValueError, match="label"):
            classifier_loss_and_grads(x_emb, bad, params)
    for bad in (-0.1, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="lr"):
            classifier_step(x_emb, label, params, bad)
    with pytest.raises(ValueError, match=r"frozen names unknown parameters \['W'\]"):
        classifier_step(x_emb, label, params, 0.1, frozen=["W"])
    with pytest.raises(ValueError, match="epochs"):
        train_classifier([(x_emb, label)], params, 0.1, -1)
    with pytest.raises(ValueError, match="epochs"):
        train_classifier([(x_emb, label)], params, 0.1, 2.5)
    with pytest.raises(ValueError, match=r"dataset\[1\] x_emb .*e = d - 1 = 4"):
        train_classifier([(x_emb, label), (x_emb[:, :2], label)], params, 0.1, 1)
    with pytest.raises(ValueError, match=r"dataset\[0\] label"):
        train_classifier([(x_emb, 7)], params, 0.1, 1)
    with pytest.raises(ValueError, match=r"sum\(lengths\) = 4 must equal .*\(3, 4\)"):
        classifier_train(x_emb, np.array([2, 2]), np.array([0, 1]), params, 0.1, 1)
    with pytest.raises(ValueError, match="lengths and labels"):
        classifier_train(x_emb, np.array([3]), np.array([0, 1]), params, 0.1, 1)
    with pytest.raises(ValueError, match=r"lengths\[0\]"):
        classifier_train(x_emb, np.array([-1, 4]), np.array([0, 1]), params, 0.1, 1)
    with pytest.raises(ValueError, match=r"e \(embedding size\)"):
        init_classifier_params(0)
    with pytest.raises(ValueError, match="dim"):
        make_embedding_table(["a"], 0, 1)


# --------------------------------------------------------------------------------------------
# the operation table and the generic reference call


def _op_inputs(x_emb, params, **arrays):
    return {"x_emb": x_emb, **arrays, **{f"params.{k}": v for k, v in params.items()}}


def test_operations_are_declared_with_a_role_for_every_array():
    for op in ("classifier_forward", "classifier_step", "classifier_train"):
        spec = ops.get(op)
        assert spec.groups == {"params": PARAM_NAMES}
        for name in (*spec.args, *spec.outputs, *(f"params.{p}" for p in PARAM_NAMES)):
            spec.role(name)


def test_generic_reference_call_of_the_operations(dataset):
    x_emb, label, params = _random_case(9, 5, EMBED_DIM)
    fw = call_reference("classifier_forward", _op_inputs(x_emb, params), {})
    assert list(fw) == list(ops.get("classifier_forward").outputs)
    np.testing.assert_array_equal(fw["weights"], classifier_forward(x_emb, params).weights)

    inputs = _op_inputs(x_emb, params, label=np.asarray(float(label)))
    out = call_reference("classifier_step", inputs, {"lr": 0.1, "frozen": ["w_f", "b_f"]})
    assert set(out) == set(ops.get("classifier_step").outputs)
    assert out["loss"].shape == ()
    direct = classifier_step(x_emb, label, params, 0.1, SEED_FROZEN)
    assert out["loss"] == direct.loss
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(out[f"grads.{name}"], direct.grads[name])
        np.testing.assert_array_equal(out[f"params.{name}"], direct.params[name])
    out_empty = call_reference("classifier_step", inputs, {"lr": 0.1, "frozen": []})
    assert not np.array_equal(out_empty["params.w_f"], params["w_f"])

    pairs = [(x, y) for x, y, _ in dataset[:4]]
    tokens, lengths, labels = pack_dataset(pairs)
    start = init_classifier_params(EMBED_DIM, seed=PARAM_SEED)
    inputs = {"tokens": tokens, "lengths": lengths, "labels": labels, **{f"params.{k}": v for k, v in start.items()}}
    out = call_reference("classifier_train", inputs, {"lr": TRAIN_LR, "epochs": 3, "frozen": None})
    assert set(out) == set(ops.get("classifier_train").outputs)
    direct = train_classifier(pairs, start, TRAIN_LR, 3)
    np.testing.assert_array_equal(out["epoch_losses"], direct.epoch_losses)
    for name in PARAM_NAMES:
        np.testing.assert_array_equal(out[f"params.{name}"], direct.params[name])


# --------------------------------------------------------------------------------------------
# seed 003's bugs are real (the port tests rely on these facts)


def _seed003_weights(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Seed 003's AttentionWeights in reference layout: ``q'k / sqrt(length(q))``, length = d*n."""
    return softmax(q @ k.T / np.sqrt(q.size), axis=-1)


@pytest.mark.parametrize("n", [1, 2, 6])
def test_seed003_scale_is_wrong_for_more_than_one_token(n):
    x_emb, _, params = _random_case(20 + n, n, 4)
    fw = classifier_forward(x_emb, params)
    buggy = _seed003_weights(fw.q, fw.k)
    if n == 1:
        np.testing.assert_array_equal(buggy, fw.weights)
    else:
        assert np.abs(buggy - fw.weights).max() > 1e-3


def _seed003_backward(fw, label: int, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seed 003's ``backprop`` transcribed to NumPy in its feature-major layout (d x n), bugs kept.

    Fed the *correct* forward stages, so that only the backward pass differs. Returns the
    gradients in the reference layout (the seed's d_out x d_in matrices transposed).
    """
    X, Qf, Kf, Vf, Z = fw.x.T, fw.q.T, fw.k.T, fw.v.T, fw.z.T  # (d, n)
    alpha = fw.weights  # the seed's alpha is (n_q, n_k) too: alpha[row, :] = softmax(e[row, :])
    W = params["w_f"].T  # (c, d)
    p = fw.probs[:, None]
    y = np.eye(len(fw.probs))[:, [label]]
    n = Z.shape[1]
    dL_dp = p - y
    dL_df = dL_dp @ (np.ones((1, n)) / n)
    dL_dW = dL_df @ Z.T
    dL_db = dL_df.sum(axis=1)
    dL_dz = (dL_df.T @ W).T  # (d, n)
    alpha_linear = alpha.flatten(order="F")  # Julia's alpha[j]: column-major linear indexing
    jac = np.zeros((n, n))
    for kk in range(n):
        for j in range(n):
            jac[j, kk] = alpha_linear[j] * (1 - alpha_linear[j]) if j == kk else -alpha_linear[kk] * alpha_linear[j]
    dL_dalpha = dL_dz.T @ Vf  # (n, n)
    dL_de = dL_dalpha @ jac  # one Jacobian applied across all rows
    dL_dq = dL_de @ Kf.T  # (n, d), no 1/sqrt
    dL_dk = dL_de.T @ Qf.T  # (n, d), no 1/sqrt
    dL_dv = dL_dz @ alpha  # (d, n)
    return {
        "w_q": (dL_dq.T @ X.T).T,
        "b_q": dL_dq.T.sum(axis=1),
        "w_k": (dL_dk.T @ X.T).T,
        "b_k": dL_dk.T.sum(axis=1),
        "w_v": (dL_dv @ X.T).T,
        "b_v": dL_dv.sum(axis=1),
        "w_f": dL_dW.T,
        "b_f": dL_db,
    }


@pytest.mark.parametrize("n", [1, 2, 5])
def test_seed003_backward_is_wrong_for_queries_and_keys_only(n):
    x_emb, label, params = _random_case(30 + n, n, 4)
    fw = classifier_forward(x_emb, params)
    _, grads = classifier_loss_and_grads(x_emb, label, params)
    buggy = _seed003_backward(fw, label, params)
    for name in ("w_v", "b_v", "w_f", "b_f"):
        np.testing.assert_allclose(buggy[name], grads[name], rtol=1e-12, atol=1e-15, err_msg=name)
    for name in ("w_q", "b_q", "w_k", "b_k"):
        if n == 1:  # a single key: both are exactly zero
            np.testing.assert_array_equal(buggy[name], grads[name])
        else:
            scale = max(np.abs(grads[name]).max(), np.abs(grads["w_q"]).max())
            assert np.abs(buggy[name] - grads[name]).max() > 1e-2 * scale, name
