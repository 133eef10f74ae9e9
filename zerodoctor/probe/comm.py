"""Probe, collectives: calls through DeepSpeed's comm backend → time and bytes per op.

``comms_logger`` cannot be used: in 0.19.8 its latencies are running totals, and it
synchronises the device after every op. Instead the methods of the backend object
(``deepspeed.comm.comm.cdb``), which every ``deepspeed.comm`` call ends in, are wrapped
once per process. An async call's handle is wrapped too, so the time a rank waits for
the collective to finish counts, not only the time to launch it. While a rank is inside
one, ``PHASE`` names the op, its process group and the group's sequence number (c10d's own
count, which the NCCL flight recorder also records), so a heartbeat shows what it waits in.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Callable

from zerodoctor.probe.phase import PHASE, RankPhase

OPS = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "broadcast", "all_gather",
       "all_gather_into_tensor", "all_gather_base", "all_gather_coalesced", "reduce_scatter_tensor",
       "reduce_scatter", "reduce", "all_to_all_single", "all_to_all", "gather", "scatter", "barrier")


class CommClock:
    """Time in collectives: per optimizer step (``take_step``) and per op (``take_ops``)."""

    def __init__(self, phase: RankPhase = PHASE, default_group: Callable[[], Any] = lambda: None) -> None:
        # a function, not the group: a reference held here would keep the default process group alive past
        # destroy_process_group into interpreter teardown, where destroying its workers can abort the process
        self.phase, self.default_group = phase, default_group
        self.step_s = 0.0
        self.ops: dict[str, list[float]] = {}  # op -> [count, bytes, seconds]
        self._depth = 0  # a backend op implemented with another one counts once

    def add(self, op: str, seconds: float, nbytes: int, calls: int = 1) -> None:
        self.step_s += seconds
        acc = self.ops.get(op)
        if acc is None:
            self.ops[op] = [calls, nbytes, seconds]
        else:
            acc[0] += calls
            acc[1] += nbytes
            acc[2] += seconds

    def take_step(self) -> float:
        seconds, self.step_s = self.step_s, 0.0
        return seconds

    def take_ops(self) -> dict[str, list[float]]:
        ops, self.ops = self.ops, {}
        return ops

    def wrap(self, op: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            group, seq = self._group(args, kwargs)
            previous = self.phase.enter_collective(op, group, seq)
            start = perf_counter()
            try:
                result = fn(*args, **kwargs)
            finally:
                self._depth -= 1
                self.add(op, perf_counter() - start, _message_bytes(args, kwargs))
                self.phase.leave(previous)
            if result is not None and hasattr(result, "wait") and not hasattr(result, "dtype"):
                return _TimedWork(result, self, op, group, seq)
            return result

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def _group(self, args: tuple, kwargs: dict) -> tuple[str | None, int | None]:
        """The op's process group name and the sequence number this op takes on it."""
        group = kwargs.get("group")
        if group is None and args:
            group = next((a for a in args if hasattr(a, "_get_sequence_number_for_group")), None)
        if group is None:
            group = self.default_group()
        if group is None:
            return None, None
        try:
            return group.group_name, group._get_sequence_number_for_group() + 1
        except (AttributeError, RuntimeError):  # a backend without c10d's counter
            return None, None


class _TimedWork:
    """An async collective's handle whose ``wait`` adds the blocked time to the op."""

    __slots__ = ("_work", "_clock", "_op", "_group", "_seq")

    def __init__(self, work: Any, clock: CommClock, op: str, group: str | None, seq: int | None) -> None:
        self._work, self._clock, self._op, self._group, self._seq = work, clock, op, group, seq

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        previous = self._clock.phase.enter_collective(self._op, self._group, self._seq)
        start = perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._clock.add(self._op, perf_counter() - start, 0, calls=0)
            self._clock.phase.leave(previous)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


_BUFFERS = frozenset(("tensor", "output_tensor", "input_tensor", "tensors", "output", "input", "tensor_list"))


def _size(obj: Any) -> int:
    nbytes = getattr(obj, "nbytes", None)  # a tensor's numel() * element_size(), one attribute read in C
    if nbytes is not None:
        return nbytes
    if isinstance(obj, (list, tuple)):
        return sum(map(_size, obj))
    return 0


def _message_bytes(args: tuple, kwargs: dict) -> int:
    """The larger of the first two buffers (output/input): the size that crosses the wire.

    On the training thread at every collective (the probe's largest cost there, ``bench/probe_overhead.py``):
    DeepSpeed passes keywords, so only the call's own keywords are looked at, not every name a buffer may have.
    """
    sizes = [_size(a) for a in args[:2]]
    if kwargs:
        sizes += [_size(v) for k, v in kwargs.items() if k in _BUFFERS]
    return max(sizes, default=0)


def instrument_backend() -> CommClock | None:
    """Wrap the live backend's collectives once per process; the clock they report to, if any."""
    from deepspeed.comm import comm as ds_comm

    backend = ds_comm.cdb
    if backend is None:
        return None
    clock = getattr(backend, "_zerodoctor_clock", None)
    if clock is not None:
        return clock
    from torch.distributed.distributed_c10d import GroupMember

    clock = CommClock(default_group=lambda: GroupMember.WORLD)  # None once destroyed, or without c10d's group
    for op in OPS:
        fn = getattr(backend, op, None)
        if callable(fn):
            setattr(backend, op, clock.wrap(op, fn))
    backend._zerodoctor_clock = clock
    return clock
