"""Report, selection: ``--select``/``--ignore`` and the project's committed choice → the findings a report shows.

Applied to the findings after judging, not to the rules before: the rules judge as in an
unfiltered run (a fallback rule such as ZD901 speaks only where no other rule found a problem,
so dropping a rule before judging would make another speak), ignoring a code hides exactly its
findings, and the report can say how many it hid — a hidden error is a choice the reader should
see was made. Selectors are codes or prefixes (``ZD2``), as in ruff; the most specific selector
wins (``--ignore ZD2 --select ZD201`` keeps ZD201), an exact tie goes to ignore.

A team commits its choice in ``.zerodoctor.toml`` (keys at the top) or a ``[tool.zerodoctor]`` table
of ``pyproject.toml``, found in the current directory or the nearest parent that has one; the
command line wins key by key.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from zerodoctor.report.model import Report

KEYS = ("select", "ignore")


class SelectionError(ValueError):
    """A selector no rule matches, or a config file that cannot be read: bad usage (exit 2)."""


@dataclass(frozen=True)
class Selection:
    select: tuple[str, ...] | None = None  # None: every rule
    ignore: tuple[str, ...] = ()

    def keeps(self, code: str) -> bool:
        """Whether findings of rule ``code`` are shown: the longest matching selector decides."""
        chosen = max((s for s in self.select or () if code.startswith(s)), key=len, default=None)
        dropped = max((s for s in self.ignore if code.startswith(s)), key=len, default=None)
        if dropped is not None and (chosen is None or len(dropped) >= len(chosen)):
            return False
        return self.select is None or chosen is not None

    def check(self, codes: Iterable[str]) -> None:
        """Refuse a selector that matches no loaded rule: a typo would otherwise silence nothing, quietly."""
        known = list(codes)
        for s in (*(self.select or ()), *self.ignore):
            if not any(c.startswith(s) for c in known):
                raise SelectionError(f"no rule matches '{s}' (see 'zerodoctor rules list')")


def parse_codes(text: str) -> tuple[str, ...]:
    """``"ZD201, zd3"`` → ``("ZD201", "ZD3")``."""
    return tuple(part.strip().upper() for part in text.split(",") if part.strip())


def resolve(select: str | None, ignore: str | None, cwd: Path) -> Selection:
    """The command line's selectors, each key falling back to the project's config file."""
    found = project_config(cwd)
    return Selection(select=parse_codes(select) if select is not None else found.get("select"),
                     ignore=parse_codes(ignore) if ignore is not None else found.get("ignore", ()))


def project_config(cwd: Path) -> dict[str, tuple[str, ...]]:
    """``select``/``ignore`` from the nearest ``.zerodoctor.toml`` or ``pyproject.toml`` with a
    ``[tool.zerodoctor]`` table, at ``cwd`` or above; ``.zerodoctor.toml`` first in one directory."""
    for directory in (cwd, *cwd.parents):
        for name, table in ((".zerodoctor.toml", ()), ("pyproject.toml", ("tool", "zerodoctor"))):
            path = directory / name
            if not path.is_file():
                continue
            section: Any = _read(path)
            for key in table:
                section = section.get(key) if isinstance(section, dict) else None
            if section is None:
                continue  # a pyproject.toml of a project that does not configure zerodoctor
            return _validated(section, path)
    return {}


def _read(path: Path) -> dict:
    """The TOML file's tables; the parser (~20 ms) imported here, where a config file was found."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the backport, a dependency on 3.10 only (pyproject.toml)
        import tomli as tomllib

    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SelectionError(f"{path}: {exc}") from None


def _validated(section: Any, path: Path) -> dict[str, tuple[str, ...]]:
    if not isinstance(section, dict):
        raise SelectionError(f"{path}: zerodoctor's settings must be a table")
    if unknown := set(section) - set(KEYS):
        raise SelectionError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} "
                             f"(zerodoctor reads {', '.join(KEYS)})")
    out = {}
    for key, value in section.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SelectionError(f'{path}: {key} must be a list of rule codes or prefixes, e.g. ["ZD2", "ZD401"]')
        out[key] = tuple(v.strip().upper() for v in value)
    return out


def apply(report: Report, selection: Selection) -> None:
    """Drop the findings (and the rules not judged) that ``selection`` leaves out; count the findings hidden."""
    kept = [f for f in report.findings if selection.keeps(f.rule)]
    report.ignored += len(report.findings) - len(kept)
    report.findings = kept
    report.unevaluated = [u for u in report.unevaluated if selection.keeps(u.rule)]
