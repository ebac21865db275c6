"""The mutation kit proves the suite's catch power on our own ports (issue 9, item 3; C: issue 27, item 6).

Every realistic single bug planted in our R, Julia or C port (attention_ports/tools/mutants.toml) must fail
or error on at least two fixture cases (and, where a mutant names operations in ``killed_in``, on
two cases of each), and every control (a 1e-14 perturbation, mathematically equivalent edits) must
pass every case. Real R and Julia through the ordinary ``--port`` path, no mocks. Both languages
run in one pass so R (in this process) overlaps the Julia workers; each mutant runs the cases of
the operation nearest to its edit (scope "home"; ``attention-ports mutation`` prints the kill
matrix over every operation the edit reaches). Without R or Julia the run skips locally and fails under CI=true.
The C kit's mutants are copies of our C ports (the C kit's walkthrough port, the GPT port in
llm.c's structure), each built (-O0) and run as a command (--port c=...): realistic C bugs
(row/column-major, strides, integer division, float accumulators, off-by-one bounds, accumulators
not reset, a causal mask off by one, skipped biases, wrong gradients) and controls (blocked
matmuls, a fused online-softmax attention kernel, other summation orders).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
import tomllib

from attention_ports.core import paths
from attention_ports.fixtures import store as fixtures
from attention_ports.runtimes import registry
from attention_ports.runtimes.impl import ImplementationUnavailable
from attention_ports.spec import ops
from attention_ports.spec import precision as formats
from attention_ports.tools import mutation
from tests.conftest import require

# Every kind of porting mistake issue 9 names, in both languages.
REQUIRED_CLASSES = {
    "softmax axis",
    "stability",
    "transpose",
    "layout",
    "scale",
    "mask order/sign",
    "masked query",
    "causal off-by-one",
    "head packing/order",
    "bias placement",
    "w_o",
    "gradient sign/scale",
    "frozen handling",
    "label base",
    "pooling",
    "trajectory averaging",
    "float32 rounding",
    "1e-9 perturbation",
}
MIN_BUGS_PER_LANG = 30
# The R and Julia kits hold every class above; the C kit (issue 27, item 6) its own.
RJ = ("r", "julia")
C_MIN_BUGS = 15
C_REQUIRED_CLASSES = {
    "row/column-major",
    "stride",
    "integer division",
    "float accumulator",
    "off-by-one loop bound",
    "uninitialised accumulator",
    "skipped bias",
    "causal off-by-one",
    "gradient",
}
C_REQUIRED_CONTROLS = {"blocked matmul", "fused attention", "summation order"}
# The bugs that exist in low precision, and the controls that round differently (issue 17, item 6).
REQUIRED_CLASSES_FLOAT32 = {
    "stability",
    "finite mask fill",
    "low-precision accumulation",
    "low-precision rounding point",
}
REQUIRED_CONTROLS_FLOAT32 = {"float64 promotion", "equivalent edit", "1e-14 perturbation", "1e-9 perturbation"}
F32 = "float32"


@pytest.fixture(scope="module")
def mutants() -> list[mutation.Mutant]:
    return mutation.load_mutants()


def test_the_kit_is_complete(mutants: list[mutation.Mutant]) -> None:
    for lang in RJ:
        mine = [m for m in mutants if m.lang == lang]
        bugs = [m for m in mine if m.expect == "killed"]
        assert len(bugs) >= MIN_BUGS_PER_LANG, f"{lang}: only {len(bugs)} bug mutants"
        missing = REQUIRED_CLASSES - {m.bug_class for m in bugs}
        assert not missing, f"{lang}: no mutant of class {sorted(missing)}"
        controls = [m for m in mine if m.expect == "passes"]
        assert any(m.bug_class == "1e-14 perturbation" and not m.equivalent for m in controls), lang
        assert sum(m.equivalent for m in controls) >= 2, f"{lang}: needs mathematically equivalent controls"
        # every edited source file of the language has mutants
        assert {m.file for m in mine} == {p.relative_to(mutation.REPO).as_posix() for p in mutation.source_files(lang)}


def test_the_c_kit_is_complete(mutants: list[mutation.Mutant]) -> None:
    mine = [m for m in mutants if m.lang == "c"]
    bugs = [m for m in mine if m.expect == "killed"]
    assert len(bugs) >= C_MIN_BUGS, f"c: only {len(bugs)} bug mutants"
    missing = C_REQUIRED_CLASSES - {m.bug_class for m in bugs}
    assert not missing, f"c: no mutant of class {sorted(missing)}"
    controls = [m for m in mine if m.expect == "passes"]
    assert not C_REQUIRED_CONTROLS - {m.bug_class for m in controls}
    assert all(m.equivalent and m.precisions == (formats.DEFAULT,) for m in controls)
    # every C port we ship has mutants
    assert {mutation.unit_of("c", m.file) for m in mine} == {
        folder for folder in mutation.C_PORTS if mutation.unit_files("c", folder)
    }


def test_a_c_mutant_is_a_copy_of_its_port_built_at_o0_by_its_own_manifest(
    mutants: list[mutation.Mutant], tmp_path: Path
) -> None:
    m = next(m for m in mutants if m.id == "c_scale_integer_exponent")
    manifest = mutation.materialise(m, tmp_path)
    folder = mutation.REPO / "ports/kits/c/example"
    copy = manifest.parent
    original = (folder / "port.c").read_text()
    assert original.replace(m.find, m.replace) in (copy / "port.c").read_text()
    assert original not in (copy / "port.c").read_text()
    raw = tomllib.loads(manifest.read_text())
    assert raw["command"] == ["./port"] and raw["language"] == "c"
    # the port's own build line, at -O0, its include of the kit's header (-I..) made absolute
    own = tomllib.loads((folder / "port.toml").read_text())["build"]
    assert raw["build"] == [
        "-O0" if a == "-O2" else f"-I{(folder / '..').resolve()}" if a == "-I.." else a for a in own
    ]


@pytest.mark.parametrize(
    ("stale_id", "file", "repeated"),
    [("r_stale", "ports/r/R/attention.R", "<- function("), ("c_stale", "ports/kits/c/example/port.c", "double s")],
)
def test_a_mutant_that_no_longer_applies_is_an_error(tmp_path: Path, stale_id: str, file: str, repeated: str) -> None:
    entry = f"""
[[mutant]]
id = "{stale_id}"
file = "{file}"
class = "scale"
description = "a find text our port no longer contains"
find = "{{find}}"
replace = "whatever"
"""
    for find, count in (("this text is not in the port", 0), (repeated, None)):
        path = tmp_path / "mutants.toml"
        path.write_text(entry.replace("{find}", find))
        with pytest.raises(mutation.MutantError) as info:
            mutation.load_mutants(path)
        message = str(info.value)
        assert f"'{stale_id}'" in message and file in message and "exactly once" in message
        if count is not None:
            assert f"occurs {count} times" in message


def test_bad_entries_are_refused(tmp_path: Path) -> None:
    base = 'id = "j_x"\nfile = "ports/julia/src/attention.jl"\nclass = "scale"\ndescription = "d"\n'
    good = 'find = "    scores = (k\' * q) .* s"\nreplace = "    scores = (k\' * q)"\n'
    r_base = 'id = "r_x"\nfile = "ports/r/R/attention.R"\nclass = "scale"\ndescription = "d"\n'
    r_good = 'find = ".default_scale <- function(d_k) 1 / sqrt(d_k)"\nreplace = ".default_scale <- function(d_k) 1"\n'
    c_base = 'id = "c_x"\nfile = "ports/kits/c/example/port.c"\nclass = "scale"\ndescription = "d"\n'
    c_good = 'find = "            s *= scale;"\nreplace = ""\n'
    for body, message in [
        (base + good + 'equivalent = true\nexpect = "killed"\n', "equivalent mutant must be expected to pass"),
        (r_base + r_good + 'precisions = ["float32"]\n', "R computes in double only"),
        (c_base + c_good + 'precisions = ["float32"]\n', "our C ports in the float64 they declare"),
        (base + good + 'precisions = ["float16"]\n', "cannot be judged in"),
        (base + good + 'expect_in = { float32 = "killed" }\n', "expect_in maps"),
        (base + good + 'precisions = ["float64"]\nexpect_in = { float32 = "passes" }\n', "expect_in maps"),
        (base.replace("attention.jl", "../../etc/passwd") + good, "not one of our port sources"),
        (base + good + 'killed_in = ["classifier_step"]\n', "cannot reach"),
        (base + good + "colour = 1\n", "unknown"),
    ]:
        path = tmp_path / "mutants.toml"
        path.write_text("[[mutant]]\n" + body)
        with pytest.raises(mutation.MutantError, match=message):
            mutation.load_mutants(path)


def test_materialised_mutant_is_one_edit_of_the_whole_port(mutants: list[mutation.Mutant], tmp_path: Path) -> None:
    m = next(m for m in mutants if m.id == "j_clf_mean_over_all_rows")
    text = mutation.materialise(m, tmp_path).read_text()
    for path in mutation.source_files("julia"):
        original = path.read_text()
        if path.name == "classifier.jl":
            assert original.replace(m.find, m.replace) in text and original not in text
        else:
            assert original in text


# The R port's block and model: built on its scaled dot-product attention and projections.
# the block's attention and norms are reached from the model, from its gradient's forward and from
# the training loop that calls the gradient
_R_TRANSFORMER = {"decoder_block", "gpt_forward", "gpt_grads", "gpt_train"}
_C_TRANSFORMER = _R_TRANSFORMER  # the C GPT port's block_forward: the same four operations reach it


@pytest.mark.parametrize(
    ("mutant_id", "reaches"),
    [
        # the attention operations call softmax, and so does the R decoder block's attention; the
        # norms, activations and positions do not
        ("r_softmax_no_max", {op for op, spec in ops.OPS.items() if spec.family == "attention"} | _R_TRANSFORMER),
        ("r_ln_one_pass_variance", {"layer_norm"} | _R_TRANSFORMER),
        ("r_tf_ffn_always_tanh", {"feed_forward", "decoder_block", "gpt_forward"}),
        ("r_tf_tokens_zero_based", {"gpt_forward"}),
        ("j_rms_centred", {"rms_norm"}),
        ("r_theta_exponent_i_over_d", {"sinusoidal_positions", "rotary_embedding"}),
        ("j_declares_halves_but_interleaves", set(ops.OPS)),  # the declaration: read, never called
        ("r_mha_heads_strided", {"multi_head_attention"}),
        ("r_bias_recycled_down_columns", {"self_attention", "multi_head_attention", "feed_forward"} | _R_TRANSFORMER),
        ("r_clf_no_scale_in_dq", {"classifier_step", "classifier_train"}),
        # the transformer's causal attention calls scaled_dot_product_attention
        (
            "j_dead_off_by_one",
            {
                "scaled_dot_product_attention",
                "self_attention",
                "multi_head_attention",
                "decoder_block",
                "gpt_forward",
                "gpt_grads",
                "gpt_train",
            },
        ),
        ("j_clf_pool_sum", {"classifier_forward", "classifier_step", "classifier_train"}),
        ("j_clf_mean_over_all_rows", {"classifier_train"}),
        # the loss has its own log-sum-exp: no softmax mutant reaches it; the gradient's loss is lm_loss
        ("r_lm_no_max", {"lm_loss", "gpt_grads", "gpt_train"}),
        ("j_lm_ignore_dropped", {"lm_loss", "gpt_grads", "gpt_train"}),
        ("j_gg_no_count", {"gpt_grads", "gpt_train"}),  # the backward is its own: only the training loop calls it
        # the training loop calls adamw_step; its own edits reach it alone
        ("r_adamw_no_bias_correction", {"adamw_step", "gpt_train"}),
        ("j_gt_moments_not_carried", {"gpt_train"}),
        # C: an operation is the function its ap_op table names (sdpa, mha); softmax_rows is
        # called by softmax and by attend, which both attention operations call
        ("c_softmax_float_sum", {"softmax", "scaled_dot_product_attention", "multi_head_attention"}),
        ("c_k_read_column_major", {"scaled_dot_product_attention", "multi_head_attention"}),
        ("c_scale_integer_exponent", {"scaled_dot_product_attention"}),
        ("c_projection_weight_column_major", {"multi_head_attention"}),
        # the GPT port: one attention kernel for every attention operation and the model's blocks;
        # its backward kernels reached from gpt_grads and the training loop only
        (
            "c_gpt_causal_diagonal_masked",
            {"scaled_dot_product_attention", "self_attention", "multi_head_attention"} | _C_TRANSFORMER,
        ),
        ("c_gpt_softmax_backward_no_rowdot", {"gpt_grads", "gpt_train"}),
        ("c_gpt_train_grads_not_zeroed", {"gpt_train"}),
    ],
)
def test_reachability_follows_the_call_graph(mutants: list[mutation.Mutant], mutant_id: str, reaches: set[str]) -> None:
    m = next(m for m in mutants if m.id == mutant_id)
    assert mutation.reachable_ops(m) == reaches


# The kits' results, once per process and per language: every test of the float64 kit is
# parametrized by language and reads only that language's mutants, so a worker computes only the
# languages of the tests it runs. Measured: under `-n 2 --dist loadgroup` the tests of the kit's
# xdist_group landed on both workers (why is not understood yet), and each worker ran the whole
# kit (R and Julia, ~160 s in one `make test`).
_KITS: dict[str, dict[str, mutation.MutantResult]] = {}


@pytest.fixture
def kit(lang: str, mutants: list[mutation.Mutant]) -> dict[str, mutation.MutantResult]:
    if lang not in _KITS:
        _KITS[lang] = _run_kit([m for m in mutants if m.lang == lang])
    return _KITS[lang]


def _run_kit(mutants: list[mutation.Mutant]) -> dict[str, mutation.MutantResult]:
    available = [lang for lang in sorted({m.lang for m in mutants}) if not mutation.unavailable(lang)]
    start = time.perf_counter()
    jobs = min(4, os.cpu_count() or 1)
    chosen = [m for m in mutants if m.lang in available]
    # Scope "home": each mutant runs the cases of its nearest operation (and of killed_in), which
    # halves the Julia compile time; `attention-ports mutation` runs every reaching operation.
    results = mutation.run_kit(chosen, jobs=max(2, jobs), scope="home")
    seconds = time.perf_counter() - start
    per_lang = Counter(r.mutant.lang for r in results)
    print(f"\nmutation kit: {dict(per_lang)} mutants in {seconds:.1f}s")
    for line in mutation.report_lines(results):
        print(line)
    return {r.mutant.id: r for r in results}


def test_every_julia_mutant_that_reaches_the_float32_tier_is_judged_in_float32(
    mutants: list[mutation.Mutant],
) -> None:
    for m in mutants:
        reaches_tier = m.lang == "julia" and bool(mutation.reachable_ops(m) & set(mutation.KIT_TIERS[F32]))
        # a declaration reaches every operation (it is read for each) but judges the rotary
        # embedding alone, which the float32 kit does not hold: mutants.toml narrows it to float64
        narrowed = m.id == "j_declares_halves_but_interleaves"
        assert (F32 in m.precisions) == (reaches_tier and not narrowed), m.id
    mine = [m for m in mutants if F32 in m.precisions]
    missing = REQUIRED_CLASSES_FLOAT32 - {m.bug_class for m in mine if m.expectation(F32) == "killed"}
    assert not missing, f"float32: no mutant of class {sorted(missing)}"
    missing = REQUIRED_CONTROLS_FLOAT32 - {m.bug_class for m in mine if m.expectation(F32) == "passes"}
    assert not missing, f"float32: no control of class {sorted(missing)}"


@pytest.mark.parametrize("lang", RJ)
def test_every_bug_is_caught_twice_and_every_control_passes(
    lang: str, mutants: list[mutation.Mutant], kit: dict[str, mutation.MutantResult]
) -> None:
    _assert_caught_twice_and_controls_pass(lang, mutants, kit)


@pytest.fixture
def ckit(mutants: list[mutation.Mutant]) -> dict[str, mutation.MutantResult]:
    """The C kit's results, once per process: its own fixture (and xdist group), so it runs beside
    the R and Julia kits rather than after them."""
    if "c" not in _KITS:
        _KITS["c"] = _run_kit([m for m in mutants if m.lang == "c"])
    return _KITS["c"]


def test_every_c_bug_is_caught_twice_and_every_control_passes(
    mutants: list[mutation.Mutant], ckit: dict[str, mutation.MutantResult]
) -> None:
    _assert_caught_twice_and_controls_pass("c", mutants, ckit)


# What the C route tells the C GPT port's bugs (judge/diagnose.py, judge/localise.py), in the
# port's own names (grads.wte): (mutant, a line one of its failing outputs' diagnoses or
# localisations must hold).
C_TOLD = {
    "c_softmax_no_max": "the softmax exponentiates x as it is, exp(x) / sum(exp(x)), without subtracting",
    "c_gpt_causal_diagonal_masked": "the causal mask leaves out the diagonal",
    "c_gpt_matmul_llmc_weight_layout": "w_q, w_k and w_v are applied transposed",
    "c_projection_weight_column_major": "w_q, w_k, w_v and w_o are applied transposed",
    "c_gpt_encoder_backward_assigned": "the first wrong gradient going backwards is grads.wte",
    "c_gpt_loss_grad_integer_division": "the first wrong gradient going backwards is grads.w_head",
    # counted from 0, as the C port counts (sdpa_fully_masked_row's query 2 sees no key)
    "c_dead_query_not_handled": "wrong only in the query 2, whose mask removes every key",
}


def test_the_c_bugs_are_told_in_the_ports_terms(ckit: dict[str, mutation.MutantResult]) -> None:
    if not all(m in ckit for m in C_TOLD):
        require("c", mutation.unavailable("c") or "its mutants did not run")
    missed = {
        m: line
        for m, line in C_TOLD.items()
        if not any(line in d for said in ckit[m].diagnoses.values() for _, d in said)
        and not any(line in where for where in ckit[m].localisations.values())
    }
    assert not missed, missed


def _assert_caught_twice_and_controls_pass(
    lang: str, mutants: list[mutation.Mutant], kit: dict[str, mutation.MutantResult]
) -> None:
    mine = [m for m in mutants if m.lang == lang and formats.DEFAULT in m.precisions]  # the float64 kit
    if not any(m.id in kit for m in mine):
        require(lang, mutation.unavailable(lang) or "its mutants did not run")
    results = [kit[m.id] for m in mine]
    bad = [f"{r.mutant.id}: {r.verdict()}; {sorted(r.messages.items())[:3]}" for r in results if not r.ok]
    assert not bad, f"{lang}: " + "\n".join(bad)
    # A control that passes because nothing ran would prove nothing.
    assert all(r.statuses for r in results)
    bugs = [r for r in results if r.mutant.expect == "killed"]
    assert all(len(r.killing) >= mutation.MIN_KILLS for r in bugs)
    # issue 26: no mutant is told its errors are float32's rounding (before: the lines of 2^29 times
    # the float64 bound took errors of up to 50% for it, R's included)
    assert _precision_lines(results) == []


def _precision_lines(results: list[mutation.MutantResult]) -> list[tuple[str, str, str]]:
    """(mutant, case, output) of every failing output told it is float32's rounding."""
    return [
        (r.mutant.id, case, output)
        for r in results
        for case, said in r.diagnoses.items()
        for output, line in said
        if "float32's rounding" in line
    ]


# Where the backward's and the training loop's bugs are localised (judge/localise.py, issue 26): on
# every case of theirs that fails, in R's names (grads$w_2) and Julia's (grads.w_2) alike.
LOCALISED = {
    # the norm's backward without its mean term: ln_f's own gradients are right, what flows back not
    "gg_ln_backward_no_mean": ("the first wrong gradient going backwards is grads{}w_2 of block",),
    "gg_wte_assigned": ("and grads{}wpe agree; the first wrong gradient going backwards is grads{}wte",),
    "gg_attention_backward_unmasked": ("the first wrong gradient going backwards is grads{}w_v of block",),
    "gg_gelu_derivative_other_form": ("the first wrong gradient going backwards is grads{}w_1 of block",),
    "gg_no_count": ("along the backward pass, loss agrees; the first wrong gradient going backwards is grads{}w_head",),
    "gt_step_count_off_by_one": ("step 1's loss agrees and step 2's is the first wrong one",),
    "gt_update_before_all_grads": ("step 1's loss agrees and step 2's is the first wrong one",),
    # moments are zero before step 1 either way: step 2's update is the first to differ, which a
    # two-step case's losses never see
    "gt_moments_not_carried": (
        "the losses of steps 1 to 2 agree and step 3's is the first wrong one",
        "every step's loss agrees (2 steps)",
    ),
}


def test_julia_mutants_in_a_kept_worker_give_what_fresh_workers_give(mutants: list[mutation.Mutant]) -> None:
    """The kept Julia worker starts on our port and redefines each mutant's changed methods in
    place (worker.jl, ``patch!``); one after another (the second also undoes the first's edit),
    every status, message, diagnosis and localisation is a fresh worker's."""
    if why := mutation.unavailable("julia"):
        require("julia", why)
    chosen = [next(m for m in mutants if m.id == i) for i in ("j_lm_no_max", "j_gg_no_count")]
    entries = list(fixtures.iter_entries(paths.FIXTURES))
    plan = [(m, mutation.cases_for(m, entries, "home")) for m in chosen]

    def row(result: mutation.MutantResult) -> dict:
        return {k: v for k, v in result.as_json().items() if k != "seconds"}

    kept = mutation.KeptWorker()
    try:
        in_place = [row(mutation.run_mutant(m, c, paths.FIXTURES, entries=entries, kept=kept)) for m, c in plan]
        assert kept.impl is not None and kept.impl.transport.starts == 1
    finally:
        kept.close()
    assert in_place == [row(mutation.run_mutant(m, c, paths.FIXTURES, entries=entries)) for m, c in plan]
    assert all(r["ok"] and r["killing_cases"] for r in in_place)


@pytest.mark.parametrize("lang", RJ)
def test_the_backward_and_training_loop_bugs_are_localised(
    lang: str, mutants: list[mutation.Mutant], kit: dict[str, mutation.MutantResult]
) -> None:
    sep = "$" if lang == "r" else "."
    for key, lines in LOCALISED.items():
        mutant_id = f"{lang[0]}_{key}"
        if mutant_id not in kit:
            require(lang, f"{mutant_id} did not run")
        r = kit[mutant_id]
        op = "gpt_grads" if key.startswith("gg_") else "gpt_train"
        assert r.kills_in(op), mutant_id
        for case in r.kills_in(op):
            said = r.localisations.get(case, "")
            assert any(line.format(sep, sep) in said for line in lines), (mutant_id, case, said)


# The model-level mistakes' diagnoses (judge/diagnose.py, issue 26), each a recomputation by the
# reference under the mistake that fits the port's numbers: (mutant, a line one of its failing
# outputs must get), R's and Julia's mutants alike.
DIAGNOSED = {
    "r_tf_no_causal_mask": "the attention is not causal",
    "j_tf_no_causal_mask": "the attention is not causal",
    "j_tf_causal_diagonal_masked": "the causal mask leaves out the diagonal",
    # its home cases are gpt_grads': the loss, a forward quantity, named by the one forward mistake giving it
    "r_tf_causal_mask_excludes_self": "the causal mask leaves out the diagonal",
    "r_tf_post_norm": "the block is post-norm",
    "j_tf_post_norm": "the block is post-norm",
    "r_tf_heads_strided": "the heads are split wrongly: each head takes every H-th projected feature",
    "j_tf_heads_strided": "the heads are split wrongly: each head takes every H-th projected feature",
    "r_tf_scale_d_model": "the scores are scaled by 1/sqrt(d_model)",
    "j_tf_scale_d_model": "the scores are scaled by 1/sqrt(d_model)",
    "r_mha_heads_strided": "the heads are split wrongly: each head takes every H-th projected feature",
    "j_mha_heads_strided": "the heads are split wrongly: each head takes every H-th projected feature",
    "r_mha_heads_reversed": "the heads' outputs are concatenated in reverse order",
    "j_mha_heads_reversed": "the heads' outputs are concatenated in reverse order",
    "r_projection_transposed": "is applied transposed: a square weight, so no shape error shows it",
    "j_projection_transposed": "is applied transposed: a square weight, so no shape error shows it",
    "r_mha_w_o_transposed": "w_o is applied transposed",
    "j_mha_w_o_transposed": "w_o is applied transposed",
    "r_sinpos_sin_cos_swapped": "each frequency's pair is (cos, sin)",
    "r_adamw_step_plus_one": "the bias corrections use t + 1 for step t",
    "j_adamw_step_minus_one": "the bias corrections use t - 1 for step t",
    "r_adamw_betas_swapped": "beta1 and beta2 are swapped",
    "j_adamw_betas_swapped": "beta1 and beta2 are swapped",
    "r_gt_moments_not_carried": "first moment m is not carried from step to step",
    "j_gt_moments_not_carried": "first moment m is not carried from step to step",
    "r_gt_step_count_off_by_one": "the bias corrections use t + 1 for step t",
    "j_gt_step_count_off_by_one": "the bias corrections use t + 1 for step t",
    "r_gt_grads_accumulated": "each step's gradients are added to the previous step's",
    "j_gt_grads_accumulated": "each step's gradients are added to the previous step's",
    "r_gt_decay_matrices_only": "the weight decay skips the biases and the norms' gains",
    "j_gt_decay_matrices_only": "the weight decay skips the biases and the norms' gains",
    "r_gg_no_count": "times the expected values, element by element: a factor count = ",
    "j_gg_no_count": "times the expected values, element by element: a factor count = ",
    "r_lm_ignore_index_not_shifted": "ignore_index has no effect",
    "r_lm_ignored_in_denominator": "the loss's mean is divided by every position",
    "r_tf_ln2_on_x": "the second layer norm is applied to the block's input x",
    "j_lm_ignored_in_denominator": "the loss's mean is divided by every position",
    "j_tf_ln2_on_x": "the second layer norm is applied to the block's input x",
    "j_lm_ignore_dropped": "ignore_index has no effect",
    # each was told "the mask is applied wrongly" where a masked query's score of ~882 overflowed
    "r_softmax_no_max": "exponentiates the scores as they are, exp(s) / sum(exp(s)), without subtracting",
    "j_softmax_no_max": "exponentiates x as it is, exp(x) / sum(exp(x)), without subtracting each row's maximum",
    "r_attention_naive_softmax": "exponentiates the scores as they are, exp(s) / sum(exp(s)), without subtracting",
    "j_attention_naive_softmax": "exponentiates the scores as they are, exp(s) / sum(exp(s)), without subtracting",
}


@pytest.mark.parametrize("lang", RJ)
def test_the_model_level_mistakes_get_their_diagnosis(lang: str, kit: dict[str, mutation.MutantResult]) -> None:
    mine = {m: line for m, line in DIAGNOSED.items() if m.startswith(lang[0] + "_")}
    if not all(m in kit for m in mine):
        require(lang, "its mutants did not run")
    missed = {
        m: sorted({d[:100] for said in kit[m].diagnoses.values() for _, d in said})
        for m, line in mine.items()
        if not any(line in d for said in kit[m].diagnoses.values() for _, d in said)
    }
    assert not missed, missed


def test_the_docs_state_the_kit_as_it_is(mutants: list[mutation.Mutant]) -> None:
    page = (mutation.REPO / "docs" / "generated-cases-and-mutation.md").read_text()
    for lang, name in (("r", "R"), ("julia", "Julia"), ("c", "C")):
        mine = [m for m in mutants if m.lang == lang and formats.DEFAULT in m.precisions]
        bugs = sum(m.expect == "killed" for m in mine)
        controls = [m for m in mine if m.expect == "passes"]
        equivalent = sum(m.equivalent for m in controls)
        # "caught" equals "bugs": test_every_bug_is_caught_twice_and_every_control_passes holds it so
        row = f"| {name} | {bugs} | {bugs} | {len(controls)} ({equivalent} equivalent edits) |"
        assert row in page, f"docs/generated-cases-and-mutation.md's mutation table should read: {row}"
    # and in float32 (docs/precision.md): the expectation there, which expect_in may change
    mine = [m for m in mutants if F32 in m.precisions]
    bugs = sum(m.expectation(F32) == "killed" for m in mine)
    controls = [m for m in mine if m.expectation(F32) == "passes"]
    equivalent = sum(m.equivalent for m in controls)
    row = f"| Julia, run in Float32 | {bugs} | {bugs} | {len(controls)} ({equivalent} equivalent edits) |"
    page = (mutation.REPO / "docs" / "precision.md").read_text()
    assert row in page, f"docs/precision.md's float32 mutation table should read: {row}"


@pytest.fixture(scope="module")
def kit32(mutants: list[mutation.Mutant]) -> dict[str, mutation.MutantResult]:
    """The Julia mutants that reach softmax or SDPA, the mutated port run in Float32 on the float32
    tier (docs/precision.md, "Catch power per precision"); its wall time is printed. Once per process."""
    if "julia-float32" not in _KITS:
        _KITS["julia-float32"] = _run_kit32(mutants)
    return _KITS["julia-float32"]


def _run_kit32(mutants: list[mutation.Mutant]) -> dict[str, mutation.MutantResult]:
    try:
        registry.create("julia").close()
    except ImplementationUnavailable as exc:
        require("julia", str(exc))
    start = time.perf_counter()
    chosen = [m for m in mutants if m.lang == "julia"]
    results = mutation.run_kit(chosen, jobs=max(2, min(4, os.cpu_count() or 1)), scope="home", precision=F32)
    print(f"\nmutation kit in float32: {len(results)} julia mutants in {time.perf_counter() - start:.1f}s")
    for line in mutation.report_lines(results):
        print(line)
    return {r.mutant.id: r for r in results}


def test_in_float32_every_bug_is_caught_twice_and_every_control_passes(
    mutants: list[mutation.Mutant], kit32: dict[str, mutation.MutantResult]
) -> None:
    results = [kit32[m.id] for m in mutants if F32 in m.precisions]
    bad = [f"{r.mutant.id}: {r.verdict()}; {sorted(r.messages.items())[:3]}" for r in results if not r.ok]
    assert not bad, "float32: " + "\n".join(bad)
    assert all(r.precision == F32 and r.statuses for r in results)  # a control that ran nothing proves nothing
    bugs = [r for r in results if r.expect == "killed"]
    assert all(len(r.killing) >= mutation.MIN_KILLS for r in bugs)
    # judged at float32: never told to declare float32 (issue 26: 202 of 229 outputs were)
    assert _precision_lines(results) == []


def test_in_float32_the_tiers_own_stability_cases_catch_the_softmax_without_its_maximum(
    kit32: dict[str, mutation.MutantResult],
) -> None:
    """Scores of ~90 to ~650 (fixtures/edges-float32.toml): exp overflows or underflows in
    float32 there, not in float64; a softmax without the max subtraction fails on them in float32."""
    catalogue = {e["id"] for e in fixtures.iter_entries(paths.FIXTURES)}
    for mutant_id, op in (
        ("j_softmax_no_max", "softmax"),
        ("j_attention_naive_softmax", "scaled_dot_product_attention"),
    ):
        r = kit32[mutant_id]
        own = [c for c in r.kills_in(op) if c not in catalogue]
        assert len(own) >= mutation.MIN_KILLS, (mutant_id, own)


R_COMMENTS = """\
softmax <- function(x) exp(x) / sum(exp(x))  # not layer_norm
layer_norm <- function(x) {
  s <- "# in a string: text, and the call after it counts"; gelu(x)
  r <- r"(a # raw string)"; t <- '#'; `odd#name` <- 1
  # gelu(softmax(x)) in a comment is not a call
  x
}
gelu <- function(x) x # softmax
"""

JULIA_COMMENTS = '''\
"""
    softmax(x)

A docstring naming gelu: words, not a call.
"""
softmax(x) = exp.(x) ./ sum(exp.(x))  # layer_norm
function layer_norm(x)
    c = '#'; s = "#= not a comment =#"; y = x'  # the adjoint, then a comment: gelu
    #= a block comment naming softmax,
       #= nested, naming gelu =#
    still the outer comment: softmax =#
    return gelu(y)
end
gelu(x) = x #= softmax =# .+ 0
'''

C_COMMENTS = """\
static double softmax(double x) { return exp(x); } /* layer_norm */
static double gelu(double x);
static double layer_norm(double x) {
    const char *s = "/* in a string: text, and the call after it counts */"; char c = '"';
    // gelu(softmax(x)) in a comment is not a call
    /* a block comment naming softmax
       and gelu */
    return gelu(x) + s[0] + c;
}
static double
gelu(double x) { return x; /* softmax */ }
static const ap_op OPS[] = {{"softmax", softmax}, {"layer_norm", layer_norm}, {"gelu", gelu}, {0, 0}};
"""


# Where a mutant edits each definition of the sources above, and what it then reaches: layer_norm
# calls gelu (after a string holding "#"); every other mention is in a comment or a docstring.
EDITS = {
    "r": {"softmax": "exp(x)", "layer_norm": "  x\n}", "gelu": "x # softmax"},
    "julia": {"softmax": "exp.(x) ./", "layer_norm": "return gelu(y)", "gelu": "x #="},
    "c": {"softmax": "exp(x)", "layer_norm": "+ s[0]", "gelu": "return x;"},
}
REACHES = {"softmax": {"softmax"}, "layer_norm": {"layer_norm"}, "gelu": {"gelu", "layer_norm"}}


@pytest.mark.parametrize(("lang", "source"), [("r", R_COMMENTS), ("julia", JULIA_COMMENTS), ("c", C_COMMENTS)])
def test_a_name_in_a_comment_or_docstring_is_not_a_call(tmp_path: Path, lang: str, source: str) -> None:
    # a C port's operations are the functions its ap_op table names (the table names them all:
    # it is read by main, never called, so it does not make them reach each other)
    folder = mutation.C_PORTS[0] if lang == "c" else mutation.SOURCES[lang][0]
    port = tmp_path / folder / f"port{mutation.SUFFIX[lang]}"
    port.parent.mkdir(parents=True)
    port.write_text(source)
    for name, find in EDITS[lang].items():
        m = mutation.Mutant(f"m_{name}", lang, port.relative_to(tmp_path).as_posix(), find, "", "", "", False, "killed")
        assert mutation.reachable_ops(m, tmp_path) == REACHES[name], name
    code = mutation.code_only(source, lang)  # comments blanked in place: a mutant's offset still holds
    assert len(code) == len(source) and code.count("\n") == source.count("\n")
