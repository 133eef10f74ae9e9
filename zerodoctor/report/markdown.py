"""Report: a ``Report`` → Markdown, for pasting into an issue or a pull request."""

from __future__ import annotations

from zerodoctor.report.coverage import not_judged_line, unrecognised
from zerodoctor.report.fixview import fix_lines
from zerodoctor.report.model import Report
from zerodoctor.report.terminal import plain
from zerodoctor.report.units import evidence_items


def to_markdown(report: Report, *, explain: bool = False) -> str:
    out = ["# zerodoctor diagnosis", ""]
    out += [f"{unrecognised(i)}\n" for i in report.inputs if not i.events]
    if not report.findings and any(i.events for i in report.inputs):
        out.append("No findings.")
    for f in report.findings:
        out += [f"## {f.rule} `{f.name}` ({f.severity})", "", f.message, "",
                f"Run `{f.run}`" + (f", steps {f.steps[0]}–{f.steps[1]}" if f.steps else "")
                + (f", ranks {', '.join(map(str, f.ranks))}" if f.ranks else ""), "",
                *(["Evidence:", "", *(f"- {item}" for item in evidence_items(f.evidence)), ""] if f.evidence else [])]
        if f.evidence_strength:
            out += [f"Evidence strength: {f.evidence_strength}", ""]
        for fix in f.fixes:
            out += [f"**Fix ({fix.safety}):** {fix.title}", "", "```diff", *fix_lines(fix, report.configs.get(f.run)),
                    "```", ""]
    if report.unevaluated and not explain:
        out += [not_judged_line(report), ""]
    elif report.unevaluated:
        out += ["## Not judged", ""]
        out += [f"- {u.rule} (run `{u.run}`): needs {', '.join(u.missing)}"
                + (f" — to see it: {u.hint}" if u.hint else "")
                for u in report.unevaluated]
        out.append("")
    if report.rejected:
        out += ["## Quarantined lines", ""] + [f"- `{r}`" for r in report.rejected[:20]] + [""]
    return plain("\n".join(out))  # printed to a terminal as often as pasted
