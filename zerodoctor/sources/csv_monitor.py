"""Sources, files: DeepSpeed Monitor's CSV files (``csv_monitor``) → rank 0's ``step`` events.

``deepspeed/monitor/csv_monitor.py`` (0.6.6+, c87f6ee20) ``write_events``: one file per metric in
``<output_path>/<job_name>/``, named after the event with ``/`` and spaces made ``_``
(``Train_Samples_elapsed_time_ms_forward.csv``), a ``step,<last part of the name>`` header, then one
``step,value`` row per write. Its "step" is the engine's ``global_samples`` (samples trained so far, all ranks),
not the optimizer step: the step is that count over the samples of one step, the difference between two rows.
``runtime/engine.py`` writes ``lr`` and ``loss_scale`` at every boundary step, and under ``wall_clock_breakdown``
the global timers in ms (``_write_monitor``: ``elapsed_time_ms_forward`` … ``_step``, read before the timer log
resets them, so per step); the pipeline engine writes ``train_loss``. Rank 0 writes them all.

The files of a directory are one source: read together, at the end (a metric's file alone would make a
step of every row). The parser is handed one of them (``monitor_file``) and reads its siblings.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from zerodoctor.events import Event, new

PATTERN = "Train_Samples_*.csv"
_FIELDS = {"elapsed_time_ms_forward": ("fwd_s", 1e-3), "elapsed_time_ms_backward": ("bwd_s", 1e-3),
           "elapsed_time_ms_backward_allreduce": ("comm_s", 1e-3), "elapsed_time_ms_step": ("optim_s", 1e-3),
           "lr": ("lr", 1.0), "loss_scale": ("loss_scale", 1.0), "train_loss": ("loss", 1.0)}
_PHASES = ("fwd_s", "bwd_s", "optim_s")


def monitor_file(directory: Path) -> Path | None:
    """The file that stands for a directory's monitor CSVs (the first by name), here or one folder down
    (``<output_path>/<job_name>/``); None where there are none."""
    for folder in (directory, *sorted(d for d in directory.iterdir() if d.is_dir())):
        found = sorted(p for p in folder.glob(PATTERN) if is_monitor_file(p))
        if found:
            return found[0]
    return None


def is_monitor_file(path: Path) -> bool:
    """A monitor CSV by its name: its run is the directory that holds it (the monitor's job name)."""
    return path.suffix == ".csv" and path.stem.removeprefix("Train_Samples_") in _FIELDS


class CsvMonitorParser:
    """Every monitor CSV beside ``path`` → one ``step`` event per optimizer step, at the end of input."""

    format = "csv-monitor"

    def __init__(self, run_id: str | None = None, path: Path | None = None) -> None:
        self.run = run_id or "csv-monitor"
        self.path = path

    def feed(self, data: bytes) -> list[Event]:
        return []  # the rows are read with their siblings' at the end: a file alone is part of each step

    def finish(self) -> list[Event]:
        if self.path is None:
            return []
        rows: dict[int, dict[str, Any]] = {}
        for file in sorted(self.path.parent.glob(PATTERN)):
            field = _FIELDS.get(file.stem.removeprefix("Train_Samples_"))
            if field is None:
                continue
            key, scale = field
            for count, value in _rows(file):
                rows.setdefault(count, {})[key] = value * scale
        if not rows:
            return []
        samples = sorted(rows)
        per_step = min((b - a for a, b in zip([0, *samples], samples) if b > a), default=0)
        if per_step <= 0:
            return []
        out: list[Event] = []
        t = self.path.stat().st_mtime
        for count in samples:
            fields = rows[count]
            if all(k in fields for k in _PHASES):
                fields["step_time_s"] = sum(fields[k] for k in _PHASES)
            out.append(new("step", t=t, run=self.run, rank=0, step=count // per_step, **fields))
        return out


def _rows(file: Path) -> list[tuple[int, float]]:
    """``(samples, value)`` of each row; the header and what is no number are skipped."""
    out = []
    with file.open(newline="", encoding="utf-8", errors="replace") as handle:
        for row in csv.reader(handle):
            if len(row) != 2:
                continue
            try:
                samples, value = int(float(row[0])), float(row[1])
            except ValueError:
                continue
            if math.isfinite(value) or row[1].strip().lower() in ("nan", "inf", "-inf"):
                out.append((samples, value))
    return out
