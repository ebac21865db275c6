"""Output that does not grow with what a port does: a message shared by every case of a port is
printed once and stored once, and no message grows with the size of a port's declaration beyond
the stated cap (declaration.LISTED names, declaration.SHOWN_CHARS characters of a value;
docs/ports.md)."""

from __future__ import annotations

import json
from pathlib import Path

from attention_ports import cli
from attention_ports.runtimes import declaration
from tests.faults.conftest import SDPA, SOFTMAX, SOFTMAX_2, check_runtime, port

UNKNOWN = [f"no_such_operation_{i}" for i in range(1, 10001)]


def test_a_declaration_of_10000_unknown_names_is_refused_in_a_bounded_message() -> None:
    """Once a 320 KB message naming every one of them."""
    try:
        declaration.parse({"operations": UNKNOWN}, "port.R", "r")
    except declaration.DeclarationError as exc:
        message = str(exc)
    listed = ", ".join(repr(n) for n in UNKNOWN[: declaration.LISTED])
    assert f"attention_ports$operations names {listed} and 9980 more, not contract operation(s)" in message
    assert len(message) < 2000


def test_a_huge_declared_value_is_shown_cut() -> None:
    for raw, field in [({"masked_query": "z" * 10**6}, "masked_query"), ({"precision": "z" * 10**6}, "precision")]:
        try:
            declaration.parse(raw, "port.jl", "julia")
        except declaration.DeclarationError as exc:
            message = str(exc)
        assert f"attention_ports.{field} = {'z' * declaration.SHOWN_CHARS!r}... (1000000 characters)" in message
        assert len(message) < 400


def test_a_julia_port_that_cannot_load_is_said_once_and_stored_once(tmp_path: Path, capsys) -> None:
    """A Julia port whose declaration is refused: its load error, once printed for every case
    (191 times, and each 320 KB here) and stored in every output, is printed and stored once."""
    check_runtime("julia")
    bad = port("julia", "declares_10000_unknown_operations")
    report = tmp_path / "r.json"
    argv = ["verify", "--port", f"julia={bad}", "--json", str(report)]
    for case in (SOFTMAX, SOFTMAX_2, SDPA):
        argv += ["--case", case]
    assert cli.main(argv) == cli.EXIT_DISAGREE
    out = capsys.readouterr().out
    said = "and 9980 more, not contract operation(s)"
    assert out.count(said) == 1, out
    assert len(out) < 8000
    text = report.read_text()
    assert text.count(said) == 1 and len(text) < 20_000
    doc = json.loads(text)
    assert [c["status"] for c in doc["cases"]] == ["error"] * 3
    messages = [r["message"] for r in doc["results"]]
    assert said in messages[0]
    assert messages[1:] == [f"julia: the port did not load, so no case ran on it (why: see case {SOFTMAX!r})"] * 3
