"""Every performance output a library version prints, in every way a console shows it, becomes the events the
probe writes for the same run: a step's phase split, collectives per op.

The outputs come from the libraries' format strings (``perf_families.py``); the wrappings are the crash
families' (``test_message_families.py``): rank prefixes, logger prefixes, colours, a tqdm bar, a terminal's cut,
mpirun's tags, a log that starts mid-line. One test per (output, wrapping).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import parsed
from tests.sources import test_message_families as families
from tests.sources.message_families import Message
from tests.sources.perf_families import PERF, PerfOutput
from zerodoctor.sources.batches import make_parser, read_batches

# Known limits, each a strict expected failure (a fix shows as a failure to update).
FIRST_LINE_LOST = "the cut takes the first micro-step line's 'time (ms)': its times are lost, and the sums fall short"
KNOWN_LIMITS: dict[str, str] = {
    "deepspeed_comms_logger-deepspeed_0.7-0.18.2-mid_line": "the cut takes the header, and a row alone is no table",
    **{f"deepspeed_comms_logger-deepspeed_{v}-wrap80": "the 80-column cut splits 'DeepSpeed info: version=': the "
                                                        "version is lost, and the table is told by its size alone"
       for v in ("0.18.3-0.19-version_printed", "0.7-0.18.2-version_printed_startup")},
    "deepspeed_wall_clock_breakdown-deepspeed_0.3.12-0.10.0-wrap80": "the 80-column cut falls inside '(ms) |' itself "
                                                                    "('time (' / 'ms) |'): no piece names a timer line",
    "deepspeed_wall_clock_breakdown-deepspeed_0.10.1-0.19-micro_only-mid_line": FIRST_LINE_LOST,
    "deepspeed_wall_clock_breakdown-deepspeed_0.10.1-0.19-zero3_memory-mid_line": FIRST_LINE_LOST,
    "megatron_timers-megatron_2020-10-2022-08-timers_alone-mid_line": "the timer line is the whole output: a log "
                                                                       "begun mid-line has lost its 'time (ms)'",
    "megatron_timers-megatron_2020-10_9d4c735a47_-backward_wraps_allreduce-mid_line": "the same: the one timer "
                                                                                      "line lost its 'time (ms)'",
    "deepspeed_throughput-deepspeed_0.8-0.19-wrap80": "the cut puts the config dump's train_batch_size value on a "
                                                      "line of its own: without the batch, no step time",
}


def _message(p: PerfOutput) -> Message:
    return Message(p.family, "", p.versions, p.source, p.records, variant=p.variant)


def _case(p: PerfOutput, wrapping: str):
    case_id = f"{_message(p).id}-{wrapping}"
    marks = [pytest.mark.xfail(reason=KNOWN_LIMITS[case_id], strict=True)] if case_id in KNOWN_LIMITS else []
    return pytest.param(p, wrapping, id=case_id, marks=marks)


CASES = [_case(p, w) for p in PERF for w in families.WRAPPINGS if w != "rich" and families._applies(_message(p), w)]


def events_of(path: Path) -> list[dict]:
    batches = list(read_batches(path, make_parser("text", "t")))
    assert not [r for b in batches for r in b.rejected]
    return parsed(batches)


def _close(got: object, want: object) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
    return got == want


@pytest.mark.parametrize(("output", "wrapping"), CASES)
def test_the_output_becomes_events(tmp_path: Path, output: PerfOutput, wrapping: str) -> None:
    before = families.cut(families.PREAMBLE, families.TERMINAL_WIDTH[wrapping]) \
        if wrapping in families.TERMINAL_WIDTH else families.PREAMBLE
    block = families.WRAPPINGS[wrapping](_message(output))
    path = tmp_path / "console.log"
    path.write_text("\n".join(block if wrapping == "mid_line" else [*before, *block]) + "\n", encoding="utf-8")
    events = events_of(path)
    if output.kind == "comm":
        got = {}
        for e in events:
            if e["kind"] == "comm":
                total = got.setdefault(e["op"], {"count": 0, "bytes": 0, "total_s": 0.0})
                for key in total:
                    total[key] += e[key]
        assert got.keys() == output.comm.keys(), f"{output.source}: ops {sorted(got)}"
        for op, want in output.comm.items():
            assert all(_close(got[op][k], v) for k, v in want.items()), f"{op}: {got[op]} != {want}"
        return
    if output.kind == "log":
        (profile,) = [e for e in events if e.get("what") == "flops_profile"]
        read = profile["data"]
        wrong = {k: (read.get(k), v) for k, v in output.data.items() if not _close(read.get(k), v)}
        assert not wrong, f"{output.source}: (read, expected) {wrong}"
        return
    steps = [e for e in events if e["kind"] == "step"]
    assert steps, f"{output.source} ({output.versions}): no step"
    step = (next((s for s in steps if s["step"] == output.expect["step"]), None) if "step" in output.expect
            else steps[-1])
    assert step is not None, f"no step {output.expect['step']} among {[s['step'] for s in steps]}"
    wrong = {k: (step.get(k), v) for k, v in output.expect.items() if not _close(step.get(k), v)}
    assert not wrong, f"{output.source} ({output.versions}): (read, expected) {wrong}"
