"""The hostile-input campaign (issue 34, rounds 2-4) as one command: every case against a real ``zerodoctor watch``.

Each case builds its run directories in a temporary folder, drives real ``watch`` (and ``status``,
``diagnose``, ``run``) subprocesses on SQLite, or on PostgreSQL where the case is about PostgreSQL
(``ZERODOCTOR_TEST_PG_URL``; the server outage cases also need ``ZERODOCTOR_TEST_PG_STOP``, and the
server is started again after each), then counts what it wrote against what the store holds. It prints
one row per case: what was done, lines written, stored, lost, duplicated, the exit codes, the error
lines (tracebacks, internal errors, lines the case must not say) and HOLDS or BREAKS with the reason.
The cases reuse the tests' helpers (tests/watch/conftest.py and the test modules each case comes from).

    python bench/hostile_campaign.py [--quick] [--only NAME ...] [--pg-schema-prefix h5hostile]

``--quick`` scales the long cases down (SIGTERM ×16 on 15,000 lines a file, 16 writers for 20 s, SIGKILL ×10 over
15 s); the full run took 560-570 s on the shared 2-core machine at load 20-60. Say the load beside any figure.
Exit status: 0 when every case holds, 1 when one breaks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugins" / "zerodoctor-webhook"))

from tests.conftest import fill, run_cli  # noqa: E402
from tests.watch.conftest import (  # noqa: E402
    ENV, Node, append, namespaces_work, start_watch, step_line, stored_steps, two_nodes, wait_for,
    write_through_two_copytruncates)
from tests.watch.test_watch_compressed_rotation import write_two_compressed_rotations  # noqa: E402
from tests.watch.test_watch_daemon import kill_repeatedly, start_writer, stored_count, written  # noqa: E402
from tests.watch.test_watch_held_messages import ILLEGAL_ACCESS  # noqa: E402
from tests.watch.test_watch_isolation import HEALTHY_STEPS, POISON_STEPS, POISONS, _poisoned_runs  # noqa: E402
from tests.watch.test_watch_store_away import PG_STOP, _restart_server  # noqa: E402
from tests.rulebook.test_loader_limits import _hostile  # noqa: E402
from tests.report.test_terminal import HOSTILE, _controls  # noqa: E402

PG_URL = os.environ.get("ZERODOCTOR_TEST_PG_URL", "")
BAD_WORDS = ("Traceback", "internal error")
Steps = list[tuple[str, int, int]]


@dataclass
class Row:
    case: str
    done: str = ""
    written: int | None = None
    stored: int | None = None
    lost: int | None = None
    dup: int | None = None
    exits: str = ""
    errors: int = 0
    holds: bool = True
    why: str = ""
    seconds: float = 0.0

    def count(self, expected: Steps, stored: Steps) -> None:
        """Lines written and stored, lost (written, not stored) and duplicated (stored more than once)."""
        want, got = Counter(expected), Counter(stored)
        self.written, self.stored = len(expected), len(stored)
        self.lost = sum((want - got).values())
        self.dup = sum(max(0, n - max(want[k], 1)) for k, n in got.items())
        self.check(self.lost == 0, f"{self.lost} line(s) lost")
        self.check(self.dup == 0, f"{self.dup} line(s) stored twice")

    def check(self, ok: object, why: str) -> None:
        if not ok:
            self.holds = False
            self.why = f"{self.why}; {why}" if self.why else why

    def said(self, *texts: str, allowed: tuple[str, ...] = ()) -> None:
        """Count the error lines of this case's output: a traceback, an internal error."""
        bad = [line for text in texts for line in text.splitlines()
               if any(word in line for word in BAD_WORDS) and not any(a in line for a in allowed)]
        self.errors += len(bad)
        self.check(not bad, f"said: {bad[0][:100]}" if bad else "")

    def exit(self, name: str, code: int | None, *expected: int) -> None:
        self.exits = f"{self.exits} {name}={code}".strip()
        self.check(code in expected, f"{name} exited {code}, not {'/'.join(map(str, expected))}")


def once(runs: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", *args, str(runs)],
                          capture_output=True, text=True, env=env or ENV, timeout=timeout)


def steps_of(runs: Path) -> Steps:
    return written(runs)


def sigterm(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, float, str]:
    """SIGTERM ``proc``: its exit code, how long it took to exit, its output (stdout, then stderr)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, time.monotonic() - started, (out or "") + (err or "")


# ----------------------------------------------------------------------------------------------------- round 2-3

def poisoned_configs(tmp: Path, quick: bool) -> Row:
    """fp16 values DeepSpeed refuses and a step of -2^63 beside a healthy run (tests/watch/test_watch_isolation.py),
    and one rank file whose lines nest 1,200 deep, are not UTF-8, hold NUL bytes or are 10 MB long."""
    row = Row("poisoned configs", "11 fp16 poisons, step -2^63, 1200-deep JSON, non-UTF-8, NUL, 10 MB line; --once")
    runs = tmp / "runs"
    _poisoned_runs(runs)
    expected = [("healthy", 0, s) for s in range(1, HEALTHY_STEPS + 1)]
    expected += [(name, 0, s) for name in POISONS for s in range(1, POISON_STEPS + 1)]
    expected += [("step-int64-min", 0, s) for s in [-2 ** 63, *range(1, POISON_STEPS)]]
    bad = [b'{"v": 1, "kind": "step", "extra": ' + b"[" * 1200 + b"]" * 1200 + b"}\n",
           b'{"v": 1, "run": "bytes", "kind": "step", "note": "\xff\xfe\xc3"}\n',
           b'{"v": 1, "run": "bytes", "kind": "st\x00ep", "step": 999}\n', b"\x00" * 1000 + b"\n",
           b'{"v": 1, "run": "bytes", "kind": "step", "pad": "' + b"x" * (10 << 20) + b'"}\n']
    (runs / "bytes").mkdir()
    with open(runs / "bytes" / "rank-0.jsonl", "wb") as f:  # past the first 4 KiB: NULs there make it no log
        f.writelines(step_line("bytes", 0, s).encode() for s in range(1, 101))
        for i, line in enumerate(bad):
            f.write(line)
            f.write(step_line("bytes", 0, 101 + i).encode())
    expected += [("bytes", 0, s) for s in range(1, 101 + len(bad))]
    done = once(runs)
    row.exit("watch", done.returncode, 0)
    row.said(done.stderr)
    row.check("set aside" not in done.stderr, "a run was set aside")
    row.count(expected, stored_steps(runs / "zerodoctor.db"))
    quarantined = len(re.findall(r"quarantin", done.stderr))
    row.check(quarantined >= len(bad), f"{quarantined} quarantine line(s) said for {len(bad)} bad lines")
    status = run_cli("status", "--db", str(runs / "zerodoctor.db"), timeout=120)
    row.exit("status", status.returncode, 0)
    diagnosed = run_cli("diagnose", "--fail-on", "never", *(str(p) for p in sorted(runs.iterdir()) if p.is_dir()),
                        timeout=300)
    row.exit("diagnose", diagnosed.returncode, 0)
    row.said(status.stderr, diagnosed.stderr)
    return row


def sigterm_mid_ingest(tmp: Path, quick: bool) -> Row:
    """SIGTERM ×16 at random times while ``watch`` ingests 4 big rank files (more appended before each life)."""
    lines = 15_000 if quick else 25_000
    row = Row("SIGTERM ×16 mid-ingest", f"4 files × {lines} lines, +2,000 per file before each life; "
                                        "SIGTERM at 0.3-3 s; --once after")
    runs, db = tmp / "runs", tmp / "runs" / "zerodoctor.db"
    for rank in range(4):
        append(runs / "big" / f"rank-{rank}.jsonl", "big", rank, range(1, lines + 1))
    rng, codes, latencies, step, mid, early = random.Random(34), [], [], lines, 0, 0
    for life in range(16):
        watch = start_watch("-q", str(runs))
        before = stored_count(db)
        if life % 2:  # mid-ingest for sure: once this life has committed lines
            wait_for(lambda: stored_count(db) > before, timeout=60)
            time.sleep(rng.uniform(0.0, 1.0))
        else:  # any time, start-up included
            time.sleep(rng.uniform(0.3, 3.0))
        mid += stored_count(db) > before
        code, took, said = sigterm(watch)
        if code == -signal.SIGTERM and not said:  # before watch took SIGTERM over: nothing was open yet
            early += 1
            code = 0
        codes.append(code)
        latencies.append(took)
        row.said(said)
        for rank in range(4):
            append(runs / "big" / f"rank-{rank}.jsonl", "big", rank, range(step + 1, step + 2001))
        step += 2000
    row.done += f"; {mid} landed mid-ingest, {early} during start-up (killed by the signal, nothing said)"
    final = once(runs, "-q")
    row.check(set(codes) == {0}, f"exit codes {sorted(set(codes))}")
    row.exits = f"watch={sorted(set(codes))}, slowest stop {max(latencies):.1f} s; once={final.returncode}"
    row.check(max(latencies) < 10, f"a SIGTERM took {max(latencies):.1f} s")
    row.check(final.returncode == 0, f"--once exited {final.returncode}")
    row.said(final.stderr)
    row.count(steps_of(runs), stored_steps(db))
    return row


def sigkill_under_appends(tmp: Path, quick: bool) -> Row:
    """SIGKILL ×10 while two 4-rank writers append (tests/watch/test_watch_daemon.py's helpers), then a restart."""
    seconds = 15.0 if quick else 25.0
    row = Row("SIGKILL ×10 under appends", f"2 writers × 4 files × 1,500 lines over {seconds:.0f} s; "
                                            "10 SIGKILLs, then --once")
    runs, db = tmp / "runs", tmp / "runs" / "zerodoctor.db"
    runs.mkdir()
    writers = [start_writer(runs / name, 4, 1500, seconds) for name in ("a", "b")]
    counts = kill_repeatedly(runs, str(db), 10, random.Random(34), total=2 * 4 * 1500)
    for w in writers:
        w.wait(timeout=4 * seconds)
    final = once(runs, "-q")
    row.exit("once", final.returncode, 0)
    row.exits = f"10×SIGKILL (-9); {row.exits}"
    row.said(final.stderr)
    row.check(any(0 < n < 2 * 4 * 1500 for n in counts), f"no kill landed mid-ingest {counts}")
    row.count(steps_of(runs), stored_steps(db))
    return row


def pg_schema(prefix: str) -> str:
    """A fresh schema on the test server; the URL that uses it."""
    from sqlalchemy import create_engine
    schema = f"{prefix}_{secrets.token_hex(4)}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    admin.dispose()
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={quote(f'-csearch_path={schema}')}"


def pg_start() -> None:
    """Start the stopped server with the options it ran with: ``pg_ctl restart`` takes them from ``postmaster.opts``
    (``pg_ctl start`` would drop them: another port, another socket directory, every other user of it cut off)."""
    _restart_server()


def pg_is_up() -> bool:
    from sqlalchemy import create_engine, text
    engine = create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT 1")).scalar() == 1
    except Exception:  # noqa: BLE001 - down is the answer
        return False
    finally:
        engine.dispose()


def pg_restart_and_outage(tmp: Path, quick: bool, prefix: str) -> Row:
    """Two ``pg_ctl restart`` under a live watch, then an outage of 8 s with lines written during it
    (tests/watch/test_watch_store_away.py); the outage must be said in a line or two, never a traceback."""
    row = Row("PostgreSQL restart ×2 + 8 s outage", "watch on PG; restart, append 100; restart, append 100; "
                                                    "stop, append 100, 8 s, start; SIGTERM")
    if not PG_URL or " stop" not in PG_STOP:
        row.check(False, "skipped: no ZERODOCTOR_TEST_PG_URL / ZERODOCTOR_TEST_PG_STOP")
        return row
    url = pg_schema(prefix)
    runs, err = tmp / "runs", tmp / "watch.err"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 101))
    with open(err, "w") as err_file:
        watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "--db", url, str(runs)],
                                 stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=ENV)
    try:
        wait_for(lambda: len(stored_steps(url)) == 100, timeout=60)
        for restart in range(2):
            _restart_server()
            append(log, "r", 0, range(101 + 100 * restart, 201 + 100 * restart))
            wait_for(lambda: len(stored_steps(url)) == 200 + 100 * restart, timeout=120)
        subprocess.run(PG_STOP, shell=True, capture_output=True, timeout=120)
        append(log, "r", 0, range(301, 401))
        time.sleep(8)
        row.check(watch.poll() is None, f"watch exited {watch.returncode} during the outage")
    finally:
        pg_start()
        wait_for(pg_is_up, timeout=120)
    try:
        wait_for(lambda: len(stored_steps(url)) >= 400, timeout=120)
    except AssertionError:
        pass
    code, took, _ = sigterm(watch) if watch.poll() is None else (watch.returncode, 0.0, "")
    said = err.read_text()
    row.exit("watch", code, 0)
    row.said(said)
    cursor = [line for line in said.splitlines() if "Error closing cursor" in line]
    row.check(all(line.startswith("zerodoctor: Error closing cursor") for line in cursor),
              "'Error closing cursor' as a traceback")
    row.check(len(said.splitlines()) < 60, f"{len(said.splitlines())} log lines for 2 restarts and an outage")
    row.errors += len(cursor)
    row.count([("r", 0, s) for s in range(1, 401)], stored_steps(url))
    return row


def many_writers(tmp: Path, quick: bool) -> Row:
    """Many writers at a high line rate under one live watch, then SIGTERM and --once."""
    writers_n, seconds, per_s = (16, 20.0, 4000) if quick else (32, 40.0, 6000)
    per_file = int(per_s * seconds / writers_n / 4)
    row = Row("many writers", f"{writers_n} writers × 4 files asked {per_s} lines/s for {seconds:.0f} s")
    runs, db = tmp / "runs", tmp / "runs" / "zerodoctor.db"
    runs.mkdir()
    watch = start_watch("-q", str(runs))
    started = time.monotonic()
    writers = [start_writer(runs / f"w{i}", 4, per_file, seconds) for i in range(writers_n)]
    for w in writers:
        w.wait(timeout=20 * seconds)
    took = time.monotonic() - started
    lines = steps_of(runs)
    try:
        wait_for(lambda: len(stored_steps(db)) >= len(lines), timeout=120, every=1.0)
        behind = 0.0
    except AssertionError:
        behind = -1.0
    code, _, err = sigterm(watch)
    row.done += f"; reached {len(lines) / took:,.0f} lines/s ({len(lines):,} lines in {took:.0f} s)"
    if behind < 0:
        row.done += "; watch still behind 120 s after the writers ended"
    row.exit("watch", code, 0)
    final = once(runs, "-q")
    row.exit("once", final.returncode, 0)
    row.said(err, final.stderr)
    row.count(lines, stored_steps(db))
    return row


# ------------------------------------------------------------------------------------------------------ round 4

def wide_file(tmp: Path, ranks: int) -> Row:
    """One file whose lines claim ``ranks`` ranks, beside a healthy run: the ``--once`` pass timed, then a live
    watch on a fresh store SIGTERMed 2 s in (its exit latency)."""
    row = Row(f"one file, {ranks:,} ranks", f"{ranks:,} ranks × 2 steps in one file + a 300-line run; "
                                              "--once timed; live: 10 lines to the other run mid-pass, then SIGTERM")
    runs = tmp / "runs"
    (runs / "wide").mkdir(parents=True)
    with open(runs / "wide" / "rank-0.jsonl", "w") as f:
        for step in (1, 2):
            f.writelines(step_line("wide", rank, step) for rank in range(ranks))
    append(runs / "ok" / "rank-0.jsonl", "ok", 0, range(1, 301))
    started = time.monotonic()
    done = once(runs, "-q")
    row.seconds = time.monotonic() - started
    row.exit("once", done.returncode, 0)
    row.said(done.stderr)
    row.count(steps_of(runs), stored_steps(runs / "zerodoctor.db"))
    live = tmp / "live.db"
    watch = start_watch("-q", "--db", str(live), str(runs))
    wait_for(lambda: stored_count(live) > 0, timeout=120, every=0.2)  # mid-pass: its first commit is in
    append(runs / "ok" / "rank-0.jsonl", "ok", 0, range(301, 311))  # the other run writes on
    appended = time.monotonic()
    try:
        wait_for(lambda: sum(r == "ok" for r, _, _ in stored_steps(live)) == 310, timeout=60, every=0.2)
        other = time.monotonic() - appended
    except AssertionError:
        other = math.inf
    code, took, err = sigterm(watch)
    row.exit("live", code, 0)
    row.said(err)
    row.done += (f"; pass {row.seconds:.1f} s, the other run's new lines stored {other:.1f} s after they were "
                 f"written, SIGTERM latency {took:.1f} s")
    row.check(took < 10, f"SIGTERM took {took:.1f} s")
    row.check(other < 15, f"the other run's lines waited {other:.1f} s")
    return row


def console_crash(tmp: Path, quick: bool) -> Row:
    """A console-only run ending in a traceback (tests/watch/test_watch_held_messages.py): said by --once and live."""
    row = Row("console-only run ending in a crash", "qlora#82's console.log (ZD903) under --once and live watch")
    runs = tmp / "runs"
    (runs / "c").mkdir(parents=True)
    shutil.copy(ILLEGAL_ACCESS, runs / "c" / "console.log")
    done = once(runs)
    row.exit("once", done.returncode, 0, 1)
    row.check("ZD903" in done.stdout, "--once did not say ZD903")
    watch = start_watch("--db", str(tmp / "live.db"), str(runs))
    time.sleep(15)
    code, _, said = sigterm(watch)
    row.exit("live", code, 0)
    row.said(done.stderr, said)
    row.check("ZD903" in said, "live watch did not say ZD903 within 15 s")
    return row


def console_crash_killed(tmp: Path, quick: bool) -> Row:
    """The same console log written in two parts under a live watch, SIGKILLed 1.5 s after the traceback came (its
    message held: the file is not quiet yet), then ``--once`` on the same store: the crash must be said."""
    row = Row("console crash, watch SIGKILLed mid-hold", "qlora#82's log: 5 lines, live watch, the rest, SIGKILL "
                                                         "1.5 s later; --once on the same store")
    runs = tmp / "runs"
    (runs / "c").mkdir(parents=True)
    lines = ILLEGAL_ACCESS.read_bytes().splitlines(keepends=True)
    log = runs / "c" / "console.log"
    log.write_bytes(b"".join(lines[:5]))
    watch = start_watch(str(runs))
    time.sleep(6)
    with open(log, "ab") as f:
        f.write(b"".join(lines[5:]))
    time.sleep(1.5)
    watch.kill()
    out, err = watch.communicate(timeout=30)
    row.exit("live", watch.returncode, -signal.SIGKILL)
    done = once(runs)
    row.exit("once", done.returncode, 0, 1)
    row.said(err, done.stderr)
    row.check("ZD903" in out + done.stdout, "ZD903 said by neither the killed watch nor the restart")
    return row


def gzip_rotations(tmp: Path, quick: bool) -> Row:
    row = Row("two gzip rotations while down", "1,000 lines, --once, 2 × logrotate compress (+300), --once")
    runs = tmp / "runs"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 1001))
    first = once(runs)
    write_two_compressed_rotations(log)
    second = once(runs)
    row.exit("once", first.returncode, 0)
    row.exit("once", second.returncode, 0)
    row.said(first.stderr, second.stderr)
    row.count([("r", 0, s) for s in range(1, 1301)], stored_steps(runs / "zerodoctor.db"))
    return row


def renamed_dir_once(tmp: Path, quick: bool) -> Row:
    row = Row("renamed run dir + new same name, --once", "exp 1,000 lines; --once; mv exp exp-failed (+10); "
                                                         "new exp (300); --once")
    runs = tmp / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, 1001))
    first = once(runs)
    (runs / "exp").rename(runs / "exp-failed")
    append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(1001, 1011))
    append(runs / "exp" / "rank-0.jsonl", "exp-2", 0, range(1, 301))
    second = once(runs)
    row.exit("once", first.returncode, 0)
    row.exit("once", second.returncode, 0)
    row.said(first.stderr, second.stderr)
    row.count([("exp", 0, s) for s in range(1, 1011)] + [("exp-2", 0, s) for s in range(1, 301)],
              stored_steps(runs / "zerodoctor.db"))
    return row


def hard_link(tmp: Path, quick: bool) -> Row:
    row = Row("hard-linked rank file", "a 100 lines; --once; cp -al a b; +10 via b; --once")
    runs = tmp / "runs"
    append(runs / "a" / "rank-0.jsonl", "a", 0, range(1, 101))
    first = once(runs)
    subprocess.run(["cp", "-al", str(runs / "a"), str(runs / "b")], check=True)
    append(runs / "b" / "rank-0.jsonl", "a", 0, range(101, 111))
    second = once(runs)
    row.exit("once", first.returncode, 0)
    row.exit("once", second.returncode, 0)
    row.said(first.stderr, second.stderr)
    row.count([("a", 0, s) for s in range(1, 111)], stored_steps(runs / "zerodoctor.db"))
    return row


def _rule_dir(tmp: Path, text: str) -> Path:
    rules = tmp / "rules"
    rules.mkdir()
    (rules / "ZD904-hostile-rule.yaml").write_text(text)
    return rules


def deep_rule_clauses(tmp: Path, quick: bool) -> Row:
    row = Row("rule clauses nested 3,000 deep", "watch --once --rules DIR on samples/fp16-min-scale")
    rules = _rule_dir(tmp, _hostile(**{"{batch.grad_accum}": "[" * 3000 + "{batch.grad_accum}" + "]" * 3000}))
    runs = tmp / "runs"
    shutil.copytree(ROOT / "samples" / "fp16-min-scale", runs / "s")
    done = once(runs, "--rules", str(rules))
    row.exit("once", done.returncode, 2)
    row.said(done.stderr)
    named = [line for line in done.stderr.splitlines() if line.startswith(str(rules))]
    row.check(len(named) == 1 and len(named[0]) < 600, f"{len(named)} line(s) name the rule file")
    row.errors += len(named)
    return row


def deep_expressions(tmp: Path, quick: bool) -> Row:
    row = Row("deep rule expression; deep first line", "when: 1,000 parentheses under watch --once; "
                                                       "diagnose FILE whose first line nests 3,000 deep")
    rules = _rule_dir(tmp, _hostile(**{"when: batch.micro_batches_per_step != batch.grad_accum":
                                       'when: "' + "(" * 1000 + "batch.grad_accum" + ")" * 1000 + ' > 0"'}))
    runs = tmp / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 11))
    done = once(runs, "--rules", str(rules))
    row.exit("once", done.returncode, 2)
    deep = tmp / "deep.jsonl"
    deep.write_text('{"kind": "step", "extra": ' + "[" * 3000 + "]" * 3000 + "}\n" + step_line("d", 0, 1))
    diagnosed = run_cli("diagnose", "--fail-on", "never", "--format", "json", str(deep), timeout=120)
    row.exit("diagnose", diagnosed.returncode, 0)
    row.said(done.stderr, diagnosed.stderr)
    return row


def full_disk(tmp: Path, quick: bool) -> Row:
    """The store on a 512 KiB tmpfs filled under a live watch (tests/watch/test_watch_full_disk.py), then freed."""
    row = Row("full disk", "store on a 512 KiB tmpfs filled under a live watch, 50 lines/s for 10 s, freed")
    disk = tmp / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        row.check(False, "skipped: mounting a tmpfs needs root")
        return row
    try:
        runs, db, err = tmp / "runs", disk / "zd.db", tmp / "watch.err"
        log = runs / "r" / "rank-0.jsonl"
        append(log, "r", 0, range(1, 3))
        with open(err, "w") as err_file:
            watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "--db", str(db), str(runs)],
                                     stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=ENV)
        wait_for(lambda: len(stored_steps(db)) == 2, timeout=60)
        fill(disk / "filler")
        started, step = time.monotonic(), 3
        while time.monotonic() - started < 10:
            append(log, "r", 0, [step])
            step += 1
            time.sleep(0.02)
        refusals = err.read_text().count("store write failed")
        (disk / "filler").unlink()
        try:
            wait_for(lambda: len(stored_steps(db)) >= step - 1, timeout=60)
        except AssertionError:
            pass
        code, _, _ = sigterm(watch)
        row.exit("watch", code, 0)
        row.said(err.read_text())
        row.errors += refusals
        row.done += f"; {refusals} refusal(s) said"
        row.check(refusals <= 6, f"{refusals} 'store write failed' lines in 10 s")
        row.count([("r", 0, s) for s in range(1, step)], stored_steps(db))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return row


def secrets_in_argv(tmp: Path, quick: bool) -> Row:
    row = Row("secrets in argv", "zerodoctor run -- python -c pass --pw/-p/--pass=/Authorization: Bearer/Basic; "
                                 "watch --once; grep run files and store")
    command = [sys.executable, "-c", "pass", "--pw", "pw-11", "-p", "pw-12", "--pass=pw-13",
               "-H", "Authorization: Bearer tok-14.abc", "Authorization=Basic dXNlcjpwdy0xNQ==",
               "x-token Bearer tok-17"]
    runs = tmp / "runs"
    ran = subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(runs), "--name", "r", "--",
                          *command], capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    row.exit("run", ran.returncode, 0)
    done = once(runs)
    row.exit("once", done.returncode, 0, 1)
    row.said(ran.stderr, done.stderr)
    blobs = [p.read_bytes() for p in runs.rglob("*") if p.is_file()]
    found = sorted({s for s in ("pw-11", "pw-12", "pw-13", "tok-14", "dXNlcjpwdy0xNQ", "tok-17")
                    for b in blobs if s.encode() in b})
    row.check(not found, f"secrets kept: {found}")
    row.errors += len(found)
    return row


def bidi_run_name(tmp: Path, quick: bool) -> Row:
    row = Row("U+202E run name", "run dir and run name with U+202E, OSC, CSI; watch, status output checked")
    runs = tmp / "runs"
    name = f"evil{HOSTILE}"
    run_dir = runs / "gnp\u202eexe.ok"
    run_dir.mkdir(parents=True)
    lines = [{"v": 1, "t": 1000.0, "run": name, "rank": 0, "kind": "run_start", "world_size": 1,
              "config": {"train_batch_size": 8, f"bad{HOSTILE}key": 1}},
             {"v": 1, "t": 1001.0, "run": name, "rank": 0, "kind": "step", "step": 1, "loss": 1.0}]
    (run_dir / "rank-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + f"bad {HOSTILE}\n")
    done = once(runs)
    status = run_cli("status", "--db", str(runs / "zerodoctor.db"), timeout=60)
    row.exit("once", done.returncode, 0, 1)
    row.exit("status", status.returncode, 0)
    row.said(done.stderr, status.stderr)
    shown = _controls(done.stdout + done.stderr + status.stdout + status.stderr)
    row.check(not shown, f"{len(shown)} control/bidi character(s) reached the terminal: {shown[:4]!r}")
    row.errors += len(shown)
    return row


def corrupt_index(tmp: Path, quick: bool) -> Row:
    row = Row("corrupt index.json", "index.json '{not json' and '[1, 2]'; watch --once --html")
    runs = tmp / "runs"
    append(runs / "fresh" / "rank-0.jsonl", "fresh", 0, range(1, 4))
    for kept in ("{not json", "[1, 2]"):
        out = tmp / f"html-{len(kept)}"
        out.mkdir()
        (out / "index.json").write_text(kept)
        done = once(runs, "--html", str(out), "--db", str(tmp / f"{len(kept)}.db"))
        row.exit("once", done.returncode, 0)
        row.said(done.stderr)
        index = out / "index.html"
        row.check(index.exists() and "fresh" in index.read_text(), f"index.html not written past {kept!r}")
    return row


def _webhook_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "hostile_webhook_tests", ROOT / "plugins" / "zerodoctor-webhook" / "tests" / "test_webhook.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trickled_webhook(tmp: Path, quick: bool) -> Row:
    row = Row("trickled webhook", "a 200 whose body trickles a byte per 0.2 s; watch --once; deliveries counted")
    webhook = _webhook_module()
    server = webhook.Trickler(every_s=0.2, head=b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n")
    runs = tmp / "runs"
    (runs / "r1").mkdir(parents=True)
    shutil.copy(ROOT / "tests/fixtures/rules/ZD203/fires.jsonl", runs / "r1" / "rank-0.jsonl")
    env = {**ENV, "ZERODOCTOR_WEBHOOK_URL": server.url, "ZERODOCTOR_WEBHOOK_RETRIES": "1",
           "ZERODOCTOR_WEBHOOK_TIMEOUT": "1", "ZERODOCTOR_WEBHOOK_DEADLINE": "3"}
    try:
        started = time.monotonic()
        done = once(runs, env=env, timeout=300)
        took = time.monotonic() - started
    finally:
        server.close()
    row.exit("once", done.returncode, 0, 1)
    row.said(done.stderr)
    with sqlite3.connect(runs / "zerodoctor.db") as conn:
        delivered = conn.execute("SELECT count(*) FROM deliveries").fetchone()[0]
    row.check(delivered == 0, f"{delivered} finding(s) recorded as delivered")
    row.check("pending" in done.stderr, "the undelivered findings were not said to stay pending")
    row.done += f"; --once took {took:.1f} s (a 3 s deadline)"
    return row


def sigint_at_start(tmp: Path, quick: bool) -> Row:
    row = Row("SIGINT at start-up", "watch SIGINTed 0.05/0.1/0.2/0.35/0.5 s after exec")
    codes, in_site = [], 0
    for after in (0.05, 0.1, 0.2, 0.35, 0.5):
        proc = start_watch(str(tmp))
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        codes.append(proc.returncode)
        if "<frozen site>" in err and "zerodoctor" not in err:  # CPython's own start-up: no zerodoctor code ran yet
            in_site += 1
            continue
        row.said(err)
        row.check(proc.returncode in (0, 130, -signal.SIGINT), f"exit {proc.returncode} at {after} s")
    row.exits = f"watch={codes}"
    if in_site:
        row.done += f"; {in_site} landed in CPython's site import, before any zerodoctor code (its traceback, exit 1)"
    return row


def copytruncate_twice(tmp: Path, quick: bool) -> Row:
    row = Row("copytruncate twice while down", "10 lines, --once, +3, 2 × (copy + truncate + append), --once")
    runs = tmp / "runs"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    first = once(runs)
    append(log, "r", 0, range(11, 14))
    write_through_two_copytruncates(log, "r")
    second = once(runs)
    row.exit("once", first.returncode, 0)
    row.exit("once", second.returncode, 0)
    row.said(first.stderr, second.stderr)
    row.count([("r", 0, s) for s in range(1, 19)], stored_steps(runs / "zerodoctor.db"))
    return row


def status_two_nodes(tmp: Path, quick: bool, prefix: str) -> Row:
    row = Row("status on two nodes", "two nodes' console.log at one local path, each watch --once on PG; status")
    if not PG_URL:
        row.check(False, "skipped: no ZERODOCTOR_TEST_PG_URL")
        return row
    if not namespaces_work():
        row.check(False, "skipped: no private mount namespaces")
        return row
    url = pg_schema(prefix)
    nodes: list[Node] = two_nodes(tmp, same_path=True)
    for node, sample in zip(nodes, ("fp16-static-65536", "fp16-min-scale")):
        (node.disk / "job").mkdir()
        shutil.copy(ROOT / "samples" / sample / "console.log", node.disk / "job" / "console.log")
        done = node.run("watch", "--once", "-q", "--db", url, str(node.local))
        row.exit(f"watch@{node.id}", done.returncode, 0)
        row.said(done.stderr)
    shown = run_cli("status", "--db", url, timeout=60)
    row.exit("status", shown.returncode, 0)
    files = [line for line in shown.stdout.splitlines() if "console.log" in line]
    row.check(len(files) == 2 and len(set(files)) == 2, f"status shows {len(set(files))} distinct of "
                                                         f"{len(files)} console.log line(s)")
    return row


CASES: dict[str, Callable[..., Row]] = {
    "poisoned": poisoned_configs, "sigterm": sigterm_mid_ingest, "sigkill": sigkill_under_appends,
    "pg": pg_restart_and_outage, "writers": many_writers,
    "wide10k": lambda tmp, quick: wide_file(tmp, 10_000), "wide20k": lambda tmp, quick: wide_file(tmp, 20_000),
    "console": console_crash, "console-killed": console_crash_killed,
    "gzip": gzip_rotations, "renamed": renamed_dir_once, "hardlink": hard_link,
    "clauses": deep_rule_clauses, "expressions": deep_expressions, "disk": full_disk, "secrets": secrets_in_argv,
    "bidi": bidi_run_name, "index": corrupt_index, "webhook": trickled_webhook, "sigint": sigint_at_start,
    "copytruncate": copytruncate_twice, "nodes": status_two_nodes,
}
NEEDS_PREFIX = {"pg", "nodes"}


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="scale the long cases down")
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="run these cases alone")
    ap.add_argument("--pg-schema-prefix", default="h5hostile")
    args = ap.parse_args()
    rows: list[Row] = []
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    campaign_started = time.monotonic()
    for name in args.only or CASES:
        tmp = Path(tempfile.mkdtemp(prefix=f"zd-hostile-{name}-"))
        started = time.monotonic()
        try:
            extra = (args.pg_schema_prefix,) if name in NEEDS_PREFIX else ()
            row = CASES[name](tmp, args.quick, *extra)
        except Exception as e:  # noqa: BLE001 - a case that raises breaks, the campaign goes on
            row = Row(name, "raised")
            row.check(False, f"{type(e).__name__}: {str(e)[:200]}")
            traceback.print_exc()
        took = time.monotonic() - started
        rows.append(row)
        print(f"[{took:6.1f} s] {'HOLDS' if row.holds else 'BREAKS'} {row.case}: {row.why}", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    header = ("case", "what was done", "written", "stored", "lost", "dup", "exit codes", "err lines", "verdict")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        verdict = "HOLDS" if r.holds else f"BREAKS ({r.why})"
        print(" | ".join([r.case, r.done, _cell(r.written), _cell(r.stored), _cell(r.lost), _cell(r.dup), r.exits,
                          str(r.errors), verdict]))
    load = os.getloadavg()
    print(f"\n{sum(r.holds for r in rows)} of {len(rows)} hold; {time.monotonic() - campaign_started:.0f} s; "
          f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0 if all(r.holds for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
