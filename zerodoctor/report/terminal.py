"""Report, terminal: text from the inputs → text safe to print where a terminal reads it.

Run names, config keys, file paths, messages and quarantined lines are the input's, and a
terminal obeys the control sequences in them: OSC 0 sets its title, ``ESC[2J`` clears the
screen, a C1 CSI does the same on some terminals, a carriage return overprints a line. So
every text report (``diagnose``, ``watch``, ``status``, ``check``, ``compare``, Markdown) puts
input text through ``escape`` (for Rich markup) or ``plain``, and ``watch``'s log lines through
``PlainFormatter``: C0 and C1 control characters are dropped, newline and tab kept. Colour is
ours alone: Rich adds it around the text.
"""

from __future__ import annotations

import logging
import re

from rich.markup import escape as escape_markup

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


def plain(text: str) -> str:
    """``text`` without control characters (newline and tab stay)."""
    return _CONTROL.sub("", text)


def escape(text: str) -> str:
    """``text`` as Rich markup that prints it as it reads: no control characters, no markup of its own."""
    return escape_markup(plain(text))


class PlainFormatter(logging.Formatter):
    """Log lines (file paths, run names, quarantine reasons) without control characters."""

    def format(self, record: logging.LogRecord) -> str:
        return plain(super().format(record))
