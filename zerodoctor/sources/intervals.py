"""Sources, intervals: sets of time ranges (nested, overlapping, on many streams) → lengths of their
unions, intersections and differences.

A profiler trace is ranges: kernels on several streams at once, operators nested in operators.
"Exposed communication" is the time a collective runs while no compute does, on any stream; a sum
of durations would count nested and overlapping ranges twice. Every question here is answered on
unions (disjoint, sorted ranges): a set's ranges are merged once, then cut into the elementary
segments between all sets' boundaries, where each set either covers a segment or does not.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

Ranges = tuple[np.ndarray, np.ndarray]  # (starts, ends), disjoint and sorted once merged


def union(starts: np.ndarray, ends: np.ndarray) -> Ranges:
    """The disjoint sorted ranges covering the same time as ``[starts[i], ends[i])`` (nested or overlapping)."""
    if not len(starts):
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    # a range begins a new merged range where it starts after every earlier one has ended
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def clip(ranges: Ranges, lo: float, hi: float) -> Ranges:
    """The part of disjoint ranges inside ``[lo, hi)``."""
    s, e = ranges
    keep = (e > lo) & (s < hi)
    return np.maximum(s[keep], lo), np.minimum(e[keep], hi)


def length(ranges: Ranges) -> float:
    return float(np.sum(ranges[1] - ranges[0]))


def covered_before(ranges: Ranges, points: np.ndarray) -> np.ndarray:
    """For each point, the time the disjoint ``ranges`` cover before it: a range's overlap with
    ``[a, b)`` is then ``covered_before(b) - covered_before(a)``, for many ranges at once."""
    s, e = ranges
    if not len(s):
        return np.zeros(len(points))
    done = np.concatenate(([0.0], np.cumsum(e - s)))
    i = np.searchsorted(s, points, side="right")  # ranges starting at or before the point
    partial = np.where(i > 0, np.minimum(points, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0.0)
    return done[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(partial, 0.0)


def measure(sets: Mapping[str, Ranges], lo: float, hi: float,
            where: Callable[[Mapping[str, np.ndarray]], np.ndarray]) -> float:
    """The time in ``[lo, hi)`` where ``where`` holds, given which sets cover it (a boolean array per set).

    ``where`` combines the per-set arrays: ``lambda c: c["comm"] & ~c["compute"]`` is exposed
    communication. The window is cut at every boundary of every set; each segment is covered by a
    set or not, judged at its midpoint.
    """
    clipped = {name: clip(r, lo, hi) for name, r in sets.items()}
    cuts = np.unique(np.concatenate([[lo, hi], *(np.concatenate(r) for r in clipped.values())]))
    if len(cuts) < 2:
        return 0.0
    mids, widths = (cuts[1:] + cuts[:-1]) / 2, np.diff(cuts)
    covers = {}
    for name, (s, e) in clipped.items():
        i = np.searchsorted(s, mids, side="right") - 1
        covers[name] = (i >= 0) & (e[np.maximum(i, 0)] > mids) if len(s) else np.zeros(len(mids), dtype=bool)
    return float(np.sum(widths[where(covers)]))


def complement(ranges: Ranges, lo: float, hi: float) -> Ranges:
    """The parts of ``[lo, hi)`` the disjoint ``ranges`` leave uncovered."""
    s, e = clip(ranges, lo, hi)
    starts, ends = np.concatenate(([lo], e)), np.concatenate((s, [hi]))
    keep = ends > starts
    return starts[keep], ends[keep]


def thin(ranges: Ranges, limit: int, tolerance: float) -> tuple[Ranges, float]:
    """At most ``limit`` ranges covering the disjoint ``ranges``: every gap up to ``tolerance`` is bridged,
    then wider ones, narrowest first, until ``limit`` are left.

    Returns the ranges and the tolerance used (the widest gap that may have been bridged): what a
    drawing of them overstates, at most, at each bridged gap.
    """
    s, e = ranges
    if len(s) < 2:
        return ranges, tolerance
    gaps = s[1:] - e[:-1]
    excess = len(s) - max(limit, 1)
    if excess > 0:
        tolerance = max(tolerance, float(np.partition(gaps, excess - 1)[excess - 1]))
    keep = gaps > tolerance
    return (np.concatenate(([s[0]], s[1:][keep])), np.concatenate((e[:-1][keep], [e[-1]]))), tolerance
