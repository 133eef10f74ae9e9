"""Benchmark: many nodes, one PostgreSQL — one ``zerodoctor watch`` per node, all live into one store.

Each simulated node has its own node id (``ZERODOCTOR_NODE_ID``, and ``host`` in its ranks' ``run_start``, as
the probe writes it), its own disk (a directory of its own) and 8 ranks of the one run ``job``; its watcher
is a real subprocess watching only that node's directory. For each node count, in a schema of its own:

- **burst**: ``--burst`` steps appended to every rank at once; the ingest rate is the events stored over the
  seconds until every one of them is (all watchers together);
- **live**: one step on every rank every ``--every`` seconds for ``--steps`` steps; at step ``--fault-at`` one
  rank of the middle node writes a NaN loss (time T). The finding is *stored* at its ``first_seen_t`` and
  *said* once the store marks it announced (polled every 50 ms): both minus T;
- **judgements** of the run in the live phase, from PostgreSQL's own counters (``pg_stat_user_tables`` on the
  findings table: a judgement reads the run's findings twice, once to record and once to announce; each
  finding it records is one update more, and the bench's own polls are taken off); per pass is per step
  written; **judges**: the watchers that said the run's state (each says it when it first judges the run);
- **PostgreSQL's CPU** over the live phase: the postmaster and its backends from ``/proc`` (the server must run
  on this machine; other clients of the same server count too), and the watchers' own CPU beside it.

``--others-niced``: once the backlog is stored, every watcher but the run's judge (the one whose log says it judges
it) runs at nice 19. In a real job each node's watcher has its node's CPUs; here 64 of them share 2 cores, and the
judge, whose judgement every finding waits for, gets about a 32nd of a core while the others take in their ranks.

``--baseline-code DIR`` runs every size with the watchers of another source tree too (``git archive REV``
unpacked), interleaved, so today's code and a change are measured in the same run. Ratios are against the
first (smallest) node count of the same code.

    ZERODOCTOR_TEST_PG_URL=postgresql+psycopg://... python bench/pg_nodes.py [--nodes 8 64] [--baseline-code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
PER_NODE = 8
RUN = "job"
START = ('{"v":1,"t":%.3f,"run":"%s","rank":%d,"kind":"run_start","world_size":%d,"local_rank":%d,'
         '"host":"%s","zero_stage":2,"precision":"bf16","params":7000000000,'
         '"config":{"train_micro_batch_size_per_gpu":1,"zero_optimization":{"stage":2}}}\n')
STEP = ('{"v":1,"t":%.3f,"run":"%s","rank":%d,"kind":"step","step":%d,"micro_batches":1,"samples":1,'
        '"loss":%s,"lr":0.0001,"overflow":false,"grad_norm":1.1,"step_time_s":0.5,"fwd_s":0.1,"bwd_s":0.3,'
        '"optim_s":0.05,"comm_s":0.1,"mem_allocated_bytes":10000000000,"mem_reserved_bytes":12000000000,'
        '"mem_peak_bytes":11000000000,"alloc_retries":0}\n')
TICKS = os.sysconf("SC_CLK_TCK")


class Job:
    """The run's rank files, one directory per node: ``node-XXXX/runs/job/rank-R.jsonl``."""

    def __init__(self, folder: Path, nodes: int) -> None:
        self.folder, self.nodes, self.ranks = folder, nodes, nodes * PER_NODE
        self.step = 0

    def node_id(self, node: int) -> str:
        return f"node{node:04d}"

    def runs(self, node: int) -> Path:
        return self.folder / f"node-{node:04d}" / "runs"

    def write(self, steps: int, nan_rank: int | None = None) -> int:
        """``steps`` more steps on every rank (the run_start before the first); returns the events written."""
        written = 0
        for rank in range(self.ranks):
            node = rank // PER_NODE
            path = self.runs(node) / RUN / f"rank-{rank}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as out:
                if self.step == 0:
                    out.write(START % (1e9, RUN, rank, self.ranks, rank % PER_NODE, self.node_id(node)))
                    written += 1
                for s in range(self.step + 1, self.step + steps + 1):
                    loss = "NaN" if rank == nan_rank and s == self.step + steps else "%.5f" % (2.5 - s * 1e-4)
                    out.write(STEP % (1e9 + s * 0.6, RUN, rank, s, loss))
                    written += 1
        self.step += steps
        return written


def cpu_s(pids: list[int], *, children: bool = False) -> float:
    """CPU seconds of ``pids`` (with their reaped children's when ``children``), from ``/proc``."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return total / TICKS


def server_cpu_s(postmaster: int) -> float:
    """The PostgreSQL server's CPU so far: the postmaster, the backends it reaped, and those alive."""
    live = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    live.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return cpu_s([postmaster], children=True) + cpu_s(live)


def postmaster_pid(engine) -> int:  # noqa: ANN001 - Engine
    """The server's postmaster: the parent of this connection's backend (the server runs on this machine)."""
    with engine.connect() as conn:
        backend = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])


class Store:
    """A schema of its own on the server, and the bench's reads of it."""

    def __init__(self, base_url: str, schema: str) -> None:
        self.schema = schema
        self.admin = create_engine(base_url)
        with self.admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        self.url = f"{base_url}{'&' if '?' in base_url else '?'}options={quote(f'-csearch_path={schema}')}"
        self.engine = create_engine(self.url)
        self.polls = 0  # the bench's own reads of the findings table

    def stored(self) -> int:
        with self.engine.connect() as conn:
            if not conn.execute(text("SELECT to_regclass('files')")).scalar():
                return 0
            return int(conn.execute(text("SELECT coalesce(sum(events), 0) FROM files")).scalar())

    def finding(self, rule: str) -> tuple[float, bool] | None:
        """(first_seen_t, announced) of the run's finding of ``rule``."""
        self.polls += 1
        with self.engine.connect() as conn:
            row = conn.execute(text("SELECT first_seen_t, notified FROM findings WHERE rule = :r"), {"r": rule}).first()
        return (row[0], row[1]) if row else None

    def findings_reads(self) -> tuple[int, int]:
        """(scans, rows updated) of the findings table so far, from the server's counters."""
        self.engine.dispose()  # a backend's counters reach the shared ones when it goes
        time.sleep(1.0)
        with self.admin.connect() as conn:
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            row = conn.execute(text("SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0), n_tup_upd FROM "
                                    "pg_stat_user_tables WHERE schemaname = :s AND relname = 'findings'"),
                               {"s": self.schema}).first()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def drop(self) -> None:
        self.engine.dispose()
        with self.admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {self.schema} CASCADE")
        self.admin.dispose()


def wait(check, timeout: float, every: float = 0.1) -> float | None:  # noqa: ANN001 - a callable
    """Seconds until ``check()`` is true; None past ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(every)
    return None


def measure(nodes: int, code: Path, args: argparse.Namespace, tag: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="zd-bench-pgnodes-"))
    store = Store(args.url, f"{args.schema_prefix}{tag}_{nodes}_{os.getpid()}")
    postmaster = postmaster_pid(store.admin)
    job = Job(folder, nodes)
    written = job.write(args.backlog)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    logs, watchers = [], []
    row: dict = {"code": tag, "nodes": nodes, "ranks": job.ranks}
    try:
        for node in range(nodes):
            logs.append((folder / f"w{node}.out", folder / f"w{node}.err"))
            with open(logs[-1][0], "w") as out, open(logs[-1][1], "w") as err:  # the watcher keeps its own copies
                watchers.append(subprocess.Popen(
                    [sys.executable, "-m", "zerodoctor", "watch", "--db", store.url, str(job.runs(node))],
                    stdout=out, stderr=err, cwd=folder, env={**env, "ZERODOCTOR_NODE_ID": job.node_id(node)}))
        row["backlog_s"] = wait(lambda: store.stored() >= written, args.timeout)
        if row["backlog_s"] is None:
            raise RuntimeError(f"{nodes} nodes: the backlog of {written} events was not stored in {args.timeout} s")
        pids = [w.pid for w in watchers]
        if args.others_niced:
            judge = [w.pid for w, (_, err) in zip(watchers, logs) if f"judging run {RUN}" in err.read_text()]
            if len(judge) != 1:
                raise RuntimeError(f"{nodes} nodes: {len(judge)} watchers say they judge {RUN}, not one")
            for pid in set(pids) - set(judge):
                os.setpriority(os.PRIO_PROCESS, pid, 19)
        # burst: every rank writes --burst steps at once
        burst = job.write(args.burst)
        written += burst
        burst_s = wait(lambda: store.stored() >= written, args.timeout, every=0.05)
        row["burst"], row["burst_rate"] = burst, (burst / burst_s if burst_s else None)
        # live: a step every --every s; the NaN at --fault-at
        scans0, updates0 = store.findings_reads()
        polls0 = store.polls
        cpu0, mine0, t0 = server_cpu_s(postmaster), cpu_s(pids), time.monotonic()
        fault: dict[str, float] = {}  # when the NaN was written, its finding stored, seen announced
        middle = (nodes // 2) * PER_NODE + 3
        next_at = time.monotonic()
        for i in range(args.steps):
            while time.monotonic() < next_at:  # between two steps: look for the finding every 50 ms
                if "written" in fault and "said" not in fault:
                    _look(store, fault)
                time.sleep(min(0.05, max(0.0, next_at - time.monotonic())))
            next_at += args.every
            written += job.write(1, nan_rank=middle if i + 1 == args.fault_at else None)
            if i + 1 == args.fault_at:
                fault["written"] = time.time()
        # still looking for the finding while the store catches up: said before the last line is stored
        drain_s = wait(lambda: bool(_look(store, fault) if "written" in fault else True) and store.stored() >= written,
                       args.timeout, every=0.05)
        wait(lambda: "written" not in fault or "said" in _look(store, fault), args.timeout, every=0.05)
        live_s = time.monotonic() - t0
        cpu1, mine1 = server_cpu_s(postmaster), cpu_s(pids)
        row["load"] = os.getloadavg()[0]
        polls = store.polls - polls0
        for w in watchers:
            w.terminate()
        for w in watchers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
        scans1, updates1 = store.findings_reads()
        judgements = (scans1 - scans0 - (updates1 - updates0) - polls) / 2
        said = 0
        judges = 0
        for out_path, err_path in logs:
            said += out_path.read_text().count("ZD204")
            judges += f"run {RUN}: " in err_path.read_text()
        row.update(drain_s=drain_s, live_s=live_s, steps=args.steps, live_rate=job.ranks / args.every,
                   stored_s=fault["stored"] - fault["written"] if "stored" in fault else None,
                   said_s=fault["said"] - fault["written"] if "said" in fault else None, said=said, judges=judges,
                   judgements=judgements, per_pass=judgements / args.steps,
                   pg_cpu=(cpu1 - cpu0) / live_s, watch_cpu=(mine1 - mine0) / live_s)
    finally:
        for w in watchers:
            if w.poll() is None:
                w.kill()
                w.wait()
        store.drop()
        shutil.rmtree(folder, ignore_errors=True)
    return row


def _look(store: Store, fault: dict[str, float]) -> dict[str, float]:
    """Note when the NaN's finding is stored (its ``first_seen_t``) and first seen announced."""
    if "said" not in fault and (seen := store.finding("ZD204")) is not None:
        fault["stored"] = seen[0]
        if seen[1]:
            fault["said"] = time.time()
    return fault


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 64], help="node counts; the first is the baseline")
    ap.add_argument("--backlog", type=int, default=5, help="steps per rank written before the watchers start")
    ap.add_argument("--burst", type=int, default=20, help="steps per rank appended at once")
    ap.add_argument("--steps", type=int, default=20, help="live steps, one on every rank every --every s")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between two live steps")
    ap.add_argument("--fault-at", type=int, default=10, help="the live step on which one rank's loss is NaN")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the store to catch up")
    ap.add_argument("--url", default=os.environ.get("ZERODOCTOR_TEST_PG_URL"), help="the PostgreSQL server")
    ap.add_argument("--schema-prefix", default="zd_bench_", help="each size's store is a schema of this prefix")
    ap.add_argument("--baseline-code", type=Path, help="a source tree whose watchers are measured beside this one's")
    ap.add_argument("--others-niced", action="store_true",
                    help="every watcher but the judge at nice 19 once the backlog is stored (each node's own CPUs)")
    args = ap.parse_args()
    if not args.url:
        sys.exit("pass --url or set ZERODOCTOR_TEST_PG_URL (a PostgreSQL server on this machine)")
    codes = ([("base", args.baseline_code.resolve())] if args.baseline_code else []) + [("this", ROOT)]
    rows = []
    for nodes in args.nodes:
        for tag, code in codes:
            rows.append(measure(nodes, code, args, tag))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\n{len(rows)} runs, one run of {PER_NODE} ranks a node, {args.burst}-step burst then a step every "
          f"{args.every:g} s for {args.steps} steps, NaN at step {args.fault_at}; {os.cpu_count()} CPUs"
          f"{', every watcher but the judge at nice 19' if args.others_niced else ''} "
          f"(x: against {args.nodes[0]} nodes of the same code, same run)\n")
    print(f"{'code':>5} {'nodes':>5} {'ranks':>5} {'burst ev/s':>10} {'x':>5} {'drain s':>7} {'stored s':>8} "
          f"{'said s':>6} {'said':>4} {'judges':>6} {'judg/pass':>9} {'x':>5} {'PG CPU':>6} {'x':>5} "
          f"{'watch CPU':>9} {'load':>5}")
    for r in rows:
        base = next(b for b in rows if b["code"] == r["code"])
        print(f"{r['code']:>5} {r['nodes']:>5} {r['ranks']:>5} {_n(r['burst_rate'], 0):>10} "
              f"{_x(r['burst_rate'], base['burst_rate']):>5} {_n(r['drain_s'], 2):>7} {_n(r['stored_s'], 2):>8} "
              f"{_n(r['said_s'], 2):>6} {r['said']:>4} {r['judges']:>6} {r['per_pass']:>9.1f} "
              f"{_x(r['per_pass'], base['per_pass']):>5} {r['pg_cpu']:>6.0%} {_x(r['pg_cpu'], base['pg_cpu']):>5} "
              f"{r['watch_cpu']:>9.0%} {r['load']:>5.1f}")


def _n(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None, base: float | None) -> str:
    return "-" if not value or not base else f"{value / base:.1f}"


if __name__ == "__main__":
    main()
