"""The run line under the findings says what the run was, from its own events: ranks, stage, precision, steps,
median step time, samples a second; and how many rules judged it."""

from __future__ import annotations

import json
import statistics

from tests.conftest import ROOT, run_cli
from zerodoctor.messages.units import format_seconds


def _run_line(stdout: str, run: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith(f"run {run}:")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_the_run_line_of_a_recorded_run_is_what_its_events_say():
    run_dir = ROOT / "samples" / "healthy-zero2"
    events = [json.loads(line) for path in sorted(run_dir.glob("rank-*.jsonl"))
              for line in path.read_text().splitlines()]
    start = next(e for e in events if e["kind"] == "run_start")
    per_step: dict[int, float] = {}
    for e in events:
        if e["kind"] == "step":
            per_step[e["step"]] = max(per_step.get(e["step"], 0.0), e["step_time_s"])  # the slowest rank's
    step_s = statistics.median(per_step.values())
    samples = start["config"]["train_batch_size"]

    line = _run_line(run_cli("diagnose", str(run_dir)).stdout, "healthy-zero2")
    assert line.startswith(f"run healthy-zero2: {start['world_size']} ranks, ZeRO-{start['zero_stage']}, "
                           f"{start['precision']}; steps {min(per_step)}–{max(per_step)}, "
                           f"{format_seconds(step_s)} a step, {samples / step_s:,.0f} samples/s, collectives "), line
    judged, total = line.split("; ")[-1].split(" rules judged")[0].split(" of ")
    assert line.endswith("none fired") and 0 < int(judged) < int(total), line


def test_a_console_log_that_never_states_its_world_size_says_the_ranks_it_saw():
    case = ROOT / "tests" / "corpus" / "apex-834-scale-to-zero" / "console.log"
    line = _run_line(run_cli("diagnose", str(case)).stdout, "apex-834-scale-to-zero")
    assert line.startswith("run apex-834-scale-to-zero: 1 rank seen; ") and line.endswith("1 fired"), line
    assert "a step" not in line  # the log has no step times: no pace is made up
