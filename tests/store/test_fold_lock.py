"""Many writers of one run, one judge: the nodes' writers never wait for each other, and the judge's fold
waits for every writer to commit, so a row committed after a later one is folded all the same
(``store/runs.write_lock`` and ``fold_lock``, on the PostgreSQL store many nodes share)."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import Connection, RootTransaction

from zerodoctor.pipeline import Pipeline, rules_from
from zerodoctor.pipeline.tail import FileTail
from zerodoctor.sources.batches import Batch
from zerodoctor.store.db import open_engine


def _steps(ranks: range, step: int) -> Batch:
    return Batch.of([{"v": 1, "t": 1000.0 + step, "run": "job", "rank": r, "kind": "step", "step": step,
                      "samples": 2} for r in ranks], end=step, last_line=step)


def _start(rank: int) -> Batch:
    return Batch.of([{"v": 1, "t": 999.0, "run": "job", "rank": rank, "kind": "run_start", "world_size": 4}],
                    end=1, last_line=1)


def _writing(node: Pipeline, path: Path) -> tuple[Connection, FileTail, RootTransaction]:
    """Node A: rank 0's run_start stored (the run's row exists: the first writer of a new run creates it, and
    the others wait for that one commit), then ranks 0-1's first step stored in a transaction left open."""
    conn = node.engine.connect()
    tail = node.tail(conn, path, "jsonl")
    node.store(conn, tail, _start(0), raw=bytes)
    node.commit(conn)
    conn.commit()
    trans = conn.begin()
    node.store(conn, tail, _steps(range(0, 2), 1), raw=bytes)
    return conn, tail, trans


def test_writers_of_one_run_never_wait_and_the_fold_waits_for_the_one_that_commits_last(tmp_path: Path, pg_url):
    """Node A stores steps of ranks 0-1 and holds its transaction open; node B stores ranks 2-3 (ids above A's)
    and commits at once. The judge's fold waits for A; once A commits it holds all four ranks."""
    node_a, node_b, judge = (Pipeline(open_engine(pg_url), rules_from()) for _ in range(3))
    for node in ("a", "b"):
        (tmp_path / node).mkdir()
        (tmp_path / node / f"rank-{0 if node == 'a' else 2}.jsonl").write_text("")
    a_conn, tail_a, a_trans = _writing(node_a, tmp_path / "a" / "rank-0.jsonl")

    stored_b = threading.Event()

    def write_b() -> None:
        with node_b.engine.begin() as conn:
            tail_b = node_b.tail(conn, tmp_path / "b" / "rank-2.jsonl", "jsonl")
            node_b.store(conn, tail_b, _start(2), raw=bytes)
            node_b.store(conn, tail_b, _steps(range(2, 4), 1), raw=bytes)
            node_b.commit(conn)
        tail_b.close()
        stored_b.set()

    writer = threading.Thread(target=write_b, daemon=True)
    writer.start()
    folded = threading.Event()
    try:
        assert stored_b.wait(10), "node B waited for node A's open transaction"
        fold = threading.Thread(target=lambda: (judge.fold(["job"]), folded.set()), daemon=True)
        fold.start()
        assert not folded.wait(1.0), "the fold read while node A held ids it had not committed"
        node_a.commit(a_conn)
        a_trans.commit()
        assert folded.wait(10)
    finally:
        if a_trans.is_active:  # a failed check: A lets go, so nothing waits for it past the test
            a_trans.rollback()
    view = judge.views["job"]
    assert sorted(view.per_rank) == [0, 1, 2, 3]
    assert sorted(e["rank"] for e in view.starts) == [0, 2]

    node_a.store(a_conn, tail_a, _steps(range(0, 2), 2), raw=bytes)  # the next pass, the fold reads on from its marks
    node_a.commit(a_conn)
    a_conn.commit()
    assert judge.grown_elsewhere(["job"]) == ["job"]
    judge.fold(["job"])
    assert {r: t["steps"] for r, t in view.per_rank.items()} == {0: 2, 1: 2, 2: 1, 3: 1}
    assert judge.grown_elsewhere(["job"]) == []
    tail_a.close()
    a_conn.close()
    for p in (node_a, node_b, judge):
        p.engine.dispose()


def test_a_writer_that_comes_while_the_fold_waits_waits_behind_it(tmp_path: Path, pg_url):
    """64 nodes' writers overlap all the time: were each new one let past a waiting fold, the fold would wait
    as long as they kept coming (it waited 4.3 s at 64 nodes on row locks). Node A holds its transaction
    open, the judge's fold waits for it, node C comes next: C waits for the fold, which goes first."""
    node_a, node_c, judge = (Pipeline(open_engine(pg_url), rules_from()) for _ in range(3))
    for node in ("a", "c"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "rank-0.jsonl").write_text("")
    a_conn, tail_a, a_trans = _writing(node_a, tmp_path / "a" / "rank-0.jsonl")
    order: list[str] = []

    def write_c() -> None:
        with node_c.engine.begin() as conn:
            tail_c = node_c.tail(conn, tmp_path / "c" / "rank-0.jsonl", "jsonl")
            node_c.store(conn, tail_c, _steps(range(2, 4), 1), raw=bytes)
            node_c.commit(conn)
        tail_c.close()
        order.append("c stored")

    fold = threading.Thread(target=lambda: (judge.fold(["job"]), order.append("folded")), daemon=True)
    writer = threading.Thread(target=write_c, daemon=True)
    try:
        fold.start()
        fold.join(1.0)
        writer.start()
        writer.join(1.0)
        assert order == [], "node C was let past the waiting fold"
    finally:
        a_trans.commit()
    fold.join(10)
    writer.join(10)
    assert order == ["folded", "c stored"]
    assert sorted(judge.views["job"].per_rank) == [0, 1]  # C's ranks come at the next fold
    judge.fold(["job"])
    assert sorted(judge.views["job"].per_rank) == [0, 1, 2, 3]
    tail_a.close()
    a_conn.close()
    for p in (node_a, node_c, judge):
        p.engine.dispose()
