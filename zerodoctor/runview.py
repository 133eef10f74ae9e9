"""Run view: one run's events → the bounded view its signals read, kept up to date batch by batch.

Signal modules declare what they read (``STEP_FIELDS`` with a merge across ranks,
``RANK_FIELDS`` with an aggregate over a rank's steps, ``FOLD_EVENTS``) and fold it
(``Fold``). The view merges the ranks of each optimizer step as their lines arrive, hands
every finished step once, in step order, to each module's fold, and keeps per-rank totals
and the rare event kinds (run_start, oom, exception, …) as they are. Nothing in it grows
with the number of steps, so a judgement costs the same on day 3 as in minute 1.

A step is finished when every rank that writes steps has reported it or a later one (or
when the input ends). A rank's row for a step already handed on arrives late: it counts in
the rank's totals but not in the merged series (``late_rows`` says how often).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import Any, Iterable, Literal

from sqlalchemy import Connection

from zerodoctor import __version__
from zerodoctor.store import runs as stored

WINDOW = 1024  # steps a per-step signal keeps: the "now" of a days-long run, and the scope of `for: N steps`
MAX_PENDING = 4096  # unfinished steps held for ranks lagging behind; beyond it the oldest are handed on
_RANK_FACTS = ("steps", "first_step", "last_step", "last_t")

Merge = Literal["min", "max", "sum", "mean"]  # STEP_FIELDS: across the ranks of one step
Aggregate = Literal["sum", "max", "min"]  # RANK_FIELDS: over one rank's steps


@dataclass
class Fold:
    """Bounded state a signal module keeps up to date, one rank-merged step at a time.

    Subclasses are dataclasses whose fields are JSON values (numbers, strings, lists, dicts
    with string keys), so ``dump``/``load`` round-trip them through the store.
    """

    def step(self, row: dict[str, Any], view: RunView) -> None:
        """One optimizer step merged over its ranks: ``step``, ``t`` and the declared ``STEP_FIELDS``.

        ``view`` has the run's facts known so far (its run_start and config come first).
        """

    def event(self, event: dict[str, Any]) -> None:
        """One event of a kind the module lists in ``FOLD_EVENTS``."""

    def dump(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def load(cls, state: dict[str, Any]) -> Fold:
        return cls(**state)


class ReadsConflict(ValueError):
    """Two signal modules declare one name with different meanings."""


@dataclass(frozen=True)
class Reads:
    """What the signal modules read, merged: the one place the view learns its shape."""

    step_fields: dict[str, str]
    rank_fields: dict[str, tuple[str, str]]
    fold_events: dict[str, tuple[str, ...]]  # kind → modules folding it
    folds: dict[str, type[Fold]]

    @classmethod
    def of(cls, modules: Iterable[ModuleType]) -> Reads:
        step_fields: dict[str, str] = {}
        rank_fields: dict[str, tuple[str, str]] = {}
        fold_events: dict[str, tuple[str, ...]] = {}
        folds: dict[str, type[Fold]] = {}
        owner: dict[str, str] = {}
        for module in modules:
            name = module.__name__
            for field, merge in getattr(module, "STEP_FIELDS", {}).items():
                _claim(step_fields, field, merge, owner, f"step field {field}", name)
            for out, spec in getattr(module, "RANK_FIELDS", {}).items():
                if out in _RANK_FACTS:
                    raise ReadsConflict(f"{name}: per-rank name {out!r} is one the view always keeps")
                _claim(rank_fields, out, tuple(spec), owner, f"per-rank {out}", name)
            for kind in getattr(module, "FOLD_EVENTS", ()):
                fold_events[kind] = (*fold_events.get(kind, ()), name)
            fold = getattr(module, "Fold", None)
            if fold is not None:
                folds[name] = fold
        return cls(step_fields, rank_fields, fold_events, folds)

    # The hot path's groupings (``_add_step``), computed once.
    @cached_property
    def min_fields(self) -> tuple[str, ...]:
        return tuple(f for f, m in self.step_fields.items() if m == "min")

    @cached_property
    def max_fields(self) -> tuple[str, ...]:
        return tuple(f for f, m in self.step_fields.items() if m == "max")

    @cached_property
    def add_fields(self) -> tuple[str, ...]:
        return tuple(f for f, m in self.step_fields.items() if m in ("sum", "mean"))

    @cached_property
    def mean_fields(self) -> tuple[str, ...]:
        return tuple(f for f, m in self.step_fields.items() if m == "mean")

    @cached_property
    def rank_specs(self) -> tuple[tuple[str, str, str], ...]:
        return tuple((out, field, agg) for out, (field, agg) in self.rank_fields.items())

    @cached_property
    def nonfinite(self) -> bool:
        """Some module reads a non-finite flag: NaN became NULL at ingest, its bit is in ``nonfinite``."""
        read = {*self.step_fields, *(field for field, _ in self.rank_fields.values())}
        return bool(read & {"loss_nonfinite", "grad_nonfinite"})

    @property
    def version(self) -> str:
        """Names the code a saved state came from: any change to what is folded rebuilds it."""
        shape = [__version__, WINDOW, sorted(self.step_fields.items()), sorted(self.rank_fields.items()),
                 sorted(self.fold_events), {m: [f.name for f in dataclasses.fields(c)] for m, c in self.folds.items()}]
        return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _claim(table: dict, key: str, value: Any, owner: dict[str, str], what: str, module: str) -> None:
    if key in table and table[key] != value:
        raise ReadsConflict(f"{module}: {what} declared as {value!r}, but {owner[what]} declared {table[key]!r}")
    table[key] = value
    owner.setdefault(what, module)


class RunView:
    """What signals know of one run: folds, per-rank totals, rare events, facts of the run."""

    def __init__(self, run_id: int, name: str, reads: Reads) -> None:
        self.run_id, self.name, self.reads = run_id, name, reads
        self.folds: dict[str, Fold] = {m: cls() for m, cls in reads.folds.items()}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.formats: dict[str, str] = {}
        self.per_rank: dict[int, dict[str, Any]] = {}
        self.released_through: int | None = None
        self.late_rows = 0
        self.last_t: float | None = None
        self.now: float | None = None  # set for each judgement: wall clock live, last_t after the fact
        self.generation = 0  # saves of this run's state; another writer's save makes ours stale
        self._pending: dict[int, dict[str, Any]] = {}

    # -- what signals read ------------------------------------------------------------

    @property
    def starts(self) -> list[dict[str, Any]]:
        return self.events.get("run_start", [])

    def first_start(self) -> dict[str, Any]:
        """rank 0's run_start (or the lowest rank's): config and facts shared by all ranks."""
        return min(self.starts, key=lambda e: e["rank"], default={})

    @property
    def config(self) -> dict[str, Any]:
        return self.first_start().get("config") or {}

    @property
    def world_size_stated(self) -> int | None:
        """The world size the run itself stated (run_start, or a console message such as the batch assertion)."""
        stated = self.first_start().get("world_size")
        if stated:
            return stated
        for log in self.events.get("log", []):
            world = (log.get("data") or {}).get("world_size")
            if isinstance(world, int) and not isinstance(world, bool) and world > 0:
                return world
        return None

    @property
    def from_console_log(self) -> bool:
        """Read from console logs only: what DeepSpeed chose to print, not the probe's every step."""
        return bool(self.formats) and "jsonl" not in self.formats.values()

    def fold(self, module: str) -> Any:
        return self.folds[module]

    def ranks(self) -> list[int]:
        seen = set(self.per_rank)
        for kind_events in self.events.values():
            seen.update(e["rank"] for e in kind_events)
        return sorted(seen)

    # -- ingest side ------------------------------------------------------------------

    def add(self, events: Iterable[dict[str, Any]], path: str, fmt: str) -> None:
        """Take in this run's events of one stored batch (step rows as the store holds them)."""
        self.formats[path] = fmt
        last_t = self.last_t
        for e in events:
            t = e["t"]
            if last_t is None or t > last_t:
                last_t = t
            if e["kind"] == "step":
                self._add_step(e)
            else:
                self._add_event(e)
        self.last_t = last_t

    def _add_event(self, e: dict[str, Any]) -> None:
        modules = self.reads.fold_events.get(e["kind"])
        if modules is None:
            self.events.setdefault(e["kind"], []).append(_public(e))
        else:
            for module in modules:
                self.folds[module].event(e)

    def _add_step(self, e: dict[str, Any]) -> None:
        """One rank's step row: into the rank's totals, and merged into its step until that is finished.

        The hot path of ingest (one call per rank and step): plain dict work, fields grouped by merge.
        """
        reads, rank, step, t = self.reads, e["rank"], e["step"], e["t"]
        if reads.nonfinite:
            bits = e.get("nonfinite") or 0
            e["loss_nonfinite"], e["grad_nonfinite"] = bits & 1, bits & 2
        totals = self.per_rank.get(rank)
        if totals is None:
            totals = self.per_rank[rank] = {"steps": 0, "first_step": step, "last_step": step, "last_t": t}
        totals["steps"] += 1
        if step < totals["first_step"]:
            totals["first_step"] = step
        if step > totals["last_step"]:
            totals["last_step"] = step
        if t > totals["last_t"]:
            totals["last_t"] = t
        for out, field, agg in reads.rank_specs:
            value = e.get(field)
            if value is not None:
                old = totals.get(out)
                totals[out] = value if old is None else (old + value if agg == "sum" else
                                                         max(old, value) if agg == "max" else min(old, value))
        if self.released_through is not None and step <= self.released_through:
            self.late_rows += 1
            return
        merged = self._pending.get(step)
        if merged is None:
            merged = self._pending[step] = {"t": t, "n": {}}
        elif t > merged["t"]:
            merged["t"] = t
        for field in reads.min_fields:
            value = e.get(field)
            if value is not None:
                old = merged.get(field)
                if old is None or value < old:
                    merged[field] = value
        for field in reads.max_fields:
            value = e.get(field)
            if value is not None:
                old = merged.get(field)
                if old is None or value > old:
                    merged[field] = value
        if reads.add_fields:
            counts = merged["n"]
            for field in reads.add_fields:
                value = e.get(field)
                if value is not None:
                    merged[field] = merged.get(field, 0) + value
                    counts[field] = counts.get(field, 0) + 1

    def settle(self, *, final: bool = False) -> None:
        """Hand every finished step to the folds, in step order (all of them when the input ended)."""
        if not self._pending:
            return
        frontier = min(t["last_step"] for t in self.per_rank.values())
        ready = sorted(self._pending) if final else sorted(s for s in self._pending if s <= frontier)
        overflow = len(self._pending) - len(ready) - MAX_PENDING
        if overflow > 0:  # a rank that stopped writing must not hold the others' steps forever
            waiting = sorted(s for s in self._pending if s > frontier)
            ready = sorted([*ready, *waiting[:overflow]])
        for step in ready:
            self._release(step, self._pending.pop(step))

    def as_of_now(self) -> RunView:
        """What a judgement sees: a copy whose folds also hold the steps still waiting for lagging ranks.

        A rank that reports a NaN at a step the others have not reached yet (or never will:
        they hang) is judged now, not when the step is finished.
        """
        if not self._pending:
            return self
        now = copy.copy(self)
        now.folds = copy.deepcopy(self.folds)
        now._pending = {}
        for step in sorted(self._pending):
            now._release(step, self._pending[step])
        return now

    def _release(self, step: int, merged: dict[str, Any]) -> None:
        row: dict[str, Any] = {"step": step, "t": merged["t"]}
        for field in self.reads.step_fields:
            row[field] = merged.get(field)
        for field in self.reads.mean_fields:
            if row[field] is not None:
                row[field] /= merged["n"][field]
        for fold in self.folds.values():
            fold.step(row, self)
        self.released_through = step

    # -- saved with the rows ----------------------------------------------------------

    def dump(self) -> str:
        """The state that rows alone would take a full read to rebuild (rare events stay in the store)."""
        return json.dumps({
            "released_through": self.released_through, "late_rows": self.late_rows, "last_t": self.last_t,
            "per_rank": self.per_rank, "pending": self._pending, "formats": self.formats,
            "folds": {m: fold.dump() for m, fold in self.folds.items()},
        })

    @classmethod
    def load(cls, conn: Connection, run_id: int, name: str, reads: Reads) -> RunView:
        """The run's view from its saved state, or rebuilt from its rows when none matches this code."""
        view = cls(run_id, name, reads)
        saved = stored.saved_state(conn, run_id, for_update=True)
        if saved is None or saved[0] != reads.version:
            view.formats = stored.run_formats(conn, run_id)
            view._rebuild(conn)
            view.generation = saved[1] if saved else 0
            return view
        _, view.generation, text = saved
        state = json.loads(text)
        view.released_through, view.late_rows, view.last_t = (state["released_through"], state["late_rows"],
                                                              state["last_t"])
        view.formats = state["formats"]
        view.per_rank = {int(r): totals for r, totals in state["per_rank"].items()}
        view._pending = {int(s): row for s, row in state["pending"].items()}
        view.folds = {m: reads.folds[m].load(s) for m, s in state["folds"].items() if m in reads.folds}
        for e in stored.run_events(conn, run_id, exclude=tuple(reads.fold_events)):
            view.events.setdefault(e["kind"], []).append(_public(e))
        return view

    def _rebuild(self, conn: Connection) -> None:
        """One full read of the run's rows: the steps merged in SQL, then the events in time order."""
        streamed = tuple(self.reads.fold_events)
        for e in stored.run_events(conn, self.run_id, exclude=streamed):  # run_start first: folds read the config
            self._add_event(e)
            self.last_t = e["t"] if self.last_t is None else max(self.last_t, e["t"])
        self.per_rank = stored.rank_totals(conn, self.run_id, self.reads.rank_fields)
        for row in stored.merged_steps(conn, self.run_id, self.reads.step_fields):
            for fold in self.folds.values():
                fold.step(row, self)
            self.released_through = row["step"]
            self.last_t = row["t"] if self.last_t is None else max(self.last_t, row["t"])
        for e in stored.run_events(conn, self.run_id, kinds=streamed) if streamed else ():
            self._add_event(e)
            self.last_t = max(self.last_t or e["t"], e["t"])

    def save(self, conn: Connection) -> None:
        """Store the state in ``conn``'s transaction, with the rows and offsets it covers."""
        self.generation += 1
        stored.save_state(conn, self.run_id, self.reads.version, self.generation, self.dump())


def _public(e: dict[str, Any]) -> dict[str, Any]:
    """An event as signals read it: the payload with rank, t and step (store keys dropped)."""
    return {k: v for k, v in e.items() if k not in ("run_id", "file_id", "v", "run")}
