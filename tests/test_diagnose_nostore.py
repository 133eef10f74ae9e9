"""``diagnose`` without ``--db`` folds in memory (``pipeline/memory.py``): no store imported, nothing written, the
same report as through a store, and a malformed line still counted and kept aside; ``--db`` still stores."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.report.json import to_json

SAMPLES = sorted(p for p in (ROOT / "samples").iterdir() if (p / "expected.json").exists())
HEALTHY = ROOT / "samples" / "healthy-zero2"

# Runs the CLI as the console script does, then says which store modules the process imported.
_PROBE = """
import sys
from zerodoctor.cli import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    print(sorted(m for m in sys.modules if m.split(".")[0] == "sqlalchemy" or m.startswith("zerodoctor.store")),
          file=sys.stderr)
"""


def _probe(args: list[str], cwd: Path, tmpdir: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    # the rules cache (rulebook/cache.py), a user cache, is the session's (conftest), never beside the run or in TMPDIR
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "TMPDIR": str(tmpdir), "COLUMNS": "1000",
           "ZERODOCTOR_CACHE_DIR": os.environ["ZERODOCTOR_CACHE_DIR"]}
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)
    imported = ast.literal_eval(proc.stderr.strip().splitlines()[-1])  # the list the probe printed
    return proc, imported


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_diagnose_without_db_imports_no_store_and_writes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("rank-0.jsonl", "rank-1.jsonl"):
        (run / name).write_bytes((HEALTHY / name).read_bytes())
    (tmp_path / "tmp").mkdir()
    before = _tree(tmp_path)
    proc, imported = _probe(["diagnose", "--format", "json", "--fail-on", "never", str(run)], tmp_path,
                            tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"][0]["events"] > 0
    assert imported == []  # neither SQLAlchemy nor any store module
    assert _tree(tmp_path) == before  # no store, no scratch file: not beside the run, not in TMPDIR


def test_diagnose_with_db_stores_what_it_read(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    (tmp_path / "tmp").mkdir()
    proc, imported = _probe(["diagnose", "--db", str(db), "--fail-on", "never", str(HEALTHY / "rank-0.jsonl")],
                            tmp_path, tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert "sqlalchemy" in imported
    with sqlite3.connect(db) as conn:
        (lines, events), = conn.execute("SELECT lines, events FROM files").fetchall()
        chunked = conn.execute("SELECT SUM(rows) FROM step_chunks").fetchone()[0]
        saved = conn.execute("SELECT COUNT(*) FROM run_state").fetchone()[0]
    assert lines == len((HEALTHY / "rank-0.jsonl").read_bytes().splitlines())
    assert events == lines and chunked > 0 and saved == 1  # every line, its steps, and the view saved with them


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_the_report_folded_in_memory_is_the_report_through_a_store(tmp_path: Path, sample: Path) -> None:
    rules = rules_from()
    in_memory = diagnose([sample], rules=rules, plots=True)
    stored = diagnose([sample], rules=rules, plots=True, db=str(tmp_path / "store.db"))
    assert to_json(in_memory) == to_json(stored)
    assert in_memory.series == stored.series  # what the HTML page plots: the plots' fold fed live
    assert in_memory.paths == stored.paths and in_memory.set_aside == stored.set_aside


def _cut_log(tmp_path: Path) -> tuple[Path, int, bytes]:
    """rank-0 of the healthy sample with one step line cut in half, as a writer killed mid-line leaves it
    (a truncated copy of a real line, not a made-up one)."""
    lines = (HEALTHY / "rank-0.jsonl").read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b'"kind": "step"' in line or b'"kind":"step"' in line) + 3
    cut = lines[index][: len(lines[index]) // 2]
    lines[index] = cut + b"\n"
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(b"".join(lines))
    return path, index + 1, cut


def test_a_malformed_line_is_counted_and_kept_aside_without_a_store(tmp_path: Path) -> None:
    path, line, cut = _cut_log(tmp_path)
    rules = rules_from()
    report = diagnose([path], rules=rules)
    assert report.inputs[0].quarantined == 1
    ((bad),) = report.rejected
    assert (bad.path, bad.line, bad.raw) == (str(path), line, cut)  # its place and its bytes, kept
    assert report.inputs[0].events == len(path.read_bytes().splitlines()) - 1
    stored = diagnose([path], rules=rules, db=str(tmp_path / "store.db"))
    assert [(r.line, r.reason, r.raw, r.size) for r in stored.rejected] == [
        (r.line, r.reason, r.raw, r.size) for r in report.rejected]
    shown = run_cli("diagnose", "--fail-on", "never", str(path))
    assert f"{path}:{line}: " in shown.stdout and "quarantined" in shown.stderr


def test_held_step_rows_are_let_go_once_folded(monkeypatch) -> None:
    """Folded in memory, a run holds only the steps still waiting for a lagging rank, never the run: read 10 lines
    a batch from each rank in turn, what is held after each settle stays under two batches, and nothing at the end;
    the report is the one a whole-file read gives."""
    from zerodoctor.pipeline import memory

    sample = ROOT / "samples" / "offload-zero2-torch-adam"
    rules = rules_from()
    whole = to_json(diagnose([sample], rules=rules))
    held: list[int] = []
    settle = memory.MemoryPipeline.settle

    def settle_and_count(self, *, final: bool = False) -> None:
        settle(self, final=final)
        held.append(sum(part.n for view in self.views.values() for part in view.held.parts))

    monkeypatch.setattr(memory, "BATCH_LINES", 10)
    monkeypatch.setattr(memory.MemoryPipeline, "settle", settle_and_count)
    assert to_json(diagnose([sample], rules=rules)) == whole
    assert len(held) > 10 and max(held) < 2 * 10 and held[-1] == 0
