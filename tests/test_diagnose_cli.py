"""``zerodoctor diagnose`` end to end: the JSON contract, exit codes, formats, a persistent store."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from tests.conftest import ROOT, diagnose_json, run_cli
from zerodoctor.rulebook.model import CATEGORIES

FIXTURES = ROOT / "tests" / "fixtures" / "rules"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FixOut(_Strict):
    title: str
    safety: Literal["safe", "unsafe"]
    config_patch: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    action: str | None = None


class FindingOut(BaseModel):
    # extra fields allowed: consumers ignore what they do not know (DESIGN.md)
    rule: str
    name: str
    category: Literal[CATEGORIES]  # type: ignore[valid-type]
    severity: Literal["info", "warning", "error"]
    message: str
    evidence: dict[str, Any]
    steps: list[int] | None
    ranks: list[int]
    fixes: list[FixOut]


class InputOut(_Strict):
    path: str
    format: str
    events: int
    quarantined: int


class UnevaluatedOut(BaseModel):
    rule: str
    missing: list[str]


class ReportOut(_Strict):
    zerodoctor: str
    inputs: list[InputOut]
    findings: list[FindingOut]
    unevaluated: list[UnevaluatedOut]


def test_json_output_follows_the_findings_contract() -> None:
    # the probe's events of a fragmentation OOM recorded on an H200 capped at 6 GiB
    out = diagnose_json(FIXTURES / "ZD201" / "fires.jsonl",
                        ROOT / "samples" / "gpu-fragmentation-oom-h200" / "rank-0.jsonl")
    report = ReportOut.model_validate(out)
    # allocated memory climbed 288 MiB a step to the OOM: a leak first (ZD408), fragmentation its aggravation
    assert {f.rule for f in report.findings} >= {"ZD201", "ZD408"}
    assert [i.events for i in report.inputs] == [352, 23]
    zd408 = next(f for f in report.findings if f.rule == "ZD408")
    assert zd408.ranks == [0] and zd408.steps == [18, 18]
    assert not any(fix.env for fix in zd408.fixes)  # expandable_segments moves a leak's OOM a few steps, no more
    assert zd408.evidence["memory.oom_stranded_share"] == pytest.approx((6419382272 - 5520813056) / (6 << 30), rel=1e-3)


@pytest.mark.parametrize(("fail_on", "code"), [("error", 1), ("warning", 1), ("never", 0)])
def test_exit_code_follows_fail_on(fail_on: str, code: int) -> None:
    proc = run_cli("diagnose", "--fail-on", fail_on, str(FIXTURES / "ZD203" / "fires.jsonl"))
    assert proc.returncode == code


def test_info_findings_do_not_fail_the_default_threshold() -> None:
    assert run_cli("diagnose", str(FIXTURES / "ZD202" / "fires.jsonl")).returncode == 0
    assert run_cli("diagnose", "--fail-on", "info", str(FIXTURES / "ZD202" / "fires.jsonl")).returncode == 1


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "missing.jsonl",
    lambda tmp: (tmp / "empty-run").mkdir() or tmp / "empty-run",
])
def test_unreadable_input_is_one_line_and_exit_2(tmp_path: Path, make) -> None:
    path = make(tmp_path)
    proc = run_cli("diagnose", str(path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and str(path) in proc.stderr and "Traceback" not in proc.stderr


def test_run_directory_reads_every_rank_file(tmp_path: Path) -> None:
    run = tmp_path / "run-1"
    run.mkdir()
    lines = (FIXTURES / "ZD102" / "fires.jsonl").read_text().splitlines()
    for rank in (0, 1):
        (run / f"rank-{rank}.jsonl").write_text("".join(line + "\n" for line in lines if f'"rank": {rank},' in line))
    out = diagnose_json(run)
    assert len(out["inputs"]) == 2
    assert [f["rule"] for f in out["findings"]] == ["ZD102"]
    assert out["findings"][0]["ranks"] == [0, 1]


def test_text_and_markdown_show_the_fix_as_a_diff_of_the_runs_config() -> None:
    text = run_cli("diagnose", str(FIXTURES / "ZD203" / "fires.jsonl")).stdout
    assert "ZD203 fp16-static-scale-skips-steps" in text
    assert '-    "loss_scale": 65536' in text and '+    "loss_scale": 0' in text
    md = run_cli("diagnose", "--format", "markdown", str(FIXTURES / "ZD203" / "fires.jsonl")).stdout
    assert "## ZD203 `fp16-static-scale-skips-steps` (error)" in md and "```diff" in md


def test_persistent_store_is_not_filled_twice_and_findings_keep_first_seen(tmp_path: Path) -> None:
    db = tmp_path / "zd.db"
    src = tmp_path / "rank-0.jsonl"
    shutil.copy(FIXTURES / "ZD203" / "fires.jsonl", src)
    first = diagnose_json(src, extra=("--db", str(db)))
    second = diagnose_json(src, extra=("--db", str(db)))
    assert first["findings"] == second["findings"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("select sum(rows) from step_chunks").fetchone()[0] == 100
        (first_seen, last_seen), = conn.execute(
            "select first_seen_t, last_seen_t from findings where rule = 'ZD203'").fetchall()
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert last_seen >= first_seen
    json.dumps(second)  # the contract is plain JSON


def test_a_report_prints_emoji_codes_as_written() -> None:
    """A message may quote a log holding ``:fire:``: the report prints it as written, never as an emoji
    (the console looks no emoji up, which also kept rich's 3,600-entry table out of every start-up)."""
    from zerodoctor.cli import _console

    assert _console().render_str("rank 3 logged cuda:fire: at step 9").plain == "rank 3 logged cuda:fire: at step 9"
