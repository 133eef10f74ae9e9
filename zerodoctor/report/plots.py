"""Report: a run's downsampled series and findings → plot specs (plain JSON) that ``assets/plots.js`` draws;
several runs' series → the same quantities overlaid on one step axis (``compare``, a run's attempts).

Each step plot has an x axis of step numbers (a bucket's middle step), one line per
column, and for a downsampled run the bucket's min and max as a band, so a spike inside
a bucket stays visible. Marks are drawn where they happened, never bucketed: overflows,
non-finite steps, OOMs, the finding's steps, ``min_loss_scale``. A run with profiler traces gets their
timeline too (``report/timeline.py``), with or without steps.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.report.timeline import timeline_spec
from zerodoctor.report.units import quantity
from zerodoctor.rulebook.finding import Finding
from zerodoctor.signals.base import nested
from zerodoctor.signals.plots import RunSeries

SIGNIFICANT = 4  # digits kept per number: a plot has a few hundred pixels, the page stays small

# (plot id, title, y unit, log y, [(column, label, colour, y axis)]): a column on its own scale
# (grad norm beside loss) gets the right-hand axis, so neither flattens the other
STEP_PLOTS = (
    ("scale", "Loss scale (fp16)", "", True, [("loss_scale", "loss scale", "#1f77b4", "left")]),
    ("loss", "Loss and gradient norm", "", False,
     [("loss", "loss", "#1f77b4", "left"), ("grad_norm", "grad norm", "#ff7f0e", "right")]),
    ("time", "Step time and where it goes", "s", False, [
        ("step_time_s", "step", "#333333", "left"), ("fwd_s", "forward", "#2ca02c", "left"),
        ("bwd_s", "backward", "#1f77b4", "left"), ("optim_s", "optimizer", "#9467bd", "left"),
        ("comm_s", "collectives", "#d62728", "left")]),
    ("memory", "Memory: allocated vs reserved", "bytes", False, [
        ("mem_allocated_bytes", "allocated", "#1f77b4", "left"), ("mem_reserved_bytes", "reserved", "#ff7f0e", "left"),
        ("mem_peak_bytes", "peak allocated", "#2ca02c", "left")]),
)
MARK = "#d62728"


def _round(value: float | None) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, int) or float(value).is_integer():
        return int(value)
    return float(f"{value:.{SIGNIFICANT}g}")


def _col(values: list) -> list:
    return [_round(v) for v in values]


def plot_specs(series: RunSeries, findings: list[Finding], config: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The plots of one run, only those it has data for (an fp32 run has no loss-scale plot)."""
    timeline = timeline_spec(series.lanes)
    if not series.lo and not series.ooms:
        return [timeline] if timeline else []
    x = _middles(series)
    banded = any(lo != hi for lo, hi in zip(series.lo, series.hi))
    spans = [{"from": f.steps[0], "to": f.steps[1], "label": f.rule} for f in findings if f.steps]
    marks = _marks(series, config)
    bounds = [v for v in (series.first_step, series.last_step, *(o["step"] for o in series.ooms)) if v is not None]
    out = []
    for pid, title, unit, log, columns in STEP_PLOTS:
        lines = [{"label": label, "color": color, "axis": axis, "max": _col(series.buckets[f"{col}_max"]),
                  "min": _col(series.buckets[f"{col}_min"]) if banded else None}
                 for col, label, color, axis in columns if series.has(col)]
        if not lines and not marks.get(pid):
            continue
        spec = {"id": pid, "title": title, "unit": unit, "log": log, "x": _col(x), "lines": lines,
                "xrange": [min(bounds), max(bounds)], "spans": spans, **marks.get(pid, {})}
        if not log:
            spec.update(_clipped(lines, x, unit))
        if pid == "memory":
            spec.update(_memory_extras(lines, findings))
        out.append(spec)
    if ranks := _ranks(series):
        out.append(ranks)
    return out + ([timeline] if timeline else [])


# (plot id, title, y unit, log y, column): each step plot's headline column, the one drawn per run in an overlay
OVERLAID = (("scale", "Loss scale (fp16)", "", True, "loss_scale"), ("loss", "Loss", "", False, "loss"),
            ("time", "Step time", "s", False, "step_time_s"),
            ("memory", "Allocated memory", "bytes", False, "mem_allocated_bytes"))
RUN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")


def overlay_specs(runs: list[tuple[str, RunSeries]]) -> list[dict[str, Any]]:
    """Several runs on one step axis, a colour each: one plot per quantity at least two of them have.

    What ``compare`` is read for (where B departs from A) and what a fix-and-resume run's attempts
    are (where attempt 2 took up from its checkpoint, and whether the fault came back). Each run is
    drawn at its buckets' middle steps, the others' steps left as gaps it spans.
    """
    out = []
    for pid, title, unit, log, column in OVERLAID:
        drawn = [(label, series, dict(zip(_middles(series), series.buckets[f"{column}_max"])))
                 for label, series in runs if series.has(column)]
        if len(drawn) < 2:
            continue
        x = sorted({step for _, _, values in drawn for step in values})
        lines = [{"label": label, "color": RUN_COLOURS[i % len(RUN_COLOURS)], "axis": "left", "min": None,
                  "max": _col([values.get(step) for step in x])} for i, (label, _, values) in enumerate(drawn)]
        spec = {"id": pid, "title": f"{title}, on one step axis", "unit": unit, "log": log,
                "x": _col(x), "lines": lines, "xrange": [min(x), max(x)], "spans": [], "overlay": True}
        if not log:
            spec.update(_clipped(lines, x, unit))
        out.append(spec)
    return out


def _middles(series: RunSeries) -> list[float]:
    """Each bucket's x: its middle step (its one step when it holds one)."""
    return [(lo + hi) / 2 if lo != hi else lo for lo, hi in zip(series.lo, series.hi)]


OUTLIER = 5.0  # a value this many times the 95th percentile (a warm-up step) is drawn at the top edge


def _clipped(lines: list[dict[str, Any]], x: list[float], unit: str) -> dict[str, Any]:
    """A y limit that keeps a few outliers from flattening the rest, and the note that says so.

    A 550 ms first step (compilation, allocator warm-up) beside 94 steps of 20 ms drew those 94 as a
    flat line at zero. Values above ``OUTLIER`` × the 95th percentile are left above the top edge,
    and the plot says how many and how high, so nothing is hidden without a word.
    """
    values = sorted(v for line in lines if line.get("axis", "left") == "left" for v in line["max"] if v is not None)
    if len(values) < 10:
        return {}
    typical = values[int(0.95 * (len(values) - 1))]
    if typical <= 0 or values[-1] <= OUTLIER * typical:
        return {}
    limit = typical * 1.5
    above = [(xi, v) for line in lines if line.get("axis", "left") == "left"
             for xi, v in zip(x, line["max"]) if v is not None and v > limit]
    top = max(above, key=lambda p: p[1])
    return {"ymax": _round(limit), "note": f"{len(above)} value{'s' if len(above) != 1 else ''} above the top edge, "
                                           f"up to {quantity(top[1], unit) if unit else f'{top[1]:.4g}'} at step "
                                           f"{_round(top[0])}: clipped so the other steps stay readable"}


def _memory_extras(lines: list[dict[str, Any]], findings: list[Finding]) -> dict[str, Any]:
    """The device's usable memory as a line, and reserved − allocated shaded: the gap a fragmentation OOM is about."""
    out: dict[str, Any] = {}
    limit = next((f.evidence.get(k) for f in findings for k in ("memory.oom_limit_bytes", "creep.device_limit_bytes")
                  if f.evidence.get(k)), None)
    if limit:
        out["hlines"] = [{"y": limit, "label": f"usable device memory {quantity(limit, 'bytes')}"}]
    labels = {line["label"] for line in lines}
    if {"reserved", "allocated"} <= labels:
        out["gap"] = {"upper": "reserved", "lower": "allocated", "label": "reserved but unallocated"}
    return out


def _marks(series: RunSeries, config: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    marks: dict[str, dict[str, Any]] = {}
    if series.overflows:
        marks["scale"] = {"points": [{"label": f"overflow ({len(series.overflows)} steps skipped)", "color": MARK,
                                      "x": [s for s, _ in series.overflows],
                                      "y": [_round(v) for _, v in series.overflows]}]}
    floor = nested(config, "fp16.min_loss_scale")
    if nested(config, "fp16.enabled") and isinstance(floor, (int, float)):
        marks.setdefault("scale", {})["hlines"] = [{"y": floor, "label": f"min_loss_scale {floor:g}"}]
    if series.nonfinite:
        # labelled once: a run of NaN steps would print the word on top of itself
        marks["loss"] = {"vlines": [{"x": s, "label": "" if i else f"NaN/inf ({len(series.nonfinite)} steps)"}
                                    for i, s in enumerate(series.nonfinite)]}
    at_step: dict[int, list[dict[str, Any]]] = {}
    for oom in series.ooms:
        if oom["step"] is not None:
            at_step.setdefault(oom["step"], []).append(oom)
    if at_step:  # one line per step: every rank of a job often fails on the same step
        marks["memory"] = {
            "vlines": [{"x": step, "label": "OOM " + _ranks_text([o["rank"] for o in ooms])}
                       for step, ooms in at_step.items()],
            "points": [{"label": "reserved at OOM", "color": MARK, "x": list(at_step),
                        "y": [max((o["reserved_bytes"] or 0 for o in ooms), default=None) or None
                              for ooms in at_step.values()]}]}
    return marks


def _ranks_text(ranks: list[int]) -> str:
    shown = ",".join(map(str, sorted(set(ranks))[:8]))
    return f"rank {shown}" if len(set(ranks)) == 1 else f"ranks {shown}" + ("…" if len(set(ranks)) > 8 else "")


def _ranks(series: RunSeries) -> dict[str, Any] | None:
    """Per rank: mean seconds per step in collectives, beside its mean step time; the slow rank waits least."""
    rows = [r for r in series.ranks if r["comm_s"] is not None and r["steps"]]
    if len(rows) < 2:  # one rank has nobody to wait for
        return None
    return {"id": "ranks", "title": "Per rank: time waiting in collectives", "unit": "s", "bars": True,
            "x": [r["rank"] for r in rows], "xlabel": "rank",
            "lines": [{"label": "collectives per step", "color": "#d62728",
                       "max": [_round(r["comm_s"] / r["steps"]) for r in rows]},
                      {"label": "step time per step", "color": "#333333",
                       "max": [_round((r["step_time_s"] or 0) / r["steps"]) if r["step_time_s"] is not None else None
                               for r in rows]}]}
