"""One file whose lines claim thousands of ranks costs each pass a bounded share, never a stall for the other runs.

Issue 34's round 4 and the campaign's 20,000-rank case (bench/hostile_campaign.py --only wide20k): a batch of
20,000 lines from 20,000 ranks is 20,000 step chunks to store and 20,000 ranks to fold, about 100 times a batch
of one rank's 20,000 lines; the pass stores one batch per file, so another run's new lines waited 15 s for it
(a loaded 2-core machine). A batch now ends at ``BATCH_RANKS`` ranks as it ends at ``BATCH_LINES`` lines.
"""

from __future__ import annotations

from pathlib import Path

from tests.watch.conftest import append, step_line, stored_steps
from zerodoctor.sources.batches import BATCH_RANKS, make_parser, read_batches

RANKS = 2 * BATCH_RANKS + 500


def _wide(path: Path, ranks: int = RANKS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step in (1, 2):
            f.writelines(step_line("wide", rank, step) for rank in range(ranks))


def test_a_batch_holds_at_most_batch_ranks_ranks_and_every_line_once(tmp_path: Path) -> None:
    log = tmp_path / "wide" / "rank-0.jsonl"
    _wide(log)
    batches = list(read_batches(log, make_parser("jsonl"), final=False))
    ranks = [{int(rank) for c in b.columns.values() for rank in c.values["rank"]} for b in batches]
    assert max(map(len, ranks)) <= BATCH_RANKS < RANKS  # before: one batch of all 17,000 lines and 8,500 ranks
    assert [b.last_line for b in batches][-1] == 2 * RANKS and sum(b.step_count() for b in batches) == 2 * RANKS
    assert all(b.cut for b in batches[:-1]) and not batches[-1].cut


def test_another_runs_lines_are_stored_in_the_first_pass_beside_a_wide_file(tmp_path: Path, make_watcher) -> None:
    runs = tmp_path / "runs"
    _wide(runs / "wide" / "rank-0.jsonl")
    append(runs / "ok" / "rank-0.jsonl", "ok", 0, range(1, 11))
    watcher = make_watcher()
    watcher.discover()
    assert watcher.ingest()  # more to read: the wide file is not done in one batch
    first = stored_steps(runs / "zerodoctor.db")
    assert sum(r == "ok" for r, _, _ in first) == 10
    assert len({rank for r, rank, _ in first if r == "wide"}) <= BATCH_RANKS
    while watcher.ingest():
        pass
    rows = stored_steps(runs / "zerodoctor.db")
    assert len(rows) == len(set(rows)) == 2 * RANKS + 10
