"""Report: the pipeline's ``on_progress(bytes_done, bytes_total)`` → a rich progress bar on stderr.

Only on a terminal and only for inputs over ``MIN_BYTES``: a small file is read before a bar
would be seen, and a pipe or a CI log wants no carriage-return noise. stdout (JSON, HTML)
is never touched.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

MIN_BYTES = 4 << 20

OnProgress = Callable[[int, int], None]


@contextmanager
def ingest_progress(stream: TextIO | None = None, min_bytes: int = MIN_BYTES) -> Iterator[OnProgress | None]:
    """Yield the callback to hand the pipeline, or ``None`` where no bar is wanted."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        yield None
        return
    # rich's progress bar (~40 ms to import) only where it may be drawn: a pipe, a CI log never pays for it
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress(TextColumn("reading"), BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=Console(file=stream), transient=True)
    task = None

    def on_progress(done: int, total: int) -> None:
        nonlocal task
        if total < min_bytes:
            return
        if task is None:
            progress.start()
            task = progress.add_task("reading", total=total)
        progress.update(task, completed=done, total=total)

    try:
        yield on_progress
    finally:
        if task is not None:
            progress.stop()
