"""Report, terminal: text from the inputs → text safe to print where a terminal reads it.

Run names, config keys, file paths, messages and quarantined lines are the input's, and a
terminal obeys the control sequences in them: OSC 0 sets its title, ``ESC[2J`` clears the
screen, a C1 CSI does the same on some terminals, a carriage return overprints a line. So
every text report (``diagnose``, ``watch``, ``status``, ``check``, ``compare``, Markdown) puts
input text through ``escape`` (for Rich markup) or ``plain``, and ``watch``'s log lines through
``PlainFormatter``: C0 and C1 control characters are dropped, newline and tab kept, and so are Unicode's
bidirectional controls (U+202A–U+202E, U+2066–U+2069, the marks U+200E, U+200F, U+061C): a right-to-left override
in a run name reorders what follows it on the line, the "Trojan Source" trick (CVE-2021-42574). Colour is ours
alone: Rich adds it around the text.
"""

from __future__ import annotations

import logging
import os
import re
import sys

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.text import Text

# C0 but tab and newline, DEL, C1; the bidirectional marks, embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """``text`` without control characters (newline and tab stay)."""
    return _CONTROL.sub("", text)


def escape(text: str) -> str:
    """``text`` as Rich markup that prints it as it reads: no control characters, no markup of its own."""
    return escape_markup(plain(text))


class PlainFormatter(logging.Formatter):
    """Log lines (file paths, run names, quarantine reasons) without control characters, one line per record.

    A library's record with a traceback (SQLAlchemy's "Error closing cursor" while a PostgreSQL server is down, 20
    lines) is about a failure zerodoctor handles itself (``watch`` waits for the store with backoff and says so):
    its line names the exception instead, the traceback stays for ``ZERODOCTOR_DEBUG=1``."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.name.startswith("zerodoctor") and not os.environ.get("ZERODOCTOR_DEBUG"):
            error = record.exc_info[1]
            cause = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            record = logging.makeLogRecord({**record.__dict__, "msg": f"{record.getMessage()} ({cause.rstrip(': ')})",
                                            "args": None, "exc_info": None, "exc_text": None})
        return plain(super().format(record))


Row = tuple[str, str, str]  # (first line's indent, the indent of the lines it wraps onto, Rich markup)


def wrap_width(console: Console) -> int | None:
    """The width to wrap a report to: the terminal's; on a pipe, ``COLUMNS`` when the user set it
    (``zerodoctor diagnose … | less`` in an 80-column window, ``COLUMNS=100`` in a CI job's log); None for
    a file or a pipe without it (a tool or an editor reads it whole)."""
    if console.is_terminal:
        return console.width
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 and console.file is sys.stdout else None


def laid_out(rows: list[Row], width: int | None) -> str:
    """Rich markup for ``rows``, each wrapped to ``width`` at word boundaries with its hanging indent.

    A terminal that wraps a long line itself breaks it mid-word at its edge and loses the indent
    (a finding's evidence read as a wall of text at 80 columns). ``None``: one line per row.
    """
    if width is None:
        return "\n".join(first + markup for first, _, markup in rows)
    out = []
    for first, rest, markup in rows:
        lines = Text.from_markup(markup).wrap(_MEASURE, max(width - len(rest), 20))
        for i, line in enumerate(lines):
            line.rstrip()
            out.append((first if i == 0 else rest) + line.markup)
    return "\n".join(out)


_MEASURE = Console(width=1000)  # Text.wrap measures cells with a console; its own width is not used
