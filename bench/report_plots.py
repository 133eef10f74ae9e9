"""Benchmark: which plotting library the HTML report inlines — page size and render time in headless Chromium.

The same five plots (a run's loss scale, loss/grad norm, step-time split, memory, per-rank
collectives; min/max bands as the report draws them) are built with each candidate, every
script inlined (the page must open offline), then loaded in Debian's chromium over the
DevTools pipe: time from navigation start until every plot is drawn, median of REPEATS after
one warm-up load.
The baseline is uPlot, the library the report ships (``zerodoctor/report/assets``).

Candidates other than uPlot are not vendored; fetch them once into LIBS with the ordinary
clients: ``npm pack vega vega-lite vega-embed`` (untar each as ``<name>-<version>/``),
``pip download --no-deps plotly`` (unzip), ``pip install --target LIBS/mpl matplotlib``.
A missing one is reported as not measured.

    python bench/report_plots.py --libs /tmp/libs [--points 800 10000]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report.browser import Browser  # noqa: E402
from zerodoctor.report.html import document  # noqa: E402

REPEATS = 3
DONE = "new Promise(r => { const t = setInterval(() => { if (document.body.dataset.doneMs) { clearInterval(t); " \
       "r(+document.body.dataset.doneMs); } }, 5); })"


def specs(points: int) -> list[dict]:
    """Plot specs in report/plots.py's shape, with ``points`` buckets per line."""
    x = list(range(1, points + 1))

    def wave(base: float, amp: float, k: float) -> list[float]:
        return [round(base + amp * math.sin(i / k) + amp * 0.3 * math.sin(i / 3.1), 4) for i in x]

    def line(label: str, color: str, base: float, amp: float, k: float) -> dict:
        hi = wave(base, amp, k)
        return {"label": label, "color": color, "axis": "left", "max": hi, "min": [round(v * 0.9, 4) for v in hi]}

    step = {"x": x, "xrange": [1, points], "spans": [{"from": points // 2, "to": points // 2 + 20, "label": "ZD201"}]}
    return [
        {"id": "scale", "title": "Loss scale", "unit": "", "log": True, **step,
         "lines": [line("loss scale", "#1f77b4", 3000, 1000, 50)],
         "points": [{"label": "overflow", "color": "#d62728", "x": x[::97], "y": [2048] * len(x[::97])}]},
        {"id": "loss", "title": "Loss and grad norm", "unit": "", "log": False, **step,
         "lines": [line("loss", "#1f77b4", 2, 0.3, 80), line("grad norm", "#ff7f0e", 1, 0.2, 20)]},
        {"id": "time", "title": "Step time", "unit": "s", "log": False, **step,
         "lines": [line(n, c, b, 0.02, 10)
                   for n, c, b in (("step", "#333333", 0.5), ("forward", "#2ca02c", 0.1),
                                   ("backward", "#1f77b4", 0.2), ("collectives", "#d62728", 0.15))]},
        {"id": "memory", "title": "Memory", "unit": "bytes", "log": False, **step,
         "lines": [line("allocated", "#1f77b4", 4e10, 1e9, 200), line("reserved", "#ff7f0e", 6e10, 1e8, 300)],
         "vlines": [{"x": points, "label": "OOM ranks 0-63"}]},
        {"id": "ranks", "title": "Per rank", "unit": "s", "bars": True, "x": list(range(64)), "xlabel": "rank",
         "lines": [{"label": "collectives", "color": "#d62728", "max": [0.15 - (r == 17) * 0.1 for r in range(64)]}]},
    ]


def _divs(plots: list[dict]) -> str:
    return "".join(f'<div class="plot" id="run0-{p["id"]}" style="width:600px;height:300px"></div>' for p in plots)


def uplot_page(plots: list[dict], _libs: Path) -> str:
    page = document("bench", _divs(plots), [{"id": "run0", "plots": plots}])
    return page.replace("</body>", "<script>document.body.dataset.doneMs = performance.now()</script></body>")


def vega_page(plots: list[dict], libs: Path) -> str | None:
    scripts = [next(libs.glob(f"{name}-*/package/build/{name}.min.js"), None)
               for name in ("vega", "vega-lite", "vega-embed")]
    if None in scripts:
        return None
    charts = []
    for p in plots:
        values = [{"x": x, "s": line["label"], "hi": hi, "lo": (line.get("min") or line["max"])[i]}
                  for line in p["lines"] for i, (x, hi) in enumerate(zip(p["x"], line["max"]))]
        mark = {"mark": "bar"} if p.get("bars") else {"layer": [
            {"mark": {"type": "area", "opacity": 0.2}, "encoding": {"y": {"field": "lo", "type": "quantitative"},
                                                                    "y2": {"field": "hi"}}},
            {"mark": "line", "encoding": {"y": {"field": "hi", "type": "quantitative",
                                                "scale": {"type": "log" if p.get("log") else "linear"}}}}]}
        spec = {"$schema": "https://vega.github.io/schema/vega-lite/v6.json", "title": p["title"], "width": 560,
                "height": 240, "data": {"values": values},
                "encoding": {"x": {"field": "x", "type": "quantitative"}, "color": {"field": "s"},
                             **({"y": {"field": "hi", "type": "quantitative"}} if p.get("bars") else {})}, **mark}
        charts.append(f'vegaEmbed("#run0-{p["id"]}", {json.dumps(spec)}, {{renderer: "canvas", actions: false}})')
    js = "".join(f"<script>{s.read_text()}</script>" for s in scripts)
    return (f"<!doctype html><html><head><meta charset='utf-8'></head><body>{_divs(plots)}{js}"
            f"<script>Promise.all([{','.join(charts)}]).then(() => document.body.dataset.doneMs = performance.now())"
            "</script></body></html>")


def plotly_page(plots: list[dict], libs: Path) -> str | None:
    lib = next(libs.glob("**/plotly/package_data/plotly.min.js"), None)
    if lib is None:
        return None
    calls = []
    for p in plots:
        traces = []
        for line in p["lines"]:
            if p.get("bars"):
                traces.append({"type": "bar", "x": p["x"], "y": line["max"], "name": line["label"]})
                continue
            traces.append({"x": p["x"], "y": line["max"], "name": line["label"], "mode": "lines"})
            traces.append({"x": p["x"], "y": line["min"], "name": line["label"] + " min", "mode": "lines",
                           "fill": "tonexty"})
        layout = {"title": {"text": p["title"]}, "width": 600, "height": 300,
                  "yaxis": {"type": "log" if p.get("log") else "linear"}}
        calls.append(f'Plotly.newPlot("run0-{p["id"]}", {json.dumps(traces)}, {json.dumps(layout)})')
    return (f"<!doctype html><html><head><meta charset='utf-8'></head><body>{_divs(plots)}"
            f"<script>{lib.read_text()}</script><script>Promise.all([{','.join(calls)}])"
            ".then(() => document.body.dataset.doneMs = performance.now())</script></body></html>")


def svg_page(plots: list[dict], libs: Path) -> tuple[str, float] | None:
    """Matplotlib draws in Python, so its cost is the SVG generation here plus the browser's load."""
    sys.path.append(str(libs / "mpl"))
    try:
        import matplotlib

        matplotlib.use("svg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    started = time.perf_counter()
    figures = []
    for p in plots:
        fig, ax = plt.subplots(figsize=(6, 3))
        for line in p["lines"]:
            if p.get("bars"):
                ax.bar(p["x"], line["max"], color=line["color"])
                continue
            ax.plot(p["x"], line["max"], color=line["color"], label=line["label"], linewidth=1)
            ax.fill_between(p["x"], line["min"], line["max"], color=line["color"], alpha=0.15)
        if p.get("log"):
            ax.set_yscale("log")
        ax.set_title(p["title"])
        out = io.StringIO()
        fig.savefig(out, format="svg")
        plt.close(fig)
        figures.append(out.getvalue().split("?>", 1)[-1])
    python_s = time.perf_counter() - started
    return (f"<!doctype html><html><head><meta charset='utf-8'></head><body>{''.join(figures)}"
            "<script>addEventListener('load', () => document.body.dataset.doneMs = performance.now())</script>"
            "</body></html>", python_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libs", type=Path, default=Path("/tmp/libs"))
    parser.add_argument("--points", type=int, nargs="+", default=[800, 10000])
    args = parser.parse_args()
    candidates = (("uPlot 1.6.32 (shipped)", uplot_page, "hover legend, drag-zoom"),
                  ("Vega-Lite + vega + vega-embed", vega_page, "tooltips/zoom if specified"),
                  ("plotly.js", plotly_page, "full (hover, zoom, pan)"),
                  ("matplotlib SVG", svg_page, "none (static)"))
    with tempfile.TemporaryDirectory() as tmp, Browser(timeout_s=120) as browser:
        print(f"{'library':<32}{'points':>7}{'page bytes':>12}{'x uPlot':>9}{'render ms':>11}{'x uPlot':>9}"
              "  interactivity")
        for points in args.points:
            plots = specs(points)
            base_size = base_ms = None
            for name, build, interaction in candidates:
                built = build(plots, args.libs)
                if built is None:
                    print(f"{name:<32}{points:>7}  not measured: library not found under {args.libs}")
                    continue
                page, extra_ms = (built if isinstance(built, tuple) else (built, 0.0))
                extra_ms *= 1000 if isinstance(built, tuple) else 1
                path = Path(tmp) / f"{points}-{len(name)}.html"
                path.write_text(page)
                times = []
                browser.render(path, DONE)  # warm-up: the first load pays for the renderer's start
                for _ in range(REPEATS):
                    rendered = browser.render(path, DONE)
                    assert not rendered.errors, (name, rendered.errors)
                    times.append(rendered.value + extra_ms)
                size, ms = len(page.encode()), statistics.median(times)
                base_size, base_ms = base_size or size, base_ms or ms
                print(f"{name:<32}{points:>7}{size:>12,}{size / base_size:>9.1f}{ms:>11.0f}{ms / base_ms:>9.1f}"
                      f"  {interaction}")


if __name__ == "__main__":
    main()
