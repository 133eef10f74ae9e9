"""Help reads as a Unix tool's: plain metavars (PATHS..., PATH, N, TEXT), no type names of the CLI library
(``{paths}``, ``<list[Path]>``) and no storage limit as a range (``9223372036854775807``); ``rules list``
has a header and columns as wide as their longest cell."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_cli

COMMANDS = ["diagnose", "watch", "check", "fix", "compare", "run", "status", "rules list", "rules show", "plugins list"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_library_type_names(command: str) -> None:
    proc = run_cli(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for leak in ("<list[", "<str>", "<path>", "<int", "9223372036854775807", "[["):
        assert leak not in text, f"{command} --help shows {leak!r}:\n{text}"
    assert not re.search(r"\{[a-z_]+\}", text.split("Options:")[0]), text  # {paths} in the usage line


def test_usage_names_arguments_plainly() -> None:
    assert run_cli("diagnose", "--help").stdout.startswith("Usage: zerodoctor diagnose [OPTIONS] PATHS...")
    assert "--world-size N " in run_cli("check", "--help").stdout


def test_rules_list_has_a_header_and_aligned_columns() -> None:
    lines = run_cli("rules", "list").stdout.splitlines()
    assert lines[0].split() == ["code", "name", "category", "severity", "status"]
    starts = {line.index(line.split()[2], len(line.split()[0]) + len(line.split()[1])) for line in lines}
    assert len(starts) == 1, "the category column starts at one place on every line"
