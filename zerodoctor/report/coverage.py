"""Report: what the inputs let zerodoctor see → one line on rules not judged, or on a file nothing was recognised in.

Shared by text and Markdown, so neither says "no findings" where nothing was visible.
"""

from __future__ import annotations

from zerodoctor.report.model import InputSummary, Report

SHOW_OTHER = 4
# signal families a console log shows only through per-step lines (or zerodoctor run's events)
_PER_STEP = ("fp16.", "numerics.", "comm.", "offload.", "batch.", "run.", "memory.alloc", "straggler.",
             "creep.device")
# what only the probe's heartbeats show (a rank's phase, its host memory): no console log has them
_HEARTBEATS = ("hang.kind", "hang.recovered", "creep.host")


def known_formats() -> str:
    from zerodoctor.sources.text import dialects

    return ("zerodoctor's events (rank-N.jsonl) and console logs with "
            + ", ".join(d.name for d in dialects()) + " lines")


def unrecognised(i: InputSummary) -> str:
    read = f"{i.lines} line{'s' if i.lines != 1 else ''} read" if i.lines else "the file is empty"
    return f"{i.path}: nothing recognised ({read}, as {i.format}); zerodoctor knows {known_formats()}"


def not_judged_line(report: Report) -> str:
    """"12 rules not judged: this log has no config dump or per-step lines; `--explain` lists them"."""
    missing = dict.fromkeys(m for u in report.unevaluated for m in u.missing)
    lacks = (["config dump"] if any(m.startswith("config.") for m in missing) else []) + (
        ["per-step lines"] if any(m.startswith(_PER_STEP) for m in missing) else []) + (
        ["heartbeats"] if any(m.startswith(_HEARTBEATS) for m in missing) else [])
    other = [m for m in missing if not m.startswith(("config.", *_PER_STEP, *_HEARTBEATS))]
    source = "this log" if all(i.format != "jsonl" for i in report.inputs) else "this run"
    why = [f"{source} has no {' or '.join(lacks)}"] if lacks else []
    if other:
        why.append("needs " + ", ".join(other[:SHOW_OTHER]) + (" …" if len(other) > SHOW_OTHER else ""))
    if source == "this log" and "fp16.enabled" in missing:
        # no precision, no scaler line: a DeepSpeed since 0.17.6 logs OVERFLOW and step lines at INFO only
        why.append('overflow status unknown from this log (DeepSpeed 0.17.6+ prints its OVERFLOW lines only with '
                   '"log_level": "info")')
    rules = len({(u.run, u.rule) for u in report.unevaluated})
    return f"{rules} rule{'s' if rules != 1 else ''} not judged: {'; '.join(why)}; `--explain` lists them"
