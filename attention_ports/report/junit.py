"""JUnit XML for CI systems: one ``<testcase>`` per implementation x case.

The layout every CI reader accepts (Jenkins, GitLab, GitHub test reporters, junitparser): a
``<testsuites>`` root with one ``<testsuite>`` per implementation, ``classname``
``attention_ports.<implementation>.<operation>`` (reporters group by it: a port's softmax failures
sit together) and ``name`` the case id. A failing case holds ``<failure>``: its message attribute
the headline and the diagnosis (the attribute is what annotation reporters such as GitHub's show),
its text the whole failure message with the case's reason and the repro. An
error ``<error>``, a missing or unavailable case ``<skipped>`` (``<failure>`` under ``--strict`` for
missing). The case's reason and flags are ``<properties>``; each ``<testsuite>`` holds the run's
headline as its property ``verdict``, and each operation the implementation declares that got no
judged case at the run's tier as a property ``not_judged.<operation>`` whose value says why.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from attention_ports.core.io import atomic_write
from attention_ports.judge.results import CaseResult
from attention_ports.report.model import Report

SUITE = "attention-ports"
# XML 1.0 cannot hold these at all, escaped or not; a port's printed output may (colour codes).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return clean(line if len(line) <= limit else line[: limit - 3] + "...")


def _headline(r: CaseResult, text: str, limit: int = 1000) -> str:
    """The failure's first line and, when diagnose.py named the mistake, the diagnosis: what an
    annotation shows without opening the log."""
    parts = [_first_line(text, limit)]
    parts += [f"diagnosis: {clean(d)}" for d in dict.fromkeys(o.diagnosis for o in r.outputs if o.diagnosis)]
    line = " -- ".join(p for p in parts if p)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def element(report: Report) -> ET.Element:
    root = ET.Element("testsuites", name=SUITE)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for impl in report.asked:  # one without a result too: its verdict and unjudged operations
        suite = ET.SubElement(root, "testsuite", name=f"{SUITE}.{impl}")
        # The run's headline (model.Report.headline), as every other report states it: a reader of
        # the counts alone would take a run of skipped (not implemented) cases for a green one.
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=report.headline())
        # declared operations with no judged case at the run's tier (model.Report.not_judged): a
        # reader of the testcases alone would not know they were never checked
        for op, why in report.not_judged().get(impl, {}).items():
            ET.SubElement(props, "property", name=f"not_judged.{op}", value=clean(why))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        seconds = 0.0
        for case in report.cases:
            r = report.cell(impl, case)
            if r is None:
                continue
            counts["tests"] += 1
            seconds += r.seconds
            classname = f"attention_ports.{impl}.{r.op}"
            tc = ET.SubElement(suite, "testcase", classname=classname, name=case, time=f"{r.seconds:.3f}")
            if r.reason or r.flags:
                props = ET.SubElement(tc, "properties")
                ET.SubElement(props, "property", name="operation", value=r.op)
                if r.reason:
                    ET.SubElement(props, "property", name="reason", value=clean(r.reason))
                if r.flags:
                    ET.SubElement(props, "property", name="flags", value=", ".join(r.flags))
            text = clean(r.message())
            if report.is_known(r):  # listed in a known-failures file: not a pass, not a failure (pytest's xfail)
                counts["skipped"] += 1
                where = "; ".join(dict.fromkeys(v for (i, c, _), v in report.known.items() if (i, c) == (impl, case)))
                ET.SubElement(tc, "skipped", message=clean(f"known failure ({where})"), type="known failure")
            elif r.status == "error":
                counts["errors"] += 1
                ET.SubElement(tc, "error", message=_headline(r, text), type="error").text = text
            elif report.is_failing(r):
                counts["failures"] += 1
                ET.SubElement(tc, "failure", message=_headline(r, text), type=r.status).text = text
            elif r.status in ("missing", "unavailable"):
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=_first_line(text) or r.status)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{seconds:.3f}")
        total_time += seconds
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.3f}")
    return root


def write_junit(report: Report, path: Path) -> None:
    root = element(report)
    ET.indent(root)
    atomic_write(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
