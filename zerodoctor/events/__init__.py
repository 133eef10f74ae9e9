"""Events, schema v1: the pydantic models every source produces and the store consumes.

One model per ``kind``. The envelope (``v``, ``t``, ``run``, ``rank``, ``kind``) is required;
every payload field is optional ("missing values are absent, not zero"), except ``step.step``.
Unknown fields are ignored so that old readers survive new writers. Units are in the field
names (``_s`` seconds, ``_bytes`` bytes) so nobody has to guess.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Literal, Union

import msgspec
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from typing_extensions import NotRequired, TypedDict

SCHEMA_VERSION = 1

# The store keeps integers in SQLite INTEGER columns: a number past int64 would fail the whole
# batch's insert, so the schema refuses it and the line is quarantined with its reason instead.
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
# Run names are a unique key: PostgreSQL's index takes at most 2,704 bytes an entry (512 characters
# of UTF-8 fit), so a longer name is refused here, alike on every store, rather than by one of them.
MAX_RUN_NAME = 512


class _Envelope(BaseModel):
    # The models are the schema, read field by field; nothing validates with them on the way of a command
    # (EVENT_ADAPTER does): their validators are built only if asked for (~8 ms of every start-up otherwise).
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    v: Literal[1] = Field(description="schema version")
    t: float = Field(allow_inf_nan=False, description="unix time in seconds when the event was recorded")
    run: str = Field(max_length=MAX_RUN_NAME, description="run id, the name of the run directory")
    rank: Int64 = Field(description="global rank of the process that wrote the event")


class RunStart(_Envelope):
    kind: Literal["run_start"]
    world_size: Int64 | None = Field(None, description="number of ranks in the job")
    local_rank: Int64 | None = Field(None, description="rank within the node")
    host: str | None = Field(None, description="host name")
    pid: Int64 | None = Field(None, description="process id of the rank")
    argv: list[str] | None = Field(None, description="command line of the rank")
    zero_stage: Int64 | None = Field(None, description="ZeRO stage, 0-3")
    precision: Literal["fp16", "bf16", "fp32"] | None = Field(None, description="training precision")
    config: dict[str, Any] | None = Field(None, description="the DeepSpeed config as the user wrote it")
    derived: dict[str, Any] | None = Field(
        None,
        description="values DeepSpeed derived from the config: train_batch_size, "
        "train_micro_batch_size_per_gpu, gradient_accumulation_steps",
    )
    params: Int64 | None = Field(None, description="number of model parameters (unpartitioned)")
    versions: dict[str, str | None] | None = Field(None, description="torch, deepspeed, cuda, nccl, python")
    device_name: str | None = Field(None, description="accelerator name, e.g. 'NVIDIA H100 80GB HBM3'")
    device_memory_bytes: Int64 | None = Field(None, description="total memory of the accelerator")
    host_memory_bytes: Int64 | None = Field(
        None, description="host memory the rank may use: MemTotal, or the cgroup's limit when lower")
    env: dict[str, str] | None = Field(None, description="allow-listed environment (never secrets), the scheduler's "
                                       "names included: Slurm's job, array and step ids and node list, a Kubernetes "
                                       "Indexed Job's index")


class Step(_Envelope):
    kind: Literal["step"]
    step: Int64 = Field(description="optimizer step number (counts skipped steps too)")
    micro_batches: Int64 | None = Field(None, description="backward calls since the previous optimizer step")
    samples: Int64 | None = Field(None, description="samples fed to the model since the previous optimizer step")
    tokens: Int64 | None = Field(None, description="token ids fed since the previous optimizer step "
                                 "(integer inputs only)")
    loss: float | None = Field(None, description="loss of the last micro-batch (NaN/Infinity allowed)")
    lr: float | None = Field(None, description="learning rate of the first param group")
    loss_scale: float | None = Field(None, description="fp16 loss scale used for this step")
    overflow: bool | None = Field(None, description="true when the step was skipped (fp16 overflow)")
    grad_norm: float | None = Field(None, description="global gradient norm (NaN/Infinity allowed)")
    step_time_s: float | None = Field(None, description="wall time since the previous optimizer step")
    fwd_s: float | None = Field(None, description="time in forward, summed over micro-batches")
    bwd_s: float | None = Field(None, description="time in backward, summed over micro-batches")
    optim_s: float | None = Field(None, description="time in the optimizer step")
    comm_s: float | None = Field(None, description="time in collectives during this step")
    tflops: float | None = Field(None, description="model TFLOP/s per GPU the training script printed for this "
                                 "step (Megatron's 'throughput per GPU (TFLOP/s/GPU)' or 'TFLOPs')")
    data_s: float | None = Field(None, description="time in DataLoader iteration (on the training thread) "
                                 "during this step")
    mem_allocated_bytes: Int64 | None = Field(None, description="torch.cuda.memory_allocated() after the step")
    mem_reserved_bytes: Int64 | None = Field(None, description="torch.cuda.memory_reserved() after the step")
    mem_peak_bytes: Int64 | None = Field(
        None, description="highest torch.cuda.memory_allocated() of this step; absent when the step set no new "
        "max_memory_allocated() (the probe never resets the user's peak counter)")
    alloc_retries: Int64 | None = Field(None, description="cumulative num_alloc_retries of the caching allocator")
    inactive_split_bytes: Int64 | None = Field(None, description="inactive_split_bytes.all.current of the allocator")
    inferred: bool | None = Field(
        None, description="true when no line showed this step: a console log's gap (step=50 after step 40) "
        "filled from DeepSpeed's skipped count, overflows first; its count is exact, its position is not. "
        "Absent on observed steps")


class Comm(_Envelope):
    kind: Literal["comm"]
    op: str = Field(description="collective name: all_gather, reduce_scatter, all_reduce, broadcast, ...")
    step: Int64 | None = Field(None, description="last optimizer step of the interval")
    count: Int64 | None = Field(None, description="calls in the interval")
    bytes: Int64 | None = Field(None, description="message bytes summed over the calls")
    total_s: float | None = Field(None, description="time in the calls, summed")
    interval_s: float | None = Field(None, description="length of the aggregation interval")
    since_step: Int64 | None = Field(
        None, description="the step the interval began after, where it spans the run so far: 0 for a console's "
        "comms-logger summary, which counts from the logger's start. Absent on the probe's per-step intervals")


class Heartbeat(_Envelope):
    kind: Literal["heartbeat"]
    phase: Literal["forward", "backward", "step", "collective", "save_checkpoint", "load_checkpoint",
                   "eval", "data", "user"] = Field(
        description="what the rank's training thread is doing: an engine phase, a collective, or outside the "
        "engine (eval: evaluation, data: the data loader, user: any other code)")
    since_t: float | None = Field(None, allow_inf_nan=False, description="unix time when that phase began")
    outer: str | None = Field(None, description="the engine phase a collective runs in (forward, backward, ...)")
    op: str | None = Field(None, description="the collective, when phase is collective")
    group: str | None = Field(None, description="its process group (c10d group name; '0' is the default group)")
    seq: Int64 | None = Field(None, description="that collective's sequence number on its group (c10d's count)")
    last_step: Int64 | None = Field(None, description="last optimizer step this rank completed")
    rss_bytes: Int64 | None = Field(None, description="resident host memory of the rank's process")
    pinned_bytes: Int64 | None = Field(None, description="page-locked host memory held by PyTorch (CUDA only)")


class Oom(_Envelope):
    kind: Literal["oom"]
    message: str | None = Field(None, description="the allocator's error message, verbatim")
    step: Int64 | None = Field(None, description="optimizer step during which it happened")
    device: Int64 | None = Field(None, description="GPU index")
    requested_bytes: Int64 | None = Field(None, description="size of the failed allocation")
    capacity_bytes: Int64 | None = Field(None, description="total capacity of the device")
    free_bytes: Int64 | None = Field(None, description="free device memory at failure")
    allocated_bytes: Int64 | None = Field(None, description="memory allocated by PyTorch at failure")
    reserved_bytes: Int64 | None = Field(None, description="memory reserved by the caching allocator at failure")
    allowed_bytes: Int64 | None = Field(None, description="the process's cap (set_per_process_memory_fraction), "
                                        "when one is set")
    alloc_retries: Int64 | None = Field(None, description="num_alloc_retries at failure")
    inactive_split_bytes: Int64 | None = Field(None, description="inactive split bytes at failure")
    alloc_conf: str | None = Field(None, description="PYTORCH_CUDA_ALLOC_CONF in effect")


class ExceptionEvent(_Envelope):
    kind: Literal["exception"]
    type: str | None = Field(None, description="exception class name")
    message: str | None = Field(None, description="str() of the exception")
    traceback: list[str] | None = Field(None, description="last lines of the traceback")
    step: Int64 | None = Field(None, description="optimizer step during which it was raised")


class Log(_Envelope):
    kind: Literal["log"]
    message: str = Field(description="the console line as recognised")
    source: str | None = Field(None, description="parser that recognised it")
    level: str | None = Field(None, description="log level when the line had one")
    what: str | None = Field(None, description="what the parser recognised, e.g. 'batch_assertion'")
    data: dict[str, Any] | None = Field(None, description="numbers the parser pulled out of the line")
    step: Int64 | None = Field(None, description="optimizer step, when the line names one")


class RunEnd(_Envelope):
    kind: Literal["run_end"]
    exit_code: Int64 | None = Field(None, description="exit status of the process")
    signal: Int64 | None = Field(None, description="signal number when killed by one")
    duration_s: float | None = Field(None, description="wall time of the process")
    dropped_events: Int64 | None = Field(
        None, description="events the probe dropped rather than make training wait (its writer fell behind, "
        "or the schema refused one); absent when none")


class Checkpoint(_Envelope):
    kind: Literal["checkpoint"]
    op: Literal["save", "load"] = Field(description="save_checkpoint or load_checkpoint, recorded once it returned")
    step: Int64 | None = Field(None, description="the engine's global step after the call (a save holds the "
                               "weights after this step; a load continues from it)")
    dir: str | None = Field(None, description="the directory passed (save_dir / load_dir)")
    tag: str | None = Field(None, description="the checkpoint's tag (DeepSpeed's default: global_step<N>)")
    path: str | None = Field(None, description="the checkpoint's own directory, <dir>/<tag>")
    reapplied: list[str] | None = Field(
        None, description="load under fix-and-resume: the patched values put back after the load restored the "
        "checkpoint's (lr, loss_scaler)")


class FixCheck(_Envelope):
    kind: Literal["fix_check"]
    step: Int64 | None = Field(None, description="the first optimizer step after a resume")
    expected: dict[str, Any] | None = Field(None, description="what the patched config sets (lr, loss scaling)")
    observed: dict[str, Any] | None = Field(None, description="what the engine ran that step with")
    in_effect: bool | None = Field(None, description="observed matches expected")


class TraceCollective(TypedDict, total=False):
    count: Int64
    total_s: float
    exposed_s: float
    bytes: Int64


class TraceExposed(TypedDict, total=False):
    op: str
    bytes: Int64
    dur_s: float
    exposed_s: float
    at_s: float


class Trace(_Envelope):
    """One profiled step of one rank, as its torch.profiler trace shows it (``sources/profiler_trace.py``)."""

    kind: Literal["trace"]
    step: Int64 | None = Field(None, description="the trace's ProfilerStep#N; absent when the trace marks no step")
    timeline: Literal["device", "host"] | None = Field(
        None, description="device: GPU kernels on streams were measured; host: a CPU-only trace's threads")
    file: str | None = Field(None, description="the trace file's name")
    window_s: float | None = Field(None, description="length of the step on the measured timeline")
    compute_s: float | None = Field(
        None, description="time some compute runs (kernels, or innermost operators on the host), overlaps once")
    comm_s: float | None = Field(None, description="time some collective runs")
    exposed_comm_s: float | None = Field(None, description="time a collective runs while no compute does, "
                                         "on any stream")
    copy_s: float | None = Field(None, description="time a memcpy/memset runs on the device")
    idle_s: float | None = Field(None, description="time nothing runs on the measured timeline")
    idle_dataloader_s: float | None = Field(None, description="idle time while the host is in the DataLoader")
    idle_optimizer_s: float | None = Field(None, description="idle time while the host is in Optimizer.step")
    dataloader_s: float | None = Field(None, description="time in enumerate(DataLoader) on the step's CPU range")
    optimizer_s: float | None = Field(None, description="time in Optimizer.step on the step's CPU range")
    host_gap_s: float | None = Field(
        None, description="time of the step's CPU range where no operator runs on any thread")
    collectives: dict[str, TraceCollective] | None = Field(
        None, description="per collective op: count, time, exposed time, bytes")
    exposed_top: list[TraceExposed] | None = Field(None, description="the longest exposed collectives, longest first")
    lanes: dict[str, list[float]] | None = Field(
        None, description="what the report's timeline draws of the window: per row (compute, comm, copy on a device "
                          "timeline, idle) flat [start, end, …] in seconds from t, near ranges merged")
    lanes_merge_s: float | None = Field(None, description="the widest gap merged into a range of lanes")
    lanes_from_s: float | None = Field(
        None, description="where the step's window starts, in seconds after the trace's first profiled window starts")


MODELS: tuple[type[_Envelope], ...] = (RunStart, Step, Comm, Heartbeat, Oom, ExceptionEvent, Log, RunEnd,
                                        Checkpoint, FixCheck, Trace)
EVENT_MODELS: dict[str, type[_Envelope]] = {m.model_fields["kind"].annotation.__args__[0]: m for m in MODELS}  # type: ignore[union-attr]


def _as_typed_dict(model: type[BaseModel]) -> type:
    """The same fields as ``model``, validated into a plain dict.

    The models above are the schema; the pipeline validates lines into dicts with these
    twins because building a model instance per event costs about 3x the JSON parse
    itself (measured: 2.3 µs vs 6.9 µs per step line), and the store wants dicts anyway.
    Absent optional fields stay absent, which is what "missing, not zero" means.
    """
    fields = {
        name: _annotation(field) if field.is_required() else NotRequired[_annotation(field)]
        for name, field in model.model_fields.items()
    }
    return TypedDict(model.__name__ + "Dict", fields)  # type: ignore[operator]


def _annotation(field: FieldInfo) -> Any:
    """The field's type with its constraints: pydantic moves a top-level ``Annotated``'s into ``metadata``."""
    constrained = (field.annotation, *field.metadata)
    return Annotated[constrained] if field.metadata else field.annotation


Event = dict[str, Any]
"""A validated event: the envelope and the fields present on the line."""

_EVENT_DICTS = {kind: _as_typed_dict(model) for kind, model in EVENT_MODELS.items()}

# Its validator is built at its first use (12 ms): a command that reads no text log and no line msgspec refuses
# (``rules list``, an events file) never builds it.
EVENT_ADAPTER: TypeAdapter = TypeAdapter(
    Annotated[Union[tuple(_EVENT_DICTS.values())],  # type: ignore[misc, arg-type]
              Field(discriminator="kind")],
    config=ConfigDict(defer_build=True),
)


@functools.cache
def _kind_adapter(kind: str) -> TypeAdapter | None:
    """One kind's validator, the union's own member, built at the kind's first event: a text log's few kinds
    build only theirs (a one-line OOM log 1 ms, the union of every kind 7 ms). None for a kind the schema lacks."""
    typed = _EVENT_DICTS.get(kind)
    return None if typed is None else TypeAdapter(typed)


def new(kind: str, **fields: Any) -> Event:
    """Build a validated event dict, for parsers of text logs and for the probe.

    ``None`` values are dropped, since a missing value is absent, not null. What the kind's validator refuses
    (a kind the schema lacks too) is refused by the union, so a refusal reads as it always did.
    """
    event = {"v": SCHEMA_VERSION, "kind": kind, **{k: v for k, v in fields.items() if v is not None}}
    adapter = _kind_adapter(kind) if isinstance(kind, str) else None
    if adapter is not None:
        try:
            return adapter.validate_python(event)
        except ValidationError:
            pass
    return EVENT_ADAPTER.validate_python(event)


_INT64 = msgspec.Meta(ge=-(2**63), le=2**63 - 1)
_FINITE = msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)  # refuses the inf of 1e400


def _record_type(field: FieldInfo) -> Any:
    """The msgspec type of one model field: int64 bounds on ints, finite floats where the model refuses
    inf/NaN (``t``, ``since_t``), a string's length cap (the run name); containers as they are."""
    annotation = field.annotation
    args = typing.get_args(annotation)
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else annotation
    if typing.get_origin(base) is Annotated:  # Int64: its bounds become msgspec's
        base = typing.get_args(base)[0]
    if base is int:
        base = Annotated[int, _INT64]
    elif base is float and any(getattr(m, "allow_inf_nan", True) is False for m in field.metadata):
        base = Annotated[float, _FINITE]
    elif base is str and any(getattr(m, "max_length", None) for m in field.metadata):
        base = Annotated[str, msgspec.Meta(max_length=next(m.max_length for m in field.metadata
                                                           if getattr(m, "max_length", None)))]
    elif base not in (float, bool, str) and typing.get_origin(base) not in (Literal, list, dict):
        raise TypeError(f"no msgspec type for {annotation!r}")
    return typing.Optional[base] if optional else base


# A step event as it travels from a parser to the store: nearly every line of a run is one, and a
# msgspec Struct costs a third of a dict to build (no GC tracking: its fields are scalars). Every
# field is present (``None`` when the event had none); ``kind`` is its tag, so it decodes in the one
# union of every kind (``EventLine``). The ``Step`` model stays the schema: this is derived from it
# field by field, and what a record cannot express (NaN and lax coercions in JSON) is validated by
# the model and converted (``step_record``).
StepRecord = msgspec.defstruct(
    "StepRecord",
    [(name, _record_type(f)) if f.is_required() else (name, _record_type(f), None)
     for name, f in Step.model_fields.items() if name != "kind"],
    gc=False, forbid_unknown_fields=False, tag_field="kind", tag="step",
)


# The numeric fields of a step beyond its number, split by the type the store keeps them in
# (stepcolumns.py): int64 (a bool as 0/1) or float64.
STEP_METRICS = tuple(name for name in Step.model_fields if name not in (*_Envelope.model_fields, "kind", "step"))
STEP_INTS = tuple(m for m in STEP_METRICS if _record_type(Step.model_fields[m]) != typing.Optional[float])
STEP_FLOATS = tuple(m for m in STEP_METRICS if m not in STEP_INTS)
STEP_BOOLS = tuple(m for m in STEP_INTS if _record_type(Step.model_fields[m]) == typing.Optional[bool])  # kept 0/1


def step_record(event: Event) -> Any:
    """The ``StepRecord`` of a step event dict the ``Step`` model validated (NaN and all)."""
    return StepRecord(**{name: event.get(name) for name in StepRecord.__struct_fields__})


def _tagged_struct(model: type[_Envelope]) -> type:
    """``model`` as a msgspec Struct tagged by its kind; an absent field stays ``UNSET`` (left out of the dict)."""
    kind = model.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
    fields = [(name, _record_type(f)) if f.is_required() else (name, _record_type(f) | msgspec.UnsetType,
                                                                msgspec.UNSET)
              for name, f in model.model_fields.items() if name != "kind"]
    return msgspec.defstruct(model.__name__ + "Line", fields, tag_field="kind", tag=kind, kw_only=True,
                             forbid_unknown_fields=False)


# Every kind a JSONL line holds, decoded by msgspec in one pass keyed by ``kind`` (``sources/jsonl.py``):
# a ``comm`` or ``heartbeat`` line (a third of a probe's run) costs no refusal by a decoder of steps
# first. ``trace`` is read from profiler traces, never a line, and its TypedDicts have no twin here:
# pydantic judges it, as every line msgspec refuses.
TAGGED_KINDS = tuple(m for m in MODELS if m not in (Step, Trace))
_LINE_TYPES = (StepRecord, *(_tagged_struct(m) for m in TAGGED_KINDS))
EventLine = Union[_LINE_TYPES]  # type: ignore[valid-type]
