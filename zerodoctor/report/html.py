"""Report: a ``Report`` → one self-contained HTML page (styles, uPlot and the plot data inlined; opens offline).

Per run: a header with the verdict, each finding with its evidence in words and its fix
as a diff, then the plots (``report/plots.py``) with the finding's steps marked.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from functools import lru_cache
from html import escape
from importlib.resources import files
from typing import Any, Iterable

from zerodoctor import __version__
from zerodoctor.report.fixview import fix_lines
from zerodoctor.report.model import Report
from zerodoctor.report.plots import overlay_specs, plot_specs
from zerodoctor.report.text import steps_text
from zerodoctor.report.units import evidence_items
from zerodoctor.rulebook.finding import SEVERITY_ORDER, Finding, Unevaluated
from zerodoctor.messages.units import format_count, format_ranks
from zerodoctor.signals.plots import RunSeries
from zerodoctor.sources.names import attempt_of

LIVE_EVERY_S = 5  # how often a live page loads its script again
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#222}
h1{font-size:20px;margin:4px 0}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:0 0 4px}.verdict{font-size:16px;padding:8px 12px;border-radius:6px;margin:6px 0}
.sev-error{background:#fde8e8;border-left:5px solid #c62828}.sev-warning{background:#fff4e0;border-left:5px solid
#ef6c00}
.sev-info{background:#e8f0fe;border-left:5px solid #1565c0}.sev-ok{background:#e8f5e9;border-left:5px solid #2e7d32}
.finding{padding:8px 12px;margin:10px 0;border-radius:6px}.meta{color:#555;font-size:13px}
pre.diff{background:#f7f7f7;padding:6px 10px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12.5px;margin:4px 0
8px}
.add{color:#1b5e20}.del{color:#b71c1c}.hunk{color:#6a1b9a}.plots{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.plot{min-width:0}.plot.wide{grid-column:1/-1}.plot-note{color:#7a4b00;font-size:12px;margin:2px
8px}.note{color:#666;font-style:italic}table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
@media (max-width:900px){.plots{grid-template-columns:1fr}}
"""


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    return files("zerodoctor.report").joinpath("assets", name).read_text(encoding="utf-8")


def document(title: str, body: str, runs: list[dict[str, Any]], *, live: str | None = None) -> str:
    """The page around ``body``; ``runs`` ([{"id", "plots"}]) is drawn into the ``<div id="{id}-{plot}">``s.

    ``live``: the name of the script beside the page that ``watch`` rewrites (``live_script``); the page loads
    it again every ``LIVE_EVERY_S`` and puts its body and plots in place of its own, without a reload."""
    data = _json({"runs": runs}).replace("</", "<\\/")
    if live:
        body = (f'<div id="zd-live" data-src="{escape(live)}" data-every-s="{LIVE_EVERY_S}" '
                f'data-stamp="{live_stamp(body, runs)}">{body}</div>')
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{escape(title)}</title>'
            f"<style>{_asset('uPlot.min.css')}{CSS}</style></head><body>{body}"
            f'<p class="meta">zerodoctor {__version__}</p>' + (
                f'<script type="application/json" id="zd-data">{data}</script>'
                f"<script>{_asset('uPlot.iife.min.js')}</script><script>{_asset('plots.js')}</script>"
                if live or any(r["plots"] for r in runs) else "")
            + (f"<script>{_asset('live.js')}</script>" if live else "") + "</body></html>")


def live_script(body: str, runs: list[dict[str, Any]]) -> str:
    """What a live page loads to update itself: ``zdLive({stamp, body, runs})`` (a page opened from a file may
    load a script beside it, where it may not fetch a data file)."""
    return f"zdLive({_json({'stamp': live_stamp(body, runs), 'body': body, 'runs': runs})});\n"


def live_stamp(body: str, runs: list[dict[str, Any]]) -> str:
    """Names the content: a page redraws only when it changed."""
    return hashlib.sha256(_json({"body": body, "runs": runs}).encode()).hexdigest()[:16]


def _json(value: Any) -> str:
    return json.dumps(_plottable(value), separators=(",", ":"), allow_nan=False)


def _plottable(value: Any) -> Any:
    """The plot data with every NaN or infinity as null: JSON has no such numbers, and a plot draws a gap
    there (a config's ``min_loss_scale: NaN`` once cost its run the whole page)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plottable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plottable(v) for v in value]
    return value


def worst(findings: Iterable[Finding]) -> Finding | None:
    return max(findings, key=lambda f: SEVERITY_ORDER[f.severity], default=None)


def verdict(findings: list[Finding]) -> tuple[str, str]:
    """(css class, one line) for a run's header."""
    top = worst(findings)
    if top is None:
        return "sev-ok", "no findings"
    counts = Counter(f.severity for f in findings)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("error", "warning", "info") if counts[s])
    return f"sev-{top.severity}", f"{summary} — {top.rule} {top.name}: {top.message}"


def finding_html(f: Finding, config: dict[str, Any] | None) -> str:
    where = ([steps_text(f.steps)] if f.steps else []) + ([format_ranks(f.ranks)] if f.ranks else [])
    out = [f'<div class="finding sev-{f.severity}"><h3>{f.severity.upper()} {escape(f.rule)} {escape(f.name)}</h3>',
           f"<div>{escape(f.message)}</div>"]
    if where:
        out.append(f'<div class="meta">{escape(" · ".join(where))}</div>')
    if f.evidence:
        out.append("<ul>" + "".join(f"<li>{escape(item)}</li>" for item in evidence_items(f.evidence)) + "</ul>")
    if f.evidence_strength:
        out.append(f'<div class="meta">evidence strength: {escape(f.evidence_strength)}</div>')
    for fix in f.fixes:
        out.append(f"<div><b>Fix ({escape(fix.safety)}):</b> {escape(fix.title)}</div>")
        if lines := fix_lines(fix, config):
            out.append('<pre class="diff">' + "\n".join(_diff_line(line) for line in lines) + "</pre>")
    return "".join(out) + "</div>"


def _diff_line(line: str) -> str:
    cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
           else "del" if line.startswith("-") and not line.startswith("---") else "")
    return f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line)


def plots_html(run_id: str, specs: list[dict[str, Any]]) -> str:
    if not specs:
        return '<p class="note">nothing to plot: these inputs hold no per-step lines</p>'
    classes = {True: "plot wide", False: "plot"}  # a timeline takes the page's width: its rows are long
    return '<div class="plots">' + "".join(f'<div class="{classes[bool(s.get("timeline"))]}" id="{run_id}-{s["id"]}">'
                                           "</div>" for s in specs) + "</div>"


def unevaluated_html(unevaluated: list[Unevaluated]) -> str:
    if not unevaluated:
        return ""
    rows = "".join(f"<tr><td>{escape(u.rule)}</td><td>{escape(', '.join(u.missing))}</td>"
                   f"<td>{escape(u.hint or '')}</td></tr>" for u in unevaluated)
    return (f"<details><summary>{format_count(len(unevaluated), 'rule')} not judged "
            "(a signal they need is missing)</summary>"
            f"<table><tr><th>rule</th><th>needs</th><th>to see it</th></tr>{rows}</table></details>")


def run_section(index: int, name: str, report: Report) -> tuple[str, dict[str, Any]]:
    """One run's HTML and its plot payload."""
    findings = [f for f in report.findings if f.run == name]
    config = report.configs.get(name)
    series = report.series.get(name)
    specs = plot_specs(series, findings, config) if series is not None else []
    run_id = f"run{index}"
    cls, line = verdict(findings)
    body = [f'<h2 id="{run_id}">run {escape(name)}</h2><div class="verdict {cls}">{escape(line)}</div>',
            *(finding_html(f, config) for f in findings), plots_html(run_id, specs),
            unevaluated_html([u for u in report.unevaluated if u.run == name])]
    return "".join(body), {"id": run_id, "plots": specs}


def overlay_section(section_id: str, heading: str, runs: list[tuple[str, RunSeries]]) -> tuple[str, dict[str, Any]]:
    """Runs overlaid on one step axis (``report/plots.overlay_specs``), under ``heading``."""
    specs = overlay_specs(runs)
    if not specs:
        return "", {"id": section_id, "plots": []}
    return f'<h2 id="{section_id}">{escape(heading)}</h2>' + plots_html(section_id, specs), {"id": section_id,
                                                                                            "plots": specs}


def attempts_sections(names: list[str], report: Report) -> list[tuple[str, dict[str, Any]]]:
    """For each fix-and-resume run with two attempts or more here, its attempts on one step axis: where each
    took up from its checkpoint, and whether the fault came back."""
    by_run: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        if (attempt := attempt_of(name)) is not None and name in report.series:
            by_run.setdefault(attempt[0], []).append((attempt[1], name))
    return [overlay_section(f"attempts{i}", f"run {run}: its attempts on one step axis",
                            [(f"attempt {k}", report.series[name]) for k, name in sorted(attempts)])
            for i, (run, attempts) in enumerate(by_run.items()) if len(attempts) > 1]


def to_html(report: Report) -> str:
    return document(*page_parts(report))


def page_parts(report: Report) -> tuple[str, str, list[dict[str, Any]]]:
    """The page's title, body and plot payload."""
    names = list(dict.fromkeys([*report.configs, *(f.run for f in report.findings)]))
    sections = attempts_sections(names, report) + [run_section(i, name, report) for i, name in enumerate(names)]
    inputs = "".join(f"<tr><td>{escape(i.path)}</td><td>{escape(i.format)}</td><td>{i.events}</td>"
                     f"<td>{i.quarantined}</td></tr>" for i in report.inputs)
    cls, line = verdict(report.findings)
    overall = f'<div class="verdict {cls}">{escape(line)}</div>' if len(names) > 1 else ""  # else the run's says it
    head = f'<h1>zerodoctor diagnosis</h1>{overall}'
    if report.inputs:  # a watch page's report is its run's judgement: the files are watch's, not listed here
        head += (f"<details><summary>{format_count(len(report.inputs), 'input file')}</summary><table><tr><th>file</th>"
                 f"<th>format</th><th>events</th><th>quarantined</th></tr>{inputs}</table></details>")
    if not names:
        head += '<p class="note">no run found in these inputs</p>'
    title = "zerodoctor: " + (", ".join(names) or "diagnosis")
    return title, head + "".join(body for body, _ in sections), [p for _, p in sections]
