"""Report: a ``Comparison`` → text (rich markup, the explanation first) and a self-contained HTML page."""

from __future__ import annotations

import json
from html import escape
from typing import Any


from zerodoctor.report import html
from zerodoctor.report.compare import ABSENT, Comparison, OnlyIn, Side
from zerodoctor.report.model import Report
from zerodoctor.report.terminal import escape as mescape
from zerodoctor.report.text import STYLE
from zerodoctor.report.units import quantity


def _value(v: Any) -> str:
    return "absent" if v is ABSENT else v if isinstance(v, str) else json.dumps(v)


def _name(c: Comparison, which: str) -> str:
    s = c.a if which == "a" else c.b
    return s.run or s.label


def _explanation(c: Comparison, o: OnlyIn) -> str:
    other = "b" if o.side == "a" else "a"
    keys = ", ".join(f"{k} ({_value(va)} → {_value(vb)})" for k, va, vb in c.config if k in o.keys)
    return (f"only in {_name(c, o.side)} (not in {_name(c, other)}): {o.finding.rule} {o.finding.name}: "
            f"{o.finding.message}" + (f"; the configs differ where its fix acts: {keys}" if keys else ""))


def lines(c: Comparison) -> list[str]:
    a, b = _name(c, "a"), _name(c, "b")
    out = [f"[bold]compare A = {mescape(a)} ({mescape(c.a.label)}) with B = {mescape(b)} ({mescape(c.b.label)})[/]"]
    if not c.only:
        out.append("the same rules fire in both" + (f": {', '.join(c.both)}" if c.both else " (none)"))
    for o in c.only:
        out.append(f"[{STYLE[o.finding.severity]}]{o.finding.severity.upper()}[/] {mescape(_explanation(c, o))}")
    width = max([len(k) for k, _, _ in c.config] + [len(label) for label, *_ in c.numbers] + [10]) + 2
    out += ["", f"[bold]config[/]: {len(c.config)} key(s) differ" if c.config else "[bold]config[/]: the same"]
    if c.config:
        out.append(f"  {'key':<{width}}{'A':>16}  {'B':>16}")
        out += [f"  {mescape(k):<{width}}{mescape(_value(va)):>16}  {mescape(_value(vb)):>16}"
                for k, va, vb in c.config]
    out += ["", "[bold]per step[/] (mean over the run's steps)", f"  {'':<{width}}{'A':>16}  {'B':>16}"]
    for label, unit, va, vb in c.numbers:
        out.append(f"  {label:<{width}}{_num(va, unit):>16}  {_num(vb, unit):>16}")
    if c.both:
        out += ["", f"fire in both: {', '.join(c.both)}"]
    return out


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    return quantity(v, unit if unit in ("s", "ratio", "bytes") else "") if unit != "samples" else f"{v:g}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
            + "</table>")


def to_html(c: Comparison) -> str:
    a, b = _name(c, "a"), _name(c, "b")
    body = [f"<h1>zerodoctor compare: A = {escape(a)} · B = {escape(b)}</h1>"]
    if not c.only:
        body.append('<div class="verdict sev-ok">the same rules fire in both</div>')
    body += [f'<div class="verdict sev-{o.finding.severity}">{escape(_explanation(c, o))}</div>' for o in c.only]
    body.append(f"<h2>config: {len(c.config)} key(s) differ</h2>")
    body.append(_table(["key", "A", "B"], [[k, _value(va), _value(vb)] for k, va, vb in c.config]))
    body.append("<h2>per step (mean over the run's steps)</h2>")
    body.append(_table(["", "A", "B"], [[label.strip(), _num(va, unit), _num(vb, unit)]
                                        for label, unit, va, vb in c.numbers]))
    both = [(f"{letter}: {s.run}", s.series) for letter, s in (("A", c.a), ("B", c.b)) if s.run is not None]
    section, overlay = html.overlay_section("overlay", "A and B on one step axis", both)
    body.append(section)
    payload = [overlay]
    for index, (letter, s) in enumerate((("A", c.a), ("B", c.b))):
        section, plots = _run_section(index, letter, s)
        body.append(section)
        payload.append(plots)
    return html.document(f"zerodoctor compare: {a} vs {b}", "".join(body), payload)


def _run_section(index: int, letter: str, s: Side) -> tuple[str, dict[str, Any]]:
    report = Report(findings=s.findings, configs={s.run: s.config} if s.run else {},
                    series={s.run: s.series} if s.run else {})
    if s.run is None:
        return f"<h2>{letter}: no run in {escape(s.label)}</h2>", {"id": f"run{index}", "plots": []}
    section, plots = html.run_section(index, s.run, report)
    return f"<h2>{letter}</h2>" + section, plots

