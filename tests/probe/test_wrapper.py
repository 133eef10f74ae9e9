"""The ``run`` wrapper's process handling with plain Python commands: exit codes, signals, output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

TIMEOUT_S = 60


def zd_run(tmp: Path, *command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp), "--name", "r", "--",
                           *command], capture_output=True, timeout=TIMEOUT_S, cwd=ROOT, **kwargs)


@pytest.mark.parametrize(("code", "expected"), [
    ("pass", 0),
    ("raise SystemExit(3)", 3),
    ("raise RuntimeError('boom')", 1),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),
])
def test_exit_status_is_the_commands(tmp_path, code, expected):
    done = zd_run(tmp_path, sys.executable, "-c", code)
    assert done.returncode == expected
    assert json.loads((tmp_path / "r" / "meta.json").read_text())["exit_code"] == expected


def test_output_passes_through_byte_for_byte(tmp_path):
    out = b"\x00\xff progress 10%\rprogress 100%\r\n\x1b[31mred\x1b[0m no newline at end"
    err = b"warning: \xe2\x9c\x93 \r\n"
    code = f"import sys; sys.stdout.buffer.write({out!r}); sys.stdout.flush(); sys.stderr.buffer.write({err!r})"
    done = zd_run(tmp_path, sys.executable, "-c", code)
    assert done.stdout == out
    assert done.stderr.startswith(err) and done.stderr[len(err):].count(b"\n") == 1  # then the next step, ours
    log = (tmp_path / "r" / "console.log").read_bytes()
    assert out in log and err in log and len(log) == len(out) + len(err)


def test_output_arrives_while_the_command_runs(tmp_path):
    code = "import sys, time; print('first', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"first\n"  # before the command ends: no buffering in between
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 128 + signal.SIGTERM


CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    marker = sys.argv[1]
    def on_int(signum, frame):
        open(marker + "." + str(os.getpid()), "w").close()
        sys.exit(7)
    signal.signal(signal.SIGINT, on_int)
    if len(sys.argv) == 2:  # the parent: start a grandchild of the wrapper, wait for it
        child = subprocess.Popen([sys.executable, __file__, marker, "child"])
        open(marker + ".ready", "w").close()
        child.wait()
    else:
        time.sleep(60)
    time.sleep(60)
""")


def test_sigint_reaches_the_whole_process_group(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(CHILD)
    marker = tmp_path / "got"
    proc = subprocess.Popen([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--",
                             sys.executable, str(script), str(marker)], cwd=ROOT)
    deadline = time.monotonic() + TIMEOUT_S
    while not Path(f"{marker}.ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)  # the grandchild installs its handler after it starts
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C delivers to the wrapper
    assert proc.wait(timeout=TIMEOUT_S) == 7
    assert len(list(tmp_path.glob("got.[0-9]*"))) == 2  # parent and grandchild both saw SIGINT


def test_processes_that_never_import_deepspeed_load_nothing_heavy(tmp_path):
    code = "import sys; print(sorted(m for m in ('deepspeed', 'torch', 'pydantic') if m in sys.modules))"
    done = zd_run(tmp_path, sys.executable, "-c", code)
    assert done.stdout == b"[]\n"


def test_an_existing_sitecustomize_still_runs(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    done = zd_run(tmp_path, sys.executable, "-c", "print(THEIRS)",
                  env={**os.environ, "PYTHONPATH": str(theirs)})
    assert done.stdout == b"ran\n"


def test_a_command_that_cannot_start_is_a_one_line_error(tmp_path):
    done = zd_run(tmp_path, str(tmp_path / "no-such-program"))
    assert done.returncode == 2
    assert done.stderr.decode().strip().count("\n") == 0 and "no-such-program" in done.stderr.decode()


def test_deepspeed_is_patched_even_after_a_find_spec_probe(tmp_path):
    # transformers asks importlib.util.find_spec("deepspeed") long before it imports it
    fake = tmp_path / "site"
    (fake / "deepspeed").mkdir(parents=True)
    (fake / "deepspeed" / "__init__.py").write_text("def initialize(*args, **kwargs):\n    return (None,)\n")
    code = ("import importlib.util; assert importlib.util.find_spec('deepspeed') is not None; "
            "import deepspeed; print(getattr(deepspeed.initialize, '_zerodoctor', False))")
    done = zd_run(tmp_path, sys.executable, "-c", code, env={**os.environ, "PYTHONPATH": str(fake)})
    assert done.stdout == b"True\n", done.stderr


def test_a_second_attempt_under_the_same_name_is_refused_unless_it_appends(tmp_path):
    """Rank files are opened for appending: a re-run would merge into the earlier attempt's events."""
    write_rank = ("import os, pathlib; d = pathlib.Path(os.environ['ZERODOCTOR_RUN_DIR']); "
                  "(d / 'rank-0.jsonl').write_text('{}\\n'); (d / 'attempts').open('a').write('x')")
    assert zd_run(tmp_path, sys.executable, "-c", write_rank).returncode == 0
    again = zd_run(tmp_path, sys.executable, "-c", write_rank)
    assert again.returncode == 2
    assert again.stderr.decode().count("\n") == 1 and "--name" in again.stderr.decode()
    assert (tmp_path / "r" / "attempts").read_text() == "x"  # the command never started
    joined = subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--name", "r",
                             "--append", "--", sys.executable, "-c", write_rank],
                            capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert joined.returncode == 0
    assert (tmp_path / "r" / "attempts").read_text() == "xx"


def test_a_copy_beside_the_rank_files_is_no_earlier_run_and_no_rank(tmp_path):
    """``rank-0.1.jsonl`` (a copy someone left) is not rank 0's file: the run starts, and once it ends the copy is
    neither closed nor read as a rank (before: exit 3, ``int('0.1')``)."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    stray = run_dir / "rank-0.1.jsonl"
    stray.write_text('{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 1}\n')
    done = zd_run(tmp_path, sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr.decode()
    assert stray.read_text().count("\n") == 1  # no run_end appended to it


def test_the_next_step_is_said_on_stderr_when_the_job_ends(tmp_path):
    done = zd_run(tmp_path, sys.executable, "-c", "print('trained'); raise SystemExit(3)")
    assert done.returncode == 3 and done.stdout == b"trained\n"  # stdout is the job's own
    said = done.stderr.decode().splitlines()[-1]
    assert said == f"zerodoctor: run r ended, exit code 3; what happened in it: zerodoctor diagnose {tmp_path / 'r'}"
    diagnosed = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", said.split(" diagnose ", 1)[1]],
                               capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert diagnosed.returncode in (0, 1), diagnosed.stderr  # the command it names runs as printed
