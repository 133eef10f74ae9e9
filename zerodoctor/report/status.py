"""Report, status: what the store holds per run (``store.status``) → text, a live table, or JSON."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from zerodoctor.messages.units import format_count, plural
from zerodoctor.report.terminal import escape
from zerodoctor.report.text import finding_line
from zerodoctor.store.status import RunStatus


def to_json(statuses: list[RunStatus]) -> dict[str, Any]:
    """The "Status" contract of DESIGN.md."""
    return {"runs": [{
        "run": s.run,
        "files": [{"path": f.path, "events": f.events, "quarantined": f.quarantined, "offset": f.offset,
                   **({"node": f.node} if f.node is not None else {})} for f in s.files],
        "findings": s.findings,
        "last_event_t": s.last_event_t,
        **({"set_aside": s.set_aside} if s.set_aside is not None else {}),  # only a run set aside has it
        **({"dropped_events": {"count": sum(s.dropped.values()), "ranks": list(s.dropped)}}
           if s.dropped else {}),  # only when the probe had to: absent, not zero
    } for s in statuses]}


def render(statuses: list[RunStatus], console: Console, now: float | None = None) -> None:
    now = time.time() if now is None else now
    if not statuses:
        console.print("no runs in the store yet")
    for s in statuses:
        counts = Counter(f["severity"] for f in s.findings)
        found = ", ".join(f"{counts[k]} {k}" for k in ("error", "warning", "info") if counts[k]) or "no findings"
        last = "no events" if s.last_event_t is None else (
            f"last event {_clock(s.last_event_t)}"
            f" ({_ago(now - s.last_event_t)} ago)")
        console.print(f"[bold]run {escape(s.run)}[/]  {last}  {found}")
        if s.set_aside is not None:
            console.print(f"  [bold red]set aside[/]: not judged, its view failed ({escape(s.set_aside)})")
        if s.dropped:
            ranks = ", ".join(map(str, s.dropped))
            console.print(f"  [yellow]the probe dropped {format_count(sum(s.dropped.values()), 'event')}[/] on "
                          f"{plural('rank', len(s.dropped))} {ranks} rather than make training wait; "
                          "its record has gaps")
        shared = {path for path, n in Counter(f.path for f in s.files).items() if n > 1}
        for f in s.files:
            kept = f"  [yellow]{f.quarantined} quarantined[/]" if f.quarantined else ""
            # nodes of one job write the same local path, each its own file: the node tells the lines apart
            where = f" on node {escape(f.node)}" if f.path in shared and f.node is not None else ""
            console.print(f"  {escape(f.path)}{where}  {f.events} events{kept}  offset {f.offset}")
            for line, reason in f.reasons:
                console.print(f"      [dim]line {line}: {escape(reason)}[/]")
        for body in s.findings:
            console.print("  " + finding_line(body) + (" [dim](acknowledged)[/]" if body.get("acknowledged") else ""))


def table(statuses: list[RunStatus], now: float | None = None) -> Table:
    """One row per run, for ``watch --table``'s live display."""
    now = time.time() if now is None else now
    out = Table("run", "files", "events", "quarantined", "errors", "warnings", "last event", title="zerodoctor watch")
    for s in statuses:
        counts = Counter(f["severity"] for f in s.findings)
        out.add_row(escape(s.run), str(len(s.files)), str(sum(f.events for f in s.files)),
                    str(sum(f.quarantined for f in s.files)), str(counts["error"]), str(counts["warning"]),
                    "-" if s.last_event_t is None else f"{_ago(now - s.last_event_t)} ago")
    return out


def _clock(t: float) -> str:
    """An event's time as a date; the time a rank wrote may be none (1e18, a clock gone wrong): the number then."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # OSError: EOVERFLOW, past what the C library's time_t holds
        return f"t={t:g} (not a date)"


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"
