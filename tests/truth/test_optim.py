"""adamw_step's truth and bound rule (attention_ports/truth/optim.py): the values against an
independent exact computation (Fraction, mpmath), every correct formulation within the bound over
random draws (torch's own, the paper's, b^t by a running product or exp-log, ``1 - b`` rounded),
each porting bug outside it, and the rule following the unit roundoff it is given."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from attention_ports.judge.compare import compare
from attention_ports.spec.precision import FORMATS
from attention_ports.truth import engine, precision
from attention_ports.truth.exact import InputError

OPTION_NAMES = ("lr", "beta1", "beta2", "eps", "weight_decay")
DEFAULTS = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
Arrays = dict[str, np.ndarray]
Formulation = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


def _opts(options: dict) -> dict:
    return {k: float(options.get(k, DEFAULTS[k])) for k in OPTION_NAMES}


# --- correct formulations (float64 or float32 NumPy, the dtype of the arrays) -------------------


def textbook(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return p * (1 - lr * weight_decay) - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps), m, v


def torch_single_tensor(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.AdamW's _single_tensor_adam, operation by operation (its lerp's two branches)."""
    dt = p.dtype.type
    p = p * dt(1 - lr * weight_decay)  # param.mul_(1 - lr * wd): the scalar in double, then the tensor's type
    w = dt(1 - beta1)
    m = m + w * (g - m) if w < 0.5 else g - (g - m) * (dt(1) - w)  # exp_avg.lerp_(grad, 1 - beta1)
    v = v * dt(beta2) + dt(1 - beta2) * g * g  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1**t)
    denom = np.sqrt(v) / dt((1 - beta2**t) ** 0.5) + dt(eps)
    return p + dt(-step_size) * m / denom, m, v  # param.addcdiv_(exp_avg, denom, value=-step_size)


def _running_power(b, t):
    out = b * 0 + 1
    for _ in range(t):
        out = out * b
    return out


def paper_running_product(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    """Loshchilov and Hutter's p - lr (wd p + m_hat / (sqrt(v_hat) + eps)), b^t as a running product."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g**2
    m_hat = m / (1 - _running_power(beta1, t))
    v_hat = v / (1 - _running_power(beta2, t))
    return p - lr * (weight_decay * p + m_hat / (np.sqrt(v_hat) + eps)), m, v


def lerp_exp_log(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    """Both moments by lerp (1 - b rounded as computed), b^t as exp(t log b), x * rsqrt-style."""
    w1, w2 = 1 - beta1, 1 - beta2
    m = m + w1 * (g - m)
    v = v + w2 * (g * g - v)
    c1 = 1 - (math.exp(t * math.log(beta1)) if beta1 > 0 else 0.0)
    c2 = 1 - (math.exp(t * math.log(beta2)) if beta2 > 0 else 0.0)
    denom = np.sqrt(v) * (1 / math.sqrt(c2)) + eps
    return p - lr * weight_decay * p - (lr / c1) * m * (1 / denom), m, v


CORRECT: tuple[Formulation, ...] = (textbook, torch_single_tensor, paper_running_product, lerp_exp_log)


# --- bugs ports make (the kit's mutants are these, in R and Julia) -------------------------------


def no_bias_correction(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return p * (1 - lr * weight_decay) - lr * m / (np.sqrt(v) + eps), m, v


def l2_decay(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return textbook(p, g + weight_decay * p, m, v, t, lr, beta1, beta2, eps, 0.0)


def eps_inside_sqrt(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return p * (1 - lr * weight_decay) - lr * (m / (1 - beta1**t)) / np.sqrt(v / (1 - beta2**t) + eps), m, v


def step_plus_one(p, g, m, v, t, **options):
    return textbook(p, g, m, v, t + 1, **options)


def step_minus_one(p, g, m, v, t, **options):
    with np.errstate(divide="ignore", invalid="ignore"):  # t - 1 = 0: the correction divides by 0
        return textbook(p, g, m, v, t - 1, **options)


def betas_swapped(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return textbook(p, g, m, v, t, lr, beta2, beta1, eps, weight_decay)


def abs_grad(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * np.abs(g)
    return p * (1 - lr * weight_decay) - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps), m, v


BUGS: tuple[Formulation, ...] = (
    no_bias_correction,
    l2_decay,
    eps_inside_sqrt,
    step_plus_one,
    step_minus_one,
    betas_swapped,
    abs_grad,
)


# --- draws ---------------------------------------------------------------------------------------


def draws(count: int, seed: int) -> list[tuple[Arrays, dict]]:
    """Random cases over the regimes the rule covers: fresh or earlier moments, gradients across
    magnitudes, every option drawn or absent, betas below 1/2 (where 1 - b rounds and torch's lerp
    takes its other branch), early and late steps."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)))
        g = rng.standard_normal(shape) * 10.0 ** rng.integers(-9, 3, shape)
        p = rng.standard_normal(shape)
        if rng.random() < 0.3:
            m, v = np.zeros(shape), np.zeros(shape)
        else:
            m = rng.standard_normal(shape) * np.abs(g)
            v = rng.uniform(0, 2, shape) * g * g
        options: dict = {"step": int(rng.choice([1, 2, 3, 7, 100, 1000]))}
        for name, choices in (
            ("lr", [1e-3, 0.01, 0.1]),
            ("beta1", [0.0, 0.3, 0.45, 0.9]),
            ("beta2", [0.3, 0.99, 0.999]),
            ("eps", [1e-8, 1e-6, 1e-12]),
            ("weight_decay", [0.0, 0.01, 0.5]),
        ):
            if rng.random() < 0.6:
                options[name] = float(rng.choice(choices))
        out.append(({"param": p, "grad": g, "m": m, "v": v}, options))
    return out


DRAWS = draws(40, 18)
TRUTHS = [engine.compute("adamw_step", inputs, options) for inputs, options in DRAWS]


def _run(form: Formulation, inputs: Arrays, options: dict, dtype=np.float64):
    a = {k: inputs[k].astype(dtype) for k in ("param", "grad", "m", "v")}
    o = _opts(options)
    return dict(
        zip(("param", "m", "v"), form(a["param"], a["grad"], a["m"], a["v"], options["step"], **o), strict=True)
    )


def _failures(form: Formulation) -> list[str]:
    out = []
    for i, ((inputs, options), truth) in enumerate(zip(DRAWS, TRUTHS, strict=True)):
        got = _run(form, inputs, options)
        for name, (expected, bound) in truth.items():
            res = compare(expected, np.asarray(got[name], dtype=np.float64), bound)
            if not res.ok:
                out.append(f"draw {i} {name}: {res.describe(f'draw{i}', name)}")
    return out


def test_values_match_an_exact_computation_in_fraction_and_mpmath() -> None:
    inputs = {
        "param": np.array([[0.5, -1.25, 3.0]]),
        "grad": np.array([[1e-8, -40.0, 0.0]]),
        "m": np.array([[0.0, 10.0, 0.25]]),
        "v": np.array([[1e-16, 900.0, 0.0]]),
    }
    options = {"step": 2, "lr": 0.1, "weight_decay": 0.5}
    truth = engine.compute("adamw_step", inputs, options)
    o = _opts(options)
    b1, b2, lr, eps, wd = (Fraction(o[k]) for k in ("beta1", "beta2", "lr", "eps", "weight_decay"))
    mpmath.mp.prec = 300
    for j in range(3):
        p, g, m, v = (Fraction(float(inputs[k][0, j])) for k in ("param", "grad", "m", "v"))
        m_new = b1 * m + (1 - b1) * g  # exact rationals: M and V are correctly rounded from these
        v_new = b2 * v + (1 - b2) * g * g
        assert truth["m"][0][0, j] == float(m_new) and truth["v"][0][0, j] == float(v_new)
        c1, c2 = 1 - b1**2, 1 - b2**2
        q = mpmath.sqrt(mpmath.mpf(v_new.numerator) / v_new.denominator / (mpmath.mpf(c2.numerator) / c2.denominator))
        frac = lambda f: mpmath.mpf(f.numerator) / f.denominator  # noqa: E731
        step = frac(lr) * frac(m_new) / (frac(c1) * (q + frac(eps)))
        exact = frac(p) * (1 - frac(lr) * frac(wd)) - step
        assert truth["param"][0][0, j] == float(exact), j


@pytest.mark.parametrize("form", CORRECT, ids=lambda f: f.__name__)
def test_every_correct_formulation_is_within_the_bound_on_every_draw(form: Formulation) -> None:
    assert _failures(form) == []


@pytest.mark.parametrize("form", BUGS, ids=lambda f: f.__name__)
def test_every_porting_bug_fails_draws(form: Formulation) -> None:
    failing_draws = {line.split()[1] for line in _failures(form)}
    assert len(failing_draws) >= 5, f"{form.__name__} fails only draws {sorted(failing_draws)}"


def test_the_float32_rule_admits_torch_in_float32_and_not_a_bug() -> None:
    """The same rule at float32's constants (truth/precision.py): torch's formulation computed in
    float32 from float32 inputs passes; a missing bias correction still fails."""
    fmt = FORMATS["float32"]
    fails = {"torch": 0, "bug": 0}
    for inputs, options in DRAWS[:20]:
        rounded = {k: a.astype(np.float32).astype(np.float64) for k, a in inputs.items()}
        opts = {k: (float(np.float32(x)) if isinstance(x, float) else x) for k, x in options.items()}
        with precision.rules(fmt):
            truth = engine.compute("adamw_step", rounded, opts)
        for key, form in (("torch", torch_single_tensor), ("bug", no_bias_correction)):
            got = _run(form, rounded, opts, np.float32)
            fails[key] += any(not compare(e, np.asarray(got[n], dtype=np.float64), b).ok for n, (e, b) in truth.items())
    assert fails["torch"] == 0 and fails["bug"] >= 5, fails


def test_the_bound_scales_with_the_unit_roundoff() -> None:
    inputs, options = DRAWS[1]
    with precision.rules(FORMATS["float32"]):
        b32 = engine.compute("adamw_step", inputs, options)["param"][1]
    b64 = TRUTHS[1]["param"][1]
    assert np.all(b32 > 2.0**20 * b64)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"options": {"step": 0}}, "step must be an integer >= 1"),
        ({"options": {"step": 1, "beta2": 1.0}}, "beta2 must be a finite number in"),
        ({"inputs": {"v": -np.ones((1, 2))}}, "v (the second moment"),
        ({"inputs": {"grad": np.ones((2, 1))}}, "one shape"),
    ],
)
def test_bad_input_is_named(change: dict, message: str) -> None:
    inputs = {"param": np.ones((1, 2)), "grad": np.ones((1, 2)), "m": np.zeros((1, 2)), "v": np.zeros((1, 2))}
    inputs.update(change.get("inputs", {}))
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        engine.compute("adamw_step", inputs, change.get("options", {"step": 1}))
