"""The coverage matrix: computed from the cases, every cell filled twice, docs/coverage.md's copy current."""

from __future__ import annotations

from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.spec.catalogue import CatalogueError, load_catalogue
from attention_ports.tools import coverage

CATALOGUE = REPO_FIXTURES / "catalogue.toml"
# The page that embeds the generated matrix (docs/coverage.md; `coverage --readme` rewrites it).
COVERAGE_PAGE = REPO_FIXTURES.parent / "docs" / "coverage.md"


@pytest.fixture(scope="module")
def matrix() -> coverage.Matrix:
    return coverage.build_matrix(CATALOGUE)


@pytest.fixture(scope="module")
def features_by_case() -> dict[str, set[str]]:
    cat = load_catalogue(CATALOGUE)
    out = {}
    for case in cat.cases:
        facts = coverage.facts_of(case)
        out[case.id] = {f.key for f in coverage.FEATURES if f.applies(case.op) and f.test(facts)}
    return out


def test_every_cell_and_combination_has_two_cases(matrix: coverage.Matrix) -> None:
    assert matrix.problems() == []


def test_the_coverage_page_shows_the_current_matrix(matrix: coverage.Matrix) -> None:
    embedded = coverage.embedded_section(COVERAGE_PAGE.read_text())
    assert embedded is not None, "docs/coverage.md has no generated coverage block"
    assert embedded == coverage.readme_section(coverage.render_markdown(matrix)), (
        "docs/coverage.md's coverage matrix is stale: run `attention-ports coverage --readme docs/coverage.md`"
    )


def test_cli_readme_rewrites_only_the_generated_block(tmp_path: Path, capsys) -> None:
    page = tmp_path / "coverage.md"
    stale = coverage.readme_section("| stale |")
    page.write_text(f"# Coverage\n\nprose before\n\n{stale}\n\nprose after\n")
    assert cli.main(["coverage", "--readme", str(page)]) == 0
    assert f"updated the coverage block of {page}" in capsys.readouterr().out
    text = page.read_text()
    markdown = coverage.render_markdown(coverage.build_matrix(CATALOGUE))
    assert text == f"# Coverage\n\nprose before\n\n{coverage.readme_section(markdown)}\n\nprose after\n"


def test_cli_readme_refuses_a_file_without_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "coverage.md"
    page.write_text("# Coverage\n\nno block here\n")
    with pytest.raises(CatalogueError, match="no coverage block"):
        coverage.update_readme(page, "| x |")
    assert page.read_text() == "# Coverage\n\nno block here\n"


def test_the_stability_flag_is_honest(features_by_case: dict[str, set[str]]) -> None:
    """A case flagged 'stability' must really overflow or underflow exp somewhere (issue 9), or
    hold a nearly constant row where a one-pass variance cancels (the normalisation layers), or
    reach gelu's negative tail, where 1 + erf cancels, hold logits of the loss beyond exp's range
    (the transformer: a nearly constant row into its first norm)."""
    stable = {"regime.overflow", "regime.underflow", "regime.out_overflow", "regime.out_underflow"}
    stable |= {"norm.cancellation", "act.negative_tail", "loss.overflow", "loss.underflow", "tf.near_constant"}
    for case in load_catalogue(CATALOGUE).cases:
        if "stability" in case.flags:
            assert features_by_case[case.id] & stable, f"{case.id} is flagged stability but no logit leaves exp's range"


@pytest.mark.parametrize(
    ("cid", "has", "has_not"),
    [
        ("sdpa_large_logits", {"regime.overflow", "mask.none", "scale.default"}, {"regime.underflow"}),
        ("sdpa_L16_d16", {"mask.none"}, {"regime.overflow", "regime.underflow", "regime.ties", "regime.distinct"}),
        (
            "sdpa_alibi_causal_large_logits",
            {"mask.finite", "mask.inf", "mask.causal", "scale.custom", "shape.cross", "regime.distinct"},
            {"mask.bool", "mask.padding", "mask.dead"},
        ),
        ("sdpa_fully_masked_row", {"mask.bool", "mask.padding", "mask.dead"}, {"mask.causal", "mask.finite"}),
        ("sdpa_causal_bool_underflow_cross", {"mask.causal", "mask.bool", "regime.underflow"}, {"mask.inf"}),
        ("self_attn_value_bias_only", {"bias.b_v", "bias.some"}, {"bias.b_q", "bias.none"}),
        ("mha_d_head1", {"heads.width1", "heads.many", "bias.none"}, {"heads.one"}),
        ("mha_zero_queries_causal_h4", {"regime.ties", "mask.causal", "shape.cross"}, {"regime.overflow"}),
        ("clf_step_shifted_large_logits", {"regime.overflow", "regime.out_overflow"}, {"regime.out_underflow"}),
        ("clf_forward_identical_keys", {"regime.ties", "regime.underflow", "regime.out_overflow"}, set()),
        ("clf_train_small_frozen_w_q_b_v", {"train.frozen", "train.empty"}, {"train.unfrozen"}),
        ("softmax_one_column_extremes", {"regime.one_key", "regime.overflow", "regime.underflow"}, set()),
        ("ffn_large_tanh_repeated", {"tf.tanh", "tf.repeated", "tf.large", "tf.distinct"}, {"tf.erf", "tf.one_token"}),
        ("block_near_constant_h4", {"tf.near_constant", "tf.heads_many", "tf.eps_given"}, {"tf.large", "tf.repeated"}),
        (
            "gpt_large_near_constant",
            {"tf.large", "tf.near_constant", "tf.blocks", "tf.heads_many", "tf.erf"},
            {"tf.short_context", "tf.one_block", "tf.heads_one"},
        ),
        ("gpt_one_token", {"tf.one_token", "tf.short_context", "tf.one_block", "tf.heads_one"}, {"tf.repeated"}),
        (
            "lm_padding_id0_ignored",
            {"loss.ignore_given", "loss.ignored", "loss.ignore_token", "loss.repeated"},
            {"loss.ignore_outside", "loss.overflow", "loss.argmax", "regime.overflow"},
        ),
    ],
)
def test_features_are_read_from_the_data(
    features_by_case: dict[str, set[str]], cid: str, has: set[str], has_not: set[str]
) -> None:
    got = features_by_case[cid]
    assert has <= got, f"{cid}: missing {has - got}"
    assert not has_not & got, f"{cid}: unexpectedly {has_not & got}"


def test_exemptions_and_combinations_name_real_things(tmp_path: Path) -> None:
    base = CATALOGUE.read_text()
    bad = tmp_path / "catalogue.toml"
    for extra, message in [
        ('[coverage.deferred.softmax]\n"mask.sparkle" = "no such feature, so this is refused"\n', "mask.sparkle"),
        ('[coverage.deferred.nonsense]\nscale = "an operation that does not exist"\n', "nonsense"),
        ('[coverage.deferred.self_attention]\n"mask.bool" = ""\n', "needs a reason"),
        ('[coverage.deferred.softmax]\nscale = "already marked not applicable above"\n', "exempted twice"),
    ]:
        bad.write_text(base + "\n" + extra)
        with pytest.raises(CatalogueError, match=message):
            coverage.load_spec(bad)


def test_an_uncovered_cell_is_reported_with_its_cases(tmp_path: Path) -> None:
    text = CATALOGUE.read_text().replace("options.scale = 0.3\n", "options.scale = 1.0\n", 1)
    assert text != CATALOGUE.read_text()
    text = text.replace("options.scale = 0.7\n", "options.scale = 1.0\n", 1)
    text = text.replace("options.scale = 2.5\n", "options.scale = 1.0\n", 1)
    cat = tmp_path / "catalogue.toml"
    cat.write_text(text)
    problems = coverage.build_matrix(cat).problems()
    assert any(p.startswith("scaled_dot_product_attention x scale.custom (another scale): 0 case(s)") for p in problems)


def test_cli_prints_the_matrix_and_checks_it(capsys) -> None:
    assert cli.main(["coverage", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| feature | softmax | SDPA |")
    assert "| regime: scaled logits > 709 (exp overflows) |" in out
