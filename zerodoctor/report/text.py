"""Report: a ``Report`` → what a tired engineer reads at 3 a.m. — fault, numbers, fix as a diff."""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from zerodoctor.report.coverage import not_judged_line, unrecognised
from zerodoctor.report.fixview import fix_lines
from zerodoctor.report.model import Report
from zerodoctor.report.runfacts import run_line
from zerodoctor.report.terminal import Row, escape, laid_out, wrap_width
from zerodoctor.report.units import evidence_items
from zerodoctor.rulebook.finding import Finding, Unevaluated
from zerodoctor.messages.units import format_count, format_ranks

STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}
SHOW_REJECTED = 5
SHOW_MISSING = 4


def finding_line(body: dict) -> str:
    """Rich markup for one finding (its findings-JSON object) on one line: what ``watch`` and ``status`` print."""
    where = f" {steps_text(body['steps'])}" if body.get("steps") else ""
    return (f"[{STYLE[body['severity']]}]{body['severity'].upper()}[/] [bold]{body['rule']} {body['name']}[/]"
            f" run {escape(body['run'])}{where}: {escape(body['message'])}")


def steps_text(steps: list[int]) -> str:
    """``step 41`` or ``steps 1–30``."""
    return f"step {steps[0]:,}" if steps[0] == steps[1] else f"steps {steps[0]:,}–{steps[1]:,}"


def finding_block(f: Finding, config: dict | None, width: int | None = None) -> str:
    """Rich markup for one finding, wrapped to ``width`` with hanging indents (None: unwrapped); ``watch`` prints
    the same block."""
    where = []
    if f.steps:
        where.append(steps_text(f.steps))
    if f.ranks:
        where.append(format_ranks(f.ranks[:16]) + ("…" if len(f.ranks) > 16 else ""))
    rows: list[Row] = [
        ("", "    ", f"[{STYLE[f.severity]}]{f.severity.upper()}[/] [bold]{f.rule} {f.name}[/]  run {escape(f.run)}"
         + (f"  ({', '.join(where)})" if where else "")),
        ("  ", "  ", escape(f.message)),
    ]
    if f.evidence:  # a rule gated only by flags has nothing more to show than its message
        items = evidence_items(f.evidence)
        rows.append(("  evidence: ", EVIDENCE_INDENT, f"[dim]{escape(items[0])}[/]"))
        rows += [(EVIDENCE_INDENT, EVIDENCE_INDENT, f"[dim]{escape(item)}[/]") for item in items[1:]]
    if f.evidence_strength:
        rows.append(("  ", "    ", f"[dim]evidence strength: {escape(f.evidence_strength)}[/]"))
    for fix in f.fixes:
        # an unsafe fix changes the training math (batch, lr, precision): it must not look like a safe one
        tag = "[green]fix[/] (safe)" if fix.safety == "safe" else "[bold yellow]fix (unsafe)[/]"
        rows.append(("  ", "    ", f"{tag}: {escape(fix.title)}"))
        for line in fix_lines(fix, config):
            color = "green" if line.startswith("+") and not line.startswith("+++") else (
                "red" if line.startswith("-") and not line.startswith("---") else "")
            rows.append(("      ", "        ", f"[{color}]{escape(line)}[/]" if color else escape(line)))
    return laid_out(rows, width)


EVIDENCE_INDENT = " " * len("  evidence: ")


def render(report: Report, console: Console, *, explain: bool = False) -> None:
    """Findings first; quarantined lines and rules not judged after, the latter in one line unless ``explain``."""
    if report.inputs and not any(i.events for i in report.inputs):
        for i in report.inputs:
            console.print(escape(unrecognised(i)))
        return
    width = wrap_width(console)
    for f in report.findings:
        console.print(finding_block(f, report.configs.get(f.run), width))
        console.print()
    for i in report.inputs:
        if not i.events:
            console.print(f"[yellow]{escape(unrecognised(i))}[/]")
    if report.rejected:
        console.print(f"[yellow]{format_count(len(report.rejected), 'line')} quarantined[/] (kept in the store, not "
                      "used):")
        for r in report.rejected[:SHOW_REJECTED]:
            console.print(f"  {escape(str(r))}")
        if len(report.rejected) > SHOW_REJECTED:
            console.print(f"  … and {len(report.rejected) - SHOW_REJECTED} more")
    for run, count in report.dropped.items():
        console.print(f"[yellow]run {escape(run)}: the probe dropped {format_count(count, 'event')}[/] rather than "
                      "make training wait (its writer fell behind); its record has gaps")
    for run, why in report.set_aside.items():
        console.print(f"[bold red]run {escape(run)} set aside[/]: not judged, its view failed ({escape(why)}); "
                      "please report it (ZERODOCTOR_DEBUG=1 shows the traceback)")
    for run, rules in report.rules.items():
        if run not in report.set_aside:
            unjudged = sum(u.run == run for u in report.unevaluated)
            fired = sum(f.run == run for f in report.findings)
            line = run_line(run, report.facts[run], rules, unjudged, fired)
            console.print(laid_out([("", "  ", f"[dim]{escape(line)}[/]")], width))
    if report.unevaluated:
        if explain:
            _explain(report.unevaluated, console, width)
        else:
            console.print(laid_out([("", "  ", f"[dim]{escape(not_judged_line(report))}[/]")], width))
    console.print(summary_line(report, markup=True))


def summary_line(report: Report, *, markup: bool = False) -> str:
    """Findings by severity, what they came from, and how many ``--select``/``--ignore`` hid."""
    counts = Counter(f.severity for f in report.findings)
    events = sum(i.events for i in report.inputs)
    summary = ", ".join(f"{counts[s]} {s if counts[s] == 1 or s == 'info' else s + 's'}"
                        for s in ("error", "warning", "info") if counts[s]) or "no findings"
    ignored = f"; {format_count(report.ignored, 'finding')} ignored (--select/--ignore)" if report.ignored else ""
    return ((f"[bold]{summary}[/]" if markup else summary)
            + f" from {format_count(events, 'event')} in {format_count(len(report.inputs), 'file')}{ignored}")


def _explain(unevaluated: list[Unevaluated], console: Console, width: int | None) -> None:
    console.print("[dim]not judged (signal missing):[/]")
    # one line per remedy, not per rule: a log without a config leaves a dozen config rules
    # unjudged for the same reason, and one switch shows what several rules need
    groups: dict[tuple, tuple[list[str], dict[str, None]]] = {}
    for u in unevaluated:
        codes, missing = groups.setdefault((u.run, u.hint), ([], {}))
        codes.append(u.rule)
        missing.update(dict.fromkeys(u.missing))
    for (run, hint), (codes, missing) in groups.items():
        names = list(missing)
        needs = ", ".join(names[:SHOW_MISSING]) + (f", … {len(names) - SHOW_MISSING} more"
                                                    if len(names) > SHOW_MISSING else "")
        rows: list[Row] = [("  ", "    ", f"[dim]{', '.join(codes)} in run {escape(run)}: needs {needs}[/]")]
        rows += [("    ", "      ", f"[dim]to see it: {escape(hint)}[/]")] if hint else []
        console.print(laid_out(rows, width))
