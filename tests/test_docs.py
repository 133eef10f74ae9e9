"""Docs that can drift are tested: event fields and examples, command help, rule doc sections."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from zerodoctor.events import EVENT_ADAPTER, EVENT_MODELS
from zerodoctor.rulebook.loader import ALL_SECTIONS
from zerodoctor.pipeline import rules_from

EVENTS_DOC = (ROOT / "docs" / "events.md").read_text()


def _section(kind: str) -> str:
    match = re.search(rf"^### `{kind}`\n(.*?)(?=^### |\Z)", EVENTS_DOC, re.S | re.M)
    assert match, f"docs/events.md has no section for kind '{kind}'"
    return match.group(1)


@pytest.mark.parametrize("kind", sorted(EVENT_MODELS))
def test_every_field_of_every_kind_is_documented(kind: str) -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", _section(kind), re.M))
    fields = set(EVENT_MODELS[kind].model_fields) - {"v", "t", "run", "rank", "kind"}
    assert fields == documented, f"undocumented: {fields - documented}; stale: {documented - fields}"


@pytest.mark.parametrize("kind", sorted(EVENT_MODELS))
def test_each_kind_has_an_example_line_that_validates(kind: str) -> None:
    examples = re.findall(r"```json\n(.*?)\n```", _section(kind), re.S)
    assert examples, f"no example for {kind}"
    shown: set[str] = set()
    for line in examples:
        event = EVENT_ADAPTER.validate_json(line)
        assert event["kind"] == kind
        shown |= set(event)
    # the examples show every field of their kind, so readers see them all in use
    unshown = {"signal", "local_rank", "argv", "host", "pid", "allowed_bytes"}
    assert set(EVENT_MODELS[kind].model_fields) - shown <= unshown


@pytest.mark.parametrize("command", [["diagnose"], ["run"], ["watch"], ["status"], ["check"], ["fix"], ["compare"],
                                     ["rules", "list"],
                                     ["rules", "show"], ["plugins", "list"]])
def test_every_command_has_help(command: list[str]) -> None:
    proc = run_cli(*command, "--help")
    assert proc.returncode == 0
    options = re.findall(r"^\s+(--[a-z-]+)(.*)$", proc.stdout, re.M)
    assert options
    for name, rest in options:
        assert rest.strip(), f"option {name} of {command} has no help text"


@pytest.mark.parametrize("rule", rules_from(), ids=lambda r: r.code)
def test_builtin_rules_have_all_doc_sections(rule) -> None:
    headings = {line.lstrip("#").strip() for line in rule.spec.doc.splitlines() if line.startswith("## ")}
    assert set(ALL_SECTIONS) <= headings, f"{rule.code} lacks {set(ALL_SECTIONS) - headings}"


def test_readme_sample_output_is_the_real_output() -> None:
    """The block at the top of README.md is what ``zerodoctor diagnose samples/fp16-min-scale`` prints, line for
    line up to its '…' (the rest cut for length). A shown line that ends in '…' is the real line's head. The
    block shows no COLUMNS, so it is a pipe's unwrapped output."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^```\n\$ zerodoctor diagnose (samples/fp16-min-scale)\n(.*?)^```", readme, re.S | re.M)
    assert block, "README.md lost its sample output block"
    shown = block.group(2).splitlines()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", block.group(1)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    real = proc.stdout.splitlines()
    for i, line in enumerate(shown):
        if line.strip() == "…":
            break
        assert i < len(real), f"README shows more lines than diagnose prints: {line!r}"
        if line.endswith("…"):
            assert real[i].startswith(line[:-1].rstrip()), f"README line {i + 1}: {line!r}\nreal: {real[i]!r}"
        else:
            assert real[i] == line, f"README line {i + 1}: {line!r}\nreal: {real[i]!r}"
