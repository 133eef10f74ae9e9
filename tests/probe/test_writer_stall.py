"""The probe's writer stalled for real (its rank file is a FIFO nobody reads): training never waits on it.

The writer thread blocks inside ``write`` on a full pipe, as it would on a hung network filesystem.
Meanwhile the training thread goes on emitting: past the bound every event is dropped and counted, no
call waits, and once the pipe drains the rank's last line, ``run_end``, carries the count.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import sys
import termios
import threading
import time

from tests.conftest import run_cli
from zerodoctor.probe.crash import CrashRecorder
from zerodoctor.probe.writer import EventWriter

F_GETPIPE_SZ = 1032  # Linux fcntl: the pipe's buffer size
BOUND = 500


def _wait_for(condition, what: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.01)


def _writer_blocked_in_write(writer: EventWriter, reader: int, pipe_bytes: int, queued: int) -> bool:
    """The pipe is full and the writer thread sits in ``flush`` (its raw ``write`` is C), ``queued`` events behind."""
    frame = sys._current_frames().get(writer._thread.ident)
    held = struct.unpack("i", fcntl.ioctl(reader, termios.FIONREAD, b"\0\0\0\0"))[0]
    return (frame is not None and frame.f_code.co_name == "flush" and len(writer._pending) == queued
            and held == pipe_bytes)


def test_a_stalled_writer_never_blocks_training_and_counts_what_it_dropped(tmp_path):
    fifo = tmp_path / "rank-0.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open returns; nobody reads yet
    writer = EventWriter(tmp_path, "stall", 0, max_pending=BOUND)
    crash = CrashRecorder(writer)
    pipe_bytes = fcntl.fcntl(reader, F_GETPIPE_SZ)
    writer.emit("log", message="x" * 2 * pipe_bytes)  # one line twice what the pipe holds: its write blocks
    _wait_for(lambda: _writer_blocked_in_write(writer, reader, pipe_bytes, 0),
              "the writer thread stuck writing to the full pipe")

    def train() -> None:  # the training thread's side: emit as a step would, BOUND + 300 times
        for step in range(BOUND + 300):
            writer.emit("step", step=step)

    training = threading.Thread(target=train, daemon=True)
    training.start()
    training.join(timeout=30)
    assert not training.is_alive(), "emit waited on the stalled writer"
    assert _writer_blocked_in_write(writer, reader, pipe_bytes, BOUND), \
        "the writer got unstuck, or the queue is past its bound"
    assert writer.dropped == 300

    received = bytearray()

    def drain() -> None:
        os.set_blocking(reader, True)
        while chunk := os.read(reader, 1 << 16):
            received.extend(chunk)

    draining = threading.Thread(target=drain, daemon=True)
    draining.start()
    crash.end()  # atexit's path: flush what is queued, then run_end with the count
    writer._file.close()  # the reader sees end of file
    draining.join(timeout=30)
    lines = [json.loads(x) for x in received.decode().splitlines()]
    assert lines[0]["kind"] == "log" and len(lines[0]["message"]) == 2 * pipe_bytes
    assert [e["step"] for e in lines if e["kind"] == "step"] == list(range(BOUND))
    assert lines[-1]["kind"] == "run_end" and lines[-1]["dropped_events"] == 300
    os.close(reader)

    kept = tmp_path / "kept" / "rank-0.jsonl"  # what the FIFO carried, as a rank file: the report says so
    kept.parent.mkdir()
    kept.write_bytes(received)
    shown = run_cli("diagnose", "--fail-on", "never", str(kept))
    assert shown.returncode == 0, shown.stderr
    assert "run stall: the probe dropped 300 events" in " ".join(shown.stdout.split())
    body = json.loads(run_cli("diagnose", "--format", "json", "--fail-on", "never", str(kept)).stdout)
    assert body["dropped_events"] == [{"run": "stall", "count": 300}]


def test_a_run_that_dropped_nothing_says_nothing(tmp_path):
    writer = EventWriter(tmp_path, "calm", 0)
    writer.emit("step", step=1)
    CrashRecorder(writer).end()
    last = json.loads((tmp_path / "rank-0.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "run_end" and "dropped_events" not in last  # absent, not zero
    body = json.loads(run_cli("diagnose", "--format", "json", "--fail-on", "never", str(tmp_path)).stdout)
    assert "dropped_events" not in body
