"""Sources, profiler trace: a torch.profiler Chrome trace (one rank's) → ``trace`` events, one per profiled step.

What each step did with its time, on the timeline that shows the work:

- **device** (a trace with GPU kernels): compute is every kernel that is not a collective, on any
  stream; communication is the NCCL/RCCL kernels; copies are ``gpu_memcpy``/``gpu_memset``. A step's
  window is its GPU-side ``ProfilerStep#N`` annotation when the trace has one, else the span of the
  kernels its CPU step launched (matched by their ``correlation`` id), else its CPU range.
- **host** (a CPU-only trace, as a ``DS_ACCELERATOR=cpu`` run gives): communication is the process
  group's own ranges (``gloo:all_gather``, on the calling thread or gloo's worker thread); compute is
  the ATen operators (``aten::mm``, ``aten::copy_``; nested ones counted once) on any thread, outside
  those ranges. Not compute: autograd and DeepSpeed's Python functions (``PreBackwardFunction…``),
  whose own time is Python or a wait for a gathered parameter, nor ``c10d::`` calls. A host trace has
  no streams: a thread that blocks on a collective's result runs no operator, so it shows as
  communication not hidden, which is what it was, but no kernel overlap can be seen on it. An
  optimizer that runs outside ATen (DeepSpeed's CPU Adam) shows as idle time in ``Optimizer.step``.

Figures per step: ``compute_s``, ``comm_s``, ``exposed_comm_s`` (communication while no compute runs
on any stream or thread), ``copy_s``, ``idle_s`` (nothing runs) and what the host was doing then
(``idle_dataloader_s``: inside the DataLoader's ``enumerate(DataLoader)`` range; ``idle_optimizer_s``:
inside ``Optimizer.step``), per collective op its count, time, exposed time and bytes, the longest
exposed collectives, and the step's ``lanes`` for the report's timeline (``sources/trace_lanes.py``).
Host side, on the step's CPU range: ``dataloader_s``, ``optimizer_s`` and ``host_gap_s``, the time no
operator runs on any thread (Python, the loader's own code, waits).

Only complete events (``"ph": "X"``, what torch.profiler writes) are read: ``B``/``E`` pairs, which
other tools write, are not paired up here.

Memory: the events are read one at a time (``chrome_trace.TraceReader``); what is kept is the
ranges, as arrays of 8-byte numbers (about 25 bytes an operator, 33 a kernel), never the events.
"""

from __future__ import annotations

import os
import re
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerodoctor import events
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.chrome_trace import TraceFormatError, TraceReader

if TYPE_CHECKING:  # numpy (~100 ms) is imported where a trace's arrays are made: every command loads this parser
    import numpy as np

    from zerodoctor.sources import intervals

_STEP = deferred(r"ProfilerStep#(\d+)$")
_RANK = deferred(r"rank[-_]?(\d+)", re.IGNORECASE)
_NCCL_KERNEL = deferred(r"^(?:nccl|rccl)\w*?Kernel_([A-Za-z]+)", re.IGNORECASE)
_HOST_COLLECTIVE = deferred(r"^(gloo|nccl|mpi|ucc|xccl|hccl):(\w+)")  # c10d's profiling title of a collective
TOP = 5
COMPUTE, COMM, COPY = 0, 1, 2
_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                "int": 4, "int32": 4, "long": 8, "int64": 8, "char": 1, "byte": 1, "int8": 1, "uint8": 1, "bool": 1,
                "short": 2, "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def op_name(raw: str) -> str:
    """A collective's name as DeepSpeed's comm logger spells it: ``AllGather``, ``_allgather_base``,
    ``all_gather_into_tensor_coalesced`` → ``all_gather``."""
    flat = raw.lower().replace("_", "")
    for key, name in (("allgather", "all_gather"), ("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"),
                      ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
                      ("send", "send_recv"), ("recv", "send_recv"), ("reduce", "reduce"), ("barrier", "barrier"),
                      ("gather", "gather"), ("scatter", "scatter")):
        if key in flat:
            return name
    return raw.lower() or "collective"


def message_bytes(args: dict[str, Any]) -> int | None:
    """The larger of a collective's input and output, in bytes, from the args torch records with it."""
    elements = [args.get(k) for k in ("In msg nelems", "Out msg nelems")]
    size = _DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    counted = [n for n in elements if isinstance(n, int) and not isinstance(n, bool)]
    return max(counted) * size if counted and size else None


class Timeline:
    """The ranges of one trace, classified as they stream by; ``steps()`` turns them into figures."""

    def __init__(self) -> None:
        self.dev = (array("d"), array("d"), array("b"))  # start, end, COMPUTE/COMM/COPY
        self.dev_comm: list[tuple[float, float, str, int | None]] = []  # start, end, op, bytes
        self.host = (array("d"), array("d"), array("q"), array("b"))  # operators: start, end, thread, is ATen
        self.host_comm: list[tuple[float, float, int, str, int | None]] = []  # start, end, thread, op, bytes
        self.launch = (array("d"), array("q"))  # runtime calls: time, correlation
        self.kernel_corr = array("q")  # per device range: its launch's correlation (-1: none)
        self.cpu_steps: list[tuple[int, float, float]] = []
        self.gpu_steps: list[tuple[int, float, float]] = []
        self.dataloader: list[tuple[float, float]] = []
        self.optimizer: list[tuple[float, float]] = []
        self.span: tuple[float, float] | None = None
        self._threads: dict[Any, int] = {}

    def add(self, e: dict[str, Any]) -> None:
        if e.get("ph") != "X":
            return
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            return
        cat, name, end = e.get("cat"), str(e.get("name", "")), ts + dur
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            args = e.get("args") or {}
            match = _NCCL_KERNEL.match(name) if cat == "kernel" else None
            kind = COPY if cat != "kernel" else COMM if match else COMPUTE
            self.dev[0].append(ts), self.dev[1].append(end), self.dev[2].append(kind)
            corr = args.get("correlation")
            self.kernel_corr.append(corr if isinstance(corr, int) else -1)
            if match:
                self.dev_comm.append((ts, end, op_name(str(args.get("Collective name") or match.group(1))),
                                      message_bytes(args)))
        elif cat == "cpu_op":
            self.host[0].append(ts), self.host[1].append(end), self.host[2].append(self._thread(e.get("tid")))
            self.host[3].append(name.startswith("aten::"))
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if isinstance(corr, int):
                self.launch[0].append(ts), self.launch[1].append(corr)
        elif cat in ("user_annotation", "gpu_user_annotation"):
            self._annotation(cat, name, ts, end, e)
        elif cat == "Trace" and name.startswith("PyTorch Profiler"):
            self.span = (ts, end)

    def _annotation(self, cat: str, name: str, ts: float, end: float, e: dict[str, Any]) -> None:
        step = _STEP.match(name)
        if step:
            (self.gpu_steps if cat == "gpu_user_annotation" else self.cpu_steps).append((int(step.group(1)), ts, end))
        elif cat == "gpu_user_annotation":
            return
        elif name.startswith("enumerate(DataLoader)"):
            self.dataloader.append((ts, end))
        elif name.startswith("Optimizer.step#"):
            self.optimizer.append((ts, end))
        elif (collective := _HOST_COLLECTIVE.match(name)) is not None:
            self.host_comm.append((ts, end, self._thread(e.get("tid")), op_name(collective.group(2)),
                                   message_bytes(e.get("args") or {})))

    def _thread(self, tid: Any) -> int:
        return self._threads.setdefault(tid, len(self._threads))

    @property
    def on_device(self) -> bool:
        return len(self.dev[0]) > 0

    def steps(self) -> list[dict[str, Any]]:
        """Figures per profiled step (one for the whole trace when it marks no step), in step order."""
        from zerodoctor.sources import intervals, trace_lanes
        sets, comms = self._device_sets() if self.on_device else self._host_sets()
        host_busy = intervals.union(*self._host_ranges())
        for name, ranges in (("dataloader", self.dataloader), ("optimizer", self.optimizer)):
            sets[name] = intervals.union(*_arrays(ranges))
        cpu = _by_step(self.cpu_steps)
        windows = {number: (lo, hi) for number, (lo, hi) in self._windows(cpu).items() if hi > lo}
        first = min((lo for lo, _ in windows.values()), default=0.0)
        out = []
        for number, (lo, hi) in sorted(windows.items(), key=lambda item: (item[0] is None, item[0] or 0)):
            figures = _figures(sets, comms, lo, hi)
            figures["lanes"], figures["lanes_merge_s"] = trace_lanes.lanes(sets, lo, hi, device=self.on_device,
                                                                            steps=len(windows))
            figures["lanes_from_s"] = (lo - first) / 1e6
            clo, chi = cpu.get(number, (lo, hi))
            figures.update(
                step=number, start_us=lo,
                dataloader_s=intervals.length(intervals.clip(sets["dataloader"], clo, chi)) / 1e6,
                optimizer_s=intervals.length(intervals.clip(sets["optimizer"], clo, chi)) / 1e6,
                host_gap_s=max((chi - clo) - intervals.length(intervals.clip(host_busy, clo, chi)), 0.0) / 1e6)
            out.append(figures)
        return out

    def _host_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np
        s, e = np.frombuffer(self.host[0], dtype=float), np.frombuffer(self.host[1], dtype=float)
        cs, ce = _arrays([(c[0], c[1]) for c in self.host_comm])
        return np.concatenate([s, cs]), np.concatenate([e, ce])

    def _device_sets(self) -> tuple[dict[str, intervals.Ranges], list[tuple[float, float, str, int | None]]]:
        import numpy as np
        from zerodoctor.sources import intervals
        s, e = np.frombuffer(self.dev[0], dtype=float), np.frombuffer(self.dev[1], dtype=float)
        kind = np.frombuffer(self.dev[2], dtype=np.int8)
        return {name: intervals.union(s[kind == k], e[kind == k])
                for name, k in (("compute", COMPUTE), ("comm", COMM), ("copy", COPY))}, self.dev_comm

    def _host_sets(self) -> tuple[dict[str, intervals.Ranges], list[tuple[float, float, str, int | None]]]:
        """Host timeline: the ATen operators outside the collectives' ranges are the compute."""
        import numpy as np
        from zerodoctor.sources import intervals
        aten = np.frombuffer(self.host[3], dtype=np.int8).astype(bool)
        s, e = np.frombuffer(self.host[0], dtype=float)[aten], np.frombuffer(self.host[1], dtype=float)[aten]
        tid = np.frombuffer(self.host[2], dtype=np.int64)[aten]
        comm_s, comm_e = _arrays([(c[0], c[1]) for c in self.host_comm])
        comm_tid = np.array([c[2] for c in self.host_comm], dtype=np.int64)
        inside = np.zeros(len(s), dtype=bool)
        for thread in np.unique(comm_tid):  # an operator a collective runs (its copies) is communication
            own = intervals.union(comm_s[comm_tid == thread], comm_e[comm_tid == thread])
            mine = tid == thread
            mids = (s[mine] + e[mine]) / 2
            i = np.searchsorted(own[0], mids, side="right") - 1
            inside[mine] = (i >= 0) & (own[1][np.maximum(i, 0)] > mids)
        compute = intervals.union(s[~inside], e[~inside])
        comms = [(c[0], c[1], c[3], c[4]) for c in self.host_comm]
        busy = {"compute": compute, "comm": intervals.union(comm_s, comm_e), "copy": intervals.union(*_arrays([]))}
        return busy, comms

    def _windows(self, cpu: dict[int | None, tuple[float, float]]) -> dict[int | None, tuple[float, float]]:
        """Each step's window on the timeline being measured."""
        if not cpu:
            if self.span is not None:
                return {None: self.span}
            starts = [a for a in (self.dev[0], self.host[0]) if len(a)]
            ends = [a for a in (self.dev[1], self.host[1]) if len(a)]
            return {None: (min(map(min, starts)), max(map(max, ends)))} if starts else {}
        if not self.on_device:
            return cpu
        return {**cpu, **self._launched_spans(cpu), **_by_step(self.gpu_steps)}

    def _launched_spans(self, cpu: dict[int | None, tuple[float, float]]) -> dict[int | None, tuple[float, float]]:
        """The span of the kernels each CPU step launched, matched through the launches' correlation ids."""
        import numpy as np
        t, corr = np.frombuffer(self.launch[0], dtype=float), np.frombuffer(self.launch[1], dtype=np.int64)
        kcorr = np.frombuffer(self.kernel_corr, dtype=np.int64)
        if not len(t) or not (kcorr >= 0).any():
            return {}
        order = np.argsort(corr)
        corr, t = corr[order], t[order]
        found = np.searchsorted(corr, kcorr).clip(0, len(corr) - 1)
        matched = (kcorr >= 0) & (corr[found] == kcorr)
        launched_at = np.where(matched, t[found], np.nan)
        s, e = np.frombuffer(self.dev[0], dtype=float), np.frombuffer(self.dev[1], dtype=float)
        spans = {}
        for number, (lo, hi) in cpu.items():
            mine = (launched_at >= lo) & (launched_at < hi)
            if mine.any():
                spans[number] = (float(s[mine].min()), float(e[mine].max()))
        return spans


def _by_step(ranges: list[tuple[int, float, float]]) -> dict[int | None, tuple[float, float]]:
    """Step number → its range (a step marked twice, as re-entered ranges are, spans both)."""
    out: dict[int | None, tuple[float, float]] = {}
    for number, lo, hi in ranges:
        old = out.get(number)
        out[number] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
    return out


def _arrays(ranges: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np
    if not ranges:
        return np.empty(0), np.empty(0)
    both = np.asarray(ranges, dtype=float)
    return both[:, 0], both[:, 1]


def _figures(sets: dict[str, intervals.Ranges], comms: list[tuple[float, float, str, int | None]],
             lo: float, hi: float) -> dict[str, Any]:
    """One step's figures over its window ``[lo, hi)`` (µs in, seconds out)."""
    import numpy as np
    from zerodoctor.sources import intervals
    def busy(c: dict[str, np.ndarray]) -> np.ndarray:
        return c["compute"] | c["comm"] | c["copy"]

    clip = {name: intervals.clip(ranges, lo, hi) for name, ranges in sets.items()}
    out: dict[str, Any] = {
        "window_s": (hi - lo) / 1e6,
        "compute_s": intervals.length(clip["compute"]) / 1e6,
        "comm_s": intervals.length(clip["comm"]) / 1e6,
        "copy_s": intervals.length(clip["copy"]) / 1e6,
        "exposed_comm_s": intervals.measure(clip, lo, hi, lambda c: c["comm"] & ~c["compute"]) / 1e6,
        "idle_s": intervals.measure(clip, lo, hi, lambda c: ~busy(c)) / 1e6,
        "idle_dataloader_s": intervals.measure(clip, lo, hi, lambda c: ~busy(c) & c["dataloader"]) / 1e6,
        "idle_optimizer_s": intervals.measure(clip, lo, hi,
                                              lambda c: ~busy(c) & c["optimizer"] & ~c["dataloader"]) / 1e6,
    }
    inside = [c for c in comms if c[1] > lo and c[0] < hi]
    if not inside:
        out["collectives"], out["exposed_top"] = {}, []
        return out
    s = np.array([max(c[0], lo) for c in inside])
    e = np.array([min(c[1], hi) for c in inside])
    hidden = intervals.covered_before(clip["compute"], e) - intervals.covered_before(clip["compute"], s)
    exposed = np.maximum((e - s) - hidden, 0.0)
    per_op: dict[str, dict[str, Any]] = {}
    for (_, _, op, size), dur, exp in zip(inside, e - s, exposed):
        row = per_op.setdefault(op, {"count": 0, "total_s": 0.0, "exposed_s": 0.0})
        row["count"] += 1
        row["total_s"] += dur / 1e6
        row["exposed_s"] += exp / 1e6
        if size is not None:
            row["bytes"] = row.get("bytes", 0) + size
    top = np.argsort(-exposed, kind="stable")[:TOP]
    out["collectives"] = per_op
    out["exposed_top"] = [{"op": inside[i][2], "bytes": inside[i][3], "dur_s": float(e[i] - s[i]) / 1e6,
                           "exposed_s": float(exposed[i]) / 1e6, "at_s": float(s[i] - lo) / 1e6}
                          for i in top if exposed[i] > 0]
    for row in out["exposed_top"]:
        if row["bytes"] is None:
            del row["bytes"]
    return out


def rank_of(meta: dict[str, Any], path: Path | None) -> int:
    """The rank the trace says (``distributedInfo``), else the one its file name carries, else 0."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    match = _RANK.search(path.name) if path is not None else None
    return int(match.group(1)) if match else 0


def unix_time(meta: dict[str, Any], us: float, path: Path | None) -> float:
    """A trace time (µs) as unix seconds: Kineto's clock starts at ``baseTimeNanoseconds`` where it says so;
    older traces count µs since the epoch; failing both, the file's modification time."""
    base = meta.get("baseTimeNanoseconds")
    if isinstance(base, int):
        return base / 1e9 + us / 1e6
    if us > 1e15:  # µs since 1970: after 2001
        return us / 1e6
    try:
        return os.stat(path).st_mtime if path is not None else 0.0
    except OSError:
        return 0.0


class ProfilerTraceParser:
    """The ``chrome-trace`` format: a whole trace, fed in chunks of bytes, turned into figures at the end."""

    format = "chrome-trace"
    reads_whole_file = True  # bytes in chunks, not lines: a trace's layout owes nothing to newlines

    def __init__(self, run_id: str | None = None, *, path: Path | None = None) -> None:
        self.path = path
        self.run_id = run_id or (path.parent.name if path is not None else "trace")
        self.timeline = Timeline()
        self.reader = TraceReader(self.timeline.add)
        self.problems: list[str] = []  # what went wrong, each kept aside as one rejected entry of the file
        self._broken = False

    def feed(self, data: bytes) -> tuple[Event, ...]:
        try:
            self.reader.feed(data)
        except TraceFormatError:
            self._broken = True  # said once by the reader of the file; the events before it still count
            raise
        return ()

    def finish(self) -> list[Event]:
        try:
            closed = self._broken or self.reader.finish()
        except TraceFormatError as exc:
            self.problems.append(str(exc))
            closed = True
        if not closed:
            self.problems.append(f"trace ends before its traceEvents array does (cut short?): "
                                 f"{self.reader.events} events read")
        meta, name = self.reader.meta, self.path.name if self.path is not None else None
        rank = rank_of(meta, self.path)
        timeline = "device" if self.timeline.on_device else "host"
        return [events.new("trace", t=unix_time(meta, figures.pop("start_us"), self.path), run=self.run_id,
                           rank=rank, timeline=timeline, file=name, **figures)
                for figures in self.timeline.steps()]
