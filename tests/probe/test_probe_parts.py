"""Probe parts on their own: the writer, the environment allow-list, OOM messages, collective timing."""

from __future__ import annotations

import json
import math

import torch

from zerodoctor.probe.comm import CommClock
from zerodoctor.probe.crash import oom_fields
from zerodoctor.probe.runinfo import allowed_env
from zerodoctor.probe.writer import EventWriter


def test_writer_turns_tensors_into_numbers_and_keeps_non_finite(tmp_path):
    writer = EventWriter(tmp_path, "r", 3)
    writer.emit("step", step=1, loss=torch.tensor(float("inf")), grad_norm=torch.tensor(2.5), overflow=True)
    writer.emit("step", step=2, grad_norm=None)
    writer.close()
    first, second = [json.loads(line) for line in (tmp_path / "rank-3.jsonl").read_text().splitlines()]
    assert math.isinf(first["loss"]) and first["grad_norm"] == 2.5 and first["rank"] == 3
    assert "grad_norm" not in second  # missing, not null


def test_writer_lines_are_what_the_schema_model_validates_and_a_refusal_falls_to_the_model(tmp_path):
    """Each kind's msgspec twin validates, msgspec encodes a flat finite event; a NaN goes out as NaN, a value only
    the pydantic model coerces (a whole float for an int) is coerced, one it refuses too is dropped and counted."""
    from zerodoctor import events

    writer = EventWriter(tmp_path, "r", 2)
    sent = [("step", {"step": 4, "loss": 0.25, "lr": 1e-4, "overflow": False, "samples": 8, "step_time_s": 0.003}),
            ("comm", {"op": "all_reduce", "step": 4, "count": 2, "bytes": 4096, "total_s": 0.001, "interval_s": 1.0}),
            ("heartbeat", {"phase": "collective", "since_t": 1.5e9, "op": "all_reduce", "group": "0", "seq": 7}),
            ("step", {"step": 5, "loss": float("nan")}),
            ("step", {"step": 6.0}),
            ("heartbeat", {"phase": "napping"})]
    for kind, fields in sent:
        writer.emit(kind, t=1.7e9, **fields)
    writer.close()
    lines = [json.loads(x) for x in (tmp_path / "rank-2.jsonl").read_text().splitlines()]
    assert writer.dropped == 1 and len(lines) == 5
    for line, (kind, fields) in zip(lines[:3], sent):
        assert line == events.new(kind, t=1.7e9, run="r", rank=2, **fields)
    assert math.isnan(lines[3]["loss"]) and lines[4]["step"] == 6 and isinstance(lines[4]["step"], int)


def test_writer_drops_an_invalid_event_and_counts_it(tmp_path):
    writer = EventWriter(tmp_path, "r", 0)
    writer.emit("step", step="not a number")
    writer.emit("step", step=2)
    writer.close()
    assert writer.dropped == 1
    assert [json.loads(x)["step"] for x in (tmp_path / "rank-0.jsonl").read_text().splitlines()] == [2]


def test_writer_drops_an_event_json_cannot_hold_and_keeps_the_rest_of_the_batch(tmp_path):
    writer = EventWriter(tmp_path, "r", 0)
    writer.emit("step", step=1)
    writer.emit("run_start", config={"optimizer": object()})  # valid for the schema, a TypeError for json.dumps
    writer.emit("step", step=2)
    writer.close()
    assert writer.dropped == 1
    assert [json.loads(x)["step"] for x in (tmp_path / "rank-0.jsonl").read_text().splitlines()] == [1, 2]


def test_a_flush_from_inside_a_flush_does_not_hang(tmp_path):
    """SIGTERM's handler flushes on the main thread, which may already be inside ``flush``."""
    import threading

    writer = EventWriter(tmp_path, "r", 0)

    class SignalDuringFlush:  # resolved inside flush, like a 0-dim tensor; flushes as the handler would
        def item(self):
            writer.emit("run_end", signal=15)
            writer.flush()
            return 1.0

    writer.emit("step", step=1, loss=SignalDuringFlush())
    flushing = threading.Thread(target=writer.flush, daemon=True)
    flushing.start()
    flushing.join(timeout=5)
    assert not flushing.is_alive()
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert sorted(kinds) == ["run_end", "step"]
    writer.close()


def test_writer_flushes_on_its_own_within_a_second(tmp_path):
    import time

    writer = EventWriter(tmp_path, "r", 0)
    writer.emit("step", step=1)
    deadline = time.monotonic() + 3
    while not (tmp_path / "rank-0.jsonl").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time.monotonic() < deadline
    writer.close()


def test_environment_is_allow_listed():
    env = allowed_env({"NCCL_SOCKET_IFNAME": "eth0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                       "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "x", "NCCL_IB_KEY": "x", "HOME": "/root",
                       "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "3",
                       "SLURM_JOB_NODELIST": "gpu[001-004]", "SLURM_JOB_ACCOUNT": "ml", "JOB_COMPLETION_INDEX": "1"})
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_SOCKET_IFNAME": "eth0",
                   "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "SLURM_ARRAY_JOB_ID": "4242",
                   "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_NODELIST": "gpu[001-004]", "JOB_COMPLETION_INDEX": "1"}


def test_requested_bytes_from_the_allocator_message():
    message = ("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
               "1.19 GiB is free.")
    assert oom_fields(torch.OutOfMemoryError(message))["requested_bytes"] == int(2.5 * 2**30)
    assert oom_fields(RuntimeError("Tried to allocate 20.00 MiB"))["requested_bytes"] == 20 * 2**20
    assert "requested_bytes" not in oom_fields(RuntimeError("some other error"))


def test_async_collective_counts_the_wait():
    import time

    class Work:
        def wait(self):
            time.sleep(0.02)
            return True

    clock = CommClock()
    op = clock.wrap("all_gather_into_tensor", lambda out, inp, async_op=False: Work())
    handle = op(torch.zeros(8), torch.zeros(4), async_op=True)
    assert handle.wait() is True
    count, nbytes, seconds = clock.take_ops()["all_gather_into_tensor"]
    assert (count, nbytes) == (1, 32) and seconds >= 0.02
    assert clock.take_step() >= 0.02 and clock.take_step() == 0.0


def test_batch_shape_counts_samples_and_token_ids_but_not_float_features():
    import torch

    from zerodoctor.probe.engine import _batch_shape

    assert _batch_shape((torch.zeros(4, 128, dtype=torch.long),), {}) == (4, 512)
    assert _batch_shape((), {"input_ids": torch.ones(2, 7, dtype=torch.int32)}) == (2, 14)
    assert _batch_shape((torch.randn(16, 32),), {}) == (16, None)
    assert _batch_shape((torch.arange(5),), {}) == (5, None)  # a 1-d label vector is no sequence
    assert _batch_shape(("no tensors",), {}) == (None, None)
