"""Bad input and a refusing machine exit 2 with one line naming what is wrong; 3 stays for real bugs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, fill, run_cli


def _one_error_line(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"zerodoctor: error: {expected}"]


def test_10000_level_nested_json_is_a_quarantined_line_not_a_crash(tmp_path):
    log = tmp_path / "rank-0.jsonl"
    good = json.dumps({"v": 1, "t": 1.0, "run": "deep", "rank": 0, "kind": "step", "step": 1})
    deep = good[:-1] + ', "extra": ' + "[" * 10_000 + "]" * 10_000 + "}"
    log.write_text(good + "\n" + deep + "\n")
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"][0] | {"path": ""} == {
        "path": "", "format": "jsonl", "events": 1, "quarantined": 1}


def test_a_first_line_nested_past_the_decoders_depth_is_read_not_a_crash(tmp_path):
    """Issue 34's round 4: a file whose first line nests 1,000+ deep exited 3 (format sniffing recursed), where the
    same file in a run directory was quarantined; an event file starting so still has its later events read."""
    deep = '{"kind": "step", "extra": ' + "[" * 3_000 + "]" * 3_000 + "}"
    step = json.dumps({"v": 1, "t": 1.0, "run": "deep", "rank": 0, "kind": "step", "step": 1})
    log = tmp_path / "deep.jsonl"
    log.write_text(deep + "\n" + step + "\n")
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"][0] | {"path": ""} == {
        "path": "", "format": "jsonl", "events": 1, "quarantined": 1}


def test_10000_level_nested_json_config_is_one_line_exit_2(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text('{"train_batch_size": ' + "[" * 10_000 + "]" * 10_000 + "}")
    _one_error_line(run_cli("check", str(config)), f"{config}: nested too deeply to be a DeepSpeed config")


def test_world_size_at_or_over_2_63_is_a_usage_error(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text("{}")
    proc = run_cli("check", str(config), "--world-size", str(2**63), "--no-deepspeed")
    assert proc.returncode == 2
    assert "Invalid value for '--world-size'" in proc.stderr and "internal error" not in proc.stderr
    assert run_cli("check", str(config), "--world-size", str(2**63 - 1), "--no-deepspeed").returncode == 0


@pytest.fixture
def full_disk(small_disk: Path):
    """A real filesystem with no space left: a 512 KiB tmpfs, filled up."""
    (small_disk / "runs" / "r").mkdir(parents=True)
    shutil.copy(ROOT / "samples" / "healthy-zero2" / "rank-0.jsonl", small_disk / "runs" / "r")
    fill(small_disk / "filler")
    return small_disk


def test_a_full_disk_at_start_is_one_line_exit_2(full_disk):
    store = full_disk / "runs" / "zerodoctor.db"  # watch's default store, on the full disk: its creation fails first
    _one_error_line(run_cli("watch", "--once", str(full_disk / "runs")),
                    f"cannot open the store sqlite:///{store}: OperationalError: database or disk is full")
    _one_error_line(run_cli("diagnose", "--db", str(full_disk / "d.db"), str(full_disk / "runs" / "r")),
                    f"cannot open the store sqlite:///{full_disk / 'd.db'}: OperationalError: database or disk is full")
    _one_error_line(run_cli("run", "--runs-dir", str(full_disk / "new"), "--", "true"),
                    "No space left on device (ENOSPC)")
