"""watch reads a run directory's ``wrapper.jsonl`` (what ``zerodoctor run`` saw of the job from outside: a silent
wait on a stale build lock, launch/build_lock.py) beside its console, and keeps both tails: a directory's source is
its rank files or its console, and the wrapper's file is neither, so it never makes watch drop the console's tail."""

from __future__ import annotations

import json


def test_the_wrapper_file_is_tailed_beside_the_console_and_judged(tmp_path, make_watcher) -> None:
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "console.log").write_text("loading the op\n")
    event = {"v": 1, "t": 1796589403.6, "run": "r", "rank": 0, "kind": "log", "what": "extension", "level": "ERROR",
             "source": "run", "message": "no output for 130 s while /x/ext/toy/lock, left 700 s ago, is held by no "
             "build: waiting on a stale JIT build lock", "data": {"state": "waiting", "lock": "/x/ext/toy/lock"}}
    (run / "wrapper.jsonl").write_text(json.dumps(event) + "\n")
    announced: list = []
    watcher = make_watcher(announced)
    watcher.discover()
    tails = {path.name: tail for path, tail in watcher.tails.items()}
    watcher.discover()  # a second pass keeps both: the console's tail (and what its parser holds) is not closed
    assert tails == {path.name: tail for path, tail in watcher.tails.items()}
    assert set(tails) == {"console.log", "wrapper.jsonl"}
    watcher.ingest()
    watcher.judge(force=True)
    assert "ZD712" in [f.rule for f in announced]
