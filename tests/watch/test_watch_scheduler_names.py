"""A run is known by the names its scheduler gave the job: ``status`` and ``ack`` take the Slurm job id, an array
task (``%A_%a``), an array job (every task) or the pod's name, as rank 0's ``run_start`` recorded them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tests.conftest import ROOT
from zerodoctor.cli import app

SAMPLE = ROOT / "samples/fp16-min-scale"


def _store(tmp_path: Path) -> str:
    """The sample as array task 4242_1 (job 4243) on pod trainer-master-0, beside healthy-zero2 untouched, read by
    ``watch --once``. The sample's rank files are real; Slurm's variables and the host are added to its rank-0
    run_start as the probe records them under sbatch (names from Slurm's documentation)."""
    runs = tmp_path / "runs"
    run_dir = runs / "fp16-min-scale"
    run_dir.mkdir(parents=True)
    shutil.copy(SAMPLE / "rank-1.jsonl", run_dir / "rank-1.jsonl")
    lines = (SAMPLE / "rank-0.jsonl").read_text().splitlines(keepends=True)
    start = json.loads(lines[0])
    start["host"] = "trainer-master-0"
    start["env"].update(SLURM_JOB_ID="4243", SLURM_ARRAY_JOB_ID="4242", SLURM_ARRAY_TASK_ID="1")
    (run_dir / "rank-0.jsonl").write_text(json.dumps(start) + "\n" + "".join(lines[1:]))
    healthy = runs / "healthy-zero2"
    healthy.mkdir()
    for f in (ROOT / "samples/healthy-zero2").glob("rank-*.jsonl"):
        shutil.copy(f, healthy / f.name)
    done = CliRunner().invoke(app, ["watch", "--once", "-q", str(runs)])
    assert done.exit_code == 0, done.output
    return str(runs / "zerodoctor.db")


def test_status_and_ack_take_the_scheduler_names(tmp_path: Path) -> None:
    db = _store(tmp_path)
    runner = CliRunner()
    for name in ("4243", "4242_1", "4242", "trainer-master-0", "fp16-min-scale"):
        shown = runner.invoke(app, ["status", name, "--db", db, "--format", "json"])
        assert shown.exit_code == 0, shown.output
        assert [r["run"] for r in json.loads(shown.stdout)["runs"]] == ["fp16-min-scale"], name
    everything = json.loads(runner.invoke(app, ["status", "--db", db, "--format", "json"]).stdout)
    assert {r["run"] for r in everything["runs"]} == {"fp16-min-scale", "healthy-zero2"}

    unknown = runner.invoke(app, ["status", "9999", "--db", db])
    assert unknown.exit_code == 2 and "9999: no such run in the store" in unknown.stderr

    acked = runner.invoke(app, ["ack", "4243", "ZD201", "--db", db])
    assert acked.exit_code == 0 and "of run fp16-min-scale" in acked.stdout, acked.output
    after = json.loads(runner.invoke(app, ["status", "4243", "--db", db, "--format", "json"]).stdout)
    assert [f.get("acknowledged") for f in after["runs"][0]["findings"] if f["rule"] == "ZD201"] == [True]


def test_a_slurm_output_file_names_its_job(tmp_path: Path) -> None:
    """The sample's real console.log saved as sbatch's default output file (slurm-%j.out) and read into a store
    by ``diagnose --db``: ``status 4244`` finds the run that file names."""
    out = tmp_path / "slurm-4244.out"
    shutil.copy(SAMPLE / "console.log", out)
    db = str(tmp_path / "store.db")
    runner = CliRunner()
    read = runner.invoke(app, ["diagnose", "--db", db, "--format", "json", str(out)])
    assert read.exit_code == 1, read.output  # its findings are errors
    shown = runner.invoke(app, ["status", "4244", "--db", db, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert [r["run"] for r in json.loads(shown.stdout)["runs"]] == ["slurm-4244"]
    assert runner.invoke(app, ["status", "424", "--db", db]).exit_code == 2  # a prefix of the id is not the job
