"""The files of a run directory: a copy beside a rank's events (``rank-0.1.jsonl``) is no rank's file (issue 23).

The rank files are the real 2-rank run of samples/healthy-zero2; the strays are byte copies of its rank 0,
named as a copy tool (``rank-0.1.jsonl``) or an editor (``rank-0.old.jsonl``) would leave them.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, run_cli
from zerodoctor.sources.batches import run_files, run_id_for
from zerodoctor.sources.names import named_by, rank_event_files

SAMPLE = ROOT / "samples" / "healthy-zero2"
STRAYS = ("rank-0.1.jsonl", "rank-0.old.jsonl", "rank-01.jsonl")


@pytest.mark.parametrize("name, rank_file", [
    ("rank-0.jsonl", True), ("rank-17.jsonl", True),
    ("rank-0.1.jsonl", False), ("rank-0.old.jsonl", False), ("rank-01.jsonl", False), ("rank-.jsonl", False),
    ("rank-a.jsonl", False), ("rank--1.jsonl", False), ("rank-0.jsonl.bak", False),
])
def test_rank_star_in_a_source_pattern_is_a_rank_number(name, rank_file):
    assert named_by(name, "rank-*.jsonl") is rank_file


def test_a_pattern_without_rank_star_is_a_plain_glob():
    assert named_by("nccl_trace_rank_3", "*_rank_[0-9]*") and named_by("console.log", "console.log")


def _run_with_strays(tmp_path):
    run = tmp_path / "job"
    run.mkdir()
    for rank in (0, 1):
        shutil.copy(SAMPLE / f"rank-{rank}.jsonl", run)
    for stray in STRAYS:
        shutil.copy(SAMPLE / "rank-0.jsonl", run / stray)
    return run


def test_run_files_leave_the_copies_beside_rank_files_unread(tmp_path):
    run = _run_with_strays(tmp_path)
    ranks = [run / "rank-0.jsonl", run / "rank-1.jsonl"]
    assert run_files(run) == [(path, "jsonl") for path in ranks]
    assert rank_event_files(run) == ranks  # what resume reads: checkpoints saved, run_starts
    assert run_id_for(run / "rank-0.1.jsonl") == "rank-0.1"  # named alone, a copy is a run of its own


def test_diagnose_counts_each_step_once_and_names_each_stray(tmp_path):
    run = _run_with_strays(tmp_path)
    clean = tmp_path / "clean"
    clean.mkdir()
    for rank in (0, 1):
        shutil.copy(SAMPLE / f"rank-{rank}.jsonl", clean)
    reports, stderr = [], {}
    for path in (clean, run):
        proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(path))
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
        stderr[path] = proc.stderr
    want, got = reports
    assert [i["path"].rsplit("/", 1)[1] for i in got["inputs"]] == ["rank-0.jsonl", "rank-1.jsonl"]
    assert sum(i["events"] for i in got["inputs"]) == sum(i["events"] for i in want["inputs"])
    assert got["findings"] == want["findings"]
    said = [line for line in stderr[run].splitlines() if "not read: no rank's file" in line]
    assert sorted(line.split(":", 1)[0] for line in said) == sorted(str(run / stray) for stray in STRAYS)
    assert "not read" not in stderr[clean]
