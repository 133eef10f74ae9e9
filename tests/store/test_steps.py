"""Store, steps: column chunks give back exactly what was stored, merged across ranks as a plain
Python merge of the same rows would, with gaps kept as gaps, and compaction changes nothing a
judgement reads."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from tests.conftest import step_rows
from zerodoctor.events import STEP_BOOLS, STEP_FLOATS, STEP_INTS, step_record
from zerodoctor.pipeline import Pipeline, rules_from
from zerodoctor.sources.batches import Batch
from zerodoctor.events.columns import Columns
from zerodoctor.events.merges import add_totals
from zerodoctor.signals.held import HeldSteps
from zerodoctor.store import runs as stored_runs
from zerodoctor.store import steps
from zerodoctor.store import files as stored_files
from zerodoctor.store.db import open_engine
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.schema import step_chunks

FIELDS = {"loss_scale": "min", "lr": "max", "comm_s": "mean", "samples": "sum", "mem_allocated_bytes": "max",
          "overflow": "max", "loss_nonfinite": "max", "tokens": "min"}


def _merge_by_hand(rows: list[dict], fields: dict[str, str]) -> dict[str, list]:
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row)
    out: dict[str, list] = {"step": sorted(by_step), "t": [max(r["t"] for r in by_step[s]) for s in sorted(by_step)]}
    for field, how in fields.items():
        merged = []
        for step in sorted(by_step):
            if field == "loss_nonfinite":
                values = [int(r.get("loss") is not None and not math.isfinite(r["loss"])) for r in by_step[step]]
            else:
                values = [int(r[field]) if isinstance(r.get(field), bool) else r.get(field) for r in by_step[step]]
                values = [v for v in values if v is not None]
            merged.append(None if not values else min(values) if how == "min" else max(values) if how == "max"
                          else sum(values) if how == "sum" else sum(values) / len(values))
        out[field] = merged
    return out


_MAYBE_INT = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
_ROW = st.fixed_dictionaries({
    "rank": st.integers(0, 3), "step": st.integers(0, 40), "t": st.floats(0, 1e9),
    "loss": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    "loss_scale": st.one_of(st.none(), st.floats(1, 2**24)), "lr": st.one_of(st.none(), st.floats(0, 1)),
    "comm_s": st.one_of(st.none(), st.floats(0, 100)), "samples": st.one_of(st.none(), st.integers(0, 2**40)),
    "mem_allocated_bytes": _MAYBE_INT, "tokens": _MAYBE_INT, "overflow": st.one_of(st.none(), st.booleans()),
})


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.lists(_ROW, min_size=1, max_size=30), min_size=1, max_size=4))
def test_chunks_merge_as_the_rows_would(tmp_path_factory, batches):
    engine = open_engine(tmp_path_factory.mktemp("s") / "store.db", scratch=True)
    ingestor = Ingestor()
    source = tmp_path_factory.mktemp("f") / "rank-0.jsonl"
    source.write_text("")
    rows = [row for batch in batches for row in batch]
    with engine.begin() as conn:
        file_id = stored_files.register(conn, source, "jsonl")["id"]
        for batch in batches:
            ingestor.add(conn, file_id, Batch.of([{"v": 1, "run": "r", "kind": "step", **r} for r in batch],
                                                 end=1, last_line=1))
        run_id = ingestor.run_id(conn, "r")
        blocks = list(steps.merged_steps(conn, run_id, FIELDS, block=7))
        stored = step_rows(conn)
    got = {k: [v for b in blocks for v in b.columns[k]] for k in ("step", "t", *FIELDS)}
    want = _merge_by_hand(rows, FIELDS)
    for key in want:
        assert got[key] == pytest.approx(want[key], nan_ok=True), key
    # every value back exactly, big integers included; a non-finite loss is flagged and reads as absent
    assert sorted(((r["rank"], r["step"], r.get("tokens"), r.get("mem_allocated_bytes"), r["nonfinite"] & 1)
                   for r in stored), key=repr) == sorted(
        ((r["rank"], r["step"], r["tokens"], r["mem_allocated_bytes"],
          int(r["loss"] is not None and not math.isfinite(r["loss"]))) for r in rows), key=repr)
    engine.dispose()


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=30, unique_by=lambda r: (r["rank"], r["step"])), data=st.data())
def test_rows_in_step_order_merge_as_any_order_does(rows, data):
    """The merge skips its sort where rows come in step order (a probe's files): the same steps as rows in any
    order give (one row per rank and step: of two, a rank's value is the later row's), each merge under a second name
    the same list, and every merge as a plain Python merge gives."""
    specs = {**FIELDS, "again_lr": ("lr", "max"), "again_comm_s": ("comm_s", "mean"), "by_rank": ("comm_s", "ranks")}

    def merged(some: list[dict]) -> dict:
        cols = Columns.of([step_record({"v": 1, "run": "r", "kind": "step", **r}) for r in some], [1] * len(some))
        out = steps.merge(cols, specs)
        out["by_rank"] = [sorted(by_rank.items()) for by_rank in out["by_rank"]]  # a step's ranks in any order
        return out

    in_order = sorted(rows, key=lambda r: r["step"])
    got = merged(in_order)
    assert repr(got) == repr(merged(data.draw(st.permutations(in_order))))  # repr: NaN == NaN
    assert got["again_lr"] == got["lr"] and repr(got["again_comm_s"]) == repr(got["comm_s"])
    want = _merge_by_hand(in_order, FIELDS)
    for key in want:
        assert got[key] == pytest.approx(want[key], nan_ok=True), key
    assert got["by_rank"] == [sorted((r["rank"], r["comm_s"]) for r in in_order
                                     if r["step"] == s and r["comm_s"] is not None) for s in got["step"]]


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(_ROW, min_size=1, max_size=30), min_size=1, max_size=3),
       late_upto=st.one_of(st.none(), st.integers(0, 40)))
def test_held_rows_total_per_rank_as_a_stored_chunk_does(batches, late_upto):
    """A run without a store totals each rank's rows of a batch (``HeldSteps.add``: only the fields its totals
    read, no rank's rows copied) exactly as the store's chunk of those rows does (``Columns.split`` and
    ``Columns.summary``, the numbers ``rank_totals`` reads back)."""
    aggregates = {"samples": ("samples", "sum"), "comm": ("comm_s", "sum"), "comm_max": ("comm_s", "max"),
                  "loss_max": ("loss", "max"), "lr_min": ("lr", "min"), "tokens": ("tokens", "sum"),
                  "data": ("data_s", "sum")}
    held, want = HeldSteps(), {}
    for batch in batches:
        cols = Columns.of([step_record({"v": 1, "run": "r", "kind": "step", **r}) for r in batch], [1] * len(batch))
        held.add(cols, aggregates, late_upto=late_upto)
        for rank, part in cols.split("rank"):
            summary, steps_ = part.summary(), part.values["step"]
            new = {"steps": part.n, "first_step": int(steps_.min()), "last_step": int(steps_.max()),
                   "last_t": float(part.values["t"].max()),
                   "late": 0 if late_upto is None else int((steps_ <= late_upto).sum()),
                   **{name: summary[field][{"sum": 1, "min": 2, "max": 3}[agg]] if field in summary else None
                      for name, (field, agg) in aggregates.items()}}
            want[rank] = new if rank not in want else add_totals(want[rank], new, aggregates)
    assert repr(held.take_totals()) == repr(want)  # repr: exactly, NaN and all


def test_a_column_no_record_has_is_not_stored_and_reads_as_absent(tmp_path: Path):
    cols = Columns.of([step_record({"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 1})], [1])
    assert "tokens" not in cols.values and "comm_s" not in cols.values
    back = Columns.decode(cols.n, cols.encode())
    assert steps.merge(back, {"tokens": "sum", "comm_s": "mean"}) == {"step": [1], "t": [1.0], "tokens": [None],
                                                                     "comm_s": [None]}


def test_compaction_keeps_every_row_and_what_the_view_holds(tmp_path: Path):
    """A live watch stores a step per rank per pass: once folded, 64 small chunks of a rank become one."""
    engine = open_engine(tmp_path / "store.db")
    source = tmp_path / "run" / "rank-0.jsonl"
    source.parent.mkdir()
    source.write_text("")
    pipeline = Pipeline(engine, rules_from())
    passes = 3 * steps.COMPACT_EVERY
    for n in range(1, passes + 1):
        batch = Batch.of([{"v": 1, "t": float(n), "run": "run", "rank": r, "kind": "step", "step": n, "samples": 2}
                          for r in (0, 1)], end=n, last_line=n)
        with engine.begin() as conn:
            tail = pipeline.tail(conn, source, "jsonl")
            pipeline.store(conn, tail, batch, raw=bytes)
            pipeline.commit(conn)
        pipeline.fold(pipeline.stored())
        tail.close()
    view = pipeline.views["run"]
    with engine.connect() as conn:
        chunks = conn.execute(select(func.count()).select_from(step_chunks)).scalar()
        stored = step_rows(conn)
    assert chunks < passes  # 384 one-row chunks would be there without compaction
    assert sorted((r["rank"], r["step"]) for r in stored) == [(r, n) for r in (0, 1) for n in range(1, passes + 1)]
    assert {r: (t["steps"], t["samples"]) for r, t in view.per_rank.items()} == {0: (passes, 2 * passes),
                                                                               1: (passes, 2 * passes)}
    with engine.begin() as conn:
        stored_runs.forget_state(conn, [view.run_id])
    rebuilt = Pipeline(engine, rules_from()).view("run")  # from the chunks alone
    assert {r: {k: v for k, v in t.items() if k != "max_id"} for r, t in rebuilt.per_rank.items()} == view.per_rank
    assert rebuilt.fold("zerodoctor.signals.run").steps == view.fold("zerodoctor.signals.run").steps == passes
    engine.dispose()


def test_a_nan_loss_is_flagged_beside_gaps_and_infinities():
    rows = [{"loss": math.nan}, {}, {"loss": math.inf, "grad_norm": -math.inf}, {"loss": 2.0, "grad_norm": math.nan}]
    cols = Columns.of([step_record({"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": i, **row})
                       for i, row in enumerate(rows)], list(range(len(rows))))
    assert cols.values["nonfinite"].tolist() == [1, 0, 3, 2]
    assert [v if v == v else None for v in cols.values["loss"].tolist()] == [None, None, None, 2.0]


_FLOAT = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
_INT = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**53) - 2, 2**53 + 2))
_ANY_STEP = st.fixed_dictionaries(
    {"rank": st.integers(0, 2**62), "step": st.integers(-(2**63), 2**63 - 1), "t": st.floats(allow_nan=False)},
    optional={name: st.one_of(st.none(), st.booleans()) if name in STEP_BOOLS else _INT if name in STEP_INTS
              else _FLOAT for name in (*STEP_INTS, *STEP_FLOATS)})


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ANY_STEP, min_size=1, max_size=12))
def test_columns_hold_every_field_of_every_record_as_it_was(rows):
    """``Columns.of`` (one matrix of the fields the first record has, the rest a column apiece) gives back each
    record's every field: ints exact past 2**53, bools as bools, a gap as a gap (NaN in a float other than loss or
    grad norm is a gap too), a non-finite loss or grad norm as NaN."""
    records = [step_record({"v": 1, "run": "r", "kind": "step", **row}) for row in rows]
    back = Columns.of(records, list(range(7, 7 + len(rows)))).records("r")
    assert [line for line, _ in back] == list(range(7, 7 + len(rows)))

    def expected(record) -> dict:
        out = msgspec.structs.asdict(record)
        for name in STEP_FLOATS:
            value = out[name]
            if name in ("loss", "grad_norm") and value is not None and not math.isfinite(value):
                out[name] = "nan"
            elif value is not None and value != value:
                out[name] = None
        return out

    def got(record) -> dict:
        out = msgspec.structs.asdict(record)
        return {k: "nan" if isinstance(v, float) and v != v else v for k, v in out.items()}

    assert [got(r) for _, r in back] == [expected(r) for r in records]


# sums that overflow to inf, or meet inf and -inf (NaN): values here, as in the store; numpy warns of them
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=200, deadline=None)
@given(rows=st.lists(_ANY_STEP, min_size=1, max_size=12), copies=st.integers(1, 40))
def test_a_chunks_summary_and_blob_are_each_columns_own(rows, copies):
    """``summary`` and ``encode`` reduce the columns every row has as one matrix per dtype: each figure is the
    one its column alone gives (the same pairwise sum past numpy's blocks of 128: ``copies`` makes up to 480 rows),
    and a column with gaps, a mask or NaN is reduced alone, as before."""
    records = [step_record({"v": 1, "run": "r", "kind": "step", **row}) for row in rows * copies]
    cols = Columns.of(records, list(range(len(records))))
    alone = {}
    for name, column in cols.values.items():
        present = column if cols.mask(name) is None else column[cols.mask(name)]
        if len(present):
            alone[name] = [len(present), present.sum().item(), present.min().item(), present.max().item()]
    assert msgspec.msgpack.encode(cols.summary()) == msgspec.msgpack.encode(alone)  # NaN and -0.0 compared too
    back = Columns.decode(cols.n, cols.encode())
    assert back.values.keys() == cols.values.keys()
    for name, column in cols.values.items():
        assert back.values[name].tobytes() == column.tobytes()
        assert (back.valid[name] is None) == (cols.valid[name] is None)


def test_an_infinite_time_is_stored_and_summed_as_it_is(tmp_path: Path):
    """msgspec reads 1e400 as inf: a value, kept in the chunk and in the rank's totals."""
    engine = open_engine(tmp_path / "store.db", scratch=True)
    ingestor = Ingestor()
    source = tmp_path / "rank-0.jsonl"
    source.write_text("")
    with engine.begin() as conn:
        file_id = stored_files.register(conn, source, "jsonl")["id"]
        ingestor.add(conn, file_id, Batch.of([{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": n,
                                               "step_time_s": math.inf if n == 2 else 1.0} for n in (1, 2)],
                                             end=1, last_line=2))
        totals, _, _ = steps.rank_totals(conn, ingestor.run_id(conn, "r"), {"time": ("step_time_s", "sum")})
    assert totals[0]["time"] == math.inf and totals[0]["steps"] == 2
    engine.dispose()


def test_compaction_asks_once_which_ranks_have_enough_small_chunks(tmp_path: Path):
    """A live pass over 4,096 ranks compacts the few that have COMPACT_EVERY small chunks, found by one grouped
    read; a look-up per rank was a query each (and on SQLite a read of every chunk of the run each)."""
    from sqlalchemy import event

    engine = open_engine(tmp_path / "store.db")
    pipeline = Pipeline(engine, rules_from())
    source = tmp_path / "run" / "rank-0.jsonl"
    source.parent.mkdir()
    source.write_text("")
    ranks = range(200)
    batch = Batch.of([{"v": 1, "t": 1.0, "run": "run", "rank": r, "kind": "step", "step": 1, "samples": 2}
                      for r in ranks], end=1, last_line=1)
    with engine.begin() as conn:
        tail = pipeline.tail(conn, source, "jsonl")
        pipeline.store(conn, tail, batch, raw=bytes)
    tail.close()
    statements = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    with engine.begin() as conn:
        steps.compact(conn, pipeline.ingestor.run_id(conn, "run"), [(tail.file_id, r) for r in ranks], folded_through=1)
    queries = [s for s in statements if not s.startswith("BEGIN")]
    assert len(queries) == 1, queries[:3]
    engine.dispose()
