"""The probe's phase and heartbeat, its collective wrapper's phase, and memory read without resetting the user's
counters."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import torch

from tests.conftest import ROOT
from zerodoctor.probe.comm import CommClock
from zerodoctor.probe.engine import _cuda_memory
from zerodoctor.probe.phase import RankPhase, watch_data_loader
from zerodoctor.probe.writer import EventWriter


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_heartbeats_come_from_the_writer_thread_while_the_training_thread_is_blocked(tmp_path):
    phase = RankPhase()
    phase.last_step = 14
    writer = EventWriter(tmp_path, "r", 1, heartbeat=phase.heartbeat, heartbeat_every_s=0.2)
    entered = time.time()
    previous = phase.enter_collective("all_reduce", "1", 31)
    time.sleep(1.3)  # the training thread is "stuck": it emits nothing
    phase.leave(previous)
    writer.close()
    beats = [e for e in _lines(tmp_path / "rank-1.jsonl") if e["kind"] == "heartbeat"]
    assert len(beats) >= 2
    assert {(b["phase"], b["op"], b["group"], b["seq"], b["last_step"], b["outer"]) for b in beats} == {
        ("collective", "all_reduce", "1", 31, 14, "user")}
    assert abs(beats[0]["since_t"] - entered) < 0.01  # since when, not when written
    assert len({b["since_t"] for b in beats}) == 1  # the same phase run to every heartbeat, to the bit
    assert all(b["t"] - b["since_t"] > 0.15 for b in beats[1:])
    assert all(b["rss_bytes"] > 10 * 2**20 for b in beats)


def test_leaving_a_collective_returns_to_the_engine_phase_and_leaving_the_engine_starts_a_new_outside_phase():
    phase = RankPhase()
    around = phase.enter("backward")
    backward_since = phase.now[1]
    inner = phase.enter_collective("all_reduce", "0", 7)
    assert phase.now[0] == "collective" and phase.now[2] == "backward"
    phase.leave(inner)
    assert phase.now[:2] == ("backward", backward_since)
    time.sleep(0.01)
    phase.leave(around, "eval")
    assert phase.now[0] == "eval" and phase.now[1] > backward_since
    evaluating_since = phase.now[1]
    phase.leave(phase.enter("eval"), "eval")  # the evaluation's next forward: still the same evaluation
    assert phase.now == ("eval", evaluating_since, None, None, None, None)
    phase.leave(phase.enter("forward"), "user")
    assert phase.now[0] == "user" and phase.now[1] > evaluating_since


def test_a_collective_shows_its_op_group_and_the_groups_own_sequence_number_while_it_runs(monkeypatch):
    """The wrapper leaves the group in the phase; the heartbeat names it and reads c10d's count, which the op
    itself moved on issuing (as gloo and NCCL do), so the op's own number. A younger op than ``SETTLED_S`` gets
    no number: it may not have been counted yet."""
    phase = RankPhase()
    beats = []

    class Group:  # the two attributes of a c10d ProcessGroup the heartbeat reads
        group_name = "1"
        count = 41

        def _get_sequence_number_for_group(self):
            return self.count

    def op(tensor, group=None):
        group.count += 1  # c10d counts the op when it is issued
        beats.append(phase.heartbeat())

    group = Group()
    clock = CommClock(phase=phase, group_types=(Group,))
    all_reduce = clock.wrap("all_reduce", op)
    all_reduce(torch.ones(2), group)
    monkeypatch.setattr("zerodoctor.probe.phase.SETTLED_S", 0.0)
    all_reduce(torch.ones(2), group=group)
    assert [(b["phase"], b["op"], b["group"], b["seq"]) for b in beats] == [
        ("collective", "all_reduce", "1", None), ("collective", "all_reduce", "1", 43)]
    assert phase.now[0] == "user" and phase.heartbeat()["group"] is None  # the group is no longer held
    assert clock.take_ops()["all_reduce"][0] == 2


def test_data_loader_time_is_the_data_phase_on_the_training_thread_and_batches_are_unchanged():
    phase = RankPhase()
    phase.thread = threading.get_ident()
    watch_data_loader(phase)
    seen = []

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            seen.append(phase.now[0])
            time.sleep(0.05)
            return torch.tensor([i])

    batches = [b.item() for b in torch.utils.data.DataLoader(Slow(), batch_size=None)]
    assert batches == [0, 1, 2]
    assert seen == ["data"] * 3
    assert phase.data_s >= 0.15
    assert phase.now[0] == "user"


def _recorded_allocator_stats():
    """memory_stats() as the H200 run recorded them, one dict per step (samples/gpu-capacity-oom-h200)."""
    steps = [e for e in _lines(ROOT / "samples" / "gpu-capacity-oom-h200" / "rank-0.jsonl") if e["kind"] == "step"]
    return [{"allocated_bytes.all.current": s["mem_allocated_bytes"],
             "reserved_bytes.all.current": s["mem_reserved_bytes"],
             "allocated_bytes.all.peak": max(x["mem_peak_bytes"] for x in steps[:i + 1]),
             "num_alloc_retries": s["alloc_retries"], "inactive_split_bytes.all.current": s["inactive_split_bytes"]}
            for i, s in enumerate(steps[:12])]


class _Allocator:
    """torch.cuda's counters as a stand-in fed with recorded stats; a GPU is not here. Reset must never be called."""

    def __init__(self, stats):
        self.stats = [stats[0], *stats]  # the first read is the probe's baseline at attach
        self.resets = 0

    def is_available(self):
        return True

    def memory_stats(self):
        return self.stats.pop(0) if len(self.stats) > 1 else self.stats[0]

    def reset_peak_memory_stats(self, device=None):
        self.resets += 1


def test_memory_is_read_without_resetting_the_users_peak_and_a_steps_peak_only_when_it_rose():
    stats = _recorded_allocator_stats()
    allocator = _Allocator(stats)
    read = _cuda_memory(allocator)
    fields = [read() for _ in stats]
    assert allocator.resets == 0
    assert [f["mem_allocated_bytes"] for f in fields] == [s["allocated_bytes.all.current"] for s in stats]
    peaks = [s["allocated_bytes.all.peak"] for s in stats]
    expected = [None] + [p if p > q else None for q, p in zip(peaks, peaks[1:])]
    assert [f["mem_peak_bytes"] for f in fields] == expected
    assert any(p is not None for p in expected)


def test_the_probe_never_calls_torchs_reset_peak_memory_stats(monkeypatch):
    """On CPU the CUDA reader is off; wrap torch's own reset and run the reader path that would call it."""
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    stats = _recorded_allocator_stats()
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: stats[0])
    read = _cuda_memory()
    for _ in range(3):
        read()
    assert calls == []


EXITING = """
import atexit, json, sys
from zerodoctor.probe.phase import RankPhase
phase = RankPhase()
phase.last_step = 40
atexit.register(lambda: print(json.dumps([phase.heartbeat()["rss_bytes"], before])))
before = phase.heartbeat()["rss_bytes"]
"""


def test_a_heartbeat_during_interpreter_exit_reports_no_memory(tmp_path):
    """After the training script returns its kept tensors are freed: RSS then is not the run's memory."""
    done = subprocess.run([sys.executable, "-c", EXITING], capture_output=True, text=True, cwd=ROOT, check=True)
    at_exit, while_running = json.loads(done.stdout)
    assert while_running > 10 * 2**20 and at_exit is None


def test_a_collective_naming_no_group_reads_c10ds_default_group_at_each_op_and_holds_no_reference_to_it():
    """A real one-rank gloo group, in a process of its own: the op sees the live default group, with its
    own count; once destroyed, the lookup says None and the group is freed (a reference held by the probe
    kept gloo alive into interpreter teardown, where destroying it could abort the process)."""
    script = """
import gc, json, weakref
import torch, torch.distributed as dist
import zerodoctor.probe.phase
from zerodoctor.probe.comm import CommClock, _default_group
from zerodoctor.probe.phase import RankPhase

zerodoctor.probe.phase.SETTLED_S = 0.0
phase, seen = RankPhase(), []
clock = CommClock(phase=phase, default_group=_default_group())

def all_reduce(tensor, async_op=False):  # the backend's op: c10d's, while there is a group
    if dist.is_initialized():
        dist.all_reduce(tensor)
    beat = phase.heartbeat()
    seen.append([beat["op"], beat["group"], beat["seq"]])

class Work:  # c10d's handle, and what a heartbeat says while the training thread waits on it
    def __init__(self, work):
        self.work = work

    def wait(self):
        beat = phase.heartbeat()
        seen.append([beat["op"], beat["group"], beat["seq"]])
        return self.work.wait()

op = clock.wrap("all_reduce", all_reduce)
issue = clock.wrap("all_gather_into_tensor", lambda out, inp, async_op=False: Work(
    dist.all_gather_into_tensor(out, inp, async_op=True)))
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
dist.all_reduce(torch.ones(1))  # c10d's count moves: the heartbeat reads it, the probe keeps no count of its own
op(torch.ones(1))
handle = issue(torch.zeros(1), torch.ones(1), async_op=True)  # c10d's third op ...
dist.all_reduce(torch.ones(1))  # ... then a fourth before its wait: the wait is still in the third
handle.wait()
world = weakref.ref(dist.distributed_c10d.GroupMember.WORLD)
dist.destroy_process_group()
gc.collect()
op(torch.ones(1))
print(json.dumps({"seen": seen, "freed": world() is None, "ops": clock.take_ops()["all_reduce"][0]}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["seen"] == [["all_reduce", "0", 2], ["all_gather_into_tensor", "0", 3], ["all_reduce", None, None]]
    assert result["freed"] and result["ops"] == 2


def test_per_op_totals_restart_from_zero_at_each_take():
    clock = CommClock()
    all_reduce = clock.wrap("all_reduce", lambda tensor, async_op=False: None)
    broadcast = clock.wrap("broadcast", lambda tensor, src, async_op=False: None)
    all_reduce(torch.ones(4))
    all_reduce(torch.ones(8))
    broadcast(torch.ones(2), 0)
    taken = clock.take_ops()
    counted = {op: (count, nbytes) for op, (count, nbytes, _) in taken.items()}
    assert counted == {"all_reduce": (2, 48), "broadcast": (1, 8)}
    assert clock.take_ops() == {}  # nothing called since: no op reported
    all_reduce(torch.ones(1))
    assert [(op, count, nbytes) for op, (count, nbytes, _) in clock.take_ops().items()] == [("all_reduce", 1, 4)]
