"""Events, dropped: a run's ``run_end`` events → the events its probe dropped, per rank.

The probe drops an event rather than make training wait (its writer fell behind, or the schema refused
one) and counts it in the rank's ``run_end.dropped_events``, absent when none. One reading of that
count for the judgement (the signal ``run.dropped_events``) and for ``status``, which reads the stored
rows without a run view: both are to the right of this stage.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping


def dropped_by_rank(run_ends: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """Rank → events its probe dropped, only the ranks that dropped any, in rank order.

    Args:
        run_ends: ``run_end`` events with their ``rank`` (a rank may have several: its probe's and
            torchrun's summary; only the probe's carries a count).
    """
    out: dict[int, int] = {}
    for e in run_ends:
        if e.get("dropped_events"):
            out[e["rank"]] = out.get(e["rank"], 0) + e["dropped_events"]
    return dict(sorted(out.items()))
