"""Report: the profiled steps' lanes of a run (``RunSeries.lanes``) → the timeline plot spec ``assets/plots.js`` draws.

One row per rank and kind of work, on one time axis for every rank: seconds from the earliest profiled
window's start. A trace's steps are placed by their offsets in that trace (``from_s``: exact), the
traces of the ranks by their own clocks (``t``), so ranks on different hosts are as aligned as those
clocks are. Rows say what the trace measured: a GPU trace's kernels on its streams, or a CPU-only
trace's host threads; a host timeline has no memcpy row, since it has no copies to show.

A row's ranges travel as whole ticks (``TICKS`` to the axis: finer than any pixel), each number the
distance from the previous one (gap, length, gap, length, …): mostly two or three digits, a third of the
bytes of seconds written out (measured on HTA's GPU trace: 16 → 4.7 bytes a range).
"""

from __future__ import annotations

from typing import Any

MAX_RANKS = 16  # rank groups drawn: 16 ranks x 4 rows x 2,000 ranges is the most a page carries
TICKS = 20_000  # to the whole axis: 1/16 of a pixel on a 1,200-pixel plot
ROWS = (("compute", "compute", "#1f77b4"), ("comm", "communication", "#d62728"), ("copy", "memcpy", "#9467bd"),
        ("idle", "idle", "#9e9e9e"))
TITLES = {
    "device": "Profiled window per rank, GPU streams: compute kernels, NCCL kernels, memcpy/memset, idle (none runs)",
    "host": "Profiled window per rank, host threads (a CPU-only trace): ATen operators, collective ranges, idle "
            "(neither runs on any thread)",
}


def timeline_spec(lanes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The timeline of a run whose traces carried lanes (one group of rows per rank and trace file); None
    for a run without."""
    if not lanes:
        return None
    groups: dict[tuple[int, str | None], list[dict[str, Any]]] = {}
    for kept in lanes:
        groups.setdefault((kept["rank"], kept["file"]), []).append(kept)
    # where each trace's first profiled window starts, on its own clock
    firsts = {key: min(mine, key=lambda kept: kept["from_s"]) for key, mine in groups.items()}
    starts = {key: first["t"] - first["from_s"] for key, first in firsts.items()}
    origin = min(starts.values())
    ranks = sorted({rank for rank, _ in groups})
    shown = [key for key in sorted(groups, key=lambda key: (key[0], starts[key])) if key[0] in ranks[:MAX_RANKS]]
    at = {key: starts[key] - origin for key in groups}
    span = max(at[key] + kept["from_s"] + max((max(r) for r in kept["rows"].values() if r), default=0.0)
               for key, mine in groups.items() for kept in mine)
    tick = max(span, 1e-9) / TICKS
    timelines = {kept["timeline"] for kept in lanes}
    twice = {rank for rank, _ in shown if sum(1 for r, _ in shown if r == rank) > 1}
    rows: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for key in shown:
        rank, file = key
        mine = groups[key]
        first = len(rows)
        where = (" (host)" if all(kept["timeline"] == "host" for kept in mine) and len(timelines) > 1 else "") + (
            f" ({file})" if rank in twice else "")
        for name, label, color in ROWS:
            if not any(name in kept["rows"] for kept in mine):
                continue
            ticks = [round((at[key] + kept["from_s"] + x) / tick) for kept in mine for x in kept["rows"].get(name, ())]
            rows.append({"label": f"rank {rank} · {label}{where}", "color": color,
                         "ranges": [b - a for a, b in zip([0, *ticks], ticks)]})
        marks += [{"x": _sig(at[key] + kept["from_s"]), "row": first, "rows": len(rows) - first,
                   "label": f"step {kept['step']}" if kept["step"] is not None else ""} for kept in mine]
    spec = {"id": "timeline", "title": TITLES["device" if "device" in timelines else "host"]
            + (" (host threads where a rank's trace is CPU-only)" if len(timelines) > 1 else ""),
            "unit": "s", "xlabel": "time from the first profiled window's start", "timeline": True,
            "xmax": span, "tick": tick, "rows": rows, "steps": marks}
    if len(ranks) > MAX_RANKS:
        spec["note"] = (f"{len(ranks) - MAX_RANKS} more ranks traced, not drawn (ranks {ranks[MAX_RANKS]}–"
                        f"{ranks[-1]}): the page draws the first {MAX_RANKS}")
    return spec


def _sig(seconds: float) -> float:
    return float(f"{seconds:.6g}")
