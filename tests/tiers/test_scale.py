"""The scale tier (attention_ports/tiers/scale.py, scale_bounds.py), on small sizes.

What must hold:
- the every-row float64 bounds are never below the arb bounds of the same rows, and at most
  2^-7 above them (the fixtures' rounding to 8 significant bits), for every attention operation,
  masks, biases and a query with no key included;
- the tier passes correct implementations (ours, torch, R, Julia, really run), and fails a port
  that is wrong only on a row the exact truth does not sample (the every-row comparison catches
  it) and a port wrong everywhere (both checks catch it);
- the decoder block's truth on sampled rows is the catalogue's whole-block truth on those rows,
  bit for bit, and a block 1e-9 off (relative) fails its sampled rows;
- splitting a call into blocks of query rows changes nothing; a call that would not fit in memory
  is skipped and fails the run instead of running.
The L = 512 ... 16384 cases themselves run in `attention-ports verify --tier scale`, not here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attention_ports.reference as reference
import numpy as np
import pytest

from attention_ports.runtimes.julia.adapter import PORT as JULIA_PORT
from attention_ports.spec.catalogue import build_inputs, load_catalogue
from attention_ports.tiers import scale
from attention_ports.truth import engine as truth
from attention_ports.truth import scale_bounds

RNG = np.random.default_rng(7)


def _inputs(
    op: str,
    n: int,
    d: int,
    *,
    mask: str | None = None,
    bias: bool = False,
    dead: bool = False,
    offset: float = 0.0,
    rng: np.random.Generator = RNG,
):
    x = [rng.standard_normal((n, d)) for _ in range(3)]
    # offset: a common part of the keys, which makes every score of a row large (hundreds) with a
    # spread of a few units: the regime of the scores' relative perturbation and of a log-domain
    # normaliser's rounding (bounds.C_IN, C_LSE)
    x[1] = x[1] + offset
    opts: dict = {}
    if op == "scaled_dot_product_attention":
        inputs = {"q": x[0] * 3, "k": x[1], "v": x[2]}
    elif op == "self_attention":
        inputs = {"x": x[0], **{f"w_{s}": rng.standard_normal((d, d)) / 2 for s in "qkv"}}
        if bias:
            inputs.update({f"b_{s}": rng.standard_normal(d) for s in "qkv"})
    else:
        inputs = {"query": x[0], "key": x[1], "value": x[2], **{f"w_{s}": rng.standard_normal((d, d)) for s in "qkvo"}}
        if bias:
            inputs.update({f"b_{s}": rng.standard_normal(d) for s in "qkvo"})
        opts["num_heads"] = 2
    if mask is not None:
        m = reference.causal_mask(n, n)
        if dead:
            m = m.copy()
            m[3] = False
        inputs["mask"] = reference.as_additive_mask(m, m.shape) if mask == "additive" else m
    return inputs, opts


CASES = [
    ("scaled_dot_product_attention", dict()),
    ("scaled_dot_product_attention", dict(mask="bool", dead=True)),
    ("self_attention", dict(mask="additive", bias=True)),
    ("self_attention", dict()),
    ("multi_head_attention", dict(mask="bool", bias=True)),
    ("multi_head_attention", dict(dead=True, mask="additive")),
    ("scaled_dot_product_attention", dict(offset=60.0)),
    ("self_attention", dict(mask="bool", offset=8.0)),
]


@pytest.mark.parametrize(("op", "kind"), CASES, ids=[f"{op}-{'-'.join(k)}" for op, k in CASES])
def test_every_row_bounds_equal_the_exact_ones_up_to_their_rounding(op: str, kind: dict) -> None:
    inputs, opts = _inputs(op, 24, 4, **kind)
    rows = [0, 3, 11, 23]
    mine = scale_bounds.compute(op, inputs, opts, rows=rows)
    exact = truth.compute(op, inputs, opts, rows=rows)
    for name, bound in mine.full.items():
        expected = exact[name][1]
        got = bound if expected.shape == bound.shape else bound[rows]
        assert np.all(got >= expected), name
        assert np.all(got <= expected * (1 + 2.0**-7)), name
    w_est, w_bound = mine.weights
    assert np.all(w_bound >= exact["weights"][1]) and np.all(w_bound <= exact["weights"][1] * (1 + 2.0**-7))
    # this module's own weights are a correct float64 result: within the bound of the exact ones
    assert np.all(np.abs(w_est - exact["weights"][0]) <= exact["weights"][1])


@pytest.mark.parametrize(("op", "kind"), CASES, ids=[f"{op}-{'-'.join(k)}" for op, k in CASES])
def test_the_bounded_spread_of_large_calls_is_an_upper_bound_and_close(
    op: str, kind: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond EXACT_SPREAD terms the output's softmax spread is bounded through CENTRES centres
    (scale_bounds._spread): never below the rule evaluated term by term, and close to it (measured
    at L = 256 with 8 centres: median 1.03 to 2.0, 99th percentile 1.2 to 6.4, worst 3.9 to 12.6;
    asserted with room for other draws). Inputs from a seed of their own, not the module's shared
    generator, so that the test order (xdist) cannot change them: measured on these, median 1.05
    to 2.19 and worst 3.0 to 14.5, under every OPENBLAS_CORETYPE."""
    inputs, opts = _inputs(op, 96, 16, **kind, rng=np.random.default_rng(2026))
    monkeypatch.setattr(scale_bounds, "EXACT_SPREAD", 1 << 40)
    exact_rule = scale_bounds.compute(op, inputs, opts).full["output"]
    monkeypatch.setattr(scale_bounds, "EXACT_SPREAD", 0)
    bounded = scale_bounds.compute(op, inputs, opts).full["output"]
    ratio = bounded / exact_rule
    assert ratio.min() >= 1.0
    assert np.median(ratio) <= 2.5 and ratio.max() <= 32


def test_the_scale_catalogue_and_its_sampled_rows() -> None:
    cases = scale.load_cases()
    assert len(cases) == 21
    attention = [c for c in cases if c.op != "decoder_block"]
    assert {(c.op, scale.length(c), "mask" in c.inputs) for c in attention} == {
        (op, n, m)
        for op in ("scaled_dot_product_attention", "self_attention", "multi_head_attention")
        for n in (1024, 4096, 16384)
        for m in (False, True)
    }
    blocks = [c for c in cases if c.op == "decoder_block"]
    assert {scale.length(c) for c in blocks} == {512, 1024, 2048}
    assert all(c.inputs["x"]["normal"][1] == 512 and c.options["num_heads"] == 8 for c in blocks)
    rows = scale.sample_rows(blocks[0])
    assert len(rows) == scale.MAX_ROWS["decoder_block"] and rows[0] == 0 and rows[-1] == scale.length(blocks[0]) - 1
    for case in cases[:3]:
        rows = scale.sample_rows(case)
        assert len(rows) == scale.ROWS == len(set(rows)) and rows == sorted(rows)
        assert rows[0] == 0 and rows[-1] == scale.length(case) - 1
        assert rows == scale.sample_rows(case)  # from the case's own seed
        w = scale.weight_rows(rows)
        assert len(w) == scale.WEIGHT_ROWS and set(w) <= set(rows) and w[0] == 0 and w[-1] == rows[-1]


def _block_inputs(n: int, d: int, d_ff: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    inputs = {"x": rng.standard_normal((n, d))}
    for norm in ("ln1", "ln2"):
        inputs[f"params.{norm}_w"] = 1 + 0.2 * rng.standard_normal(d)
        inputs[f"params.{norm}_b"] = 0.2 * rng.standard_normal(d)
    for s in "qkvo":
        inputs[f"params.w_{s}"] = rng.standard_normal((d, d)) / np.sqrt(d)
        inputs[f"params.b_{s}"] = 0.2 * rng.standard_normal(d)
    inputs["params.w_1"], inputs["params.b_1"] = rng.standard_normal((d, d_ff)) / np.sqrt(d), rng.standard_normal(d_ff)
    inputs["params.w_2"], inputs["params.b_2"] = rng.standard_normal((d_ff, d)) / np.sqrt(d_ff), rng.standard_normal(d)
    return inputs


@pytest.mark.parametrize(("n", "d", "d_ff", "heads"), [(24, 8, 32, 2), (12, 16, 24, 4)])
def test_the_decoder_blocks_truth_on_rows_is_the_whole_blocks_on_those_rows(
    n: int, d: int, d_ff: int, heads: int
) -> None:
    """rows= of decoder_block (truth/transformer.py, block_rows_t): the same values and the same
    bounds, bit for bit, as the catalogue's whole block on those rows (its feed-forward's Jacobian
    taken one row at a time is the whole one's diagonal blocks; n d <= MAX_DIRECTIONS here, so the
    whole block carries its error through the Jacobian too)."""
    inputs = _block_inputs(n, d, d_ff, np.random.default_rng(n))
    opts = {"num_heads": heads, "approximate": "tanh"}
    rows = [0, 5, n - 1]
    whole = truth.compute("decoder_block", inputs, opts)["y"]
    sub = truth.compute("decoder_block", inputs, opts, rows=rows)["y"]
    assert np.array_equal(sub[0], whole[0][rows]) and np.array_equal(sub[1], whole[1][rows])
    with pytest.raises(truth.InputError, match="valid query indices"):
        truth.compute("decoder_block", inputs, opts, rows=[n])


def test_truth_rounds_only_the_outputs_asked_for() -> None:
    inputs, opts = _inputs("self_attention", 10, 3)
    got = truth.compute("self_attention", inputs, opts, rows=[1, 2], outputs=["q", "output"])
    assert set(got) == {"q", "output"} and got["q"][0].shape == (2, 3)
    full = truth.compute("self_attention", inputs, opts, rows=[1, 2])
    assert np.array_equal(got["output"][0], full["output"][0]) and np.array_equal(got["q"][1], full["q"][1])
    with pytest.raises(truth.InputError, match="no outputs"):
        truth.compute("self_attention", inputs, opts, outputs=["nothing"])


# --- the tier end to end, on a small catalogue ------------------------------------------------------
SMALL = """
format_version = 2
seed = 99

[[case]]
id = "small_sdpa_causal"
op = "scaled_dot_product_attention"
reason = "the tier's machinery on a small SDPA with a causal mask"
flags = ["random", "mask"]
inputs.q = {normal = [48, 8]}
inputs.k = {normal = [48, 8]}
inputs.v = {normal = [48, 8]}
inputs.mask = {causal = [48, 48]}

[[case]]
id = "small_mha"
op = "multi_head_attention"
reason = "the tier's machinery on a small multi-head attention"
flags = ["random"]
inputs.query = {normal = [40, 8]}
inputs.key = {normal = [40, 8]}
inputs.value = {normal = [40, 8]}
inputs.w_q = {normal = [8, 8], scale = 0.3}
inputs.w_k = {normal = [8, 8], scale = 0.3}
inputs.w_v = {normal = [8, 8], scale = 0.3}
inputs.w_o = {normal = [8, 8], scale = 0.3}
options.num_heads = 2

[[case]]
id = "small_self"
op = "self_attention"
reason = "the tier's machinery on a small self-attention"
flags = ["random"]
inputs.x = {normal = [32, 8]}
inputs.w_q = {normal = [8, 8], scale = 0.3}
inputs.w_k = {normal = [8, 8], scale = 0.3}
inputs.w_v = {normal = [8, 8], scale = 0.3}

[[case]]
id = "small_block"
op = "decoder_block"
reason = "the tier's machinery on a small decoder block (2 heads, causal, tanh gelu)"
flags = ["random", "mask", "bias", "non_square"]
inputs.x = {normal = [24, 8]}
inputs."params.ln1_w" = {normal = [8], scale = 0.2, offset = 1.0}
inputs."params.ln1_b" = {normal = [8], scale = 0.2}
inputs."params.w_q" = {normal = [8, 8], scale = 0.5}
inputs."params.b_q" = {normal = [8], scale = 0.2}
inputs."params.w_k" = {normal = [8, 8], scale = 0.5}
inputs."params.b_k" = {normal = [8], scale = 0.2}
inputs."params.w_v" = {normal = [8, 8], scale = 0.5}
inputs."params.b_v" = {normal = [8], scale = 0.2}
inputs."params.w_o" = {normal = [8, 8], scale = 0.3}
inputs."params.b_o" = {normal = [8], scale = 0.2}
inputs."params.ln2_w" = {normal = [8], scale = 0.2, offset = 1.0}
inputs."params.ln2_b" = {normal = [8], scale = 0.2}
inputs."params.w_1" = {normal = [8, 16], scale = 0.4}
inputs."params.b_1" = {normal = [16], scale = 0.2}
inputs."params.w_2" = {normal = [16, 8], scale = 0.3}
inputs."params.b_2" = {normal = [8], scale = 0.2}
options.num_heads = 2
options.approximate = "tanh"
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The small catalogue, with a truth cache of its own shared by this module's tests (the pool
    processes that fill it read the folder from the environment)."""
    folder = tmp_path_factory.mktemp("scale")
    before = os.environ.get(scale.CACHE_ENV)
    os.environ[scale.CACHE_ENV] = str(folder / "cache")
    path = folder / "small.toml"
    path.write_text(SMALL)
    yield path
    if before is None:
        del os.environ[scale.CACHE_ENV]
    else:
        os.environ[scale.CACHE_ENV] = before


def _run(small: Path, impls: list[str], ports: dict | None = None, **kwargs) -> scale.Report:
    return scale.run_tier(impls, ports, catalogue=small, n_rows=6, workers=1, **kwargs)


def _status(report: scale.Report) -> dict[tuple[str, str], str]:
    return {(v.impl, v.case): v.status for v in report.verdicts}


def test_correct_implementations_agree_and_blocks_keep_every_row_in_place(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _run(small, ["reference", "torch", "r", "julia"], required={"reference", "torch", "r", "julia"})
    assert set(_status(report).values()) == {"pass"}, [m for v in report.verdicts for m in v.messages]
    assert all(v.rows_over_bound is not None for v in report.verdicts)
    # the decoder block is judged on its sampled rows only (no every-row bounds)
    assert all((v.full_over_bound is None) == (v.case == "small_block") for v in report.verdicts)
    assert "exact rows each" in scale.render(report)

    monkeypatch.setattr(scale, "MAX_WEIGHTS_ELEMENTS", 2 * 40 * 7)  # MHA in blocks of 7 query rows
    blocked = _run(small, ["reference", "julia"])
    assert set(_status(blocked).values()) == {"pass"}
    assert all(s == 0 for s in blocked.truth_seconds.values())  # the truth came from the cache
    mha = {r.impl: r for name in ("reference", "julia") for r in blocked.runs[name] if r.case == "small_mha"}
    assert mha["julia"].calls == 6
    whole = next(r for r in report.runs["julia"] if r.case == "small_mha")
    # Blocks put every row back where it belongs: the blocked and the whole result agree within the
    # tier's pairwise rule (2B). Not bit for bit: a product over 7 rows may take another BLAS kernel
    # than one over 40 (on AMD EPYC, OpenBLAS's does: 44 of 320 elements differ by ~1e-16).
    case = next(c for c in scale.load_cases(["small_mha"], small))
    inputs = build_inputs(case)
    bounds, cached = scale.every_row_bounds(case, inputs, scale.sample_rows(case, 6), use_cache=True)
    assert cached
    whole.impl = "julia (whole)"
    agree, _, first = scale.judge_pairs([whole, mha["julia"]], bounds.full)[(whole.impl, "julia")]
    assert agree, first


def _julia_port(tmp_path: Path, name: str, edit: tuple[str, str]) -> Path:
    src = (JULIA_PORT / "attention.jl").read_text()
    assert edit[0] in src
    path = tmp_path / name
    path.write_text(src.replace(*edit))
    return path


def test_a_bug_on_rows_the_truth_does_not_sample_is_caught_between_implementations(small: Path, tmp_path: Path) -> None:
    case = load_catalogue(small).cases[0]
    rows = scale.sample_rows(case, 6)
    unsampled = next(i for i in range(48) if i not in rows) + 1  # a Julia (1-based) query column
    bug = _julia_port(
        tmp_path,
        "one_row.jl",
        (
            "    output = v * weights                                     # (d_v, n_k) * (n_k, n_q) = (d_v, n_q)\n",
            "    output = v * weights\n"
            f"    size(output, 2) >= {unsampled} && (output[:, {unsampled}] .*= 1 + 1e-12)  # a wrong row\n",
        ),
    )
    report = _run(small, ["reference", "torch", "julia"], {"julia": bug}, case_globs=["small_sdpa_causal"])
    status = _status(report)
    assert status[("julia", "small_sdpa_causal")] == "fail"
    assert status[("reference", "small_sdpa_causal")] == status[("torch", "small_sdpa_causal")] == "pass"
    verdict = next(v for v in report.verdicts if v.impl == "julia")
    assert verdict.rows_over_bound is not None and verdict.rows_over_bound <= 1  # the sampled rows are right
    assert "disagrees with reference, torch on every-row outputs beyond 2B" in "\n".join(verdict.messages)


def test_a_port_wrong_everywhere_fails_both_checks(small: Path, tmp_path: Path) -> None:
    bug = _julia_port(
        tmp_path,
        "scaled.jl",
        (
            "s = scale === nothing ? inv(sqrt(float(eltype(q))(d_k)))",
            "s = scale === nothing ? inv(float(eltype(q))(d_k))",
        ),
    )
    report = _run(small, ["reference", "torch", "julia"], {"julia": bug}, case_globs=["small_sdpa_causal"])
    verdict = next(v for v in report.verdicts if v.impl == "julia")
    assert verdict.status == "fail" and verdict.rows_over_bound > 1
    text = "\n".join(verdict.messages)
    assert "(sampled rows, exact)" in text and "every-row outputs beyond 2B" in text


def test_a_decoder_block_off_by_1e9_relative_fails_its_sampled_rows(small: Path) -> None:
    """The decoder block has no every-row comparison: its sampled rows' exact truth alone catches a
    1e-9 relative error (the reference's real output, scaled)."""
    report = _run(small, ["reference"], case_globs=["small_block"])
    (run,) = report.runs["reference"]
    (case,) = scale.load_cases(["small_block"], small)
    rows = scale.sample_rows(case, 6)
    exact = scale.load_truth(case, build_inputs(case), rows)
    ok, worst, _ = scale.judge_rows(run, exact, rows, None)
    assert ok and worst is not None and worst <= 1
    run.rows["y"] = run.rows["y"] * (1 + 1e-9)
    ok, worst, messages = scale.judge_rows(run, exact, rows, None)
    assert not ok and worst is not None and worst > 1
    assert "y (sampled rows, exact)" in messages[0]


def test_the_decoder_block_is_left_out_at_float32_and_says_why(small: Path) -> None:
    from attention_ports.fixtures.store import FixtureError
    from attention_ports.spec import precision

    said: list[str] = []
    with pytest.raises(FixtureError, match="first-order guard"):
        _run(small, ["reference"], case_globs=["small_block"], fmt=precision.FORMATS["float32"], say=said.append)
    assert said == [f"decoder_block: not at float32 ({scale.FLOAT64_ONLY['decoder_block']})"]


def test_a_call_that_would_not_fit_in_memory_is_skipped_and_fails(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "mem_available", lambda: 1000)
    report = _run(small, ["reference"], case_globs=["small_self"])
    (verdict,) = report.verdicts
    assert verdict.status == "fail" and "GiB available" in verdict.messages[0]


def test_workers_get_the_scale_tier_call_limit_unless_the_user_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from attention_ports.runtimes.julia import worker as julia_worker
    from attention_ports.runtimes.r import adapter as r_adapter

    monkeypatch.delenv("ATTENTION_PORTS_R_TIMEOUT", raising=False)
    monkeypatch.setenv("ATTENTION_PORTS_JULIA_TIMEOUT", "77")
    with scale._scale_timeouts():
        assert r_adapter.limits().timeout == scale.SCALE_CALL_TIMEOUT
        assert julia_worker.limits().timeout == 77
    assert r_adapter.limits().timeout == r_adapter.DEFAULT_LIMITS["timeout"]
    assert julia_worker.limits().timeout == 77


def test_the_scale_tier_writes_every_report_format_and_its_shards_merge(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``verify --tier scale`` goes through the one pipeline: JSON format 5, JUnit, HTML, markdown;
    two shards merged hold the whole run's results."""
    import json
    import xml.etree.ElementTree as ET

    from attention_ports import cli
    from attention_ports.pipeline import verify as pipeline

    monkeypatch.setattr(scale, "CATALOGUE", small)
    monkeypatch.setattr(scale, "ROWS", 6)
    files = {ext: tmp_path / f"scale.{ext}" for ext in ("json", "xml", "html", "md")}
    run = ["verify", "--tier", "scale", "--impl", "reference", "--impl", "torch"]
    targets = ["--json", files["json"], "--junit", files["xml"], "--html", files["html"], "--markdown", files["md"]]
    assert cli.main([*run, *map(str, targets)]) == 0
    out = capsys.readouterr().out
    assert "6 exact rows each" in out and "8 of 8 (implementation, case) pairs agree" in out
    assert "PASS: all 8 implementation x case results agree with the truth" in out
    doc = json.loads(files["json"].read_text())
    assert doc["meta"]["tier"] == "scale" and doc["meta"]["scale"]["rows_per_case"] == 6
    assert {r["output"] for r in doc["results"]} == {pipeline.SCALE_ROWS, pipeline.SCALE_PAIRS}
    assert all(0 <= r["err_over_bound"] <= 1 for r in doc["results"])
    assert all(c["extra"]["rows_err_over_bound"] <= 1 and c["extra"]["calls"] >= 1 for c in doc["cases"])
    assert {c["extra"]["sampled_rows"] for c in doc["cases"]} == {6}
    suite = ET.parse(files["xml"]).getroot()
    assert suite.get("tests") == "8" and suite.get("failures") == "0"
    assert "PASS: all 8" in files["html"].read_text() and "PASS" in files["md"].read_text()

    for k in (1, 2):
        assert cli.main([*run, "--shard", f"{k}/2", "--json", str(tmp_path / f"s{k}.json")]) == 0
    merged = tmp_path / "merged.json"
    assert cli.main(["merge-reports", str(tmp_path / "s1.json"), str(tmp_path / "s2.json"), "--json", str(merged)]) == 0
    got = json.loads(merged.read_text())
    for key in ("results", "summary", "agreement"):  # cases[].extra holds each run's own timings
        assert got[key] == doc[key], key


def test_a_scale_failure_is_a_failing_junit_testcase(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import xml.etree.ElementTree as ET

    from attention_ports import cli

    monkeypatch.setattr(scale, "CATALOGUE", small)
    monkeypatch.setattr(scale, "ROWS", 6)
    monkeypatch.setattr(scale, "mem_available", lambda: 1000)
    xml = tmp_path / "scale.xml"
    assert (
        cli.main(["verify", "--tier", "scale", "--impl", "reference", "--case", "small_self", "--junit", str(xml)]) == 1
    )
    assert "FAIL: 1 of 1 cases fail" in capsys.readouterr().out
    (failure,) = ET.parse(xml).getroot().iter("failure")
    assert "GiB available" in failure.get("message")
