"""Probe, engine: a ``DeepSpeedEngine``'s forward/backward/step calls → one ``step`` event per optimizer step.

The engine's own methods are wrapped on the instance. Values are read from the engine,
not from DeepSpeed's logger (WARNING by default since 0.17.6, so its lines never print):
the loss scale before the scaler updates it, ``skipped_steps`` for overflow, the grad norm
as DeepSpeed cached it. Nothing here synchronises the device: loss and grad norm stay
0-dim tensors until the writer's thread turns them into numbers.

Each wrapper also sets the rank's phase (``probe.phase``) for the heartbeat: forward,
backward, step, save/load_checkpoint, evaluation (a forward in eval mode or without grad),
and outside the engine in between. The user's memory counters are never reset: the peak of
a step is reported only when it set a new high, read from the counter as it is.

Checkpoint saves and loads become ``checkpoint`` events (where the job keeps its checkpoints,
for ``run --fix-and-resume``); on a relaunch with a fix, ``probe.resume`` keeps the patched values
across the load and checks them on the first step after it.

A probe that raises is switched off after recording the failure once; the call it
wrapped still runs, so training never notices. The one exception is a fix that is not in
effect after a resume: the user asked for the fix, so that attempt stops (``FixNotInEffect``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from time import perf_counter
from typing import Any

from zerodoctor.probe import RUN_DIR_ENV, RUN_ID_ENV
from zerodoctor.probe.comm import CommClock, instrument_backend
from zerodoctor.probe.crash import CrashRecorder
from zerodoctor.probe.phase import PHASE, watch_data_loader
from zerodoctor.probe.resume import FixKeeper, FixNotInEffect, load_patch, observed_values
from zerodoctor.probe.runinfo import run_start_fields, user_config
from zerodoctor.probe.writer import EventWriter

COMM_INTERVAL_S = 1.0  # how often per-op collective totals become ``comm`` events
_RECORDERS: dict[str, CrashRecorder] = {}  # one writer and crash recorder per process and run dir


class EngineProbe:
    def __init__(self, engine: Any, writer: EventWriter, crash: CrashRecorder, comm: CommClock | None,
                 keeper: FixKeeper | None = None) -> None:
        self.engine, self.writer, self.crash, self.comm, self.keeper = engine, writer, crash, comm, keeper
        self.not_in_effect: str | None = None  # set by the first step after a resume whose fix is not in effect
        self.enabled = True
        self.phase = PHASE
        self._cuda = _cuda_memory()
        self._reset()
        self._last_step_t: float | None = None
        self._span = self._end = 0.0  # the last engine call's duration and end (``_call``)
        self._comm_t = perf_counter()

    def _reset(self) -> None:
        self.micro_batches = 0
        self.samples: int | None = None
        self.tokens: int | None = None
        self.fwd_s = self.bwd_s = 0.0
        self.loss: Any = None

    # -- wrappers -------------------------------------------------------------------------
    def install(self) -> None:
        engine = self.engine
        forward, backward, step = engine.forward, engine.backward, engine.step
        import torch

        grad_enabled = torch.is_grad_enabled
        module = engine.module  # read once: on an nn.Module each read is a Python __getattr__ call
        self._fp16 = engine.fp16_enabled()  # the config's, fixed for the engine's life

        # These run at every micro-batch, between calls that evict the interpreter's working set from the caches,
        # so what they cost goes by the frames and objects they touch: the accounting is inline (a try costs
        # nothing in Python 3.11 until it catches), and one clock reading both times a call and starts a phase.
        def probed_forward(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return forward(*args, **kwargs)
            if not (module.training and grad_enabled()):  # evaluation: no samples, no step time of its own
                return self._call(forward, args, kwargs, "eval", "eval")
            out = self._call(forward, args, kwargs, "forward")
            try:
                self.fwd_s += self._span
                samples, tokens = _batch_shape(args, kwargs)
                if samples is not None:
                    self.samples = (self.samples or 0) + samples
                if tokens is not None:
                    self.tokens = (self.tokens or 0) + tokens
            except Exception as exc:  # noqa: BLE001 - the probe's own failure
                self._fail(exc)
            return out

        def probed_backward(loss: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return backward(loss, *args, **kwargs)
            out = self._call(backward, (loss, *args), kwargs, "backward")
            try:
                self.bwd_s += self._span
                self.micro_batches += 1
                self.loss = loss.detach() if hasattr(loss, "detach") else loss
            except Exception as exc:  # noqa: BLE001 - the probe's own failure
                self._fail(exc)
            return out

        def probed_step(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return step(*args, **kwargs)
            try:  # read before the step changes them; a call that steps nothing is told by global_steps after
                before = (engine.global_steps, engine.skipped_steps,
                          engine._get_optimizer_loss_scale() if self._fp16 else None, engine.get_lr()[0])
            except Exception as exc:  # noqa: BLE001 - the probe's own failure
                before = self._fail(exc)
            out = self._call(step, args, kwargs, "step")
            if before is not None and engine.global_steps != before[0]:
                self._safely(self._after_step, before)
            if self.not_in_effect is not None:
                self.writer.flush()
                raise FixNotInEffect(self.not_in_effect)
            return out

        # Instance attributes shadow the class methods; nn.Module.__call__ finds forward here too.
        object.__setattr__(engine, "forward", probed_forward)
        object.__setattr__(engine, "backward", probed_backward)
        object.__setattr__(engine, "step", probed_step)
        for name in ("save_checkpoint", "load_checkpoint"):
            self._checkpoint_call(name)
        self.phase.thread = threading.get_ident()
        watch_data_loader(self.phase)

    def _checkpoint_call(self, name: str) -> None:
        """Wrap a checkpoint method: its phase (minutes, and all ranks' collectives), then a ``checkpoint`` event."""
        method = getattr(self.engine, name, None)
        if method is None:
            return
        load = name == "load_checkpoint"

        def probed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return method(*args, **kwargs)
            taken = self._safely(self.keeper.before_load, self.engine) if load and self.keeper else None
            out = self._call(method, args, kwargs, name)
            self._safely(self._after_checkpoint, load, args, kwargs, out, taken)
            return out

        object.__setattr__(self.engine, name, probed)

    def _after_checkpoint(self, load: bool, args: tuple, kwargs: dict, out: Any, taken: dict | None) -> None:
        engine = self.engine
        directory = args[0] if args else kwargs.get("load_dir" if load else "save_dir")
        tag = args[1] if len(args) > 1 else kwargs.get("tag")
        if load:
            if not (isinstance(out, tuple) and out and out[0]):  # nothing there to load: the run starts afresh
                return
            if tag is None:  # DeepSpeed read it from the directory's 'latest' file
                tag = (Path(directory) / "latest").read_text().strip()
        elif tag is None:
            tag = f"global_step{engine.global_steps}"  # DeepSpeed's own default
        path = os.path.join(str(directory), str(tag))
        reapplied = self.keeper.after_load(engine, taken) if load and taken else None
        self.writer.emit("checkpoint", op="load" if load else "save", step=engine.global_steps,
                         dir=str(directory), tag=str(tag), path=path, reapplied=reapplied)
        if load:
            self.phase.last_step = engine.global_steps
            self.crash.step = engine.global_steps + 1

    def _call(self, fn: Any, args: tuple, kwargs: dict, phase: str, after: str = "user") -> Any:
        """``fn`` in ``phase``; how long it took is left in ``_span``, when it returned in ``_end``."""
        start = perf_counter()
        if self._last_step_t is None:
            self._last_step_t = start
        previous = self.phase.enter(phase, start)
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            self._safely(self.crash.record, exc)
            raise
        finally:
            self._end = end = perf_counter()
            self._span = end - start
            # an engine call inside another (DeepSpeed's step calls into itself) returns to it
            self.phase.leave(previous, after, end)

    def _safely(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the probe's own failure: record once, switch off
            return self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.enabled = False
        self._report_failure(exc)

    def _report_failure(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        try:
            self.writer.emit("log", message=f"probe disabled: {message}", source="probe", level="error",
                             what="probe_error")
            self.writer.flush()
        finally:
            print(f"zerodoctor: probe disabled on rank {self.writer.rank}, training continues: {message}",
                  file=sys.stderr, flush=True)

    # -- accounting -----------------------------------------------------------------------
    def _after_step(self, before: tuple) -> None:
        """One optimizer step taken: its ``step`` event, from what ``before`` read before it and the engine now."""
        engine = self.engine
        steps, skipped, scale, lr = before
        now = self._end
        fields: dict[str, Any] = {
            "step": engine.global_steps,
            "micro_batches": self.micro_batches,
            "samples": self.samples,
            "tokens": self.tokens,
            "loss": self.loss,
            "lr": lr,
            "loss_scale": scale,
            "overflow": engine.skipped_steps > skipped,
            "grad_norm": engine.get_global_grad_norm(),
            "step_time_s": now - self._last_step_t if self._last_step_t is not None else None,
            "fwd_s": self.fwd_s,
            "bwd_s": self.bwd_s,
            "optim_s": self._span,
            "data_s": self.phase.data_s,
        }
        if self.comm is not None:
            fields["comm_s"] = self.comm.take_step()
        if self._cuda is not None:
            fields.update(self._cuda())
        self.writer.put("step", fields)
        if self.keeper is not None and self.keeper.expected is not None:
            self._check_fix()
        self.phase.last_step, self.phase.data_s = engine.global_steps, 0.0
        self.crash.step = engine.global_steps + 1  # failures from here on belong to the next step
        self._last_step_t = now
        self._reset()
        if self.comm is not None and now - self._comm_t >= COMM_INTERVAL_S:
            self.flush_comm(now)

    def _check_fix(self) -> None:
        observed = observed_values(self.engine)
        expected, ok = self.keeper.check(observed)
        self.writer.emit("fix_check", step=self.engine.global_steps, expected=expected, observed=observed,
                         in_effect=ok)
        if not ok:
            self.not_in_effect = (f"zerodoctor: fix not in effect after the resume: the patched config sets "
                                  f"{expected}, "
                                  f"the engine runs with {observed}; stopping this attempt")

    def flush_comm(self, now: float | None = None) -> None:
        now = perf_counter() if now is None else now
        for op, (count, nbytes, seconds) in sorted(self.comm.take_ops().items()):
            self.writer.emit("comm", op=op, step=self.engine.global_steps, count=int(count), bytes=int(nbytes),
                             total_s=seconds, interval_s=now - self._comm_t)
        self._comm_t = now


def _batch_shape(args: tuple, kwargs: dict) -> tuple[int | None, int | None]:
    """(samples, tokens) of the first tensor the model received (positional, then keyword).

    Samples are its leading dimension; tokens its element count when it holds integer token
    ids of shape (batch, sequence, …), which is what "tokens seen" means for a language model.
    """
    for value in (*args, *kwargs.values()):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            dtype = value.dtype  # its flags are attributes: no tensor method calls at every forward
            ids = len(shape) >= 2 and not dtype.is_floating_point and not dtype.is_complex
            return int(shape[0]), (int(value.numel()) if ids else None)
    return None, None


def _cuda_memory(cuda: Any = None) -> Any:
    """Reader of the caching allocator's counters (host-side bookkeeping, no device sync), or None.

    It never resets them: ``max_memory_allocated()`` belongs to the user (and to the HF Trainer's
    memory metrics). A step's peak is known only when it raised the all-time peak; otherwise it
    stays absent, since all the counter says is that it was no higher than before.
    """
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        return None
    last_peak = [cuda.memory_stats().get("allocated_bytes.all.peak")]

    def read() -> dict[str, Any]:
        stats = cuda.memory_stats()
        peak = stats.get("allocated_bytes.all.peak")
        rose = peak is not None and (last_peak[0] is None or peak > last_peak[0])
        last_peak[0] = peak
        return {"mem_allocated_bytes": stats.get("allocated_bytes.all.current"),
                "mem_reserved_bytes": stats.get("reserved_bytes.all.current"),
                "mem_peak_bytes": peak if rose else None,
                "alloc_retries": stats.get("num_alloc_retries"),
                "inactive_split_bytes": stats.get("inactive_split_bytes.all.current")}

    return read


def attach_engine(engine: Any, run_dir: str | os.PathLike | None, *, config: Any = None,
                  run_id: str | None = None) -> EngineProbe:
    run_dir = Path(run_dir or os.environ[RUN_DIR_ENV])
    run_id = run_id or os.environ.get(RUN_ID_ENV) or run_dir.name
    crash = _RECORDERS.get(str(run_dir))
    if crash is None:
        crash = CrashRecorder(EventWriter(run_dir, run_id, engine.global_rank, heartbeat=PHASE.heartbeat))
        crash.install()
        _RECORDERS[str(run_dir)] = crash
    snapshot = user_config(config) if config is not None else None
    if snapshot is None:
        snapshot = user_config(getattr(engine, "_config", None) and engine._config._param_dict)
    crash.writer.emit("run_start", t=time.time(), **run_start_fields(engine, snapshot))
    crash.writer.flush()
    crash.step = engine.global_steps + 1
    patch = load_patch(run_dir)
    keeper = FixKeeper(patch) if patch is not None else None
    probe = EngineProbe(engine, crash.writer, crash, instrument_backend(), keeper if keeper and keeper.active else None)
    probe.install()
    if probe.comm is not None:
        import atexit

        atexit.register(probe.flush_comm)
    return probe
