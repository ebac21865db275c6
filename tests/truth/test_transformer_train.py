"""gpt_train's truth and carried bound (attention_ports/truth/transformer_train.py): the first step's
loss is gpt_grads' exact loss, the carried AdamW rule holds every update computed in float64 from
inputs anywhere in their balls (b_k's regime among them: an exact zero gradient whose computed one
is noise), and a trajectory that leaves first order is refused, not estimated. Seconds."""

from __future__ import annotations

import numpy as np
import pytest
from flint import arb, ctx

from attention_ports.core import paths
from attention_ports.spec import catalogue
from attention_ports.truth import bounds, engine
from attention_ports.truth import transformer_train as tt
from attention_ports.truth.exact import BOUND_PREC


def _case(case_id: str) -> tuple[dict[str, np.ndarray], dict]:
    cases = catalogue.load_catalogue(paths.FIXTURES / "catalogue.toml").cases
    case = next(c for c in cases if c.id == case_id)
    return catalogue.build_inputs(case), dict(case.options)


def test_each_loss_is_the_exact_loss_before_its_step() -> None:
    inputs, options = _case("gpt_train_one_token_decay")
    train = engine.compute("gpt_train", inputs, options)
    first = engine.compute("gpt_grads", inputs, {k: options[k] for k in ("num_heads",)})
    assert train["losses"][0][0] == first["loss"][0]  # both the exact value, correctly rounded
    lr_zero = engine.compute("gpt_train", *_case("gpt_train_lr_zero"))
    assert lr_zero["losses"][0][0] == lr_zero["losses"][0][1]  # lr = 0: the same parameters twice


def _adamw(p, g, m, v, t, lr, b1, b2, eps, wd):
    """torch's single-tensor step, in float64."""
    p = p * (1 - lr * wd)
    m = m + (g - m) * (1 - b1)
    v = v * b2 + g * g * (1 - b2)
    denom = np.sqrt(v) / np.sqrt(1 - b2**t) + eps
    return p - (lr / (1 - b1**t)) * m / denom, m, v


@pytest.mark.parametrize("t", [1, 2, 3])
def test_the_carried_update_holds_every_input_in_its_balls(t: int) -> None:
    rng = np.random.default_rng(t)
    opts = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.1}
    old = ctx.prec
    ctx.prec = BOUND_PREC
    try:
        o = tt._corrections(tt._options({"steps": 1, **opts})[1], t)
        for k in range(60):
            p, g = rng.normal(), rng.normal() * 10.0 ** rng.integers(-9, 0)
            m, v = (0.0, 0.0) if t == 1 else (rng.normal() * 0.1, abs(rng.normal()) * 0.01)
            if k % 5 == 0:
                g, m, v = 0.0, 0.0, 0.0  # b_k: exactly 0, computed as noise within e_g
            errs = [abs(p) * 1e-12, max(abs(g) * 1e-6, 1e-17), abs(m) * 1e-9, v * 1e-9]
            e_p, e_m, e_v = tt.carried_update(*map(arb, (p, g, m, v, *errs)), o)
            want_p, want_m, want_v = (float(x.mid()) for x in tt._update(arb(p), arb(g), arb(m), arb(v), o))
            for _ in range(20):
                moved = [x + e * rng.uniform(-1, 1) for x, e in zip((p, g, m, v), errs, strict=True)]
                moved[3] = max(moved[3], 0.0)
                got = _adamw(*moved, t, opts["lr"], 0.9, 0.999, 1e-8, opts["weight_decay"])
                for value, want, bound in zip(got, (want_p, want_m, want_v), (e_p, e_m, e_v), strict=True):
                    assert abs(value - want) <= float(bound.upper()) * (1 + 1e-9) + 1e-300, (t, k, value, want)
    finally:
        ctx.prec = old


def test_a_trajectory_that_leaves_first_order_is_refused() -> None:
    # Two blocks, six tokens: the third step's forward runs at parameters whose carried error (lr
    # times step 2's gradient bound, Adam's step depending on its gradient from step 2 on) puts a
    # softmax row's logit error bound at 1.1e-6, past float64's guard 2^-20 (measured; one block of
    # five tokens, gpt_train_tanh_plain_adam, certifies four steps at lr 0.005).
    inputs, options = _case("gpt_train_two_blocks_repeated")
    with pytest.raises(bounds.BoundError):
        engine.compute_detailed("gpt_train", inputs, {**options, "steps": 3}, memo=False)
