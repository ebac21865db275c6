"""The verify reports: table, JSON, JUnit, markdown and HTML, from one real run with a failure.

The run: the reference and a KNOWN-BAD R port (tests/data/ports/r/mask_multiplied.R, which
multiplies the scores by its mask) on a passing case, a failing case and a case the port does not
declare (missing). The HTML page is rendered by a real headless Chromium (Debian's ``chromium``;
skipped locally without it, a failure under CI=true): the screenshot must not be blank and must
show the failing case's heatmaps, and the rendered DOM must hold the table and those heatmaps.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.core import progress
from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.results import CaseResult, FailedArrays, OutputResult
from attention_ports.judge.runner import judge, run_suite
from attention_ports.report import Report, heatmap, html_page, json_report, junit, markdown, text
from attention_ports.report.model import cell_numbers
from attention_ports.runtimes.impl import Arrays, Implementation
from attention_ports.tools import doctor
from tests.conftest import require
from tests.faults.conftest import check_runtime

PORT = Path(__file__).resolve().parents[1] / "data" / "ports" / "r" / "mask_multiplied.R"
PASSING, FAILING, MISSING = "sdpa_L2_d3", "sdpa_causal_additive", "softmax_ties"


@pytest.fixture(scope="module")
def results() -> list[CaseResult]:
    check_runtime("r")
    return run_suite(
        REPO_FIXTURES, ["reference", "r"], {"r": PORT}, [PASSING, FAILING, MISSING], required={"r"}, progress=None
    )


@pytest.fixture(scope="module")
def report(results: list[CaseResult]) -> Report:
    return Report(results, {"implementations": ["reference", "r"], "ports": {"r": str(PORT)}})


def by_key(results: list[CaseResult]) -> dict[tuple[str, str], CaseResult]:
    return {(r.impl, r.case): r for r in results}


def test_the_run_has_a_pass_a_failure_and_a_missing_case(results: list[CaseResult]) -> None:
    cells = {k: r.status for k, r in by_key(results).items()}
    assert cells[("r", PASSING)] == "pass" and cells[("r", FAILING)] == "fail" and cells[("r", MISSING)] == "missing"
    assert {cells[("reference", c)] for c in (PASSING, FAILING, MISSING)} == {"pass"}


# ---------------------------------------------------------------- table


class _TinyError(Implementation):
    """The reference, off by 1e-9 where it should be exactly zero: a failure whose relative error
    and ulps are 0 (an unresolved element has neither), the shape of issue 11's
    ``fail 5.2e-01 4.7e-16`` row that looked like a pass."""

    name = "tiny"

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        from attention_ports.runtimes.builtin import call_reference

        out = call_reference(op, inputs, options)
        w = out["weights"].copy()
        w[w == 0] = 1e-9
        out["weights"] = w
        return out


def test_a_failing_row_cannot_read_as_a_pass() -> None:
    entry = next(e for e in iter_entries(REPO_FIXTURES) if e["id"] == FAILING)
    case = load_case(REPO_FIXTURES, entry)
    res = CaseResult("tiny", case.id, case.op, judge("tiny", case, _TinyError()))
    assert res.status == "fail" and res.max_rel_err is not None and res.max_rel_err < 1e-12
    nums = cell_numbers(res)
    assert nums["status"] == "FAIL" and nums["ulps"] == "-"
    assert float(nums["err/bnd"]) > 1e200  # 1e-9 against a bound of ~1e-301: the headline is the failure
    row = next(ln for ln in text.table(Report([res])).splitlines() if ln.startswith(FAILING))
    assert row.split()[:2] == [FAILING, "FAIL"]


def test_the_table_puts_status_first_and_shows_err_over_bound(report: Report) -> None:
    lines = text.table(report).splitlines()
    assert lines[0].split() == ["case", "reference", "r"]
    assert lines[1].split() == ["status", "err/bnd", "bad", "ulps"] * 2
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[3:]}
    ref_pass, r_fail = rows[FAILING][:4], rows[FAILING][4:]
    assert ref_pass[0] == "pass" and 0 <= float(ref_pass[1]) <= 1 and ref_pass[2] == "0"
    assert r_fail[0] == "FAIL" and float(r_fail[1]) > 1 and int(r_fail[2]) > 0 and r_fail[3] == "-"
    assert rows[MISSING][4:] == ["missing", "-", "-", "-"]


def test_the_summary_says_what_missing_means(report: Report) -> None:
    lines = text.summary_lines(report).splitlines()
    assert (
        "  r: 1 case(s) missing: operations the port does not implement (not declared, or not defined); never a pass"
        in lines
    )
    assert "(failures under --strict)" in text.summary_lines(Report(report.results, strict=True))
    assert lines[-1] == "verdict: FAIL: 1 of 6 implementation x case results fail; 1 not implemented (r)"


def test_a_headline_says_pass_only_when_every_case_ran_and_agreed(report: Report) -> None:
    # Without the failing case: nothing failed, but r's softmax case did not run (not implemented).
    ran = [r for r in report.results if r.case != FAILING]
    partial = Report(ran)
    assert partial.ok and not partial.complete
    headline = "PASS for 3 of 4 implementation x case results; 1 not implemented (r)"
    assert partial.headline() == headline
    assert markdown.render(partial).splitlines()[0] == f"## attention-ports verify: {headline}"
    assert f'<div class="banner partial">{headline}</div>' in html_page.render(partial)
    assert {p.get("value") for p in junit.element(partial).iter("property") if p.get("name") == "verdict"} == {headline}
    assert partial.summary()["headline"] == headline and partial.summary()["ok"] is True
    # --strict: the case that did not run fails the run, counted once, as missing.
    strict = Report(ran, strict=True)
    assert not strict.ok and strict.headline() == (
        "FAIL: 3 of 4 implementation x case results pass; 1 not implemented (r) (failing under --strict)"
    )
    # CI=true: an implementation that passed nothing fails the run though nothing failed.
    only_missing = [r for r in ran if not (r.impl == "r" and r.case == PASSING)]
    ci = Report(only_missing, ci=True)
    assert ci.zero_pass() == ["r"] and not ci.ok
    assert ci.headline() == (
        "FAIL: r passed zero cases (CI=true: a run must prove its cases ran); 1 not implemented (r)"
    )
    assert Report(only_missing).ok  # locally a partial port is the author's business
    # Every case ran and agreed: the plain PASS.
    everything = Report([r for r in ran if r.impl == "reference"])
    assert everything.complete and everything.headline() == "PASS: all 2 cases agree with the truth"
    assert '<div class="banner ok">' in html_page.render(everything)


# ---------------------------------------------------------------- JSON


def test_json_v5_keeps_v2_fields_and_stores_a_cases_shared_fields_once(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    json_report.write_json(report, path)
    doc = json.loads(path.read_text())
    assert doc["version"] == 5
    v2 = {"impl", "case", "output", "status", "max_abs_err", "max_rel_err", "max_ulp_err", "err_over_bound", "message"}
    for row in doc["results"]:
        assert v2 <= set(row)
    bad = [row for row in doc["results"] if row["impl"] == "r" and row["case"] == FAILING]
    assert {row["output"] for row in bad} == {"output", "weights"}
    for row in bad:
        assert row["status"] == "fail" and row["mismatches"] > 0 and row["total"] == np.prod(row["expected_shape"])
        assert row["diagnosis"].startswith("right for a different mask: the mask multiplies the scores")
        assert "flags" not in row and "reason" not in row  # format 5: once per case, in "cases"
    (case,) = [c for c in doc["cases"] if c["impl"] == "r" and c["case"] == FAILING]
    assert case["flags"] == ["mask", "random"] and case["reason"]
    assert doc["agreement"]["reference"]["reference"] == {"agree": 5, "compared": 5, "unknown": 0}
    assert doc["agreement"]["reference"]["r"] == {"agree": 2, "compared": 4, "unknown": 0}
    assert doc["summary"]["ok"] is False


def test_every_format_explains_its_marks_and_large_ulps() -> None:
    """pass:0 (a masked-query convention) and a pass with ~1e+05 ulps come with their legends."""
    from attention_ports.report.model import COLUMNS_LEGEND, CONVENTION_LEGEND, ULPS_NOTE

    cases = ["sdpa_fully_masked_row", "sdpa_L256_d64"]
    rep = Report(run_suite(REPO_FIXTURES, ["reference"], {}, cases, progress=None))
    table = text.table(rep)
    assert "pass:0" in table and CONVENTION_LEGEND in table and COLUMNS_LEGEND in table
    acc = text.accuracy_table(rep)
    # sdpa_L256_d64's reference shows 1e+05 ulps on most BLAS kernels, 13208 under Sandybridge's
    assert re.search(r" (\d{5}|\de\+0[4-9]) / 0\.", acc) and acc.endswith(ULPS_NOTE)
    md = markdown.render(rep)
    assert "pass:0" in md and f"{CONVENTION_LEGEND}." in md and f"{COLUMNS_LEGEND}." in md
    assert CONVENTION_LEGEND in html_page.render(rep).replace("&#x27;", "'")


# ---------------------------------------------------------------- JUnit


def test_junit_has_one_testcase_per_implementation_and_case(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    junit.write_junit(report, path)
    root = ET.parse(path).getroot()  # well-formed XML
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["attention-ports.reference", "attention-ports.r"]
    cases = [(tc.get("classname"), tc.get("name")) for s in suites for tc in s.findall("testcase")]
    assert len(cases) == len(set(cases)) == 6
    for s in [root, *suites]:  # the counts agree with the testcases, at every level
        tcs = s.iter("testcase")
        kinds = [next((k for k in ("failure", "error", "skipped") if tc.find(k) is not None), "") for tc in tcs]
        assert int(s.get("tests")) == len(kinds)
        assert int(s.get("failures")) == kinds.count("failure")
        assert int(s.get("errors")) == kinds.count("error")
        assert int(s.get("skipped")) == kinds.count("skipped")
        assert float(s.get("time")) >= 0
    r_suite = {tc.get("name"): tc for tc in suites[1].findall("testcase")}
    failure = r_suite[FAILING].find("failure")
    assert failure is not None
    # the headline and the diagnosis: an annotation reporter shows the attribute, not the body
    assert failure.get("message").startswith(
        "case 'sdpa_causal_additive', output 'output': 28 of 32 elements (87.5%) differ beyond their error bounds"
        " -- diagnosis: right for a different mask: the mask multiplies the scores (keep = 1, remove = 0)"
    )
    assert "a removed key gets the score 0 instead of -Inf" in failure.get("message")
    # classnames group by implementation and operation
    assert {tc.get("classname") for tc in suites[1].findall("testcase")} == {
        "attention_ports.r.scaled_dot_product_attention",
        "attention_ports.r.softmax",
    }
    assert "  diagnosis: right for a different mask: the mask multiplies the scores" in failure.text
    assert "  what this case tests: The same causal mask in additive form" in failure.text
    assert r_suite[MISSING].find("skipped") is not None
    assert r_suite[PASSING].find("failure") is None and r_suite[PASSING].find("skipped") is None
    props = {p.get("name"): p.get("value") for p in r_suite[FAILING].iter("property")}
    assert props["flags"] == "mask, random" and props["operation"] == "scaled_dot_product_attention"


def test_junit_under_strict_fails_a_missing_case_and_survives_control_characters(
    report: Report, tmp_path: Path
) -> None:
    path = tmp_path / "strict.xml"
    junit.write_junit(Report(report.results, strict=True), path)
    tcs = {
        tc.get("name"): tc
        for tc in ET.parse(path).getroot().iter("testcase")
        if tc.get("classname").startswith("attention_ports.r.")
    }
    assert tcs[MISSING].find("failure") is not None
    assert junit.clean("colour \x1b[31mred\x1b[0m\x00") == "colour \\x1b[31mred\\x1b[0m\\x00"


# ---------------------------------------------------------------- markdown


def test_markdown_summary_leads_with_the_verdict_and_lists_each_failure(report: Report, tmp_path: Path) -> None:
    doc = markdown.render(report)
    lines = doc.splitlines()
    assert lines[0] == (
        "## attention-ports verify: FAIL: 1 of 6 implementation x case results fail; 1 not implemented (r)"
    )
    assert "| implementation | pass | fail | error | missing | unavailable |" in lines
    assert "| r | 1 | 1 | 0 | 1 | 0 |" in lines
    row = next(ln for ln in lines if ln.startswith("| r | `sdpa_causal_additive` |"))
    assert "| **FAIL** |" in row and "right for a different mask: the mask multiplies the scores" in row
    assert "<details><summary>r · sdpa_causal_additive: fail</summary>" in lines
    assert "```text" in lines
    path = tmp_path / "summary.md"
    markdown.write_markdown(report, path)
    assert path.read_text() == doc
    assert markdown._cell("a|b\nc") == "a\\|b c"


def test_markdown_appends_to_the_github_step_summary_and_replaces_any_other_file(
    report: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "step_summary"
    summary.write_text("## an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    doc = markdown.render(report)
    monkeypatch.chdir(tmp_path)
    markdown.write_markdown(report, Path("step_summary"))  # the same file, spelt relatively
    markdown.write_markdown(report, summary)
    assert summary.read_text() == "## an earlier step's summary\n" + ("\n" + doc) * 2
    other = tmp_path / "summary.md"
    other.write_text("old")
    markdown.write_markdown(report, other)
    assert other.read_text() == doc


# ---------------------------------------------------------------- HTML


def test_html_page_is_self_contained_with_heatmaps_for_the_failure(report: Report) -> None:
    page = html_page.render(report)
    assert page.startswith("<!DOCTYPE html>")
    for external in ("<script", "<link", "src=", "http://", "https://"):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', ""), external
    for kind in ("expected", "actual", "error"):
        assert f'data-kind="{kind}"' in page
    assert f'data-case="{FAILING}"' in page and f'data-case="{PASSING}"' not in page
    assert '<table class="agreement">' in page and '<table class="cases">' in page
    assert "Diagnosis:</b> right for a different mask: the mask multiplies the scores" in page


def test_html_heatmaps_of_a_julia_port_are_drawn_in_julias_layout() -> None:
    from attention_ports.runtimes.julia import adapter as julia_adapter
    from attention_ports.spec.ops import Role
    from attention_ports.spec.portview import PortView

    e = np.arange(6.0).reshape(3, 2) / 10  # reference layout: 3 queries x 2 keys
    a = e.copy()
    a[2, 0] = np.nan
    view = PortView("Julia", "weights", Role.SCORES, lambda n: julia_adapter._axes(Role.SCORES, n))
    out = OutputResult("julia", "c", "weights", "fail", arrays=FailedArrays(e, a, np.full((3, 2), 1e-16), view))
    section = html_page._heatmaps(CaseResult("julia", "c", "scaled_dot_product_attention", [out]), out)
    assert "weights: Julia layout, key x query, 1-based, shape (2, 3)" in section
    assert "<title>weights[1, 3]: NaN</title>" in section  # the NaN at the reference's [2, 0]
    assert "rows: key, columns: query" in section


def _many_large_failures(n: int = 20, shape: tuple[int, ...] = (4, 256, 256)) -> Report:
    """``n`` failures of a 3-D output, each wrong from another query on, one cause named in each."""
    rng = np.random.default_rng(16)
    results = []
    for k in range(n):
        e = rng.standard_normal(shape)
        a = e.copy()
        a[:, k:, :] += rng.standard_normal((shape[0], shape[1] - k, shape[2]))
        out = OutputResult(
            "r",
            f"case{k}",
            "weights",
            "fail",
            diagnosis=f"wrong from the query {k + 1} on: the mask multiplies the scores",
            arrays=FailedArrays(e, a, np.full(shape, 1e-15)),
        )
        results.append(CaseResult("r", f"case{k}", "scaled_dot_product_attention", [out]))
    return Report(results)


def test_a_report_of_twenty_large_failures_stays_small_pooled_and_grouped() -> None:
    """Per-element SVG made this report 68 MB (measured); pooled images keep it under 1 MB."""
    page = html_page.render(_many_large_failures())
    assert len(page) < 1_000_000, len(page)
    heatmaps = re.findall(r'<svg [^>]*class="heatmap".*?</svg>', page)
    assert len(heatmaps) == 20 * 4 * 3  # 4 heads of expected, actual, error per failure
    assert max(len(h) for h in heatmaps) < 8_000
    assert "256 x 256 pooled to 64 x 64: worst of each" in page
    assert "256 x 256 pooled to 64 x 64: mean of each" in page
    # one image per heatmap, 64 x 64 indexed pixels
    png = base64.b64decode(re.search(r'href="data:image/png;base64,([^"]+)"', heatmaps[2]).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (64, 64)
    # colour scales: the values' (numbered with the row's range) per row, the error's once
    assert page.count('class="colour-scale" data-kind="values"') == 20 * 4
    assert page.count('class="colour-scale" data-kind="error"') == 1
    # the shared cause, said once, linking all twenty
    assert "<b>20 failures</b> share one cause: the mask multiplies the scores" in page
    assert page.count("(a cause 20 failures share: see above)") == 20


def test_a_small_array_keeps_a_titled_cell_per_element() -> None:
    e = np.arange(12.0).reshape(3, 4)
    out = heatmap.svg(e, "expected", "expected", scale=11.0, name="w", base=1)
    assert out.count("<rect") == 12 and "<image" not in out
    assert "<title>w[3, 4]: 11</title>" in out


def _png_rgb(path: Path) -> np.ndarray:
    """The pixels of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes), as (h, w, 3)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), dtype=np.int32)
    prev = np.zeros(w * bpp, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros_like(line)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth depend on the left neighbour: byte by byte
            for i in range(len(line)):
                left = cur[i - bpp] if i >= bpp else 0
                up, ul = prev[i], (prev[i - bpp] if i >= bpp else 0)
                if f == 1:
                    pred = left
                elif f == 3:
                    pred = (left + up) // 2
                else:
                    p = left + up - ul
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                    pred = left if pa <= pb and pa <= pc else up if pb <= pc else ul
                cur[i] = (line[i] + pred) & 0xFF
        out[y], prev = cur, cur
    return out.reshape(h, w, bpp)[:, :, :3]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        require("chromium", "Debian's chromium renders the HTML report (apt-get install -y chromium)")
    return str(found)


def test_html_report_renders_in_a_headless_browser(report: Report, tmp_path: Path) -> None:
    browser = _chromium()
    page = tmp_path / "report.html"
    html_page.write_html(report, page)
    shot = tmp_path / "report.png"
    flags = [
        "--headless",
        "--no-sandbox",  # root in a container
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run(
        [browser, *flags, "--window-size=1200,1800", f"--screenshot={shot}", page.as_uri()],
        env=env,
        capture_output=True,
        timeout=180,
        check=True,
    )
    pixels = _png_rgb(shot)
    assert pixels.shape[:2] == (1800, 1200)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # not blank: text, tables, colours
    # The failing case's error heatmap: cells far beyond their bound are dark red (heatmap._error).
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    dark_red = (r > 120) & (r < 180) & (g < 40) & (b < 40)
    assert dark_red.sum() > 2000, dark_red.sum()
    # ... and the passing cells' green, the expected values' blue.
    assert ((g > 200) & (r < 200) & (b < 200)).sum() > 500
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    assert '<table class="cases">' in dom and '<table class="agreement">' in dom
    assert f'data-case="{FAILING}"' in dom and 'class="heatmap" data-kind="error"' in dom


def test_pooled_heatmap_images_render_in_a_headless_browser(tmp_path: Path) -> None:
    """The pooled PNG heatmaps draw: the error map's dark red (~1e15 x bound) and the values' colours."""
    browser = _chromium()
    page = tmp_path / "large.html"
    html_page.write_html(_many_large_failures(n=1, shape=(1, 256, 256)), page)
    shot = tmp_path / "large.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'p'}"]
    subprocess.run(
        [browser, *flags, "--window-size=1200,1400", f"--screenshot={shot}", page.as_uri()],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        timeout=180,
        check=True,
    )
    pixels = _png_rgb(shot)
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    assert ((r > 120) & (r < 180) & (g < 40) & (b < 40)).sum() > 20_000  # the 256 x 256 px error image
    assert ((b == 255) & (r < 240)).sum() > 500  # negative values: blue (pale: block means of noise)


# ---------------------------------------------------------------- the command line and progress


def test_verify_writes_every_report_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    targets = {
        flag: tmp_path / f"report.{ext}"
        for flag, ext in [("--json", "json"), ("--junit", "xml"), ("--markdown", "md"), ("--html", "html")]
    }
    args = ["verify", "--impl", "reference", "--case", "seed00*"]
    for flag, path in targets.items():
        args += [flag, str(path)]
    assert cli.main(args) == 0
    capsys.readouterr()
    doc = json.loads(targets["--json"].read_text())
    assert doc["summary"]["ok"] is True
    # meta says what judged what: the tool's and runtimes' versions, the fixtures' manifest hash
    assert doc["meta"]["versions"] == {
        "attention_ports": doctor.tool_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    manifest = (REPO_FIXTURES / "manifest.json").read_bytes()
    assert doc["meta"]["fixtures"]["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert ET.parse(targets["--junit"]).getroot().get("failures") == "0"
    assert targets["--markdown"].read_text().startswith("## attention-ports verify: PASS: all 6 cases agree")
    assert "PASS: all 6 cases agree with the truth" in targets["--html"].read_text()


def test_the_json_meta_records_the_versions_of_the_runtimes_a_run_used(tmp_path: Path, capsys) -> None:
    check_runtime("r")
    check_runtime("julia")
    path = tmp_path / "r.json"
    args = ["verify", "--quiet", "--impl", "torch", "--impl", "r", "--impl", "julia", "--case", "seed000_four_words"]
    assert cli.main([*args, "--json", str(path)]) == 0
    capsys.readouterr()
    versions = json.loads(path.read_text())["meta"]["versions"]
    assert re.fullmatch(r"R version \d+\.\d+\.\d+.*", versions["r"]), versions
    assert re.fullmatch(r"julia version \d+\.\d+\.\d+", versions["julia"]), versions
    import torch

    assert versions["torch"] == torch.__version__


def test_progress_is_a_live_bar_on_a_terminal_and_plain_lines_in_a_log() -> None:
    import io

    log = io.StringIO()
    show = progress.VerifyProgress(log, live=False)
    for i in range(1, 21):
        show("r", i, 20, f"case{i}")
    lines = log.getvalue().splitlines()
    # the first case, then every tenth of the way: a CI log shows the run is alive, not every case
    assert [ln.split(" cases")[0] for ln in lines] == [f"[r]: {i}/20" for i in (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20)]
    tty = io.StringIO()
    bar = progress.VerifyProgress(tty, live=True)
    bar("julia", 1, 4, "sdpa_L2_d3")
    bar("julia", 4, 4, "mha_h4")
    out = tty.getvalue()
    assert out.startswith("\r\x1b[K[julia] [#######.......................] 1/4")
    assert out.endswith("mha_h4\n") and "[##############################] 4/4" in out


@pytest.mark.parametrize("shape", [(300, 70), (64, 200), (65, 64), (1, 500)])
def test_a_large_heatmap_shows_each_blocks_worst_error_and_mean_value(shape: tuple[int, int]) -> None:
    from attention_ports.report import heatmap

    m = np.random.default_rng(7).standard_normal(shape) * 10
    m[0, 5], m[-1, -1], m[0, -3] = np.nan, np.inf, -np.inf
    rows, cols = heatmap._edges(shape[0]), heatmap._edges(shape[1])
    for kind in ("error", "expected"):
        got = heatmap._reduce(m, kind)
        assert got.shape == (len(rows) - 1, len(cols) - 1) == (min(shape[0], 64), min(shape[1], 64))
        for i in range(got.shape[0]):
            for j in range(got.shape[1]):
                block = m[rows[i] : rows[i + 1], cols[j] : cols[j + 1]]
                if kind == "error":
                    want = block.max() if np.isfinite(block).all() else np.inf
                else:
                    with np.errstate(invalid="ignore"):  # inf and -inf in one block: NaN
                        want = np.nan if np.isnan(block).any() else block.mean()
                np.testing.assert_allclose(got[i, j], want, rtol=1e-13, atol=0)  # the same sum, another order
