"""Signals, memory creep: device memory allocated per step and each rank's RSS → how fast it climbs, when it is full.

A tensor kept alive every step (a loss appended without ``.item()``, a cache that only grows)
shows as allocated memory rising in a straight line, step after step. A least-squares line
over the last ``POINTS`` steps gives the rate; its R² says whether it is a steady climb or
noise; the memory left divided by the rate says in how many steps the OOM comes. Host memory
is read from the heartbeats (RSS per rank, against the host's or cgroup's limit, summed over
the ranks of one host): under CPU offload the host runs out first, and the kernel's OOM killer
leaves no message at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import DEVICE, HEARTBEATS, STEPS
from zerodoctor.signals.base import last_known, shown_by
from zerodoctor.messages.oom import oom_numbers

POINTS = 128  # the fit's window: recent enough to see a leak start, long enough to see through noise

_device = shown_by(STEPS, DEVICE)
_heartbeats = shown_by(HEARTBEATS)

READS = ()

SIGNALS = [
    _device("creep.device_bytes_per_step", "bytes", "growth of allocated device memory per step (least squares)"),
    _device("creep.device_r2", "ratio", "how straight the climb is (R² of the fit; 1 = every step the same)"),
    _device("creep.device_growth_share", "ratio", "growth over the fitted steps / device memory"),
    _device("creep.device_steps_left", "steps", "steps until allocated memory reaches the device's memory at that "
                                                "rate"),
    _device("creep.device_points", "steps", "steps in the fit"),
    _device("creep.device_bytes", "bytes", "allocated memory at the last step"),
    _device("creep.device_limit_bytes", "bytes", "the device's memory, or the process's cap when an OOM message "
                                                 "stated one"),
    _device("creep.device_capped", "bool", "the limit is the process's cap (an OOM message's 'allowed'), not the "
                                           "device"),
    _heartbeats("creep.host_bytes_per_step", "bytes", "growth of the RSS of the ranks of the fastest-growing host, "
                                                      "per step"),
    _heartbeats("creep.host_r2", "ratio", "how straight the fastest-growing rank's climb is (R²)"),
    _heartbeats("creep.host_growth_share", "ratio", "growth over the fitted heartbeats / host memory"),
    _heartbeats("creep.host_steps_left", "steps", "steps until the fastest-growing host's ranks together fill "
                                                  "its memory, at that growth"),
    _heartbeats("creep.host_points", "heartbeats", "heartbeats in the fastest-growing rank's fit"),
    _heartbeats("creep.host_bytes", "bytes", "RSS of the fastest-growing host's ranks now"),
    _heartbeats("creep.host_limit_bytes", "bytes", "the fastest-growing host's memory (MemTotal, or the cgroup's "
                                                   "limit)"),
    _heartbeats("creep.host_ranks", "ranks", "the ranks of the fastest-growing host"),
]

STEP_FIELDS = {"mem_allocated_bytes": "max"}
FOLD_EVENTS = ("heartbeat",)


@dataclass
class Fold(runview.Fold):
    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    device: list[list[int]] = field(default_factory=list)  # [step, allocated bytes], the last POINTS
    host: dict[str, list[list[int]]] = field(default_factory=dict)  # rank → [last step, rss bytes]

    def add_steps(self, block: Steps, view: RunView) -> None:
        steps, allocated = block.columns["step"], block.columns["mem_allocated_bytes"]
        new = [[steps[i], allocated[i]] for i in last_known(allocated, POINTS)]
        if new:
            self.device = (self.device + new)[-POINTS:]

    def event(self, event: dict[str, Any]) -> None:
        if event.get("rss_bytes") is None or event.get("last_step") is None:
            return
        points = self.host.setdefault(str(event["rank"]), [])
        if points and points[-1][0] == event["last_step"]:
            # One point per step, the most the rank held at it: a stalled rank is no climb, and a
            # heartbeat during exit, after the kept tensors are freed, does not undo the leak.
            points[-1][1] = max(points[-1][1], event["rss_bytes"])
        else:
            points.append([event["last_step"], event["rss_bytes"]])
            del points[:-POINTS]


def fit(points: list[list[int]]) -> tuple[float, float] | None:
    """(slope per step, R²) of the least-squares line through ``points``; None below 8 points or no spread."""
    if len(points) < 8:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    syy = sum((p[1] - my) ** 2 for p in points)
    if sxx == 0:
        return None
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    slope = sxy / sxx
    return slope, (sxy * sxy / (sxx * syy) if syy > 0 else 0.0)


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    out: dict[str, Any] = {}
    # A process capped with set_per_process_memory_fraction runs out at its cap, which only its OOM
    # message states ("6.00 GiB allowed"); the device's memory otherwise.
    allowed = [o.get("allowed_bytes") or oom_numbers(o.get("message") or "").get("allowed_bytes")
               for o in view.events.get("oom", [])]
    allowed = [a for a in allowed if a]
    capacity = view.first_start().get("device_memory_bytes")
    out.update(_device(fold, min([*allowed, capacity]) if capacity else None, bool(allowed)))
    out.update(_host(fold, view))
    return out


def _device(fold: Fold, capacity: int | None, capped: bool) -> dict[str, Any]:
    fitted = fit(fold.device)
    if fitted is None or not capacity:
        return {}
    slope, r2 = fitted
    span = fold.device[-1][0] - fold.device[0][0]
    current = fold.device[-1][1]
    out = {"creep.device_bytes_per_step": slope, "creep.device_r2": r2,
           "creep.device_growth_share": slope * span / capacity, "creep.device_points": len(fold.device),
           "creep.device_bytes": current, "creep.device_limit_bytes": capacity, "creep.device_capped": capped}
    if slope > 0:
        out["creep.device_steps_left"] = max(capacity - current, 0) / slope
    return out


def _host(fold: Fold, view: RunView) -> dict[str, Any]:
    hosts: dict[str, list[str]] = {}
    limits: dict[str, int] = {}
    for start in view.starts:
        host = str(start.get("host"))
        hosts.setdefault(host, []).append(str(start["rank"]))
        if start.get("host_memory_bytes"):
            limits[host] = start["host_memory_bytes"]
    best: dict[str, Any] | None = None
    for host, ranks in hosts.items():
        fits = {r: fit(fold.host[r]) for r in ranks if r in fold.host}
        fits = {r: f for r, f in fits.items() if f is not None}
        if not fits or host not in limits:
            continue
        slope = sum(f[0] for f in fits.values())
        if best is None or slope > best["slope"]:
            top = max(fits, key=lambda r: fits[r][0])
            span = fold.host[top][-1][0] - fold.host[top][0][0]
            best = {"slope": slope, "r2": fits[top][1], "limit": limits[host], "ranks": sorted(map(int, fits)),
                    "now": sum(fold.host[r][-1][1] for r in fits), "span": span, "points": len(fold.host[top])}
    if best is None:
        return {}
    out = {"creep.host_bytes_per_step": best["slope"], "creep.host_r2": best["r2"],
           "creep.host_growth_share": best["slope"] * best["span"] / best["limit"], "creep.host_points": best["points"],
           "creep.host_ranks": best["ranks"], "creep.host_bytes": best["now"], "creep.host_limit_bytes": best["limit"]}
    if best["slope"] > 0:
        out["creep.host_steps_left"] = max(best["limit"] - best["now"], 0) / best["slope"]
    return out
