"""Every fixture case on every selected implementation: the heart of the suite.

Parametrized by the plugin (attention_ports/pytest_plugin.py) as ``test_case[IMPL-CASE]``; this
repository's own tests/conformance/test_cases.py runs this same function.
"""

from __future__ import annotations

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.results import case_note
from attention_ports.judge.runner import judge, repro_command
from attention_ports.runtimes.impl import Implementation

_ENTRIES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}


def test_case(impl_name: str, case_id: str, impl: Implementation, port_paths, case_gates) -> None:
    case = load_case(REPO_FIXTURES, _ENTRIES[case_id])
    results = judge(impl_name, case, impl)
    # The regression gates (--ap-known-failures, --ap-baseline): a listed failure is xfail, a listed
    # case that passes or a regression on the baseline fails, as verify judges them.
    known, gated = case_gates.check(impl_name, case_id, case.op, results)
    statuses = {r.status for r in results}
    if gated:
        pytest.fail("\n".join(gated), pytrace=False)
    if statuses == {"missing"} and impl_name in port_paths:
        pytest.skip(f"{impl_name} port does not define {case.op} (a partial port)")
    problems = [r.message for r in results if r.status != "pass"]
    if problems and known:
        pytest.xfail(f"known failure ({known})")
    if problems:
        diagnosed = any(r.diagnosis for r in results)
        problems.append(case_note(case.reason, case.flags, diagnosed))  # what the case tests, not a finding
        problems.append(f"repro: {repro_command(impl_name, case_id, port_paths.get(impl_name))}")
        pytest.fail("\n".join(problems), pytrace=False)
