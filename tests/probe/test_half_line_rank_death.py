"""A rank SIGKILLed mid-write leaves half a line; the wrapper's synthetic ``run_end`` must not be glued to it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

TIMEOUT_S = 60

# The rank writes one whole event, then half of the next, then is killed as the OOM killer would kill it.
HALF_LINE_THEN_SIGKILL = textwrap.dedent("""
    import json, os, signal
    from zerodoctor import events
    path = os.path.join(os.environ["ZERODOCTOR_RUN_DIR"], "rank-0.jsonl")
    whole = json.dumps(events.new("run_start", t=1.0, run=os.environ["ZERODOCTOR_RUN_ID"], rank=0, world_size=1))
    with open(path, "ab", buffering=0) as f:
        f.write(whole.encode() + b"\\n" + b'{"kind": "step", "step": 7, "lo')
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_synthetic_run_end_starts_on_a_fresh_line_after_a_half_written_one(tmp_path):
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--name", "r",
                           "--", sys.executable, "-c", HALF_LINE_THEN_SIGKILL],
                          capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 128 + signal.SIGKILL, done.stderr
    lines = (tmp_path / "r" / "rank-0.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends in a newline
    assert lines[1] == b'{"kind": "step", "step": 7, "lo'  # the half line stays what it was, alone
    run_end = json.loads(lines[2])
    assert (run_end["kind"], run_end["rank"], run_end["signal"]) == ("run_end", 0, signal.SIGKILL)
    assert len(lines) == 4


def test_a_file_ending_in_a_whole_line_gets_no_blank_line(tmp_path):
    from zerodoctor.launch.wrapper import finish_run_dir

    path = tmp_path / "rank-0.jsonl"
    path.write_text(json.dumps({"kind": "run_start", "t": 1.0, "run": "r", "rank": 0}) + "\n")
    finish_run_dir(tmp_path, "r", -signal.SIGKILL)
    lines = path.read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""
    assert json.loads(lines[1])["kind"] == "run_end"


# The failure box of a real run (tests/probe/test_crash_families.py, ``--crash teardown-abort``): rank 1 died of
# SIGABRT after its run_end, and torchrun stopped rank 0 with SIGTERM.
TEARDOWN_BOX = """\
Failures:
[1]:
  time      : 2026-12-04_08:38:20
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 30784)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 30784
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_08:38:20
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 30785)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 30785
=======================================================
"""


def test_a_rank_that_ended_and_then_died_of_a_fault_signal_gets_a_teardown_event_from_the_launchers_box(tmp_path):
    """No fault file (the user's own fault handler took it): the launcher's box says which rank died of what."""
    from zerodoctor.launch.wrapper import finish_run_dir

    for rank in (0, 1):
        (tmp_path / f"rank-{rank}.jsonl").write_text("".join(
            json.dumps({"kind": kind, "t": 1.0, "run": "r", "rank": rank}) + "\n" for kind in ("run_start", "run_end")))
    (tmp_path / "console.log").write_text(TEARDOWN_BOX)
    finish_run_dir(tmp_path, "r", 1)
    assert len((tmp_path / "rank-0.jsonl").read_text().splitlines()) == 2  # SIGTERM is no crash
    last = json.loads((tmp_path / "rank-1.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["what"], last["data"]) == ("log", "fatal", {"family": "teardown_crash", "signal": 6})
