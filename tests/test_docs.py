"""The docs: every relative link resolves, every CLI flag is documented, every figure the code can
produce is checked against the code, and every example run is the real output.

Pages checked: README.md, docs/*.md (not docs/_incoming/, drafts waiting to be placed) and
ports/CONTRACT.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures import store as fixtures
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.runtimes import registry
from attention_ports.runtimes.impl import ImplementationUnavailable
from attention_ports.spec import ops, precision
from attention_ports.spec.catalogue import load_catalogue
from attention_ports.spec.precision import fixtures_dir
from attention_ports.tools import mutation
from tests.conftest import require

REPO = REPO_FIXTURES.parent
PAGES = sorted([REPO / "README.md", REPO / "ports" / "CONTRACT.md", *(REPO / "docs").glob("*.md")])
CLI_PAGE = REPO / "docs" / "cli.md"
README_LIMIT = 15 * 1024  # issue 16: the README is a front door, the rest lives in docs/
WALKTHROUGH = {"r": REPO / "tests/data/ports/r/walkthrough.R", "julia": REPO / "tests/data/ports/julia/walkthrough.jl"}


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link or heading inside one is not one)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page, with GitHub's -1, -2 suffixes for repeats."""
    seen: Counter[str] = Counter()
    out = set()
    for line in _prose(page.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            slug = _slug(m.group(1))
            out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return out


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", _prose(page.read_text()))  # nor is one in inline code
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: are not ours to check
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {_rel(dest)}")
    assert not broken, f"{_rel(page)} has broken links:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs() -> None:
    assert _slug("Generated cases: `verify --random`") == "generated-cases-verify---random"
    assert _slug("The scale tier: `attention-ports verify --tier scale`") == (
        "the-scale-tier-attention-ports-verify---tier-scale"
    )
    assert _slug("Conventions: a query whose mask removes every key") == (
        "conventions-a-query-whose-mask-removes-every-key"
    )


def test_the_readme_is_a_front_door() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; at most {README_LIMIT}: move detail to docs/"


def test_every_docs_page_is_listed_in_the_index() -> None:
    index = (REPO / "docs" / "index.md").read_text()
    unlisted = [p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md" and f"]({p.name})" not in index]
    assert not unlisted, f"docs/index.md does not list {unlisted}"


# --------------------------------------------------------------------------------------------
# the CLI page


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _section(text: str, command: str) -> str | None:
    """The text of docs/cli.md's '## `attention-ports COMMAND`' section, up to the next '## '."""
    m = re.search(rf"^## `attention-ports {re.escape(command)}`\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    return m.group(1) if m else None


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_the_cli_page_names_every_flag_help_shows(command: str) -> None:
    # format_help() is exactly what `attention-ports COMMAND --help` prints
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", _subcommands()[command].format_help())) - {"--help"}
    section = _section(CLI_PAGE.read_text(), command)
    assert section is not None, f"docs/cli.md has no section '## `attention-ports {command}`'"
    missing = sorted(f for f in shown if not re.search(rf"{re.escape(f)}(?![\w-])", section))
    assert not missing, f"docs/cli.md's section on `attention-ports {command}` does not mention {missing}"


def _table(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize("header", ["| status | meaning |", "| exit code | meaning |"])
def test_the_readme_and_the_cli_page_say_the_same_statuses_and_exit_codes(header: str) -> None:
    assert _table((REPO / "README.md").read_text(), header) == _table(CLI_PAGE.read_text(), header)


# --------------------------------------------------------------------------------------------
# figures: every count of cases in the docs is checked against the catalogue, never typed blind


def _ops() -> Counter[str]:
    return Counter(c.op for c in load_catalogue(REPO_FIXTURES / "catalogue.toml").cases)


def _flagged(flag: str) -> Counter[str]:
    return Counter(c.op for c in load_catalogue(REPO_FIXTURES / "catalogue.toml").cases if flag in c.flags)


def _mutation_controls() -> int:
    return sum(m.expect == "passes" for m in mutation.load_mutants() if "float64" in m.precisions)  # the float64 kit


def _c_kit_cases() -> tuple[int, int]:
    entries = list(fixtures.iter_entries(REPO_FIXTURES))
    mine = [m for m in mutation.load_mutants() if m.lang == "c"]
    return len(mine), sum(len(mutation.cases_for(m, entries, "home")) for m in mine)


@dataclass(frozen=True)
class Figure:
    page: str
    pattern: str  # a regex over the page's text with runs of whitespace as one space; groups are figures
    expected: Callable[[], tuple[int, ...]]


def _float32_tier() -> list[dict]:
    return fixtures.read_manifest(fixtures_dir("float32"))["cases"]


# the operations of the new user's trial port (tests/data/ports/r/newuser_gpt.R's declaration)
NEWUSER_OPS = ("layer_norm", "gelu", "feed_forward", "decoder_block", "gpt_forward", "lm_loss", "gpt_grads")

FIGURES = [
    Figure("docs/ports.md", r"ok fixtures (\d+) cases in", lambda: (sum(_ops().values()),)),
    Figure("docs/ports.md", r"passed all (\d+) of their cases", lambda: (sum(_ops()[op] for op in NEWUSER_OPS),)),
    Figure(
        "docs/ports.md",
        r"r: (\d+) missing, (\d+) pass",
        lambda: (sum(_ops().values()) - _ops()["softmax"], _ops()["softmax"]),
    ),
    Figure(
        "docs/fixtures.md",
        r"(\d+) cases carry the flag: (\d+) in SDPA .*?, (\d+) in self-attention .*? and (\d+) in multi-head attention",
        lambda: (
            sum(_flagged("masked_query").values()),
            *(_flagged("masked_query")[op] for op in ("scaled_dot_product_attention", "self_attention")),
            _flagged("masked_query")["multi_head_attention"],
        ),
    ),
    Figure("docs/findings.md", r"fails \d+ of the (\d+) softmax cases", lambda: (_ops()["softmax"],)),
    Figure(
        "docs/ports.md",
        r"NOTHING RAN: 0 of (\d+) cases; (\d+) not implemented",
        lambda: (sum(_ops().values()), sum(_ops().values())),
    ),
    Figure(
        "docs/ports.md",
        r"PASS for (\d+) of (\d+) cases; (\d+) not implemented",
        lambda: (_ops()["softmax"], sum(_ops().values()), sum(_ops().values()) - _ops()["softmax"]),
    ),
    Figure("docs/truth-and-bounds.md", r"the mutation kit's (\d+) controls", lambda: (_mutation_controls(),)),
    # the C kit as make test runs it (scope "home"): its mutants and the cases they run
    Figure("docs/generated-cases-and-mutation.md", r"(\d+) mutants, (\d+) cases, about", lambda: _c_kit_cases()),
    # the float32 tier: its applicable cases of the catalogue's (every operation), and the training
    # steps among them (fixtures/precision/float32/manifest.json)
    Figure(
        "docs/precision.md",
        r"cases of every operation \((\d+) of the (\d+) are applicable",
        lambda: (
            sum(1 for e in _float32_tier() if not e["id"].startswith(("softmax_f32_", "sdpa_f32_"))),
            sum(_ops().values()),
        ),
    ),
    Figure(
        "docs/precision.md",
        r"what Flux users run, are judged on (\d+) cases",
        lambda: (sum(1 for e in _float32_tier() if e["op"] == "classifier_step"),),
    ),
    # the mixed and float16 tiers' applicable and not applicable cases, from their manifests
    *(
        Figure("docs/precision.md", rf"\| `{name}` \| (\d+) \| (\d+) \|", lambda name=name: _tier_counts(name))
        for name in ("bfloat16/float32", "float16/float32")
    ),
    Figure("docs/precision.md", r"Measured: (\d+) of the tier's (\d+) cases are applicable", lambda: _float16_counts()),
]


def _tier_counts(name: str) -> tuple[int, int]:
    from attention_ports.fixtures.store import read_manifest
    from attention_ports.spec.precision import fixtures_dir

    manifest = read_manifest(fixtures_dir(name))
    return len(manifest["cases"]), len(manifest["truth"]["not_applicable"])


def _float16_counts() -> tuple[int, int]:
    applicable, not_applicable = _tier_counts("float16")
    return applicable, applicable + not_applicable


# Counts of cases that are not the catalogue's: settings of generated runs, or a run's own output
# that an example test below checks; (page, the words around the figure).
OTHER_CASE_COUNTS = {
    ("docs/generated-cases-and-mutation.md", r"a fixed seed \(\d+\) and 105 cases per"),
    ("docs/generated-cases-and-mutation.md", r"and 210 cases"),
    ("docs/cli.md", r"seed 20261123 and 105 cases per"),  # generated.CI_PROFILE, as on the page above
    ("docs/generated-cases-and-mutation.md", r"runs of 600 cases per"),
    ("docs/cli.md", r"fewer than 2 cases"),
    # our Julia port in Float32 judged at float64: asserted by tests/runtimes/test_precision.py
    ("docs/precision.md", r"fail 39\s+of 43 cases"),
    ("docs/precision.md", r"fail 59 of 60 cases"),
    ("docs/precision.md", r"all 60 of those cases"),
    ("docs/generated-cases-and-mutation.md", r"caught by >= 2 cases"),  # the rule, mutation.MIN_KILLS
    ("docs/cli.md", r"NOTHING RAN: 0 of N cases"),  # the headline's form, N any count
    # a pytest-split group's summary line: asserted by tests/test_pytest_plugin.py
    ("docs/ports.md", r"ran 1 of its 3 selected cases"),
    ("docs/ports.md", r"verdict: FAIL: 1 of 2 cases fail"),  # the walk-through run's, checked below
    ("docs/truth-and-bounds.md", r"failed 12 cases in R and in Julia"),  # before issue 19's rule: history
    # issue 27's new-user trial, its first and second runs: history (the 79 cases of the port's five
    # operations: asserted by tests/runtimes/command/test_newuser_c.py)
    ("docs/protocol.md", r"FAIL: 191 of 191 cases fail"),
    ("docs/protocol.md", r"PASS for 79 of 191 cases"),
}


def _flat(page: str) -> str:
    return re.sub(r"\s+", " ", (REPO / page).read_text())


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"{f.page}:{f.pattern[:30]}")
def test_a_figure_in_the_docs_is_the_codes(figure: Figure) -> None:
    m = re.search(figure.pattern, _flat(figure.page))
    assert m is not None, f"{figure.page} no longer says /{figure.pattern}/: update FIGURES in tests/test_docs.py"
    got = tuple(int(g) for g in m.groups())
    assert got == figure.expected(), f"{figure.page}: '{m.group(0)}' should read the figures {figure.expected()}"


def test_every_count_of_cases_in_the_docs_is_checked() -> None:
    """A number of cases typed into a page must be one of FIGURES (or named in OTHER_CASE_COUNTS)."""
    unchecked = []
    for page in PAGES:
        rel = _rel(page)
        if rel == "docs/coverage.md":
            continue  # generated, and checked by tests/tools/test_coverage.py
        text = _flat(rel)
        covered = [m.span() for f in FIGURES if f.page == rel for m in re.finditer(f.pattern, text)]
        covered += [m.span() for p, pat in OTHER_CASE_COUNTS if p == rel for m in re.finditer(pat, text)]
        for m in re.finditer(r"\b(\d[\d,]*)(?: [\w-]+){0,2} cases\b", text):
            if not any(a <= m.start() and m.end() <= b for a, b in covered):
                unchecked.append(f"{rel}: '{m.group(0)}'")
    assert not unchecked, "counts of cases no test checks (add them to FIGURES):\n" + "\n".join(unchecked)


# --------------------------------------------------------------------------------------------
# example runs: each `$ attention-ports verify ...` block in the docs is the real output


@dataclass(frozen=True)
class Example:
    lang: str
    # the file name the example's command uses, written into a temporary folder where the command
    # runs; None: the command names a port of the repository and runs at its root
    port: str | None
    operations: str | None = None  # replaces the walk-through port's declared operations, if given


EXAMPLES = {
    "$ attention-ports verify --port r=my_port.R --case sdpa_fully_masked_row --case sdpa_L2_d3": Example(
        "r", "my_port.R", None
    ),
    "$ attention-ports verify --port julia=MyPort.jl --case sdpa_fully_masked_row --case sdpa_L2_d3": Example(
        "julia", "MyPort.jl", None
    ),
    "$ attention-ports verify --port r=my_port.R --quiet": Example("r", "my_port.R", 'c("softmax")'),
    "$ attention-ports verify --random 50 --seed 3 --port r=tests/data/ports/r/user_sdpa_unscaled.R": Example(
        "r", None
    ),
}


def example_blocks() -> list[tuple[str, str, list[str]]]:
    """(page, command, the lines after it) of every fenced block that starts with `$ attention-ports verify`."""
    out = []
    for page in PAGES:
        for m in re.finditer(r"^```\w*\n(\$ attention-ports verify[^\n]*)\n(.*?)^```", page.read_text(), re.M | re.S):
            out.append((_rel(page), m.group(1), m.group(2).splitlines()))
    return out


def _matches(doc: list[str], actual: list[str]) -> bool:
    """Doc lines against the real ones, in order: a line '...' stands for any run of lines, '...'
    inside a line for any text; every other line is the real line."""
    if not doc:
        return not actual
    if doc[0].strip() == "...":
        return any(_matches(doc[1:], actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(part) for part in doc[0].split("..."))
    return re.fullmatch(pattern, actual[0]) is not None and _matches(doc[1:], actual[1:])


def _run_example(command: str, example: Example, folder: Path) -> tuple[list[str], int]:
    try:
        registry.create(example.lang).close()
    except ImplementationUnavailable as exc:
        require(example.lang, str(exc))
    if example.port is None:
        folder = REPO
    else:
        _write_port(example, folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = command.removeprefix("$ attention-ports ").split()
    proc = subprocess.run(
        [sys.executable, "-m", "attention_ports.cli", *argv], cwd=folder, env=env, capture_output=True, text=True
    )
    # repro lines name the port by the path given, or by its absolute path: show it as given
    out = proc.stdout.replace(f"{folder}{os.sep}", "")
    return out.rstrip("\n").splitlines(), proc.returncode


def _write_port(example: Example, folder: Path) -> None:
    assert example.port is not None
    text = WALKTHROUGH[example.lang].read_text()
    if example.operations is not None:
        declared = {"r": r"^attention_ports <- list\(operations = .*\)", "julia": r"^const attention_ports = \(.*\)"}
        new = {
            "r": f"attention_ports <- list(operations = {example.operations})",
            "julia": f"const attention_ports = (operations = {example.operations},)",
        }
        text = re.sub(declared[example.lang] + "$", new[example.lang], text, count=1, flags=re.M)
    (folder / example.port).write_text(text)


@pytest.mark.parametrize(("page", "command", "lines"), example_blocks(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_example_run_in_the_docs_is_the_real_output(
    page: str, command: str, lines: list[str], tmp_path: Path
) -> None:
    assert command in EXAMPLES, f"{page}: the example `{command}` is not run by tests/test_docs.py: add it to EXAMPLES"
    example = EXAMPLES[command]
    want_rc = None
    if len(lines) >= 2 and lines[-2] == "$ echo $?":
        want_rc, lines = int(lines[-1]), lines[:-2]
    actual, rc = _run_example(command, example, tmp_path)
    assert _matches(lines, actual), (
        f"{page}: the example `{command}` is not what the run prints; it prints:\n" + "\n".join(actual)
    )
    if want_rc is not None:
        assert rc == want_rc, f"{page}: `{command}` exits {rc}, the page says {want_rc}"


def test_the_walkthrough_ports_are_the_skeletons_with_two_operations(tmp_path: Path) -> None:
    """The docs say the walk-through port is `init`'s skeleton with softmax and SDPA filled in."""
    for lang, name in (("r", "my_port.R"), ("julia", "MyPort.jl")):
        assert cli.main(["init", lang, str(tmp_path / name)]) == 0
        skeleton = (tmp_path / name).read_text().replace(str(tmp_path / name), name)
        port = WALKTHROUGH[lang].read_text()
        # every stub but the two written is there unchanged
        stubs = re.findall(r"^(?:function |)(\w+)(?: <- function|\()", skeleton, flags=re.M)
        for op in set(stubs) - {"softmax", "scaled_dot_product_attention"}:
            assert f"{op} is not written yet" in port, (lang, op)
        for op in ("softmax", "scaled_dot_product_attention"):
            assert f"{op} is not written yet" not in port, (lang, op)


def test_the_contract_names_the_operations_each_precision_tier_covers() -> None:
    """ports/CONTRACT.md says which operations the tiers cover; spec/precision.py decides it."""
    text = " ".join((REPO / "ports" / "CONTRACT.md").read_text().split())
    left = set(ops.OPS) - set(precision.TIER_OPS)
    if not left:
        assert "The float32 tier covers every operation;" in text, "ports/CONTRACT.md: the float32 tier covers all"
    else:
        but = re.search(r"The float32 tier covers every operation but (.+?), for now;", text)
        assert but, "ports/CONTRACT.md no longer says which operations the float32 tier covers"
        assert set(re.split(r", | and ", but.group(1))) == left
    kernel = re.search(r"the mixed and float16 tiers cover (.+?), each with its declared rounding points \(", text)
    assert kernel, "ports/CONTRACT.md no longer says which operations the storage tiers cover"
    assert set(re.split(r", | and ", kernel.group(1))) == set(precision.STORAGE_TIER_OPS)


# What each precision tier covers, said once in one form on every page that says it (issue 26: four
# pages said it four ways, some false): "the float32 tier covers every operation but gpt_train",
# "the mixed and float16 tiers cover every operation but ...", the lists from spec/precision.py.
_OP = "(?:" + "|".join(sorted(map(re.escape, ops.OPS), key=len, reverse=True)) + ")"
TIER_COVERAGE = re.compile(
    r"(?:[Tt]he )?(float32 tier|mixed and float16 tiers?)(?: \([^)]*\))? (?:covers?|holds?) every operation"
    rf"(?: but ((?:{_OP}, )*{_OP}(?: and {_OP})?))?"
)
# Statements of a tier's coverage in any other form: what the pages said before.
STALE_COVERAGE = re.compile(
    r"(?:tiers?|float16`?|precision[^.]{0,120}?) (?:covers?|holds?) softmax and SDPA"
    r"|softmax and SDPA for now|catalogue's softmax and SDPA cases|float32 tier \(softmax and SDPA\)"
    r"|float32 tier (?:covers|holds) every operation(?! but)"
)


def _tier_left_out(tier: str) -> set[str]:
    covered = precision.TIER_OPS if tier == "float32 tier" else precision.STORAGE_TIER_OPS
    return set(ops.OPS) - set(covered)


def test_every_page_says_what_each_precision_tier_covers_in_one_form() -> None:
    said: dict[str, int] = Counter()
    for page in PAGES:
        text = " ".join(_prose(page.read_text()).split())
        stale = [m.group(0) for m in STALE_COVERAGE.finditer(text)]
        assert not stale, f"{_rel(page)} states a tier's coverage another way: {stale}"
        for m in TIER_COVERAGE.finditer(text):
            tier = "float32 tier" if m.group(1) == "float32 tier" else "storage tiers"
            named = set(re.split(r", | and ", m.group(2))) if m.group(2) else set()
            assert named == _tier_left_out(tier), f"{_rel(page)}: '{m.group(0)}' (spec/precision.py decides it)"
            said[_rel(page)] += 1
    pages = {"README.md", "docs/cli.md", "docs/ports.md", "docs/fixtures.md", "docs/precision.md"}
    assert pages <= set(said), f"these pages no longer say it in the one form: {pages - set(said)}"


def test_an_r_port_declaring_float32_is_said_to_error_not_to_be_judged() -> None:
    """An R port declaring float32 gets a load error, so every case errors (run: every one of its
    cases is ERROR, tests/runtimes/test_declaration.py); no page says it is judged at float64."""
    for rel in ("docs/ports.md", "docs/precision.md", "ports/CONTRACT.md"):
        text = _flat(rel)
        assert "every case an `error` until the field is removed" in text or (
            "every case is an `error` until the field is removed" in text
        ), rel
        assert not re.search(r"declares `?\"?float32\"?`? gets a load error saying so, and is judged", text), rel


def test_the_contract_says_absent_options_are_omitted_as_the_adapters_do() -> None:
    """The contract's signatures show defaults' values (``eps = 1e-5``), init's skeleton writes
    ``eps = NULL``: the contract says an absent option is omitted, and the R adapter omits it."""
    import numpy as np

    from attention_ports.runtimes.r.adapter import build_call

    text = _flat("ports/CONTRACT.md")
    assert "is **omitted** from the call, never passed as `NULL` or `nothing`" in text
    assert "`attention-ports init` writes `eps = NULL`" in text
    spec = ops.get("layer_norm")
    names = [a.name for a in build_call(spec, {"x": np.ones((2, 3))}, {"eps": None})]
    assert names == ["x"]
