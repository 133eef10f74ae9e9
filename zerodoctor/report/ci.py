"""Report: a ``Report`` → one line per finding, for a CI log (``concise``) or GitHub Actions (``github``).

``concise`` reads like a compiler's ``path:line: message`` with the run in the line's place, so an
editor or ``grep`` takes it as is, and ends on the text report's summary line. ``github`` prints
workflow commands that GitHub turns into annotations on the job; it says nothing else, as a
command stream should.
"""

from __future__ import annotations

from zerodoctor.report.model import Report
from zerodoctor.report.terminal import plain
from zerodoctor.report.text import summary_line
from zerodoctor.rulebook.finding import Finding

GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def concise(report: Report) -> str:
    lines = [f"{_where(report, f)}: {f.rule} {f.severity} {_one_line(f.message)}" for f in report.findings]
    return "\n".join([*lines, summary_line(report)])


def github(report: Report) -> str:
    return "\n".join(
        f"::{GITHUB_LEVEL[f.severity]} title={_property(f'{f.rule} {f.name}')}::"
        f"{_data(f'{f.message} ({_where(report, f)})')}" for f in report.findings)


def _where(report: Report, f: Finding) -> str:
    """``path:run``: the first input the run's events came from (a run directory gives several)."""
    paths = report.paths.get(f.run)
    return _one_line(f"{paths[0]}:{f.run}" if paths else f.run)


def _one_line(text: str) -> str:
    return " ".join(plain(text).split())


def _data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (``escapeData``)."""
    return plain(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _property(text: str) -> str:
    """A workflow command's property value (``escapeProperty``): also ``:`` and ``,``, which end it."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")
