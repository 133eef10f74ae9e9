"""Report: what the inputs let zerodoctor see → one line on rules not judged, or on a file nothing was recognised in.

Shared by text and Markdown, so neither says "no findings" where nothing was visible.
"""

from __future__ import annotations

from zerodoctor.report.model import InputSummary, Report

SHOW_OTHER = 4
# an input as a person calls it in a console log, and in a run the probe recorded
_WORDS = {"config": ("config dump", "config"), "steps": ("per-step lines", "steps")}


def known_formats() -> str:
    from zerodoctor.sources.text import dialects

    return ("zerodoctor's events (rank-N.jsonl) and the "
            + ", ".join(d.name for d in dialects()) + " lines of a console log")


def unrecognised(i: InputSummary) -> str:
    """A file no event came from. Said as what is missing, not as an unknown format: a slice of DeepSpeed's
    config print without its head is DeepSpeed's own lines, and "zerodoctor knows deepspeed lines" read as a
    contradiction there (held-out 9's open-r1#59)."""
    read = f"{i.lines} line{'s' if i.lines != 1 else ''} read" if i.lines else "the file is empty"
    return (f"{i.path}: nothing to judge ({read}, as {i.format}): no step, config dump, error or hang line "
            f"zerodoctor reads; it reads {known_formats()}")


def not_judged_line(report: Report) -> str:
    """"12 rules not judged: this log has no config dump or per-step lines; `--explain` lists them".

    Only inputs the run lacks are named (``Unevaluated.lacks``, from what the run held); a signal
    missing for another reason (too few steps, a value its lines do not print) is named as needed.
    """
    console = all(u.console_log for u in report.unevaluated)
    lacks = list(dict.fromkeys(w for u in report.unevaluated for w in u.lacks))
    other = list(dict.fromkeys(m for u in report.unevaluated for m in u.unexplained))
    source = "this log" if console else "this run"
    named = [_WORDS.get(w, (w, w))[0 if console else 1] for w in lacks]
    why = [f"{source} has no {_or(named)}"] if named else []
    if other:
        why.append("needs " + ", ".join(other[:SHOW_OTHER]) + (" …" if len(other) > SHOW_OTHER else ""))
    missing = {m for u in report.unevaluated for m in u.missing}
    if console and {"fp16.enabled", "numerics.unscaled_skips"} <= missing:
        # no precision, no scaler line: a DeepSpeed since 0.17.6 logs OVERFLOW and step lines at INFO only
        # (its bf16 and static-scale skips print at WARNING since 0.19.6, and then the status is known)
        why.append('overflow status unknown from this log (DeepSpeed 0.17.6+ prints its OVERFLOW lines only with '
                   '"log_level": "info")')
    rules = len({(u.run, u.rule) for u in report.unevaluated})
    return f"{rules} rule{'s' if rules != 1 else ''} not judged: {'; '.join(why)}; `--explain` lists them"


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
