"""Every fixture case on every implementation: the conformance suite's own test, run here.

The test lives in the installable package (attention_ports/conformance/test_cases.py) so a team's
repository runs exactly the same function with ``pytest --pyargs attention_ports.conformance``;
importing it here collects it as ``tests/conformance/test_cases.py::test_case[IMPL-CASE]``.
"""

from attention_ports.conformance.test_cases import test_case

__all__ = ["test_case"]
