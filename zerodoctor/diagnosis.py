"""Diagnose: input paths → one ``Report`` (the pipeline, run once over a scratch store or ``--db``).

``diagnose`` is ``watch`` that stops at end of file: the same ``Pipeline`` reads the files
and judges every run they touched.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from zerodoctor.pipeline import Pipeline, Progress, expand_inputs
from zerodoctor.report.model import InputSummary, Report
from zerodoctor.rulebook.loader import Rule
from zerodoctor.store.db import open_engine
from zerodoctor.store.quarantine import kept_aside
from zerodoctor.store.runs import list_runs


def diagnose(paths: list[Path], *, db: str | None = None, rules: list[Rule], input_format: str | None = None,
             on_progress: Progress | None = None, plots: bool = False, jobs: int | None = None) -> Report:
    """``plots``: also read each run's plot series (``Report.series``), which only the HTML page draws;
    ``jobs``: processes parsing large JSONL files (``Pipeline.ingest``)."""
    inputs = expand_inputs(paths, input_format)
    with tempfile.TemporaryDirectory(prefix="zerodoctor-") as scratch:
        engine = open_engine(db or Path(scratch) / "diagnose.db", scratch=db is None)
        try:
            pipeline = Pipeline(engine, rules, save_views=db is not None)
            rows = pipeline.ingest(inputs, on_progress, jobs=jobs)
            report = Report(inputs=[InputSummary(str(path), fmt, row["events"], row["quarantined"], row["lines"])
                                    for (path, fmt), row in zip(inputs, rows)])
            file_ids = [row["id"] for row in rows]
            with engine.connect() as conn:
                report.rejected = kept_aside(conn, {row["id"]: str(path) for (path, _), row in zip(inputs, rows)})
                touched = list_runs(conn, file_ids)
            for _, name in touched:
                report.add(pipeline.judge(name))
                if plots:
                    report.series[name] = pipeline.series(name)
            return report
        finally:
            engine.dispose()
