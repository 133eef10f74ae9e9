"""A watch that has seen many runs keeps only some views in memory; a run it let go of that writes again is
read on from its saved view: every line once, its findings as if it had been kept."""

from __future__ import annotations

from tests.watch.conftest import append, step_line, stored_steps
from zerodoctor.watch import daemon


def _pass(watcher) -> None:
    watcher.discover()
    while watcher.ingest():
        pass
    watcher.judge(force=True)


def test_views_past_the_cap_are_let_go_and_a_run_that_writes_again_is_read_on(tmp_path, make_watcher, monkeypatch):
    monkeypatch.setattr(daemon, "VIEWS_KEPT", 2)
    runs = tmp_path / "runs"
    for i in range(5):
        append(runs / f"r{i}" / "rank-0.jsonl", f"r{i}", 0, range(1, 11))
    announced: list = []
    watcher = make_watcher(announced)
    _pass(watcher)
    assert len(watcher.pipeline.views) == 2  # before: all 5, and one more for every run ever seen
    assert announced == []

    gone = next(f"r{i}" for i in range(5) if f"r{i}" not in watcher.pipeline.views)
    with open(runs / gone / "rank-0.jsonl", "a") as f:
        f.write(step_line(gone, 0, 11, loss=float("nan")))
    _pass(watcher)
    assert [(f.rule, f.run) for f in announced] == [("ZD204", gone)]
    assert watcher.pipeline.views[gone].per_rank[0]["steps"] == 11  # the saved ten, and the new one
    assert sorted(s for r, _, s in stored_steps(runs / "zerodoctor.db") if r == gone) == list(range(1, 12))
