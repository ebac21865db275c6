"""One verdict, said the same way by every front end (issue 19, item 4).

The same user port on the same cases through ``attention-ports verify`` (its exit status, its
JSON, text, markdown, HTML and JUnit reports), the pytest plugin (``pytest --pyargs
attention_ports.conformance --port ...``) and the native runner of its language
(ports/r/conformance.R, ports/julia/conformance.jl): the cases passed, failed (fail or error) and
missing (an operation the port does not implement) are the same numbers everywhere, each case
counted once, and so is the exit status. Three ports per language:

- a partial port (it defines softmax only): softmax judged, the rest missing, never a pass and
  never a failure; under CI=true it passed something, so the run is green, and every headline
  says ``PASS for P of N; M not implemented``, not that everything agreed;
- a port that declares scaled dot-product attention and returns no ``weights``: a failure in every
  front end (the output it does return is still judged);
- the all-stub skeleton of ``attention-ports init``, under CI=true: it passed zero cases, so every
  front end fails the run, though nothing failed.

Real R and Julia (skipped locally without them, a failure under CI=true).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from attention_ports.tools import skeleton
from tests.test_native_runners import CLOSING, RUNNERS, USER_PORTS, native_command
from tests.test_pytest_plugin import CONFORMANCE, run_pytest

# softmax (the partial ports' one operation), attention with and without the dropped output's
# weights, and one self-attention case: an operation none of the three ports implements.
CASES = ("softmax_*", "sdpa_L*", "self_attn_L1")
CASE_ARGS = tuple(a for c in CASES for a in ("--case", c))
PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")
EXT = {"r": "R", "julia": "jl"}


@dataclass(frozen=True)
class Counts:
    passed: int
    failed: int  # fail or error: the port's fault
    missing: int  # not implemented: counted apart


@dataclass(frozen=True)
class Setting:
    kind: str  # partial, drops_output, stub
    ci: bool  # run every front end with CI=true (else with CI unset)
    exit: int  # the exit status every front end must give


SETTINGS = [
    Setting("partial", ci=True, exit=0),
    Setting("drops_output", ci=False, exit=1),
    Setting("stub", ci=True, exit=1),
]
PARTIAL = {"r": "softmax_only.R", "julia": "only_softmax.jl"}


def port_file(lang: str, kind: str, tmp_path: Path) -> Path:
    if kind == "stub":
        return skeleton.write(lang, tmp_path / f"stub.{EXT[lang]}")
    name = PARTIAL[lang] if kind == "partial" else f"weights_not_returned.{EXT[lang]}"
    return USER_PORTS / lang / name


def expected_headline(counts: Counts, n: int, lang: str, ci: bool) -> str:
    """What every report's headline must say, derived from the counts alone."""
    if counts.failed:
        head = f"FAIL: {counts.failed} of {n} cases fail"
    elif ci and counts.passed == 0:
        head = f"FAIL: NOTHING RAN: 0 of {n} cases; {lang} passed zero cases (CI=true: a run must prove its cases ran)"
    elif counts.passed == 0:
        head = f"NOTHING RAN: 0 of {n} cases"
    elif counts.missing:
        head = f"PASS for {counts.passed} of {n} cases"
    else:
        return f"PASS: all {n} cases agree with the truth"
    return head + (f"; {counts.missing} not implemented" if counts.missing else "")


def verify_counts(path: Path, lang: str) -> Counts:
    doc = json.loads(path.read_text())
    got = doc["summary"]["implementations"][lang]
    return Counts(got.get("pass", 0), got.get("fail", 0) + got.get("error", 0), got.get("missing", 0))


def pytest_counts(stdout: str) -> Counts:
    last = [ln for ln in stdout.splitlines() if " in " in ln and PYTEST_COUNT.search(ln)][-1]
    got = {kind.rstrip("s"): int(n) for n, kind in PYTEST_COUNT.findall(last)}
    return Counts(got.get("passed", 0), got.get("failed", 0) + got.get("error", 0), got.get("skipped", 0))


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.kind for s in SETTINGS])
@pytest.mark.parametrize("lang", ["r", "julia"])
def test_verify_pytest_and_the_native_runner_give_one_verdict(
    lang: str, setting: Setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    port = port_file(lang, setting.kind, tmp_path)
    if setting.ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    n = sum(any(re.fullmatch(c.replace("*", ".*"), e["id"]) for c in CASES) for e in iter_entries(REPO_FIXTURES))

    # The native runner runs while verify does (they share the cores); it inherits CI as set above.
    native_json = tmp_path / "native.json"
    native = subprocess.Popen(
        native_command(lang, RUNNERS[lang], port, "--json", str(native_json), *CASE_ARGS),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reports = {ext: tmp_path / f"verify.{ext}" for ext in ("json", "md", "html", "xml")}
    try:
        code = cli.main(
            [
                "verify",
                "--port",
                f"{lang}={port}",
                *CASE_ARGS,
                "--quiet",
                "--json",
                str(reports["json"]),
                "--markdown",
                str(reports["md"]),
                "--html",
                str(reports["html"]),
                "--junit",
                str(reports["xml"]),
            ]
        )
        native_out, _ = native.communicate(timeout=600)
    finally:
        native.kill()
        native.wait()
    ours = verify_counts(reports["json"], lang)
    text_report = capsys.readouterr().out
    assert ours.passed + ours.failed + ours.missing == n

    closing = CLOSING.findall(native_out)
    assert closing and closing[-1][0] == lang, native_out[-3000:]
    assert Counts(*(int(x) for x in closing[-1][1:])) == ours, native_out[-3000:]
    assert native.returncode == code == setting.exit, native_out[-3000:]

    proc = run_pytest(
        tmp_path, *CONFORMANCE, "--port", f"{lang}={port}", *CASE_ARGS, **({"CI": "true"} if setting.ci else {})
    )
    log = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert pytest_counts(proc.stdout) == ours, log
    assert f"fixture cases passed per implementation: {lang}: {ours.passed}/{n}" in proc.stdout, log
    assert proc.returncode == setting.exit, log

    # What each kind of port must get, whatever the counts happen to be.
    if setting.kind == "partial":
        assert ours.passed > 0 and ours.failed == 0 and ours.missing > 0
    elif setting.kind == "drops_output":
        assert ours.failed == sum(re.fullmatch("sdpa_L.*", e["id"]) is not None for e in iter_entries(REPO_FIXTURES))
        weights = {
            (r["case"], r["status"])
            for r in json.loads(reports["json"].read_text())["results"]
            if r["output"] == "weights" and r["case"].startswith("sdpa_")
        }
        assert weights and {status for _, status in weights} == {"fail"}
    else:
        assert ours == Counts(0, 0, n)

    # Every report states the one headline; none says PASS over cases that did not run.
    headline = expected_headline(ours, n, lang, setting.ci)
    doc = json.loads(reports["json"].read_text())
    assert doc["summary"]["headline"] == headline
    assert f"verdict: {headline}" in text_report.splitlines()
    assert doc["summary"]["ok"] is (setting.exit == 0)
    assert doc["summary"]["complete"] is False
    assert reports["md"].read_text().splitlines()[0] == f"## attention-ports verify: {headline}"
    assert f">{html.escape(headline)}</div>" in reports["html"].read_text()
    suites = ET.parse(reports["xml"]).getroot()
    assert {p.get("value") for p in suites.iter("property") if p.get("name") == "verdict"} == {headline}
    junit_missing = sum(1 for tc in suites.iter("testcase") if tc.find("skipped") is not None)
    junit_failed = sum(
        1 for tc in suites.iter("testcase") if tc.find("failure") is not None or tc.find("error") is not None
    )
    assert (
        Counts(len(list(suites.iter("testcase"))) - junit_missing - junit_failed, junit_failed, junit_missing) == ours
    )


def junit_counts(path: Path) -> tuple[int, int, int]:
    """(tests, failures + errors, skipped) over every <testcase> of a JUnit file."""
    cases = list(ET.parse(path).getroot().iter("testcase"))
    failed = sum(tc.find("failure") is not None or tc.find("error") is not None for tc in cases)
    return len(cases), failed, sum(tc.find("skipped") is not None for tc in cases)


@pytest.mark.parametrize("lang", ["r", "julia"])
def test_strict_fails_a_missing_case_and_counts_it_once(
    lang: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # Was: R's runner said "23 passed, 80 failed, 60 missing" of 103 (each missing case counted as
    # failed too), and Julia's Test summary showed no failure ("Broken") and then exited 1.
    monkeypatch.delenv("CI", raising=False)
    port = port_file(lang, "partial", tmp_path)
    native_junit, verify_json, verify_junit = tmp_path / "native.xml", tmp_path / "v.json", tmp_path / "v.xml"
    native = subprocess.run(
        native_command(lang, RUNNERS[lang], port, "--strict", "--junit", str(native_junit), *CASE_ARGS),
        capture_output=True,
        text=True,
        check=False,
    )
    argv = ["verify", "--strict", "--quiet", "--port", f"{lang}={port}", *CASE_ARGS]
    code = cli.main([*argv, "--json", str(verify_json), "--junit", str(verify_junit)])
    text_report = capsys.readouterr().out
    ours = verify_counts(verify_json, lang)
    n = ours.passed + ours.failed + ours.missing
    assert ours.passed > 0 and ours.failed == 0 and ours.missing > 0
    closing = CLOSING.findall(native.stdout)
    assert closing and Counts(*(int(x) for x in closing[-1][1:])) == ours, native.stdout[-3000:]
    assert f"{ours.missing} missing, failing under --strict" in native.stdout
    assert native.returncode == code == 1
    # The framework's own summary shows the failures that fail the run: testthat's, Julia Test's.
    if lang == "r":
        assert f"── {ours.missing}. Failure" in native.stdout, native.stdout[-3000:]
    else:
        assert re.search(rf"julia conformance\s*\|\s*{ours.passed}\s+{ours.missing}\s", native.stdout), native.stdout
    # JUnit, from both: a missing case is a <failure> under --strict, never also a skip.
    assert junit_counts(native_junit) == junit_counts(verify_junit) == (n, ours.missing, 0)
    headline = f"FAIL: {ours.passed} of {n} cases pass; {ours.missing} not implemented (failing under --strict)"
    assert f"verdict: {headline}" in text_report.splitlines()
    assert json.loads(verify_json.read_text())["summary"]["headline"] == headline
