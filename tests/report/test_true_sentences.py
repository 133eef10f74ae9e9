"""Every sentence about what a run lacked is true of that run.

The not-judged line, ``--explain`` and each ``hint`` are rendered for runs that have and lack each input
kind (steps, config, heartbeats, device memory, flight-recorder dumps; recorded by the probe or read from
a console log), and checked against the events parsed from the same files here, independently of the
signals the report is built from: "no per-step lines" on a log with step lines, or "run under
`zerodoctor run`" for a run recorded that way, fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, parsed, run_cli
from zerodoctor.pipeline import expand_inputs
from zerodoctor.sources.batches import make_parser, read_batches

INPUTS = [
    "samples/healthy-zero2",  # probe, CPU: steps and config, no device memory, no heartbeats
    "samples/gpu-capacity-oom-h200",  # probe on a GPU: device memory
    "samples/fp16-static-65536/console.log",  # console: step lines, no config dump
    "samples/fp16-min-scale/console.log",  # console: an exception, no step lines
    "samples/fragmentation-oom/console.log",  # console: OOM messages only
    "tests/fixtures/logs/deepspeed_stage3_timers_comms_logger.log",  # console: config dump and step lines
    "tests/fixtures/logs/deepspeed_loss_scaler_calibration.log",  # console: config dump, scaler lines
    "tests/fixtures/rules/ZD702/fires.jsonl",  # probe events with heartbeats
    "tests/fixtures/flight_recorder/hang",  # flight-recorder dumps
    "tests/fixtures/rules/ZD302/fires.run",  # probe events with profiler traces
    "samples/offload-zero3-torch-adam/console.log",  # console on the CPU accelerator: its collective times unsynced
]


LACKS = {"config": "config", "steps": "steps", "heartbeats": "heartbeats", "device memory": "device_memory",
         "flight-recorder dumps": "dumps", "profiler traces": "traces",
         "synchronised collective times": "synced"}  # the JSON's words → Held's fields
COMMS_ON = '"comms_logger": {"enabled": true}'  # the switch's words in a hint
HOST_BUILT = "deepspeed_shm_comm_op built successfully"  # only DeepSpeed's CPU accelerator builds it


@dataclass
class Held:
    """What the files hold, read by the parsers alone."""

    probe: bool
    steps: int
    config: bool
    heartbeats: bool
    device_memory: bool
    dumps: bool
    traces: bool
    synced: bool  # collective times that waited for the device: the probe's, or any on a GPU
    comms_table: bool  # the comms logger printed its table: its switch is on


def held(path: Path) -> Held:
    events: list[dict] = []
    formats = []
    for file, fmt in expand_inputs([path]):
        formats.append(fmt)
        events += parsed(read_batches(file, make_parser(fmt, "t", path=file)))
    kinds = [e.get("kind", "step") for e in events]  # parsed() gives steps as their fields alone
    starts = [e for e in events if e.get("kind") == "run_start"]
    text = "".join(f.read_text(errors="replace") for f, fmt in expand_inputs([path]) if fmt == "text")
    return Held(probe="jsonl" in formats, steps=kinds.count("step"), config=any(s.get("config") for s in starts),
                heartbeats="heartbeat" in kinds, device_memory=any(s.get("device_memory_bytes") for s in starts),
                dumps="flight-recorder" in formats, traces="chrome-trace" in formats,
                synced="jsonl" in formats or HOST_BUILT not in text, comms_table="Comm. Op" in text)


def _claims(text: str) -> set[str]:
    """The inputs a not-judged line says the run has none of."""
    said = text.split(" has no ", 1)[1].split(";", 1)[0] if " has no " in text else ""
    words = {"per-step lines": "steps", "steps": "steps", "config dump": "config", "config": "config",
             "heartbeats": "heartbeats", "device memory": "device_memory", "flight-recorder dumps": "dumps",
             "profiler traces": "traces", "synchronised collective times": "synced"}
    parts = [p.strip() for chunk in said.split(" or ") for p in chunk.split(",")]
    assert all(p in words for p in parts if p), f"unknown claim in {text!r}"
    return {words[p] for p in parts if p}


@pytest.mark.parametrize("name", INPUTS)
def test_what_the_report_says_a_run_lacks_it_lacks(name: str) -> None:
    path = ROOT / name
    facts = held(path)
    text = run_cli("diagnose", "--fail-on", "never", str(path))
    assert text.returncode == 0, text.stderr
    (line,) = [x for x in text.stdout.splitlines() if "not judged:" in x]
    for claim in _claims(line):
        assert not getattr(facts, claim), f"{name}: says it has no {claim}, but it has: {line}"
    assert ("this log" in line) == (not facts.probe), line

    body = json.loads(run_cli("diagnose", "--format", "json", "--fail-on", "never", str(path)).stdout)
    for u in body["unevaluated"]:
        for lack in u.get("lacks", []):
            assert not getattr(facts, LACKS[lack]), (name, u)
        hint = u.get("hint", "")
        if facts.probe:
            assert "run the job under `zerodoctor run`" not in hint.lower(), (name, u)
        if facts.config:
            assert "config dump" not in hint, (name, u)
        if facts.comms_table:
            assert COMMS_ON not in hint, (name, u)  # a switch already on is never the advice

    explain = run_cli("diagnose", "--explain", "--fail-on", "never", str(path)).stdout
    if facts.probe:
        assert "under `zerodoctor run`, which records" not in explain, explain


def test_inputs_are_told_apart_by_the_parsers() -> None:
    """The table above covers each input kind both ways, so the test would see a claim the run contradicts."""
    facts = [held(ROOT / n) for n in INPUTS]
    for kind in ("probe", "steps", "config", "heartbeats", "device_memory", "dumps", "traces", "synced", "comms_table"):
        assert {bool(getattr(f, kind)) for f in facts} == {True, False}, kind
