"""Steps a console log never printed are marked ``inferred``, from the parser through the store.

The log is a real paste (https://github.com/deepspeedai/DeepSpeed/issues/1825): DeepSpeed prints
``step=N, skipped=K`` every 10 steps, so the clock fills the steps between from the skipped count.
Those made-up steps must never pass for observed ones; chunks stored before the field existed (no
``inferred`` column) still read back, their steps without it.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import create_engine

from tests.conftest import parsed, run_cli, step_rows
from zerodoctor.sources.batches import make_parser, read_batches

CASE = Path(__file__).resolve().parents[1] / "corpus" / "ds-1825-healthy-steps-skipped-2"
LOG = CASE / "console.log"
GAPS = [*range(41, 50), *range(51, 60)]


def test_gap_steps_are_inferred_and_printed_ones_are_not() -> None:
    steps = [e for e in parsed(read_batches(LOG, make_parser("text", CASE.name))) if e["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(40, 61))
    assert [s["step"] for s in steps if s.get("inferred") is True] == GAPS
    assert [s["step"] for s in steps if "inferred" not in s] == [40, 50, 60]  # absent, not false


def test_inferred_travels_through_the_store_beside_chunks_stored_without_it(tmp_path) -> None:
    # Steps 1-3 of the same run and rank stored first: a chunk with no ``inferred`` column, as every
    # chunk written before the field existed.
    old = tmp_path / CASE.name / "rank-0.jsonl"
    old.parent.mkdir()
    old.write_text("".join(json.dumps({"v": 1, "t": 1000.0 + n, "run": CASE.name, "rank": 0, "kind": "step",
                                       "step": n, "loss": 1.0}) + "\n" for n in (1, 2, 3)))
    db = tmp_path / "store.db"
    for path in (old, LOG):
        proc = run_cli("diagnose", "--db", str(db), "--fail-on", "never", "--format", "json", str(path))
        assert proc.returncode == 0, proc.stderr
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            rows = step_rows(conn)
    finally:
        engine.dispose()
    assert {r["run"] for r in rows} == {CASE.name}
    assert sorted(r["step"] for r in rows if r.get("inferred")) == GAPS
    assert sorted(r["step"] for r in rows if "inferred" not in r) == [1, 2, 3, 40, 50, 60]
