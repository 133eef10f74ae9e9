"""Sources, files: DeepSpeed Monitor's CSV files (``csv_monitor``) → rank 0's ``step`` events.

``deepspeed/monitor/csv_monitor.py`` (0.6.6+, c87f6ee20) ``write_events``: one file per metric in
``<output_path>/<job_name>/``, named after the event with ``/`` and spaces made ``_``
(``Train_Samples_elapsed_time_ms_forward.csv``), a ``step,<last part of the name>`` header, then one
``step,value`` row per write. What each metric means and how rows become steps is ``monitor_events.py``'s,
shared with the TensorBoard reader.

The files of a directory are one source: read together, at the end (a metric's file alone would make a
step of every row). The parser is handed one of them (``monitor_file``) and reads its siblings.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from zerodoctor.events import Event
from zerodoctor.sources import monitor_events

PATTERN = "Train_Samples_*.csv"


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
    return path.suffix == ".csv" and path.stem.removeprefix("Train_Samples_") in monitor_events.FIELDS


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
        rows: monitor_events.Rows = {}
        for file in sorted(self.path.parent.glob(PATTERN)):
            metric = file.stem.removeprefix("Train_Samples_")
            for count, value in _rows(file):
                monitor_events.add(rows, metric, count, value)
        return monitor_events.steps_of(rows, self.run, self.path.stat().st_mtime)


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
