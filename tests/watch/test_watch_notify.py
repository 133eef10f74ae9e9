"""Notifications run beside ingest: a notifier stuck on a dead endpoint never holds up the watch thread,
and each finding is still delivered once."""

from __future__ import annotations

import threading
import time

from tests.watch.conftest import append, step_line, stored_steps
from zerodoctor.store.db import open_engine
from zerodoctor.watch.daemon import Watcher


class StuckEndpoint:
    """Blocks each send until ``release``; fails while ``down``."""

    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.down = True
        self.calls = 0
        self.sent: list[str] = []

    def send(self, finding: dict) -> None:
        self.calls += 1
        assert self.release.wait(20), "never released"
        if self.down:
            raise ConnectionError("endpoint down")
        self.sent.append(finding["rule"])


def test_a_stuck_notifier_does_not_hold_up_ingest_and_delivers_each_finding_once(tmp_path, rules):
    runs = tmp_path / "runs"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 3))
    with open(log, "a") as f:
        f.write(step_line("r", 0, 3, loss=float("nan")))
    endpoint = StuckEndpoint()
    watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules, lambda *_: None,
                      notifiers=[endpoint], notify_retry_s=0.0)
    try:
        watcher.discover()
        watcher.ingest()
        watcher.judge(force=True)
        started = time.monotonic()
        watcher.notify()
        append(log, "r", 0, range(4, 6))  # the watch thread goes on while the send hangs
        watcher.ingest()
        watcher.notify()  # one delivery at a time: no second send of the same finding
        assert time.monotonic() - started < 5
        assert len(stored_steps(runs / "zerodoctor.db")) == 5
        endpoint.release.set()
        watcher.deliveries.join(timeout=10)
        assert (endpoint.calls, endpoint.sent) == (1, [])  # failed: the finding stays pending

        endpoint.down = False
        watcher.notify()
        watcher.deliveries.join(timeout=10)
        watcher.notify()
        watcher.deliveries.join(timeout=10)
        assert endpoint.sent == ["ZD204"]
    finally:
        endpoint.release.set()
        watcher.close()
        watcher.engine.dispose()


class Inbox:
    name = "inbox"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def send(self, finding: dict) -> None:
        self.sent.append((finding["run"], finding["rule"]))


def test_a_notifier_added_to_an_old_store_sends_what_is_judged_from_then_on_not_its_history(tmp_path, rules):
    """Before: enabling the webhook on a store of past runs posted every finding it held."""
    runs = tmp_path / "runs"
    for run in ("old", "live"):
        append(runs / run / "rank-0.jsonl", run, 0, range(1, 3))
        with open(runs / run / "rank-0.jsonl", "a") as f:
            f.write(step_line(run, 0, 3, loss=float("nan")))
    before = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules, lambda *_: None)
    try:
        before.once()  # no notifier yet: both runs' findings are the store's history
    finally:
        before.close()
        before.engine.dispose()

    inbox = Inbox()
    watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules, lambda *_: None, notifiers=[inbox])
    try:
        with open(runs / "live" / "rank-0.jsonl", "a") as f:
            f.write(step_line("live", 0, 4, loss=float("nan")))  # the live run goes on: judged again, still NaN
        append(runs / "new" / "rank-0.jsonl", "new", 0, range(1, 3))
        with open(runs / "new" / "rank-0.jsonl", "a") as f:
            f.write(step_line("new", 0, 3, loss=float("nan")))
        watcher.once()
    finally:
        watcher.close()
        watcher.engine.dispose()
    assert sorted(inbox.sent) == [("live", "ZD204"), ("new", "ZD204")]  # not "old": judged before the notifier
