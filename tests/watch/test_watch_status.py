"""Status: what the store holds per run and file, as text for people and as the JSON contract."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.watch.conftest import append, step_line
from zerodoctor.probe.writer import EventWriter


def test_status_json_contract_and_text_reasons(tmp_path):
    runs = tmp_path / "runs"
    log = runs / "r1" / "rank-0.jsonl"
    append(log, "r1", 0, range(1, 6))
    with open(log, "a") as f:
        f.write("not json\n" + '{"v": 1, "t": 1, "run": "r1", "rank": 0, "kind": "teleport"}\n'
                + step_line("r1", 0, 6, loss=float("nan")))
    append(runs / "r2" / "rank-0.jsonl", "r2", 0, range(1, 3))
    assert run_cli("watch", "--once", "-q", str(runs)).returncode == 0

    shown = run_cli("status", "--db", str(runs / "zerodoctor.db"), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert [r["run"] for r in report["runs"]] == ["r1", "r2"]
    r1 = report["runs"][0]
    assert set(r1) == {"run", "files", "findings", "last_event_t"}
    from zerodoctor.store.nodes import local_node

    assert r1["files"] == [{"path": str(log.resolve()), "events": 6, "quarantined": 2, "offset": log.stat().st_size,
                            "node": local_node()}]
    assert [f["rule"] for f in r1["findings"]] == ["ZD204"] and r1["findings"][0]["severity"] == "error"
    assert r1["last_event_t"] == 1006.0
    assert report["runs"][1]["findings"] == []

    text = run_cli("status", "--db", str(runs / "zerodoctor.db")).stdout
    assert "1 error" in text and "no findings" in text
    assert "line 6: invalid JSON" in text and "line 7: unknown kind 'teleport'" in text


def test_file_outside_a_run_directory_belongs_to_the_runs_it_holds(tmp_path):
    loose = tmp_path / "copied-from-cluster.jsonl"
    loose.write_text("".join(step_line("abc", 0, s) for s in range(1, 4)))
    db = tmp_path / "store.db"
    assert run_cli("diagnose", "--db", str(db), "--fail-on", "never", str(loose)).returncode == 0
    report = json.loads(run_cli("status", "--db", str(db), "--format", "json").stdout)
    assert [(r["run"], [f["events"] for f in r["files"]]) for r in report["runs"]] == [("abc", [3])]


def test_status_without_a_store_is_a_usage_error(tmp_path):
    proc = run_cli("status", cwd=tmp_path)
    assert proc.returncode == 2
    assert "runs/zerodoctor.db: no store there" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_live_table_has_one_row_per_run_with_its_counts(tmp_path):
    from rich.console import Console

    from zerodoctor.report.status import table
    from zerodoctor.store.status import FileStatus, RunStatus

    statuses = [RunStatus("r1", [FileStatus("a", 5, 2, 10), FileStatus("b", 7, 0, 10)],
                          [{"severity": "error"}, {"severity": "warning"}, {"severity": "error"}], 100.0),
                RunStatus("r2")]
    console = Console(record=True, width=120)
    console.print(table(statuses, now=160.0))
    rows = [line.split("│")[1:-1] for line in console.export_text().splitlines() if line.startswith("│")]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["r1", "2", "12", "2", "2", "1", "1 min ago"],
        ["r2", "0", "0", "0", "0", "0", "-"],
    ]


def test_status_shows_the_events_a_probe_dropped_per_run_and_rank(tmp_path):
    """Real probe writers: rank 1 of ``lossy`` has 7 events refused, which its ``run_end`` counts; ``calm`` none."""
    runs = tmp_path / "runs"
    for run, rank, refused in (("lossy", 0, 0), ("lossy", 1, 7), ("calm", 0, 0)):
        writer = EventWriter(runs / run, run, rank)
        for step in range(1, 4):
            writer.emit("step", step=step, loss=1.0, samples=8, micro_batches=1)
        for _ in range(refused):
            writer.emit("teleport")  # a kind the schema refuses: dropped and counted, never written
        writer.close(exit_code=0)
    assert run_cli("watch", "--once", "-q", str(runs)).returncode == 0
    db = str(runs / "zerodoctor.db")

    report = {r["run"]: r for r in json.loads(run_cli("status", "--db", db, "--format", "json").stdout)["runs"]}
    assert report["lossy"]["dropped_events"] == {"count": 7, "ranks": [1]}
    assert "dropped_events" not in report["calm"]  # absent, not zero

    shown = "\n" + run_cli("status", "--db", db).stdout
    blocks = {b.split()[0]: " ".join(b.split()) for b in shown.split("\nrun ")[1:]}  # run name → its lines
    assert "the probe dropped 7 events on rank 1 rather than make training wait" in blocks["lossy"]
    assert "dropped" not in blocks["calm"]
