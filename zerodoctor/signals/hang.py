"""Signals, hangs: heartbeats, steps and collective timeouts → is the run stuck, which ranks, waiting in what.

Live (and after the fact, ``now`` being the run's last event): when no step has completed for
``window`` seconds, each rank's last heartbeat says where it is. A rank outside the engine, or
in an earlier collective, while the others wait in one is the stuck rank; every rank in the same
collective is the collective or the network; no rank waiting (evaluation, a checkpoint save, a
slow loader) is only busy; a rank whose heartbeats stopped is dead or frozen in native code.
When steps resume after such a gap, the gap is kept as a closed episode with how long it lasted.

When one rank never enters a collective, every other rank waits in it until the watchdog's
timeout and reports the same SeqNum; the rank that reports an older SeqNum, or none at all,
is the one to look at (``hang.timeout_verdict``: ranks behind, ranks silent, or every rank that logged in the
same collective; for a new group's store-based barrier, more processes than the group holds, or fewer). The flight
recorder's dumps say the same per process group. Exit codes come from ``run_end`` (the probe, or torchrun's
summary).
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from operator import sub
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.messages import crashes
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import DUMPS, FLIGHT_RECORDER, HEARTBEATS
from zerodoctor.signals.base import Signal, last_known, shown_by, verdict

# The promise: a stuck run is named within this long of its last progress. The environment may
# shorten it (tests of long evaluations and saves do; the 60 s default has its own real-run test).
HANG_WITHIN_S = float(os.environ.get("ZERODOCTOR_HANG_WITHIN_S", "60"))
NAMING_LATENCY_S = 5.0  # what naming it takes once judged stuck: a heartbeat interval and the watch's timer
STEP_TIMES = 10.0  # a run whose steps take minutes is stuck after this many median steps, not 60 s
SILENT_AFTER_S = 30.0  # six missed heartbeats: the writer thread itself stopped
# A wait that began two heartbeats ago or less proves nothing yet: the rank it seems to wait for may
# have moved on since its own last heartbeat (seen: one rank's beat still in save_checkpoint while
# the other, 0 s into the next step's all_reduce, was called the waiter).
WAITED_S = 10.0
BUSY = ("save_checkpoint", "load_checkpoint", "eval")  # legitimately long, on every rank at once
RUNS_KEPT = 8  # recent phase runs kept per rank
LONG_KEPT = 16  # phase runs that outlasted the shortest window, kept apart: what a stall that ended was
EPISODES_KEPT = 16
MEDIAN_OF = 101
# A rank's state, as a record (rules/phrases.yaml's rank-state words it)
STATE = "rank, phase, since_t, for_s (seconds in that phase); op, group, seq, outer in a collective"

_flight_recorder = shown_by(DUMPS, switch=FLIGHT_RECORDER)
_heartbeats = shown_by(HEARTBEATS)

READS = ("run.world_size",)

# What each kind of stall is given with (classify's records): its message may read them outside a clause
STALL_COMES_WITH = {"rank": ("hang.stalled_s", "hang.stuck_states", "hang.waiting_states"),
                    "silent": ("hang.stalled_s", "hang.stuck_states", "hang.waiting_states"),
                    "collective": ("hang.stalled_s", "hang.waiting_states"),
                    "busy": ("hang.stalled_s", "hang.busy_states")}
_RECOVERED = ("hang.recovered_lasted_s", "hang.recovered_step", "hang.recovered_waiting_states")
RECOVERED_COMES_WITH = {"rank": (*_RECOVERED, "hang.recovered_stuck_states"), "collective": _RECOVERED,
                        "silent": (*_RECOVERED, "hang.recovered_stuck_states")}

SIGNALS = [
    Signal("hang.collective_timeouts", "events", "collective operations the NCCL watchdog timed out (one per rank)"),
    Signal("hang.collective", "name", "the collective that timed out (OpType of the most reported SeqNum)"),
    Signal("hang.seq", "SeqNum", "sequence number of the timed-out collective on its process group"),
    Signal("hang.timeout_s", "s", "the process group's timeout"),
    Signal("hang.timeout_ranks", "ranks", "ranks whose watchdog reported the timeout"),
    Signal("hang.suspect_ranks", "ranks", "ranks stuck on an older collective, or that reported none while others did"),
    Signal("hang.behind_ranks", "ranks", "ranks that timed out on an older collective (a smaller SeqNum)"),
    Signal("hang.silent_ranks", "ranks", "ranks of the job that reported no timeout while others did"),
    Signal("hang.failed_ranks", "ranks", "ranks that failed: exited non-zero, or by a signal"),
    Signal("hang.barrier_world_size", "ranks", "processes a new process group's store-based barrier waited for "
                                               "(world_size)"),
    Signal("hang.barrier_joined", "ranks", "processes the store-based barrier counted (worker_count)"),
    Signal("hang.timed_out", "records", "the collective that timed out: op (its OpType), seq (its SeqNum), timeout_s "
           "(the process group's timeout), each where the log names it"),
    verdict("hang.timeout_verdict", "which rank the timed-out ranks waited for: ranks behind (an older SeqNum), "
            "ranks silent (none while the others reported one), or every rank that logged in the same collective; a "
            "new group's store-based barrier that more processes reached than the group holds (a shared store), or "
            "fewer", ("behind", "silent", "same_collective", "store_crowded", "store_short"),
            {"behind": ("hang.timeout_ranks", "hang.behind_ranks"),
             "silent": ("hang.timeout_ranks", "hang.silent_ranks"),
             "same_collective": ("hang.timeout_ranks",),
             "store_crowded": ("hang.timeout_ranks", "hang.barrier_joined", "hang.barrier_world_size"),
             "store_short": ("hang.timeout_ranks", "hang.barrier_joined", "hang.barrier_world_size")}),
    _heartbeats("hang.window_s", "s", f"no step for this long is a stall: max({HANG_WITHIN_S:g} s, {STEP_TIMES:g} "
                                      f"median steps) less {NAMING_LATENCY_S:g} s to name it"),
    _heartbeats("hang.stalled_s", "s", "seconds since the last completed step, at the judgement's now"),
    _heartbeats("hang.in_progress", "bool", "the run still runs: its ranks send heartbeats, one has not ended, and "
                                            "not all went quiet (a live watch judges it again with no new events)"),
    verdict("hang.kind", "none | rank (stuck while others wait) | collective (all wait in it) | busy (no rank "
            "waits) | silent (some ranks' heartbeats stopped) | gone (all did)",
            ("none", "rank", "collective", "busy", "silent", "gone"), STALL_COMES_WITH, shown_by=(HEARTBEATS,)),
    Signal("hang.last_step", "step", "last step completed on every rank before the stall"),
    Signal("hang.stuck_ranks", "ranks", "the ranks the others wait for, or whose heartbeats stopped"),
    Signal("hang.stuck_states", "records", f"where each stuck rank is and since when ({STATE}); a silent rank's "
                                           "quiet_s says how long its heartbeats have stopped, its state is its last"),
    Signal("hang.waiting_states", "records", f"where the other ranks are, and since when ({STATE})"),
    Signal("hang.busy_states", "records", f"what each rank does while no step completes ({STATE})"),
    _heartbeats("hang.recovered", "episodes", "stalls (a rank stuck, a collective, silence) that ended with steps "
                                              "resuming"),
    _heartbeats("hang.recovered_lasted_s", "s", "how long the last recovered stall lasted"),
    _heartbeats("hang.recovered_step", "step", "the step that ended the last recovered stall"),
    verdict("hang.recovered_kind", "kind of the last recovered stall: rank | collective | silent, as hang.kind",
            ("rank", "collective", "silent"), RECOVERED_COMES_WITH, shown_by=(HEARTBEATS,)),
    _heartbeats("hang.recovered_stuck_states", "records", f"where the last recovered stall's stuck ranks were, at "
                                                          f"its end ({STATE}; quiet_s as above)"),
    _heartbeats("hang.recovered_waiting_states", "records", f"where the other ranks were, at its end ({STATE})"),
    _heartbeats("hang.recovered_ranks", "ranks", "the ranks stuck in the last recovered stall"),
    _flight_recorder("hang.fr_behind", "ranks", "how many ranks' flight recorder dumps place them behind the others "
                                                "on a group"),
    _flight_recorder("hang.fr_behind_ranks", "ranks", "the ranks the flight recorder dumps place behind"),
    _flight_recorder("hang.fr_lags", "records", "one per rank behind, on the group whose furthest member moved last: "
                                                "rank, group, desc (the group's description), seq (its last "
                                                "recorded or pg_status's last enqueued collective) and op (where "
                                                "recorded), head (the group's furthest seq), groups (how many "
                                                "groups it is behind on, when more than one) and beat: its last "
                                                "heartbeat's state, when it has one"),
    Signal("hang.log_stalled_s", "s", "a console log with clock times: seconds it went on after its last step's "
                                      "line, with no error and no end (0: less than a window)",
           label="time the log went on past the last step"),
    Signal("hang.log_last_step", "step", "the last step logged before the log went on without steps"),
]

STEP_FIELDS = {"step_time_s": "max"}
FOLD_EVENTS = ("heartbeat",)


@dataclass
class Fold(runview.Fold):
    """Per rank, its last few phase runs (consecutive heartbeats in one phase); recent step times; closed stalls."""

    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # rank → runs, oldest first
    long: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # rank → its long runs, oldest first
    step_times: list[float] = field(default_factory=list)
    progress_t: float | None = None  # when the last step completed on every rank
    last_step: int | None = None
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def event(self, event: dict[str, Any]) -> None:
        """One heartbeat: extends the rank's current phase run, or starts the next one.

        ``diagnose`` folds a whole file's heartbeats before its steps are merged, so a stall that
        ended long before is found in ``long``, which only phases longer than a window enter.
        """
        rank = str(event["rank"])
        run = _extend(self.runs.setdefault(rank, []), event, RUNS_KEPT)
        if run["t"] - (run["since_t"] or run["t"]) >= HANG_WITHIN_S - NAMING_LATENCY_S:
            _extend(self.long.setdefault(rank, []), run, LONG_KEPT)

    def add_steps(self, block: Steps, view: RunView) -> None:
        """Steps completed: a gap of a window or more since the last progress was a stall that ended.

        A window is never under ``HANG_WITHIN_S - NAMING_LATENCY_S``, so only steps that far from the
        step before them are looked at one by one (a healthy block has none).
        """
        steps, ts, times = block.columns["step"], block.columns["t"], block.columns["step_time_s"]
        least = HANG_WITHIN_S - NAMING_LATENCY_S
        gaps = [0] if self.progress_t is not None and ts[0] - self.progress_t >= least else []
        if len(ts) > 1 and max(map(sub, ts[1:], ts)) >= least:
            gaps += [j for j in range(1, len(ts)) if ts[j] - ts[j - 1] >= least]
        progress, seen = self.progress_t, 0  # progress: the latest t of the steps before ``seen``
        for j in gaps:
            if j > seen:
                latest = max(ts[seen:j])
                progress = latest if progress is None else max(progress, latest)
                seen = j
            recent = (self.step_times + [times[i] for i in last_known(times[:j + 1], MEDIAN_OF)])[-MEDIAN_OF:]
            if ts[j] - progress >= self.window(recent):
                self.progress_t = progress
                self._close(ts[j], steps[j])
        if known := [times[i] for i in last_known(times, MEDIAN_OF)]:
            self.step_times = (self.step_times + known)[-MEDIAN_OF:]
        latest = max(ts)
        self.progress_t = latest if self.progress_t is None else max(self.progress_t, latest)
        self.last_step = steps[-1]

    def window(self, step_times: list[float] | None = None) -> float:
        """No step for this long is a stall, given the recent step times (the fold's own by default)."""
        recent = self.step_times if step_times is None else step_times
        median = statistics.median(recent) if recent else 0.0
        return max(HANG_WITHIN_S, STEP_TIMES * median) - NAMING_LATENCY_S

    def _close(self, end: float, step: int) -> None:
        """Steps resumed at ``step`` after a stall: keep what it was, judged at its end from the runs inside it."""
        start = self.progress_t
        states = {rank: _during([*self.long.get(rank, []), *runs], start, end) for rank, runs in self.runs.items()}
        known = {r: s for r, s in states.items() if s is not None}
        verdict = classify(known, dict.fromkeys(known, end))
        if verdict["kind"] in ("rank", "collective", "silent"):
            self.episodes.append({"from_t": start, "to_t": end, "step": step, **verdict})
            del self.episodes[:-EPISODES_KEPT]


def _extend(runs: list[dict[str, Any]], beat: dict[str, Any], kept: int) -> dict[str, Any]:
    """Add a heartbeat (or a run) to ``runs``: the same phase run goes on, another one starts."""
    key = (beat.get("phase"), beat.get("since_t"), beat.get("seq"))
    for run in reversed(runs[-2:]):  # one file per rank is in order; a re-read after rotation may not be
        if (run["phase"], run["since_t"], run["seq"]) == key:
            run["t"] = max(run["t"], beat["t"])
            return run
    run = {k: beat.get(k) for k in ("t", "phase", "since_t", "outer", "op", "group", "seq", "last_step")}
    runs.append(run)
    runs.sort(key=lambda r: r["t"])
    del runs[:-kept]
    return run


def _during(runs: list[dict[str, Any]], start: float, end: float) -> dict[str, Any] | None:
    """The rank's longest phase inside [start, end]: where it spent the stall."""
    inside = [r for r in runs if r["t"] >= start and (r["since_t"] or r["t"]) <= end]
    if not inside:
        return None
    return max(inside, key=lambda r: min(r["t"], end) - max(r["since_t"] or r["t"], start))


def classify(states: dict[str, dict[str, Any]], nows: dict[str, float]) -> dict[str, Any]:
    """What a stall is, from each rank's state (its last phase run) at its own now (``RunView.now_of``:
    ranks on nodes whose clocks disagree are each read against their own); where each rank is, as records."""
    ranks = sorted(map(int, states))
    silent = [r for r in ranks if nows[str(r)] - states[str(r)]["t"] >= SILENT_AFTER_S]
    if silent and len(silent) == len(ranks):  # the whole job went quiet: killed with its wrapper, or ended unseen
        return {"kind": "gone", "ranks": []}
    if silent:
        return {"kind": "silent", "ranks": silent,
                "stuck": [{**_state(states[str(r)], nows[str(r)], r), "quiet_s": nows[str(r)] - states[str(r)]["t"]}
                          for r in silent],
                "waiting": _states(states, [r for r in ranks if r not in silent], nows)}
    waits = Counter((s["group"], s["seq"]) for r, s in states.items()
                    if s["phase"] == "collective" and nows[r] - (s["since_t"] or s["t"]) >= WAITED_S)
    if not waits or all(s["phase"] in BUSY or s.get("outer") in BUSY for s in states.values()):
        return {"kind": "busy", "ranks": [], "busy": _states(states, ranks, nows)}
    # the collective most ranks wait in (the later one on a tie): whoever is elsewhere holds it up
    head = max(waits, key=lambda k: (waits[k], k[1] or 0))
    behind = [r for r in ranks if states[str(r)]["phase"] != "collective"
              or (states[str(r)]["group"], states[str(r)]["seq"]) != head]
    if not behind:
        return {"kind": "collective", "ranks": ranks, "waiting": _states(states, ranks, nows)}
    return {"kind": "rank", "ranks": behind, "stuck": _states(states, behind, nows),
            "waiting": _states(states, [r for r in ranks if r not in behind], nows)}


def _state(run: dict[str, Any], now: float, rank: int | None = None) -> dict[str, Any]:
    """A phase run as the record rules word (rules/phrases.yaml, rank-state): what, since when, for how long."""
    since = run.get("since_t") or run["t"]
    where = {"phase": run["phase"], "since_t": since, "for_s": now - since}
    if run["phase"] == "collective":
        where.update({k: run.get(k) for k in ("op", "group", "seq", "outer") if run.get(k) is not None})
    return where if rank is None else {"rank": rank, **where}


def _states(states: dict[str, dict[str, Any]], ranks: list[int], nows: dict[str, float]) -> list[dict[str, Any]]:
    return [_state(states[str(r)], nows[str(r)], r) for r in ranks]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out.update(_stall(view))
    out.update(_log_stall(view))
    out.update(_flight_recorder(view))
    out.update(_timeouts(view, values))
    if "hang.stalled_s" in out:  # heartbeats, a rank not ended: silence from here on is a stall to name
        out["hang.in_progress"] = out["hang.kind"] != "gone"
    return out


def _stall(view: RunView) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    if not fold.runs or view.now is None:
        return {}
    out: dict[str, Any] = {"hang.window_s": fold.window(), "hang.recovered": len(fold.episodes)}
    if fold.episodes:
        last = fold.episodes[-1]
        out.update({"hang.recovered_lasted_s": last["to_t"] - last["from_t"],
                    "hang.recovered_step": last["step"], "hang.recovered_ranks": last["ranks"],
                    "hang.recovered_kind": last["kind"], "hang.recovered_stuck_states": last.get("stuck"),
                    "hang.recovered_waiting_states": last.get("waiting")})
    starts = [e["t"] for e in view.starts]
    progress = fold.progress_t if fold.progress_t is not None else max(starts, default=None)
    ended = {e["rank"] for e in view.events.get("run_end", [])}
    if progress is None or ended >= set(map(int, fold.runs)):
        out["hang.kind"] = "none"
        return out
    stalled = _since_progress(view, fold, progress)
    out["hang.stalled_s"] = stalled
    if stalled < fold.window():
        out["hang.kind"] = "none"
        return out
    states = {r: runs[-1] for r, runs in fold.runs.items() if int(r) not in ended}
    verdict = classify(states, {r: _rank_now(view, fold, int(r)) for r in states})
    out.update({"hang.kind": verdict["kind"], "hang.stuck_ranks": verdict["ranks"] or None,
                "hang.last_step": fold.last_step, "hang.stuck_states": verdict.get("stuck"),
                "hang.waiting_states": verdict.get("waiting"), "hang.busy_states": verdict.get("busy")})
    return out


def _rank_now(view: RunView, fold: Fold, rank: int) -> float:
    """The judgement's now on ``rank``'s clock (``RunView.now_of``), from its last step or heartbeat."""
    last = [t for t in ((view.per_rank.get(rank) or {}).get("last_t"),
                        *(run["t"] for run in fold.runs.get(str(rank), [])[-1:])) if t is not None]
    return view.now_of(rank, max(last)) if last else view.now


def _since_progress(view: RunView, fold: Fold, progress: float) -> float:
    """Seconds since a step last completed: live, each rank with a file of its own against its own clock
    (the least of them), since the merged steps' times mix the ranks' clocks; else the run's now."""
    ranks = [r for r in view.quiet if (view.per_rank.get(r) or {}).get("last_t") is not None]
    if not ranks:
        return view.now - progress
    return min(_rank_now(view, fold, r) - view.per_rank[r]["last_t"] for r in ranks)


def _log_stall(view: RunView) -> dict[str, Any]:
    """A console log whose lines show the clock: no step for a window while it went on (``log_clock``,
    sources/text.py), and no error of the run and no end of it closed the log (a stop request from outside,
    torchrun's SignalException after scancel or Ctrl-C, is how a hung job usually ends: not an error).

    Only lines stamped by the log itself count, at both ends: a step on an unstamped line has no time.
    A log cut mid-run shows no later clock, so it is never a stall here; a run that crashed after a
    pause is the crash's (the fatal error names it).
    """
    clocks = [e for e in view.events.get("log", []) if e.get("what") == "log_clock"]
    fold: Fold = view.fold(__name__)
    if not clocks or fold.runs:  # heartbeats: the probe's own judgement (_stall) holds
        return {}
    ended = view.events.get("run_end") or any(e.get("what") == "fatal" for e in view.events.get("log", [])) or any(
        crashes.is_fault(e.get("type") or "") for e in view.events.get("exception", []))  # a stop request is no end
    went_on = clocks[-1]
    stalled = went_on["t"] - went_on["data"]["progress_t"]
    stalled = 0.0 if ended or stalled < fold.window() else stalled
    return {"hang.log_stalled_s": stalled, "hang.log_last_step": went_on["data"].get("step")}


def _flight_recorder(view: RunView) -> dict[str, Any]:
    """Per process group, the member ranks whose place in it is behind the group's furthest member's.

    A rank's place is the ``seq`` its dump gives (``sources/flight_recorder.py``: its last recorded
    collective or ``pg_status``'s last enqueued one, whichever is later). Where any rank's dump shows
    p2p ops on a group, ``pg_status`` may count those, so there only recorded collectives place a rank.
    A group is compared only among its members as the dumps' ``pg_config`` lists them: a ``pg_id`` is
    each rank's own count of the groups it joined, so rank 0's group 5 and rank 12's group 5 are
    different groups (NVRx's 16-rank Megatron dumps: compared by ``pg_id``, all 16 ranks were "behind").
    A place a dump knows only by ``pg_id`` takes the name other ranks' entries give that ``pg_id`` only
    where exactly one such name is a group the rank is a member of and has no other ``pg_id`` for;
    where no dump lists any membership (gloo's empty ``pg_config``) ``pg_id``s are compared as they are.
    Each rank behind is given once: on the group whose furthest member moved last (the collective the
    others wait in), with how many groups it is behind on.
    """
    dumps = [(e["rank"], e["t"], e.get("data") or {}) for e in view.events.get("log", [])
             if e.get("what") == "flight_recorder"]
    if not dumps:
        return {}
    members: dict[str, set[int]] = {}
    named: dict[Any, set[str]] = {}  # pg_id -> the names ranks' own entries give it
    own: dict[int, set[str]] = {}  # rank -> the names its own dump gives
    descs: dict[str, str] = {}
    for rank, _, d in dumps:
        if d.get("group") is not None:
            members.setdefault(str(d["group"]), set()).update(d.get("members") or ())
            if d.get("desc") not in (None, "", "undefined"):  # torch writes "undefined" for a group given none
                descs.setdefault(str(d["group"]), str(d["desc"]))
            own.setdefault(rank, set()).add(str(d["group"]))
            if d.get("pg_id") is not None:
                named.setdefault(d["pg_id"], set()).add(str(d["group"]))
    known = any(members.values())

    def group_of(rank: int, d: dict[str, Any]) -> str | None:
        if d.get("group") is not None:
            return str(d["group"])
        fits = {name for name in named.get(d.get("pg_id"), ()) if name not in own.get(rank, ())
                and (not members.get(name) or rank in members[name])}
        if len(fits) == 1:
            return fits.pop()
        return None if known or d.get("pg_id") is None else str(d["pg_id"])

    by_group: dict[str, list[tuple[int, float, dict[str, Any]]]] = {}
    for rank, t, d in dumps:
        group = group_of(rank, d)
        if group is not None and (not members.get(group) or rank in members[group]):
            by_group.setdefault(group, []).append((rank, t, d))
    lags: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    beats = view.fold(__name__).runs
    for group, ranks in sorted(by_group.items()):
        p2p = any(d.get("p2p") for _, _, d in ranks)
        places: dict[int, tuple[int, float, dict[str, Any]]] = {}
        for rank, t, d in ranks:  # a rank dumped twice: its later place
            seq = d.get("recorded_seq") if p2p else d.get("seq")
            if isinstance(seq, int) and seq >= places.get(rank, (-1, t, d))[0]:
                places[rank] = (seq, t, d)
        head = max((seq for seq, _, _ in places.values()), default=None)
        # when the head was recorded (an entry's time_created_ns; a pg_status count has no time, its file's mtime none)
        moved = max((t for seq, t, d in places.values() if seq == head and d.get("recorded_seq") == seq), default=0.0)
        for rank, (seq, _, d) in sorted(places.items()):
            if seq < head:
                beat = beats.get(str(rank))
                op = d.get("op") if d.get("recorded_seq", seq) == seq else None  # no entry: pg_status names no op
                lags.setdefault(rank, []).append((moved, {
                    "rank": rank, "group": group, "desc": descs.get(group), "seq": seq, "op": op, "head": head,
                    "beat": _state(beat[-1], beat[-1]["t"]) if beat else None}))
    shown = []
    for rank, behind in sorted(lags.items()):
        _, lag = max(behind, key=lambda place: place[0])
        shown.append({**lag, "groups": len(behind) if len(behind) > 1 else None})
    return {"hang.fr_behind": len(lags), "hang.fr_behind_ranks": sorted(lags) or None, "hang.fr_lags": shown or None}


def _timeouts(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    timeouts = [e for e in view.events.get("log", []) if e.get("what") == "collective_timeout"]
    # a rank that named its collective also printed the generic epitaph after it: one timeout, not two
    named = {e["rank"] for e in timeouts if (e.get("data") or {}).get("seq") is not None}
    timeouts = [e for e in timeouts if e["rank"] not in named or (e.get("data") or {}).get("seq") is not None]
    out: dict[str, Any] = {"hang.collective_timeouts": len(timeouts)}
    ends = view.events.get("run_end", [])
    failed = sorted({e["rank"] for e in ends if e.get("exit_code") or e.get("signal")})
    out["hang.failed_ranks"] = failed or None
    if not timeouts:
        return out
    data = [(e["rank"], e.get("data") or {}) for e in timeouts]
    seq_votes = Counter((d.get("seq"), d.get("op")) for _, d in data)
    # The collective most ranks wait in; on a tie the later one: a rank waiting in SeqNum N+1 finished N, so one
    # still in N is behind it (LlamaFactory#2902's rank 0 in 1516, rank 1 in 1517), not in "the same collective"
    (seq, op), _ = max(seq_votes.items(), key=lambda vote: (vote[1], -1 if vote[0][0] is None else vote[0][0]))
    ranks = sorted({r for r, _ in data})
    out.update({"hang.collective": op, "hang.seq": seq, "hang.timeout_ranks": ranks})
    out["hang.timeout_s"] = next((d["timeout_s"] for _, d in data if d.get("timeout_s") is not None), None)
    barrier = next((d for _, d in data if d.get("op") == "store_based_barrier" and "joined" in d), None)
    if barrier is not None:  # more processes than the group holds is another job on the same store, not a straggler
        out["hang.barrier_world_size"], out["hang.barrier_joined"] = barrier["world_size"], barrier["joined"]
    behind = sorted({r for r, d in data if seq is not None and d.get("seq") is not None and d["seq"] < seq})
    world = values.get("run.world_size")
    # A rank with a file of its own that logged no timeout did not wait in the collective; a console log is an
    # excerpt (one node's output, a paste of rank 1's lines), where a rank it does not show said nothing to it.
    complete = not view.from_console_log
    silent = (sorted(set(range(world)) - set(ranks))
              if complete and isinstance(world, int) and world > len(ranks) else [])
    suspects = sorted(set(behind) | set(silent))
    out["hang.suspect_ranks"] = suspects or None
    out["hang.behind_ranks"], out["hang.silent_ranks"] = behind or None, silent or None
    out["hang.timed_out"] = {k: v for k, v in (("op", op), ("seq", seq), ("timeout_s", out["hang.timeout_s"]))
                             if v is not None}
    if barrier is not None:
        out["hang.timeout_verdict"] = "store_crowded" if barrier["joined"] > barrier["world_size"] else "store_short"
    else:
        out["hang.timeout_verdict"] = "behind" if behind else "silent" if silent else "same_collective"
    return out
