"""Watch, metrics: what the watcher stored and judged → Prometheus series on ``/metrics`` (``watch --metrics``).

Teams that run ZeRO jobs at scale already look at Prometheus and Grafana; this puts the findings and the
numbers a board plots where their alert routes and dashboards can read them. The series are built on the
watcher's thread after a look and published as one immutable tuple, swapped in by a single assignment;
the HTTP server (``prometheus_client``'s, on a thread of its own) only ever reads the tuple it finds. A
scrape never waits for a pass and a pass never waits for a scrape: neither takes a lock the other holds.

Labels stay bounded: a run, a rank, a rule and its fixed name, category and severity, a step phase from a
fixed list; never a message, a path or a step number. Per rank, each number is the one its highest step
read so far carried (absent until a step carries it: absent, not zero), and the counters count what this
watch stored since it started (Prometheus's ``rate``/``increase`` see through a restart).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import Connection

from zerodoctor.sources.batches import Batch, run_id_for
from zerodoctor.sources.names import rank_of
from zerodoctor.store import findings as stored_findings

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from zerodoctor.events.columns import Columns
    from zerodoctor.rulebook.finding import Finding

PUBLISH_S = 1.0  # least time between two snapshots while serving (stretched to 10x a snapshot's cost)
RUNS_KEPT = 256  # runs with series, the most recently active: a watch that has seen thousands stays bounded
# step field → (metric, help): the last value a rank's highest step carried
_GAUGES = {
    "loss": ("zerodoctor_rank_loss", "Loss of the rank's last step that carried one."),
    "loss_scale": ("zerodoctor_rank_loss_scale", "fp16 loss scale of the rank's last step that carried one."),
    "step_time_s": ("zerodoctor_rank_step_seconds", "Wall time of the rank's last timed step."),
    "mem_allocated_bytes": ("zerodoctor_rank_memory_allocated_bytes",
                            "Device memory allocated at the rank's last step that measured it."),
    "mem_reserved_bytes": ("zerodoctor_rank_memory_reserved_bytes",
                           "Device memory the allocator reserved at the rank's last step that measured it."),
}
# step field → the ``phase`` label of zerodoctor_rank_step_phase_seconds: the split of a step's time
PHASES = {"fwd_s": "forward", "bwd_s": "backward", "optim_s": "optimizer", "comm_s": "communication"}
# zerodoctor_run_info's labels ← the environment rank 0's run_start recorded: the names a person searches a job by
SCHEDULER_NAMES = {"slurm_job_id": "SLURM_JOB_ID", "slurm_array_job_id": "SLURM_ARRAY_JOB_ID",
                   "slurm_array_task_id": "SLURM_ARRAY_TASK_ID", "slurm_step_id": "SLURM_STEP_ID",
                   "slurm_job_nodelist": "SLURM_JOB_NODELIST"}


@dataclass
class _Rank:
    """One rank of one run as this watch read it: per field (highest step with a value, that value)."""

    step: int | None = None
    values: dict[str, tuple[int, float]] = field(default_factory=dict)
    skipped: int = 0
    events: int = 0
    wrote_t: float | None = None  # its own file's last change (rank-<r>.jsonl), on this host's clock


@dataclass(frozen=True)
class _Said:
    """A rule's labels in a run's findings series, as its finding last had them (a gone one keeps its series: 0)."""

    name: str
    category: str
    severity: str


class LiveMetrics(Collector):
    """The watcher's series: fed on its thread (``stored``, ``judged``, ``publish``), read by scrapes (``collect``).

    Args:
        every_s: least time between two snapshots while serving (``due``); a look's end publishes regardless.
    """

    def __init__(self, *, every_s: float = PUBLISH_S) -> None:
        self._ranks: dict[str, dict[int, _Rank]] = {}
        self._quarantined: Counter[str] = Counter()
        self._found: dict[str, set[str]] = {}  # run → the rules of its last judgement's findings
        self._ever: dict[str, dict[str, _Said]] = {}  # run → every rule it had a finding of, labels as last seen
        self._info: dict[str, dict[str, str]] = {}  # run → zerodoctor_run_info's labels
        self._active: dict[str, float] = {}  # run → when this watch last stored or judged something of it
        self._runs_of: dict[Path, tuple[str, int | None]] = {}  # file → its run, and its rank where it is one's
        self._rank_families: tuple[Metric, ...] = ()  # built again only after a change (``_changed``)
        self._changed = True
        self.passes = 0
        self.every_s, self._next = every_s, 0.0
        self._snapshot: tuple[Metric, ...] = ()

    # -- fed by the watcher's thread --------------------------------------------------

    def stored(self, path: Path, batch: Batch) -> None:
        """A batch read from ``path`` was stored: its ranks' last values, skipped steps and events counted."""
        now = time.time()
        self._changed = True
        if batch.rejected:
            run = self._run_of(path)[0]
            self._quarantined[run] += len(batch.rejected)
            self._active[run] = now
        for e in batch.events:
            if isinstance(e.get("rank"), int):
                self._rank(e["run"], e["rank"]).events += 1
                self._active[e["run"]] = now
        for name, columns in batch.columns.items():
            self._active[name] = now
            self._take_steps(name, columns)

    def passed(self) -> None:
        self.passes += 1

    def judged(self, run: str, found: Iterable[Finding], start: Mapping[str, Any] | None = None) -> None:
        """A run was judged: its findings now (a rule it had before and lacks now is gone: 0), and ``start``, rank
        0's ``run_start``: the scheduler's names for the job, rank 0's host (under Kubernetes, its pod), the stage."""
        if start:
            env = start.get("env") or {}
            facts = {**{label: start.get(label) for label in ("host", "zero_stage", "precision")},
                     **{label: env.get(name) for label, name in SCHEDULER_NAMES.items()}}
            self._info[run] = {label: str(value) for label, value in facts.items() if value not in (None, "")}
        said, self._found[run] = self._ever.setdefault(run, {}), set()
        for f in found:
            said[f.rule] = _Said(f.name, f.category, f.severity)
            self._found[run].add(f.rule)
        self._active[run] = time.time()

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def publish(self, conn: Connection, files: Mapping[Path, int | None]) -> None:
        """Build the series from what was stored and judged, and swap them in for the scrapes to come.

        ``files``: every tailed file and the byte offset read up to (None: an offset that does not count
        bytes on disk, a decoded file's), for the ingest lag and each rank's last write. ``conn`` reads
        which findings a person acknowledged since (``zerodoctor ack`` runs in another process).
        """
        started = time.monotonic()
        lag = 0
        for path, offset in files.items():
            try:
                st = os.stat(path)
            except OSError:
                continue
            if offset is not None:
                lag += max(0, st.st_size - offset)
            run, rank = self._run_of(path)
            kept = self._ranks.get(run, {}).get(rank) if rank is not None else None
            if kept is not None and kept.wrote_t != st.st_mtime:
                kept.wrote_t, self._changed = st.st_mtime, True
        self._forget_idle()
        if self._changed:  # 64 ranks: ~700 samples, most of a snapshot's cost; idle, the last ones stand
            self._rank_families, self._changed = tuple(self._rank_series()), False
        acknowledged = stored_findings.acknowledged_among(conn, list(self._ever))
        families = [*self._finding_series(acknowledged), *self._run_info(), *self._rank_families, *self._health(lag)]
        self._snapshot = tuple(families)  # one assignment: a scrape reads the old tuple or this one, whole
        cost = time.monotonic() - started
        self._next = time.monotonic() + max(self.every_s, 10 * cost)

    # -- read by the HTTP server's thread ---------------------------------------------

    def collect(self) -> Iterator[Metric]:
        return iter(self._snapshot)

    # -- building -------------------------------------------------------------------

    def _rank(self, run: str, rank: int) -> _Rank:
        ranks = self._ranks.setdefault(run, {})
        if rank not in ranks:
            ranks[rank] = _Rank()
        return ranks[rank]

    def _run_of(self, path: Path) -> tuple[str, int | None]:
        if path not in self._runs_of:
            self._runs_of[path] = run_id_for(path), rank_of(path.name)
        return self._runs_of[path]

    def _take_steps(self, run: str, columns: Columns) -> None:
        """Per rank of a batch's step rows: the highest step, each field's value at its highest step that has
        one (a row read late, for an older step, moves nothing), the skipped steps and the rows counted."""
        import numpy as np

        ranks, steps = columns.values["rank"], columns.values["step"]
        for rank in np.unique(ranks).tolist():
            rows = np.flatnonzero(ranks == rank)
            kept = self._rank(run, rank)
            kept.events += len(rows)
            top = int(steps[rows].max())
            kept.step = top if kept.step is None else max(kept.step, top)
            if "overflow" in columns.values:
                overflow = columns.values["overflow"][rows]
                mask = columns.mask("overflow")
                kept.skipped += int(overflow[mask[rows]].sum() if mask is not None else overflow.sum())
            for name in (*_GAUGES, *PHASES):
                if name not in columns.values:
                    continue
                mask = columns.mask(name)
                have = rows if mask is None else rows[mask[rows]]
                if not len(have):
                    continue
                at = have[np.argmax(steps[have])]
                step, value = int(steps[at]), float(columns.values[name][at])
                if name not in kept.values or kept.values[name][0] <= step:
                    kept.values[name] = (step, value)

    def _forget_idle(self) -> None:
        """Past ``RUNS_KEPT`` runs, the series of those this watch heard of longest ago go (Prometheus marks
        them stale): a watch that lives for days over thousands of runs serves a bounded page."""
        if len(self._active) <= RUNS_KEPT:
            return
        for run in sorted(self._active, key=self._active.__getitem__)[:len(self._active) - RUNS_KEPT]:
            for kept in (self._active, self._ranks, self._found, self._ever, self._quarantined, self._info):
                kept.pop(run, None)
            self._changed = True

    def _finding_series(self, acknowledged: set[tuple[str, str]]) -> Iterator[Metric]:
        out = GaugeMetricFamily("zerodoctor_findings", "1 while the run has a finding of the rule, 0 once it is "
                                "gone or acknowledged.", labels=["run", "rule", "name", "category", "severity"])
        for run, said in sorted(self._ever.items()):
            found = self._found.get(run, set())
            for rule, labels in sorted(said.items()):
                stands = rule in found and (run, rule) not in acknowledged
                out.add_metric([run, rule, labels.name, labels.category, labels.severity], 1.0 if stands else 0.0)
        yield out

    def _run_info(self) -> Iterator[Metric]:
        out = InfoMetricFamily("zerodoctor_run", "The run's facts from rank 0's run_start: the Slurm job, array and "
                               "step ids and node list it ran as, its host (a pod's name under Kubernetes), its ZeRO "
                               "stage and precision; join on run to find a run by its job id.", labels=["run"])
        for run, labels in sorted(self._info.items()):
            out.add_metric([run], labels)
        yield out

    def _rank_series(self) -> Iterator[Metric]:
        labels = ["run", "rank"]
        step = GaugeMetricFamily("zerodoctor_rank_last_step", "Highest optimizer step the rank reported.",
                                 labels=labels)
        gauges = {name: GaugeMetricFamily(metric, doc, labels=labels) for name, (metric, doc) in _GAUGES.items()}
        phases = GaugeMetricFamily("zerodoctor_rank_step_phase_seconds", "Time of the rank's last timed step "
                                   "spent in each phase (communication may overlap the others).",
                                   labels=[*labels, "phase"])
        skipped = CounterMetricFamily("zerodoctor_rank_skipped_steps", "Steps the rank skipped on an fp16 "
                                      "overflow, read by this watch since it started.", labels=labels)
        events = CounterMetricFamily("zerodoctor_rank_events_stored", "Events and steps of the rank this watch "
                                     "stored since it started.", labels=labels)
        wrote = GaugeMetricFamily("zerodoctor_rank_last_write_timestamp_seconds", "When the rank's own file last "
                                  "changed (unix seconds, this host's clock): time() minus it is the rank's "
                                  "silence.", labels=labels)
        for run, ranks in sorted(self._ranks.items()):
            for rank, kept in sorted(ranks.items()):
                key = [run, str(rank)]
                events.add_metric(key, kept.events)
                if kept.step is None:
                    continue
                step.add_metric(key, kept.step)
                skipped.add_metric(key, kept.skipped)
                for name, family in gauges.items():
                    if name in kept.values:
                        family.add_metric(key, kept.values[name][1])
                for name, phase in PHASES.items():
                    if name in kept.values:
                        phases.add_metric([*key, phase], kept.values[name][1])
                if kept.wrote_t is not None:
                    wrote.add_metric(key, kept.wrote_t)
        yield from (step, *gauges.values(), phases, skipped, events, wrote)

    def _health(self, lag: int) -> Iterator[Metric]:
        quarantined = CounterMetricFamily("zerodoctor_quarantined_lines", "Lines of the run's files this watch "
                                          "kept aside as malformed since it started.", labels=["run"])
        for run, count in sorted(self._quarantined.items()):
            quarantined.add_metric([run], count)
        yield quarantined
        yield CounterMetricFamily("zerodoctor_ingest_passes", "Passes over every tailed file since this watch "
                                  "started.", value=self.passes)
        yield GaugeMetricFamily("zerodoctor_ingest_lag_bytes", "Bytes on disk in the tailed files not read yet, "
                                "at the last look.", value=lag)
        yield GaugeMetricFamily("zerodoctor_last_look_timestamp_seconds", "When these series were built (unix "
                                "seconds): a watch that stopped looking shows here.", value=time.time())


@dataclass
class Server:
    """``/metrics`` served by ``prometheus_client`` on a thread of its own, from ``LiveMetrics``' snapshot."""

    address: tuple[str, int]
    httpd: WSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(metrics: LiveMetrics, host: str, port: int) -> Server:
    """Start serving; raises ``OSError`` where the address cannot be bound (in use, not this host's)."""
    from prometheus_client import ProcessCollector, start_http_server

    registry = CollectorRegistry()
    registry.register(metrics)
    ProcessCollector(registry=registry)  # the watch's own CPU and memory: what serving costs shows beside it
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    bound: Any = httpd.server_address
    return Server((str(bound[0]), int(bound[1])), httpd, thread)


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6, ``:9400`` for every interface) → (host, port); ValueError if not."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--metrics {text}: expected HOST:PORT, e.g. 127.0.0.1:9400")
    host = host.removeprefix("[").removesuffix("]") or "0.0.0.0"
    return host, int(port)
