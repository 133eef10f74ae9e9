"""Sources, trace lanes: one profiled step's measured sets → the few ranges the report's timeline draws.

A real step holds tens of thousands of kernels or operators; a page draws a row a few thousand pixels
wide. Per row (``compute``, ``comm``, ``copy`` on a device timeline only: a CPU-only trace has no
copies, and ``idle``: the window minus the union of the others, taken on the exact sets before any
merge, less its ranges under the floor below, gaps the busy rows bridge) the step's ranges are merged
where they touch or nearly do:

- **merge tolerance**: a gap narrower than ``1 / FLOOR_PARTS`` of the step's window (1/4000: under a
  pixel on any screen) is bridged; where a row still holds more than its share of ``PER_RANK`` (2000
  ranges per row and rank, shared equally by the trace's profiled steps), the narrowest gaps next, until
  it fits. The widest tolerance a step needed is its ``lanes_merge_s``: a drawn range overstates the
  busy (or idle) time by at most that much per bridged gap. The step's figures (``compute_s``…) are
  measured on the exact sets, never on these.

Ranges are flat ``[start, end, start, end, …]``, seconds from the step window's start (the event's ``t``),
rounded to 0.1 µs (Kineto records ns, but no pixel tells them apart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zerodoctor.sources.intervals import Ranges

Lanes = dict[str, list[float]]  # row → flat [start, end, …], seconds from the step's window start

PER_RANK = 2000  # ranges per row a rank's trace may carry, over all its profiled steps
FLOOR_PARTS = 4000  # gaps under window / FLOOR_PARTS are always bridged
BUSY = ("compute", "comm", "copy")


def lanes(sets: dict[str, Ranges], lo: float, hi: float, *, device: bool, steps: int) -> tuple[Lanes, float]:
    """The rows of one step's window ``[lo, hi)`` (µs) and the merge tolerance it needed (s).

    Args:
        sets: the trace's disjoint sets, ``compute``, ``comm`` and ``copy`` among them.
        device: a device timeline (it has a ``copy`` row).
        steps: the trace's profiled steps, which share ``PER_RANK``.
    """
    import numpy as np

    from zerodoctor.sources import intervals
    kinds = BUSY if device else BUSY[:2]
    clipped = {kind: intervals.clip(sets[kind], lo, hi) for kind in kinds}
    busy = intervals.union(np.concatenate([s for s, _ in clipped.values()]),
                           np.concatenate([e for _, e in clipped.values()]))
    limit, floor = max(PER_RANK // max(steps, 1), 1), (hi - lo) / FLOOR_PARTS
    idle_s, idle_e = intervals.complement(busy, lo, hi)
    wide = idle_e - idle_s >= floor  # narrower: a gap the busy rows bridge, not drawn twice
    clipped["idle"] = idle_s[wide], idle_e[wide]
    rows: Lanes = {}
    widest = 0.0
    for kind, ranges in clipped.items():
        (s, e), used = intervals.thin(ranges, limit, floor)
        widest = max(widest, used if len(s) < len(ranges[0]) else 0.0)
        flat = np.empty(2 * len(s))
        flat[0::2], flat[1::2] = s - lo, e - lo
        rows[kind] = np.round(flat / 1e6, 7).tolist()
    return rows, widest / 1e6
