"""Sources, files: TensorBoard event files of DeepSpeed Monitor (``"tensorboard": {"enabled": true}``) → rank 0's
``step`` events, read through TensorBoard's own reader (the optional extra ``zerodoctor[tensorboard]``).

``deepspeed/monitor/tensorboard.py`` ``write_events`` gives each ``(tag, value, global_samples)`` to torch's
``SummaryWriter.add_scalar`` in ``<output_path>/<job_name>/events.out.tfevents.<time>.<host>.<pid>.<n>``; the tags
and what they mean are DeepSpeed Monitor's, shared with the CSV reader (``monitor_events.py``). A file is known by
its content, whatever its name: TFRecord framing (a little-endian uint64 length, its masked CRC, the record) whose
first record is the ``file_version`` event, ``brain.Event:N``. It is a whole-file format, read once its writer is
done with it; TensorBoard's ``EventFileLoader`` reads it (CRCs checked, a torn last record left out). Without
``tensorboard`` installed the file is one rejected entry saying so, never a crash.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from zerodoctor.events import Event
from zerodoctor.sources import monitor_events

NAME_PREFIX = "events.out.tfevents."
_VERSION = b"brain.Event:"
_HEAD = 12 + 64  # the framing and the start of the first record, where the file_version string lies
MISSING_EXTRA = ("TensorBoard event file not read: the tensorboard package is not installed "
                 "(pip install 'zerodoctor[tensorboard]')")


def looks_like_tfevents(head: bytes) -> bool:
    """TFRecord framing whose first record is TensorBoard's ``file_version`` event."""
    if len(head) < 12:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length < 1024 and _VERSION in head[12:12 + length]


def is_tfevents_file(path: Path) -> bool:
    """An event file by its first bytes (its name may be anything once copied)."""
    try:
        with path.open("rb") as handle:
            return path.is_file() and looks_like_tfevents(handle.read(_HEAD))
    except OSError:
        return False


def tfevents_in(directory: Path) -> list[Path]:
    """The event files a folder holds, here or one folder down (``<output_path>/<job_name>/``), by content."""
    folders = (directory, *sorted(d for d in directory.iterdir() if d.is_dir()))
    for folder in folders:
        found = [p for p in sorted(folder.iterdir()) if p.name.startswith(NAME_PREFIX) and is_tfevents_file(p)]
        if found:
            return found
    return []


class TensorBoardParser:
    """One event file → one ``step`` event per optimizer step, at the end of input."""

    format = "tensorboard"
    reads_whole_file = True

    def __init__(self, run_id: str | None = None, path: Path | None = None) -> None:
        self.run = run_id or "tensorboard"
        self.path = path
        self.problems: list[str] = []  # each kept aside as one rejected entry of the file

    def feed(self, data: bytes) -> list[Event]:
        return []  # TensorBoard's reader reads the file itself, records and CRCs, at the end

    def finish(self) -> list[Event]:
        if self.path is None:
            return []
        try:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
            from tensorboard.util.tensor_util import make_ndarray
        except ImportError:
            self.problems.append(MISSING_EXTRA)
            return []
        rows: monitor_events.Rows = {}
        for event in EventFileLoader(str(self.path)).Load():
            for value in event.summary.value:
                if not value.tag.startswith(monitor_events.TAG_PREFIX):
                    continue
                number = _scalar(value, make_ndarray)
                if number is not None:
                    monitor_events.add(rows, value.tag.removeprefix(monitor_events.TAG_PREFIX), event.step, number)
        return monitor_events.steps_of(rows, self.run, self.path.stat().st_mtime)


def _scalar(value: Any, make_ndarray: Any) -> float | None:
    """A summary value's number: ``simple_value`` (torch's ``add_scalar``), or a one-element tensor (summary v2)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        array = make_ndarray(value.tensor)
        return float(array.reshape(-1)[0]) if array.size == 1 else None
    return None
