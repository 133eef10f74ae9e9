"""Report: a ``Report`` → Markdown, for pasting into an issue or a pull request."""

from __future__ import annotations

from zerodoctor.report.model import Report
from zerodoctor.report.fixview import evidence_text, fix_lines


def to_markdown(report: Report) -> str:
    out = ["# zerodoctor diagnosis", ""]
    if not report.findings:
        out.append("No findings.")
    for f in report.findings:
        out += [f"## {f.rule} `{f.name}` ({f.severity})", "", f.message, "",
                f"Run `{f.run}`" + (f", steps {f.steps[0]}–{f.steps[1]}" if f.steps else "")
                + (f", ranks {', '.join(map(str, f.ranks))}" if f.ranks else ""), "",
                f"Evidence: {evidence_text(f.evidence)}", ""]
        if f.evidence_strength:
            out += [f"Evidence strength: {f.evidence_strength}", ""]
        for fix in f.fixes:
            out += [f"**Fix ({fix.safety}):** {fix.title}", "", "```diff", *fix_lines(fix, report.configs.get(f.run)),
                    "```", ""]
    if report.unevaluated:
        out += ["## Not judged", ""]
        out += [f"- {u.rule} (run `{u.run}`): needs {', '.join(u.missing)}" + (f" — to see it: {u.hint}" if u.hint else "")
                for u in report.unevaluated]
        out.append("")
    if report.rejected:
        out += ["## Quarantined lines", ""] + [f"- `{r}`" for r in report.rejected[:20]] + [""]
    return "\n".join(out)
