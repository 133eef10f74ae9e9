"""The terminal report of every sample at 80 and 120 columns, pinned as the lines a person sees.

A terminal that wraps a long line itself breaks it mid-word and loses the indent, so ``render`` wraps
to the width with hanging indents; these snapshots are what it prints on a terminal that wide (no
colour), and a check that no line is wider than the terminal. Update with ``--snapshot-update`` and
read the diff.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import ROOT
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from
from zerodoctor.report.text import render

SAMPLES = sorted(p.parent for p in (ROOT / "samples").glob("*/expected.json"))
RULES = rules_from()


def printed(path: Path, width: int) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None, highlight=False, soft_wrap=True)
    render(diagnose([path], rules=RULES), console)
    return out.getvalue().replace(str(ROOT) + "/", "").splitlines()


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_at_80_and_120_columns(sample: Path, snapshot) -> None:
    for width in (80, 120):
        lines = printed(sample, width)
        too_wide = [line for line in lines if len(line) > width and " " in line.strip()]
        assert not too_wide, f"lines past {width} columns: {too_wide}"
        snapshot(f"terminal/{sample.name}-{width}", lines)


def test_evidence_and_messages_keep_their_indent_when_wrapped() -> None:
    lines = printed(ROOT / "samples/fragmentation-oom", 80)
    start = next(i for i, line in enumerate(lines) if line.startswith("ERROR ZD401"))
    block = lines[start:lines.index("", start)]
    assert all(line.startswith("  ") for line in block[1:]), block  # nothing falls back to column 0
    evidence = [i for i, line in enumerate(block) if line.startswith("  evidence: ")][0]
    fix = next(i for i, line in enumerate(block) if line.startswith("  fix "))
    assert all(line.startswith(" " * 12) for line in block[evidence + 1:fix]), block[evidence:fix]
