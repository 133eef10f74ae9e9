"""The run view: ranks merged per step as lines arrive, folds that match a full read, and a judgement
that reads no step rows however long the run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import event

from zerodoctor import signals
from zerodoctor.pipeline import Pipeline, rules_from, tail
from zerodoctor.signals.base import StepSeries
from zerodoctor.signals.view import Reads, ReadsConflict, RunView
from zerodoctor.sources.batches import Batch
from zerodoctor.store.db import open_engine
from zerodoctor.store.runs import list_runs
from zerodoctor.events import STEP_METRICS

RANKS = 2


def step(rank: int, n: int, **fields) -> str:
    body = {"v": 1, "t": 1000.0 + n + rank / 10, "run": "r", "rank": rank, "kind": "step", "step": n, **fields}
    return json.dumps(body, allow_nan=True) + "\n"


def fp16_run(tmp_path: Path, steps: int) -> list[tuple[Path, str]]:
    """Two ranks of a dynamic-fp16 run with overflows every 7th step and a NaN loss at step 5."""
    start = {"v": 1, "t": 999.0, "run": "r", "kind": "run_start", "world_size": RANKS, "precision": "fp16",
             "config": {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 8}}}
    inputs = []
    for rank in range(RANKS):
        path = tmp_path / "r" / f"rank-{rank}.jsonl"
        path.parent.mkdir(exist_ok=True)
        lines = [json.dumps({**start, "rank": rank}) + "\n"]
        for n in range(1, steps + 1):
            lines.append(step(rank, n, overflow=n % 7 == 0 and rank == 1, loss_scale=256.0 / (1 + rank),
                              loss=math.nan if n == 5 and rank == 0 else 1.0, samples=4, micro_batches=2,
                              step_time_s=0.5 + rank, comm_s=0.1 * (rank + 1), fwd_s=0.2, bwd_s=0.2, optim_s=0.1))
        path.write_text("".join(lines))
        inputs.append((path, "jsonl"))
    return inputs


def values_of(view: RunView, modules) -> dict:
    values = signals.compute(view, modules)
    return {k: (v.summary if isinstance(v, StepSeries) else v) for k, v in values.items()}


@pytest.fixture
def pipeline(tmp_path: Path):
    engine = open_engine(tmp_path / "store.db")
    yield Pipeline(engine, rules_from())
    engine.dispose()


def test_ranks_of_a_step_are_merged_as_each_signal_declares(tmp_path, pipeline):
    pipeline.ingest(fp16_run(tmp_path, 30))
    values = values_of(pipeline.view("r"), pipeline.modules)
    assert values["fp16.overflow_count"] == 4  # rank 1 overflowed at 7, 14, 21, 28: "max" over ranks
    assert values["fp16.loss_scale_last"] == 128.0  # the smallest scale any rank used: "min"
    assert values["numerics.nonfinite_loss_steps"] == 1  # rank 0's NaN at step 5
    assert values["comm.fraction"] == pytest.approx(0.15 / 1.5)  # mean comm over ranks / slowest rank's step
    assert values["batch.samples_per_micro"] == 2  # per rank: 30 × 4 samples / 30 × 2 micro-batches
    assert {r: t["samples"] for r, t in pipeline.view("r").per_rank.items()} == {0: 120, 1: 120}


def test_folding_as_lines_arrive_gives_what_a_full_read_gives(tmp_path, pipeline, monkeypatch):
    monkeypatch.setattr(tail, "BATCH_LINES", 50)  # many transactions: totals and folds carried across them
    pipeline.ingest(fp16_run(tmp_path, 300))
    live = values_of(pipeline.view("r"), pipeline.modules)
    with pipeline.engine.begin() as conn:
        ((run_id, _),) = list_runs(conn)
        rebuilt = RunView(run_id, "r", pipeline.reads)
        rebuilt._rebuild(conn, final=True)
        rebuilt.formats = dict(pipeline.view("r").formats)
    assert values_of(rebuilt, pipeline.modules) == live
    folded = pipeline.view("r").per_rank
    assert set(rebuilt.per_rank) == set(folded)
    for rank, totals in rebuilt.per_rank.items():  # float sums added in another order differ in the last bits
        assert totals == pytest.approx(folded[rank])


def test_a_restarted_reader_starts_from_the_saved_state_and_reads_no_step_rows(tmp_path, pipeline):
    pipeline.ingest(fp16_run(tmp_path, 200))
    before = values_of(pipeline.view("r"), pipeline.modules)
    fresh = Pipeline(pipeline.engine, pipeline.rules)
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731 - (conn, cursor, statement, ...)
    event.listen(pipeline.engine, "before_cursor_execute", listener)
    try:
        judged = fresh.judge("r")
    finally:
        event.remove(pipeline.engine, "before_cursor_execute", listener)
    assert not _step_rows_read(statements)  # the saved folds stand for every step row
    assert values_of(fresh.view("r"), fresh.modules) == before
    assert judged.world_size_stated == RANKS


def _step_rows_read(statements: list[str]) -> list[str]:
    """The reads of step chunks among ``statements`` but a fold's of the chunks stored past its mark."""
    return [s for s in statements if "FROM step_chunks" in s and "step_chunks.id > " not in s]


def _statements_of(pipeline: Pipeline, judge) -> list[str]:
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731 - (conn, cursor, statement, ...)
    event.listen(pipeline.engine, "before_cursor_execute", listener)
    try:
        judge()
    finally:
        event.remove(pipeline.engine, "before_cursor_execute", listener)
    return statements


def test_an_upgrade_that_changed_one_signal_module_folds_only_that_module_again(tmp_path, pipeline, monkeypatch):
    """A fold is kept across any edit of its module's code (a comment, a new signal) until its own ``VERSION``
    is bumped; then it alone is folded again from the stored steps."""
    from zerodoctor.signals import comms

    pipeline.ingest(fp16_run(tmp_path, 200))
    before = values_of(pipeline.view("r"), pipeline.modules)
    edited = tmp_path / "comms.py"
    edited.write_text(Path(comms.__file__).read_text() + "# a comment edit\n")
    monkeypatch.setattr(comms, "__file__", str(edited))
    monkeypatch.setattr("zerodoctor.__version__", "99.0")  # a release that left every fold alone
    kept = Pipeline(pipeline.engine, pipeline.rules)
    assert not _step_rows_read(_statements_of(pipeline, lambda: kept.judge("r")))

    monkeypatch.setattr(comms.Fold, "VERSION", comms.Fold.VERSION + 1)
    upgraded = Pipeline(pipeline.engine, pipeline.rules)
    statements = _statements_of(pipeline, lambda: upgraded.judge("r"))
    assert _step_rows_read(statements)  # the steps read again, for the changed fold
    assert values_of(upgraded.view("r"), upgraded.modules) == before
    assert upgraded.view("r").behind == {"zerodoctor.signals.plots"}  # only what no signal reads waits for a page


def store_steps(pipeline: Pipeline, rows: list[dict], *, final: bool = False) -> RunView:
    """Store step rows of run "r" as one batch of one file and let the view take them, as ingest does."""
    events = [{"v": 1, "run": "r", "kind": "step", **row} for row in rows]
    with pipeline.engine.begin() as conn:
        tail = pipeline.tail(conn, Path(__file__), "jsonl")
        pipeline.store(conn, tail, Batch.of(events, end=0, last_line=0), raw=bytes)
        pipeline.commit(conn)
    pipeline.fold(pipeline.stored(), final=final)
    tail.close()
    return pipeline.views["r"]


def test_a_step_waits_for_the_ranks_behind_it(pipeline):
    view = store_steps(pipeline, [{"rank": r, "step": n, "t": float(n), "overflow": r == 1}
                                  for r in (0, 1) for n in range(1, 4 if r else 6)])
    assert view.released_through == 3  # rank 1 has reported up to 3; rank 0's 4 and 5 wait for it
    with pipeline.engine.connect() as conn:
        assert view.as_of_now(conn).fold("zerodoctor.signals.run").steps == 5  # a judgement sees them all
    assert view.fold("zerodoctor.signals.run").steps == 3
    assert view.fold("zerodoctor.signals.numerics").overflows == 3  # rank 1's overflows merged into steps 1-3


def test_a_rank_row_for_a_step_already_handed_on_is_counted_late_not_merged(pipeline):
    store_steps(pipeline, [{"rank": 0, "step": 1, "t": 1.0, "samples": 4}], final=True)
    view = store_steps(pipeline, [{"rank": 1, "step": 1, "t": 1.1, "samples": 4}])
    assert view.late_rows == 1
    assert view.per_rank[1]["samples"] == 4  # still in that rank's totals
    assert view.fold("zerodoctor.signals.run").steps == 1


def test_every_declared_step_field_is_a_stored_column():
    reads = Reads.of(signals.signal_modules())
    fields = {name if isinstance(spec, str) else spec[0] for name, spec in reads.step_fields.items()}
    assert fields - {*STEP_METRICS, "loss_nonfinite", "grad_nonfinite"} == set()
    assert {field for field, _ in reads.rank_fields.values()} <= set(STEP_METRICS)


def test_two_modules_declaring_one_field_differently_are_refused():
    a, b = ModuleType("a"), ModuleType("b")
    a.STEP_FIELDS, b.STEP_FIELDS = {"loss": "min"}, {"loss": "max"}
    with pytest.raises(ReadsConflict, match="b: step field loss declared as 'max', but a declared 'min'"):
        Reads.of([a, b])
