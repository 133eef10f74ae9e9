"""Sources: DeepSpeed Monitor's events (``monitor/monitor.py`` ``write_events``) → rank 0's ``step`` events.

Every Monitor writer (``csv_monitor.py``, ``tensorboard.py``, wandb, comet) gets the same list of
``(name, value, global_samples)`` from the engine: ``Train/Samples/lr`` and ``Train/Samples/loss_scale`` at each
boundary step, ``Train/Samples/train_loss``, and under ``wall_clock_breakdown`` the global timers in ms
(``Train/Samples/elapsed_time_ms_forward`` … ``_step``, read before the timer log resets them, so per step). The
CSV writer names a file after the event (``/`` made ``_``), TensorBoard keeps the tag: this module is the one
home of what each name means and of how a monitor's rows become steps, so the two readers cannot drift apart.
Their "step" is the engine's ``global_samples`` (samples trained so far, all ranks), not the optimizer step: the
step is that count over the samples of one step, the difference between two rows.
"""

from __future__ import annotations

from zerodoctor.events import Event, new

TAG_PREFIX = "Train/Samples/"
FIELDS = {"elapsed_time_ms_forward": ("fwd_s", 1e-3), "elapsed_time_ms_backward": ("bwd_s", 1e-3),
          "elapsed_time_ms_backward_allreduce": ("comm_s", 1e-3), "elapsed_time_ms_step": ("optim_s", 1e-3),
          "lr": ("lr", 1.0), "loss_scale": ("loss_scale", 1.0), "train_loss": ("loss", 1.0)}
PHASES = ("fwd_s", "bwd_s", "optim_s")
Rows = dict[int, dict[str, float]]  # global_samples → step field → value


def add(rows: Rows, metric: str, samples: int, value: float) -> None:
    """One monitor event (its name without ``Train/Samples/``) into ``rows``; a name no step field means is
    left out (``elapsed_time_ms_backward_inner``, ``eval_loss``)."""
    field = FIELDS.get(metric)
    if field is not None:
        key, scale = field
        rows.setdefault(samples, {})[key] = value * scale


def steps_of(rows: Rows, run: str, t: float) -> list[Event]:
    """One ``step`` per row, numbered by samples over the samples of one step (the smallest gap between rows)."""
    if not rows:
        return []
    samples = sorted(rows)
    per_step = min((b - a for a, b in zip([0, *samples], samples) if b > a), default=0)
    if per_step <= 0:
        return []
    out: list[Event] = []
    for count in samples:
        fields: dict[str, float] = rows[count]
        if all(k in fields for k in PHASES):
            fields["step_time_s"] = sum(fields[k] for k in PHASES)
        out.append(new("step", t=t, run=run, rank=0, step=count // per_step, **fields))
    return out
