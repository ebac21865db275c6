"""Issue 26's trial "as a new user would": a GPT-2 port in base R written from llm.c's public
train_gpt2.c (tests/data/ports/r/newuser_gpt.R, not from our ports; it passes every case of its
seven operations), and four mistakes such a port could have (newuser_gpt_mistakes.toml), each
planted alone and run for real on one or two cases: each gets its right diagnosis or localisation,
none the precision line or any other cause. The whole port's cases are verified by
``attention-ports verify --port r=tests/data/ports/r/newuser_gpt.R`` (docs/generated-cases-and-mutation.md,
"A new user's trial", has what each mistake got before and after issue 26's diagnoses).
"""

from __future__ import annotations

from pathlib import Path

import tomllib

from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import run_suite
from attention_ports.runtimes.r.adapter import RImplementation
from tests.faults.conftest import check_runtime

DATA = Path(__file__).resolve().parents[1] / "data" / "ports" / "r"
PORT = DATA / "newuser_gpt.R"
MISTAKES = tomllib.loads((DATA / "newuser_gpt_mistakes.toml").read_text())["mistake"]


def planted(mistake: dict, folder: Path) -> Path:
    text = PORT.read_text()
    for old, new in mistake["edits"]:
        assert text.count(old) == 1, f"{mistake['id']}: {old!r} is no longer in {PORT} exactly once"
        text = text.replace(old, new)
    path = folder / mistake["id"] / PORT.name
    path.parent.mkdir()
    path.write_text(text)
    return path


def test_each_mistake_in_a_new_users_gpt_port_gets_its_right_line_and_no_misleading_one(tmp_path: Path) -> None:
    check_runtime("r")
    assert len(MISTAKES) == 4 and len({m["id"] for m in MISTAKES}) == 4
    wrong = []
    ports = [planted(m, tmp_path) for m in MISTAKES]
    impl = RImplementation(ports[0])  # one R worker: each next port loaded in place (R starts once)
    try:
        for mistake, port in zip(MISTAKES, ports, strict=True):
            if port != ports[0]:
                impl.load(port)
            wrong += _judged(mistake, impl)
    finally:
        impl.close()
    assert not wrong, "\n".join(map(str, wrong))


def _judged(mistake: dict, impl: RImplementation) -> list[tuple[str, ...]]:
    """What the suite says about ``mistake`` that it must not: the precision line, another cause,
    or neither the right diagnosis nor the right localisation."""
    wrong = []
    expect = {e["case"]: e for e in mistake["expect"]}
    results = run_suite(REPO_FIXTURES, ["r"], None, list(expect), required={"r"}, progress=None, live={"r": impl})
    assert sorted(r.case for r in results) == sorted(expect), mistake["id"]
    for r in results:
        e = expect[r.case]
        failing = [o for o in r.outputs if o.status != "pass"]
        assert failing and all(o.status == "fail" for o in failing), (mistake["id"], r.message())
        for o in failing:
            said = o.diagnosis or o.localisation
            if "float32" in said:
                wrong.append((mistake["id"], r.case, o.output, "precision line", said))
            elif o.diagnosis and e.get("diagnosis", "\0") not in o.diagnosis:
                wrong.append((mistake["id"], r.case, o.output, "misleading diagnosis", o.diagnosis))
            elif not o.diagnosis and e.get("localisation", "\0") not in o.localisation:
                wrong.append((mistake["id"], r.case, o.output, "no right line", o.localisation))
    return wrong
