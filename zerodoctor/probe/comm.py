"""Probe, collectives: calls through DeepSpeed's comm backend → time and bytes per op.

``comms_logger`` cannot be used: in 0.19.8 its latencies are running totals, and it
synchronises the device after every op. Instead the methods of the backend object
(``deepspeed.comm.comm.cdb``), which every ``deepspeed.comm`` call ends in, are wrapped
once per process. An async call's handle is wrapped too, so the time a rank waits for
the collective to finish counts, not only the time to launch it. While a rank is inside
one, ``PHASE`` holds the op and its process group, so a heartbeat shows what it waits in: the
group's name and sequence number (c10d's own count, which the NCCL flight recorder also records)
are read from the group by the heartbeat, on the writer's thread (``phase.group_place``), not at
every op on the training thread, where the two reads cost ~2.5 µs an op in a real step.
"""

from __future__ import annotations

from functools import partial
from time import perf_counter
from typing import Any, Callable

from zerodoctor.probe.phase import OUTSIDE, PHASE, RankPhase, issued_place

OPS = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "broadcast", "all_gather",
       "all_gather_into_tensor", "all_gather_base", "all_gather_coalesced", "reduce_scatter_tensor",
       "reduce_scatter", "reduce", "all_to_all_single", "all_to_all", "gather", "scatter", "barrier")


class CommClock:
    """Time in collectives: per optimizer step (``take_step``) and per op (``take_ops``).

    The wrapper runs on the training thread at every collective, between calls into the backend that
    evict the interpreter's working set from the caches, so its cost goes by what it touches more than by
    its bytecodes: a real 1-rank run's all_reduce took a median 15 µs of wrapper when the work was spread
    over six helper functions, 10 µs inline (a hot loop: 3-7 µs and 1.7-3 µs). Hence one closure per op
    that does it all, a running total per op zeroed in place rather than a dict rebuilt per interval, and
    nothing built per call but the phase tuple.
    """

    def __init__(self, phase: RankPhase = PHASE, default_group: Callable[[], Any] = lambda: None,
                 group_types: tuple[type, ...] = ()) -> None:
        # a function, not the group: a reference held here would keep the default process group alive past
        # destroy_process_group into interpreter teardown, where destroying its workers can abort the process
        # (the phase holds an op's group only while the op runs)
        self.phase, self.default_group, self.group_types = phase, default_group, frozenset(group_types)
        self.step_s = 0.0
        self._totals: dict[str, list] = {}  # op -> [count, bytes, seconds] since the last take_ops
        self._depth = 0  # a backend op implemented with another one counts once

    def add(self, op: str, seconds: float, nbytes: int, calls: int = 1) -> None:
        self.step_s += seconds
        totals = self._totals.setdefault(op, [0, 0, 0.0])
        totals[0] += calls
        totals[1] += nbytes
        totals[2] += seconds

    def take_step(self) -> float:
        seconds, self.step_s = self.step_s, 0.0
        return seconds

    def take_ops(self) -> dict[str, list]:
        """Per op called since the last take: [count, bytes, seconds]; the totals restart from zero."""
        taken = {}
        for op, totals in self._totals.items():
            if totals[0] or totals[2]:
                taken[op] = totals[:]
                totals[:] = (0, 0, 0.0)
        return taken

    def wrap(self, op: str, fn: Any) -> Any:
        clock, phase, default_group, group_types = self, self.phase, self.default_group, self.group_types
        totals = self._totals.setdefault(op, [0, 0, 0.0])

        def timed(*args: Any, **kwargs: Any) -> Any:
            if clock._depth:
                return fn(*args, **kwargs)
            # the op's process group (DeepSpeed passes it by keyword, or positionally as in all_reduce), held in the
            # phase only while the op runs: the heartbeat names and counts it (a type test, not an attribute lookup)
            group = kwargs.get("group") if kwargs else None
            if group is None:
                for value in args:
                    if type(value) in group_types:
                        group = value
                        break
                else:
                    group = default_group()
            nbytes = _message_bytes(args, kwargs)  # before the op, while the caller's tensors are still in cache
            previous = phase.now
            start = perf_counter()
            phase.now = ("collective", start, previous[0], op, group, None)
            clock._depth = 1
            try:
                result = fn(*args, **kwargs)
            finally:
                end = perf_counter()
                seconds = end - start
                clock._depth = 0
                clock.step_s += seconds
                totals[0] += 1
                totals[1] += nbytes
                totals[2] += seconds
                if previous[0] in OUTSIDE:  # called from outside the engine: a new outside phase from now
                    phase.leave(previous, at=end)
                else:  # within an engine phase, as DeepSpeed calls them: back to it, with no call
                    phase.now = previous
            if result is not None and hasattr(result, "wait") and not hasattr(result, "dtype"):
                # an async op: its wait comes after later ops may have moved the group's count, so its place is
                # read now, when c10d has just counted it (only async ops pay this)
                return _TimedWork(result, clock, op, *issued_place(group))
            return result

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


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
    if isinstance(obj, (list, tuple)):
        return sum(map(_size, obj))
    return getattr(obj, "nbytes", None) or 0  # a tensor's numel() * element_size(), one attribute read in C


def _message_bytes(args: tuple, kwargs: dict) -> int:
    """The larger of the first two buffers (output/input): the size that crosses the wire.

    DeepSpeed passes keywords, so only the call's own keywords are looked at, not every name a buffer may
    have; a tensor's size is one attribute read, so the common case stays in this one frame.
    """
    largest = 0
    for value in args[:2]:
        nbytes = getattr(value, "nbytes", None)
        if nbytes is None:  # a list of tensors, or no buffer (all_reduce's op)
            nbytes = _size(value) if value.__class__ in (list, tuple) else 0
        if nbytes > largest:
            largest = nbytes
    if kwargs:
        for key, value in kwargs.items():
            if key in _BUFFERS:
                nbytes = getattr(value, "nbytes", None)
                if nbytes is None:
                    nbytes = _size(value)
                if nbytes > largest:
                    largest = nbytes
    return largest


def instrument_backend() -> CommClock | None:
    """Wrap the live backend's collectives once per process; the clock they report to, if any."""
    from deepspeed.comm import comm as ds_comm

    backend = ds_comm.cdb
    if backend is None:
        return None
    clock = getattr(backend, "_zerodoctor_clock", None)
    if clock is not None:
        return clock
    clock = CommClock(default_group=_default_group(), group_types=_group_types())
    for op in OPS:
        fn = getattr(backend, op, None)
        if callable(fn):
            setattr(backend, op, clock.wrap(op, fn))
    backend._zerodoctor_clock = clock
    return clock


def _group_types() -> tuple[type, ...]:
    """The classes a process group argument has: c10d's ``ProcessGroup``, and its backends where torch has them
    (a group created for one backend was one of those before torch 2.0)."""
    import torch.distributed as dist

    names = ("ProcessGroup", "ProcessGroupGloo", "ProcessGroupNCCL", "ProcessGroupMPI", "ProcessGroupUCC")
    return tuple(cls for cls in (getattr(dist, name, None) for name in names) if isinstance(cls, type))


def _default_group() -> Callable[[], Any]:
    """What reads c10d's default group at each op (None once destroyed, or before init): a lookup, never the group.

    ``GroupMember.WORLD`` is a metaclass property over a property, three Python calls at every collective that
    names no group; ``getattr`` on c10d's registry of groups is one call in C. The registry lives as long as the
    module anyway; holding it keeps no group alive.
    """
    from torch.distributed import distributed_c10d as c10d

    world = getattr(c10d, "_world", None)
    if world is not None and hasattr(world, "_default_pg"):
        return partial(getattr, world, "_default_pg", None)
    return lambda: c10d.GroupMember.WORLD  # a torch without that registry
