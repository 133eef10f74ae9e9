"""Report: the profiled steps' lanes of a run (``RunSeries.lanes``) → the timeline plot spec ``assets/plots.js`` draws.

One row per rank and kind of work, on one time axis for every rank (seconds from the earliest profiled
window's start; ranks are placed by their traces' own clocks, so ranks on different hosts are as aligned
as those clocks are). Rows say what the trace measured: a GPU trace's kernels on its streams, or a
CPU-only trace's host threads; a host timeline has no memcpy row, since it has no copies to show.
"""

from __future__ import annotations

import math
from typing import Any

MAX_RANKS = 16  # rank groups drawn: 16 ranks x 4 rows x 2,000 ranges is the most a page carries
ROWS = (("compute", "compute", "#1f77b4"), ("comm", "communication", "#d62728"), ("copy", "memcpy", "#9467bd"),
        ("idle", "idle", "#9e9e9e"))
TITLES = {
    "device": "Profiled window per rank, GPU streams: compute kernels, NCCL kernels, memcpy/memset, idle (none runs)",
    "host": "Profiled window per rank, host threads (a CPU-only trace): ATen operators, collective ranges, idle "
            "(neither runs on any thread)",
}


def timeline_spec(lanes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The timeline of a run whose traces carried lanes; None for a run without."""
    if not lanes:
        return None
    ranks = sorted({kept["rank"] for kept in lanes})
    shown = ranks[:MAX_RANKS]
    origin = min(kept["t"] for kept in lanes)
    ends = [kept["t"] - origin + max((max(r) for r in kept["rows"].values() if r), default=0.0) for kept in lanes]
    span = max(max(ends), 1e-9)
    digits = max(0, math.ceil(-math.log10(span / 20_000)))  # 1/20,000 of the axis: finer than any pixel
    timelines = {kept["timeline"] for kept in lanes}
    rows: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for rank in shown:
        mine = [kept for kept in lanes if kept["rank"] == rank]
        host = all(kept["timeline"] == "host" for kept in mine)
        first = len(rows)
        for key, name, color in ROWS:
            if not any(key in kept["rows"] for kept in mine):
                continue
            label = f"rank {rank} · {name}" + (" (host)" if host and len(timelines) > 1 else "")
            ranges = [round(kept["t"] - origin + x, digits) for kept in mine for x in kept["rows"].get(key, ())]
            rows.append({"label": label, "color": color, "ranges": ranges})
        marks += [{"x": round(kept["t"] - origin, digits), "row": first, "rows": len(rows) - first,
                   "label": f"step {kept['step']}" if kept["step"] is not None else ""} for kept in mine]
    spec = {"id": "timeline", "title": TITLES["device" if "device" in timelines else "host"]
            + (" (host threads where a rank's trace is CPU-only)" if len(timelines) > 1 else ""),
            "unit": "s", "xlabel": "time from the first profiled window's start", "timeline": True,
            "xmax": round(span, digits), "rows": rows, "steps": marks}
    if len(ranks) > len(shown):
        spec["note"] = (f"{len(ranks) - len(shown)} more ranks traced, not drawn (ranks {ranks[len(shown)]}–"
                        f"{ranks[-1]}): the page draws the first {MAX_RANKS}")
    return spec
