"""Diagnose: input paths → one ``Report`` (the pipeline, run once over a scratch store or ``--db``).

``diagnose`` is ``watch`` that stops at end of file: the same passes (``Pipeline.ingest_pass``)
read the files and judges every run they touched. The path ``-`` is standard input, spooled to a
scratch file first: the sources read files (format sniffing, byte offsets), never streams.

The scratch store is an SQLite file with no fsync and its journal in memory, not an in-memory
database: on a 1M-event 8-rank log both took the same time (4.1 vs 4.6 s, then 5.6 vs 5.6 s,
alternating on a loaded 2-core machine), but a database in memory holds the whole run in the
process (47 MB more peak RSS at 1M events, so ~0.5 GB at 10M) where a file leaves it to the page
cache. Nothing is recorded in it but what the views need: findings go to the report only.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from zerodoctor.pipeline import InputError, Pipeline, Progress, expand_inputs
from zerodoctor.report.model import InputSummary, Report
from zerodoctor.rulebook.loader import Rule
from zerodoctor.store.db import open_engine
from zerodoctor.store.quarantine import kept_aside
from zerodoctor.store.runs import list_runs


def diagnose(paths: list[Path], *, db: str | None = None, rules: list[Rule], input_format: str | None = None,
             on_progress: Progress | None = None, plots: bool = False, jobs: int | None = None) -> Report:
    """``plots``: also read each run's plot series (``Report.series``), which only the HTML page draws;
    ``jobs``: processes parsing large JSONL files (``Pipeline.ingest``)."""
    with tempfile.TemporaryDirectory(prefix="zerodoctor-") as scratch:
        spooled = Path(scratch) / "stdin.log"
        inputs = expand_inputs(_spool_stdin(paths, spooled), input_format)
        shown = {path: STDIN_NAME if path == spooled else str(path) for path, _ in inputs}
        engine = open_engine(db or Path(scratch) / "diagnose.db", scratch=db is None)
        try:
            pipeline = Pipeline(engine, rules, lasting=db is not None)
            rows = pipeline.ingest(inputs, on_progress, jobs=jobs)
            report = Report(inputs=[InputSummary(shown[path], fmt, row["events"], row["quarantined"], row["lines"])
                                    for (path, fmt), row in zip(inputs, rows)])
            file_ids = [row["id"] for row in rows]
            with engine.connect() as conn:
                report.rejected = kept_aside(conn, {row["id"]: shown[path] for (path, _), row in zip(inputs, rows)})
                touched = list_runs(conn, file_ids)
                for (path, _), row in zip(inputs, rows):
                    for _, name in list_runs(conn, [row["id"]]):
                        report.paths.setdefault(name, []).append(shown[path])
            for _, name in touched:
                report.add(pipeline.judge(name))
                if plots:
                    report.series[name] = pipeline.series(name)
            return report
        finally:
            engine.dispose()


STDIN = "-"
STDIN_NAME = "<stdin>"  # how reports name the input read from standard input


def _spool_stdin(paths: list[Path], spooled: Path) -> list[Path]:
    """``paths`` with ``-`` read into ``spooled`` and replaced by it; a terminal there is refused, not waited on."""
    if all(str(p) != STDIN for p in paths):
        return paths
    if sys.stdin.isatty():
        raise InputError("-: standard input is a terminal; pipe a log in (zerodoctor diagnose - < train.log)")
    with spooled.open("wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out)
    return [spooled if str(p) == STDIN else p for p in paths]
