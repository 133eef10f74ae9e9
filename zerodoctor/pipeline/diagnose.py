"""Diagnose: input paths → one ``Report``, the views folded in memory (``pipeline/memory.py``), or through the
store ``--db`` names (the pipeline ``watch`` runs, read until no file has more).

Without ``--db`` nothing is written and no store is imported: the same batches feed the same folds that
``watch`` keeps, and the same ``judge_view`` judges them. The path ``-`` is standard input, spooled to a
scratch file first (the one file this path writes, gone when it returns): the sources read files (format
sniffing, byte offsets), never streams.

With ``--db`` every line is stored as ``watch`` stores it, the views folded from the rows and saved, findings
recorded, so a later ``watch`` or ``status`` on that store goes on from there.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from zerodoctor.pipeline import InputError, Progress, expand_inputs
from zerodoctor.report.model import InputSummary, Report
from zerodoctor.rulebook.loader import Rule


def diagnose(paths: list[Path], *, db: str | None = None, rules: list[Rule], input_format: str | None = None,
             on_progress: Progress | None = None, plots: bool = False, jobs: int | None = None) -> Report:
    """``db``: store what is read there (SQLAlchemy URL or SQLite path); None: fold it in memory, store nothing.
    ``plots``: also read each run's plot series (``Report.series``), which only the HTML page draws;
    ``jobs``: processes parsing large JSONL files (``Pipeline.ingest``)."""
    reads_stdin = any(str(p) == STDIN for p in paths)
    with tempfile.TemporaryDirectory(prefix="zerodoctor-") if reads_stdin else nullcontext(None) as scratch:
        spooled = Path(scratch) / "stdin.log" if scratch is not None else None
        inputs = expand_inputs(_spool_stdin(paths, spooled), input_format)
        shown = {path: STDIN_NAME if path == spooled else str(path) for path, _ in inputs}
        if db is None:
            return _in_memory(inputs, shown, rules, on_progress=on_progress, plots=plots, jobs=jobs)
        return _stored(inputs, shown, db, rules, on_progress=on_progress, plots=plots, jobs=jobs)


def _in_memory(inputs: list[tuple[Path, str]], shown: dict[Path, str], rules: list[Rule], *,
               on_progress: Progress | None, plots: bool, jobs: int | None) -> Report:
    from zerodoctor.pipeline.memory import MemoryPipeline

    pipeline = MemoryPipeline(rules)
    reads = pipeline.ingest(inputs, on_progress, jobs=jobs)
    report = Report(inputs=[InputSummary(shown[r.path], r.fmt, r.events, len(r.rejected), r.lines) for r in reads])
    report.rejected = [dataclasses.replace(bad, path=shown[r.path]) for r in reads for bad in r.rejected]
    for read in reads:
        for name in read.runs:
            report.paths.setdefault(name, []).append(shown[read.path])
    for name in pipeline.runs:
        report.add(pipeline.judge(name))
        if plots:
            report.series[name] = pipeline.series(name)
    return report


def _stored(inputs: list[tuple[Path, str]], shown: dict[Path, str], db: str, rules: list[Rule], *,
            on_progress: Progress | None, plots: bool, jobs: int | None) -> Report:
    from zerodoctor.pipeline import Pipeline
    from zerodoctor.store.db import open_engine
    from zerodoctor.store.quarantine import kept_aside
    from zerodoctor.store.runs import list_runs

    engine = open_engine(db)
    try:
        pipeline = Pipeline(engine, rules)
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


def _spool_stdin(paths: list[Path], spooled: Path | None) -> list[Path]:
    """``paths`` with ``-`` read into ``spooled`` and replaced by it; a terminal there is refused, not waited on."""
    if spooled is None:
        return paths
    if sys.stdin.isatty():
        raise InputError("-: standard input is a terminal; pipe a log in (zerodoctor diagnose - < train.log)")
    with spooled.open("wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out)
    return [spooled if str(p) == STDIN else p for p in paths]
