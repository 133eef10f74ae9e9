"""Fixtures for watch: step lines with known content, a store to count them in, a watcher to drive by hand."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable, Iterable

import pytest


from tests.conftest import step_rows
from zerodoctor.pipeline import rules_from
from zerodoctor.store.db import open_engine
from zerodoctor.watch.daemon import Watcher

ENV = {**os.environ, "COLUMNS": "1000", "PYTHONUNBUFFERED": "1"}  # past any line: a piped report wraps to COLUMNS


def step_line(run: str, rank: int, step: int, *, loss: float = 1.0) -> str:
    return json.dumps({"v": 1, "t": 1000.0 + step, "run": run, "rank": rank, "kind": "step", "step": step,
                       "loss": loss, "samples": 8, "micro_batches": 1}, allow_nan=True) + "\n"


def append(path: Path, run: str, rank: int, steps: Iterable[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(step_line(run, rank, s) for s in steps)


def write_through_two_copytruncates(log: Path, run: str) -> None:
    """Steps 14-18 of ``log``'s run written through two logrotate ``copytruncate`` rotations (the older copy
    moved to ``.2``), as when watch is down through both: the copies hold what was not read yet."""
    for steps in (range(14, 17), range(17, 19)):
        if log.with_name(log.name + ".1").exists():
            log.with_name(log.name + ".1").rename(log.with_name(log.name + ".2"))
        shutil.copyfile(log, log.with_name(log.name + ".1"))
        with open(log, "r+") as f:
            f.truncate(0)
        append(log, run, 0, steps)


def event_line(t: float, rank: int, kind: str, **fields) -> str:
    """One event of run "r" as the probe writes it (``events`` schema v1)."""
    return json.dumps({"v": 1, "t": t, "run": "r", "rank": rank, "kind": kind, **fields}) + "\n"


def stalled_run(runs, skew_s: float, skews: tuple[float, float] = (0.0, 0.0)) -> None:
    """Rank 1 stopped 70 s ago in the data loader (its heartbeats too); rank 0 waits in all_reduce since,
    its heartbeat a second old. Every time is stamped on the ranks' clock, ``skew_s`` off the watcher's,
    and rank r's ``skews[r]`` more (two nodes whose clocks disagree); each file was last written, on the
    watcher's clock, when its rank's last line was."""
    wall = time.time()
    collective = {"phase": "collective", "op": "all_reduce", "group": "0", "seq": 9, "outer": "backward"}
    for rank, quiet_s, phase in ((0, 1, collective), (1, 69, {"phase": "data"})):
        now = wall + skew_s + skews[rank]  # this rank's clock
        stalled_at = now - 70
        lines = [event_line(now - 200, rank, "run_start", world_size=2)]
        lines += [event_line(stalled_at - 10 + i, rank, "step", step=i, step_time_s=1.0) for i in range(1, 11)]
        lines.append(event_line(now - quiet_s, rank, "heartbeat", since_t=stalled_at, last_step=10, **phase))
        path = runs / "r" / f"rank-{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines))
        os.utime(path, (wall - quiet_s, wall - quiet_s))


def checksum(rows: Iterable[tuple]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()


def stored_steps(db: Path | str) -> list[tuple[str, int, int]]:
    """(run, rank, step) of every stored step row, duplicates kept; ``db`` a path or a URL."""
    engine = open_engine(db)
    try:
        with engine.connect() as conn:
            return [(row["run"], row["rank"], row["step"]) for row in step_rows(conn)]
    finally:
        engine.dispose()


def wait_for(check: Callable[[], object], timeout: float = 20, every: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {check}")
        time.sleep(every)


def start_watch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# As root a mount namespace alone; otherwise a user namespace too, where the kernel allows one.
UNSHARE = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
NO_NAMESPACES = "needs a private mount namespace (unshare -m as root, or unprivileged user namespaces)"


@cache
def namespaces_work() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        [*UNSHARE, "true"], capture_output=True).returncode == 0


@dataclass(frozen=True)
class Node:
    """A node of a multi-node job, played on this machine: its own id (``ZERODOCTOR_NODE_ID``) and its
    own disk, which its processes see at ``local``, the path every node's job writes to (a private mount
    namespace binds ``disk`` there), as ``/local/runs`` on each real node is that node's own disk.
    With ``local`` equal to ``disk`` each node's runs are at a path of their own."""

    id: str
    disk: Path
    local: Path

    @property
    def env(self) -> dict[str, str]:
        return {**ENV, "ZERODOCTOR_NODE_ID": self.id}

    def command(self, *args: str) -> list[str]:
        """``zerodoctor ARGS`` as run on this node."""
        python = [sys.executable, "-m", "zerodoctor", *args]
        if self.local == self.disk:
            return python
        # exec: the pid is the watcher's own, so a SIGKILL lands on it
        return [*UNSHARE, "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"', str(self.disk),
                str(self.local), *python]

    def watch(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.command("watch", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout, env=self.env)


def two_nodes(root: Path, *, same_path: bool) -> list[Node]:
    """Nodes a and b, their disks under ``root``; their runs at ``root/local/runs`` on each when ``same_path``."""
    nodes = []
    for name in ("a", "b"):
        disk = root / f"node-{name}" / "runs"
        disk.mkdir(parents=True)
        nodes.append(Node(f"node-{name}", disk, root / "local" / "runs" if same_path else disk))
    if same_path:
        if not namespaces_work():
            pytest.skip(NO_NAMESPACES)
        (root / "local" / "runs").mkdir(parents=True)
    return nodes


@pytest.fixture(scope="session")
def rules():
    return rules_from()


@pytest.fixture
def make_watcher(tmp_path: Path, rules) -> Iterable[Callable[..., Watcher]]:
    """A watcher over ``tmp_path/runs`` driven pass by pass (no observer), announcing into a list."""
    made: list[Watcher] = []

    def make(announced: list | None = None) -> Watcher:
        (tmp_path / "runs").mkdir(exist_ok=True)
        sink = announced if announced is not None else []
        watcher = Watcher(open_engine(tmp_path / "runs" / "zerodoctor.db"), [tmp_path / "runs"], rules,
                          lambda finding, config, change: sink.append(finding))
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.close()
        watcher.engine.dispose()
