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
