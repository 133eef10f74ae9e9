"""Messages, deferred patterns: a message's regex compiled at its first use, not when its module is imported.

The dialects, the crash families and the signatures hold ~150 patterns, and compiling them all took ~20 ms of
every ``diagnose`` and ``compare``; a log shows few families (a one-line OOM log compiles 27 of 156). A pattern made
by ``deferred`` compiles when it is first asked to match; from then on its methods are the compiled pattern's own,
looked up as fast. Its ``pattern`` (the source) is there before, so a pattern built from others compiles none.
A match's ``re`` is the compiled pattern, never this object: to tell which pattern matched, compare ``pattern``s.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

# What a compiled pattern answers: every public attribute of re.Pattern but ``pattern``, known from the start
_COMPILED = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "scanner", "flags",
             "groups", "groupindex")

# Every pattern made: a test compiles them all, since a typo in one that no test's log reaches would raise only
# when a user's log does.
MADE: list[_Deferred] = []


class _Deferred:
    """Stands for ``re.compile(pattern, flags)`` until an attribute of the compiled pattern is asked for."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self.pattern = pattern
        self._flags = flags
        MADE.append(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and the like see this object, and compile nothing
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self._flags)
        self.__dict__.update({attribute: getattr(compiled, attribute) for attribute in _COMPILED})
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"deferred({self.pattern!r})"


def deferred(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, done when the pattern is first used (a bad pattern raises then)."""
    return cast("re.Pattern[AnyStr]", _Deferred(pattern, flags))
