"""``zerodoctor run --profile STEPS`` around a real 2-rank gloo ZeRO-3 run: one trace per rank, of exactly
those optimizer steps, read back by ``diagnose`` beside the probe's own events."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from tests.conftest import ROOT, diagnose_json, run_cli
from tests.probe.conftest import TRAIN, Recorded, run_command, run_env
from zerodoctor.probe.profile import parse_steps

CONFIG = {
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 4000, "stage3_param_persistence_threshold": 10,
                          "reduce_bucket_size": 4000},
}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Recorded:
    tmp = tmp_path_factory.mktemp("runs")
    command = run_command(tmp, "prof", CONFIG, "--steps", "4", "--width", "64", "--layers", "3")
    command[command.index("run") + 1:command.index("run") + 1] = ["--profile", "2-3"]
    done = subprocess.run(command, capture_output=True, timeout=300, cwd=ROOT, env=run_env())
    return Recorded(tmp / "prof", done.returncode, done.stdout, done.stderr)


def test_each_rank_writes_one_private_trace_of_the_asked_steps(profiled: Recorded) -> None:
    assert profiled.finished_training(), profiled.stderr.decode()[-2000:]
    for rank in (0, 1):
        trace = profiled.run_dir / f"rank-{rank}.pt.trace.json.gz"
        rank_file = profiled.run_dir / f"rank-{rank}.jsonl"
        assert stat.S_IMODE(os.stat(trace).st_mode) == stat.S_IMODE(os.stat(rank_file).st_mode)
    report = diagnose_json(profiled.run_dir)
    traces = [i for i in report["inputs"] if i["format"] == "chrome-trace"]
    assert [i["path"].rsplit("/", 1)[1] for i in traces] == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    assert [i["events"] for i in traces] == [2, 2] and not any(i["quarantined"] for i in traces)


def test_the_trace_holds_the_asked_steps_and_the_probe_still_records_every_step(profiled: Recorded) -> None:
    from zerodoctor.sources.batches import make_parser, read_batches

    path = profiled.run_dir / "rank-1.pt.trace.json.gz"
    steps = [e for b in read_batches(path, make_parser("chrome-trace", "prof", path)) for e in b.events]
    assert [(s["rank"], s["step"], s["timeline"]) for s in steps] == [(1, 2, "host"), (1, 3, "host")]
    assert all(s["collectives"].get("all_gather", {}).get("count", 0) > 0 for s in steps)  # ZeRO-3's gathers
    assert [e["step"] for e in profiled.events(1) if e["kind"] == "step"] == [1, 2, 3, 4]


@pytest.mark.parametrize("spec", ["5-3", "0-2", "two"])
def test_a_bad_window_is_refused_before_the_job_starts(tmp_path, spec: str) -> None:
    proc = run_cli("run", "--runs-dir", str(tmp_path), "--name", "x", "--profile", spec, "--", "python", str(TRAIN))
    assert proc.returncode == 2 and "--profile" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_parse_steps() -> None:
    assert parse_steps("10-12") == (10, 12) and parse_steps(" 7 ") == (7, 7)
