"""One self-contained HTML page: the verdict, the case table, the agreement matrix, every failure
with its message, diagnosis, the case's reason and heatmaps of expected / actual / error.

No script and no external asset (styles inline, heatmaps inline SVG: heatmap.py), so the file
can be uploaded as a CI artifact and opened anywhere. The page is checked in a real headless
browser by tests/report/test_formats.py.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from attention_ports.core.io import atomic_write
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.report import heatmap
from attention_ports.report.model import (
    CONVENTION_LEGEND,
    Report,
    SharedCause,
    cause_key,
    cell_numbers,
    port_layout,
    shared_causes,
)

MAX_SLICES = 4  # heads of a 3-D output drawn per failure
MAX_FAILURE_SECTIONS = 200
NO_HEATMAPS = (
    "No heatmaps: a merged report is rebuilt from the shards' JSON reports, which hold no arrays; each "
    "shard's own page (verify --shard K/N --html F) draws them."
)

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 22px; margin: 0 0 8px; } h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.banner { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 8px 0 16px; }
.banner.ok { background: #dafbe1; border: 1px solid #4ac26b; }
.banner.bad { background: #ffebe9; border: 1px solid #ff8182; }
.banner.partial { background: #fff8c5; border: 1px solid #d4a72c; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.s-pass { background: #e6f4ea; } td.s-fail { background: #ffd7d5; font-weight: 600; }
td.s-error { background: #ffe2b8; font-weight: 600; } td.s-missing { background: #eaeef2; }
td.s-unavailable { background: #f6f8fa; color: #57606a; }
td a { color: inherit; }
.meta { color: #57606a; }
.failure { border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 12px; margin: 12px 0; }
.diagnosis { background: #fff8c5; border-left: 4px solid #d4a72c; padding: 4px 8px; margin: 6px 0; }
.reason { color: #57606a; margin: 4px 0; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
.hm-row { display: flex; gap: 18px; flex-wrap: wrap; align-items: flex-start; margin: 6px 0; }
.hm-title { font: 12px system-ui, sans-serif; fill: #1f2328; }
.hm-axis { font: 11px system-ui, sans-serif; fill: #57606a; }
.legend { font-size: 12px; color: #57606a; }
.sw { display: inline-block; width: 12px; height: 12px; border: 1px solid #8c959f; margin: 0 3px 0 10px;
      vertical-align: -2px; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _anchor(r: CaseResult) -> str:
    return f"f-{r.impl}-{r.case}"


def _case_table(report: Report) -> str:
    head = "".join(f"<th>{_e(i)}</th>" for i in report.impls)
    rows = []
    for case in report.cases:
        cells = []
        for impl in report.impls:
            r = report.cell(impl, case)
            if r is None:
                cells.append("<td></td>")
                continue
            nums = cell_numbers(r)
            text = nums["status"] + ("" if nums["err/bnd"] == "-" else f" &middot; {_e(nums['err/bnd'])}")
            if report.is_failing(r) and nums["bad"] != "-":
                text += f" &middot; {_e(nums['bad'])} bad"
            if report.is_failing(r):
                text = f'<a href="#{_e(_anchor(r))}">{text}</a>'
            title = "err/bnd: worst error / its bound (1 = the limit)"
            cells.append(f'<td class="s-{_e(r.status)}" title="{title}">{text}</td>')
        rows.append(f"<tr><th><code>{_e(case)}</code></th>{''.join(cells)}</tr>")
    return f'<table class="cases"><tr><th>case</th>{head}</tr>{"".join(rows)}</table>'


def _agreement(report: Report) -> str:
    agreement = report.agreement()
    head = "".join(f"<th>{_e(i)}</th>" for i in report.impls)
    rows = []
    for a in report.impls:
        cells = []
        for b in report.impls:
            cell = agreement[(a, b)]
            frac = cell.fraction
            if frac is None:
                cells.append('<td class="num">-</td>')
                continue
            hue = int(120 * frac)  # red 0 -> green 120
            unknown = f" (+{cell.unknown} unknown)" if cell.unknown else ""
            cells.append(
                f'<td class="num" style="background:hsl({hue},70%,85%)" title="{100 * frac:.1f}%">'
                f"{cell.agree}/{cell.compared}{unknown}</td>"
            )
        rows.append(f"<tr><th>{_e(a)}</th>{''.join(cells)}</tr>")
    return (
        f'<table class="agreement"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
        '<p class="meta">Outputs on which two implementations reach the same result: both agree with the '
        "truth, or both fail with arrays within twice the bound of each other (the same mistake). "
        "Outputs one of them did not run are not counted.</p>"
    )


def _heatmaps(r: CaseResult, o: OutputResult) -> str:
    layout = port_layout(o)
    attrs = {"data-impl": r.impl, "data-case": r.case, "data-output": o.output}
    if layout is None:
        arr = o.arrays
        if arr is None or arr.expected.ndim > 2 or arr.actual.ndim > 2:
            return ""
        view = arr.view
        e, a = (
            (view.to_port(arr.expected), view.to_port(arr.actual)) if view is not None else (arr.expected, arr.actual)
        )
        where = f"{view.language} layout" if view is not None else "reference layout"
        return (
            f'<p class="meta">The shapes differ ({_e(where)}): expected {_e(tuple(e.shape))}, '
            f"the port returned {_e(tuple(a.shape))}.</p>"
            + heatmap.pair(e, a, attrs=attrs, titles=(f"expected {tuple(e.shape)}", f"actual {tuple(a.shape)}"))
        )
    expected, actual, ratio, label = layout
    view = o.arrays.view if o.arrays is not None else None
    name = view.name if view is not None else o.output
    base = view.base if view is not None else 0
    names = view.axis_names(expected.ndim) if view is not None else None
    if names is None and o.arrays is not None:
        from attention_ports.spec import ops

        try:
            role = ops.get(r.op).role(o.output)
            names = ops.AXIS_NAMES.get(role)
        except KeyError:
            names = None
        names = names if names and len(names) == expected.ndim else None
    parts = [f'<p class="meta">{_e(name)}: {_e(label)}, shape {_e(tuple(expected.shape))}</p>']
    if expected.ndim <= 2:
        parts.append(heatmap.triple(expected, actual, ratio, name=name, base=base, axis_names=names, attrs=attrs))
        return "".join(parts)
    axis = names.index("head") if names and "head" in names else 0
    rest = [n for i, n in enumerate(names or ()) if i != axis] or None
    for h in range(min(expected.shape[axis], MAX_SLICES)):
        take = lambda a, h=h: np.take(a, h, axis=axis)  # noqa: E731
        parts.append(f'<p class="meta">{_e(names[axis] if names else "slice")} {h + base}</p>')
        parts.append(
            heatmap.triple(
                take(expected),
                take(actual),
                take(ratio),
                name=f"{name}[{h + base}]",
                base=base,
                axis_names=rest,
                attrs=attrs,
            )
        )
    if expected.shape[axis] > MAX_SLICES:
        parts.append(f'<p class="meta">and {expected.shape[axis] - MAX_SLICES} more</p>')
    return "".join(parts)


def _shared(shared: dict[str, SharedCause]) -> str:
    if not shared:
        return ""
    items = []
    for cause in shared.values():
        text, rs = cause.label, cause.results
        links = ", ".join(
            f'<a href="#{_e(_anchor(r))}">{_e(r.impl)} &middot; <code>{_e(r.case)}</code></a>' for r in rs
        )
        items.append(f"<li><b>{len(rs)} failures</b> share one cause: {_e(text)}<br>{links}</li>")
    return (
        "<h3>Failures that share a cause</h3>"
        '<p class="meta">Their diagnoses name the same mistake (in different places): fixing it once '
        "is likely to fix them all.</p>"
        f'<ul class="shared">{"".join(items)}</ul>'
    )


def _failure(report: Report, r: CaseResult, shared: dict[str, SharedCause] | None = None) -> str:
    parts = [
        f'<div class="failure" id="{_e(_anchor(r))}">',
        f"<h3>{_e(r.impl)} &middot; <code>{_e(r.case)}</code> &middot; {_e(r.op)}: {_e(r.status.upper())}</h3>",
    ]
    if r.reason:
        flags = f" [{_e(', '.join(r.flags))}]" if r.flags else ""
        purpose = "" if any(o.diagnosis for o in r.outputs) else " (its purpose, not a diagnosis)"  # runner.case_note
        parts.append(f'<p class="reason">What this case tests{purpose}: {_e(r.reason)}{flags}</p>')
    for o in r.outputs:
        if o.status == "pass":
            continue
        parts.append(f"<h4>output <code>{_e(o.output)}</code>: {_e(o.status)}</h4>")
        if o.diagnosis:
            cause = (shared or {}).get(cause_key(o.diagnosis, o.output))
            n = len(cause.results) if cause is not None else 0
            also = f" <i>(a cause {n} failures share: see above)</i>" if n > 1 else ""
            parts.append(f'<p class="diagnosis"><b>Diagnosis:</b> {_e(o.diagnosis)}{also}</p>')
        parts.append(_heatmaps(r, o))
    parts.append(f"<pre>{_e(r.message())}</pre></div>")
    return "".join(parts)


def _meta_text(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} = {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return str(value)


def render(report: Report) -> str:
    failures = report.failures
    verdict = report.headline()
    banner = "ok" if report.complete else "partial" if report.ok else "bad"
    meta = "".join(f"<li>{_e(k)}: {_e(_meta_text(v))}</li>" for k, v in report.meta.items() if v)
    counts = report.counts()
    statuses = ("pass", "fail", "error", "missing", "unavailable")
    count_rows = "".join(
        f"<tr><th>{_e(i)}</th>" + "".join(f'<td class="num">{counts[i].get(s, 0)}</td>' for s in statuses) + "</tr>"
        for i in report.impls
    )
    body = [
        "<h1>attention-ports verify</h1>",
        f'<div class="banner {banner}">{_e(verdict)}</div>',
        f'<ul class="meta">{meta}</ul>' if meta else "",
        "<h2>Summary</h2>",
        "<table><tr><th>implementation</th>"
        + "".join(f"<th>{s}</th>" for s in statuses)
        + f"</tr>{count_rows}</table>",
        (
            "<h2>Declared operations not judged</h2><ul>"
            + "".join(f"<li>{_e(line)}</li>" for line in report.not_judged_lines())
            + "</ul>"
        )
        if report.not_judged()
        else "",
        "<h2>Cases</h2>",
        '<p class="meta">Each cell: status &middot; the worst error as a fraction of its bound (1 = the limit; '
        "nan/inf: a NaN or an infinity where a number belongs) &middot; elements beyond their bounds.</p>",
        _case_table(report),
        f'<p class="meta">{_e(CONVENTION_LEGEND)}.</p>' if any(r.masked_query for r in report.results) else "",
        "<h2>Agreement between implementations</h2>",
        _agreement(report),
    ]
    if failures:
        shared = shared_causes(failures)
        # The error scale heads the heatmaps; a merged report's failures have none (the arrays are
        # not in the shards' JSON), so there it says where they are instead of an orphan legend.
        drawn = any(o.arrays is not None for r in failures for o in r.outputs)
        merged = "merged_from" in report.meta
        legend = heatmap.legend() if drawn else f'<p class="meta">{_e(NO_HEATMAPS)}</p>' if merged else ""
        body += ["<h2>Failures</h2>", _shared(shared), legend]
        body += [_failure(report, r, shared) for r in failures[:MAX_FAILURE_SECTIONS]]
        if len(failures) > MAX_FAILURE_SECTIONS:
            body.append(
                f'<p class="meta">{len(failures) - MAX_FAILURE_SECTIONS} more failures: see the JSON report.</p>'
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>attention-ports: {_e(verdict)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_html(report: Report, path: Path) -> None:
    atomic_write(path, render(report).encode())
