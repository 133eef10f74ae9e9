// zerodoctor: draws the plot specs of report/plots.py with uPlot (inlined beside this file).
// Marks (finding steps, overflows, OOMs, min_loss_scale) are drawn on the canvas where they
// happened, never bucketed with the lines.
(function () {
  "use strict";
  const t0 = performance.now();
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  function fmt(unit, v) {
    if (v == null || !isFinite(v)) return "";
    if (unit === "bytes") {
      let i = 0;
      while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
      return (i ? v.toFixed(1) : v.toFixed(0)) + " " + UNITS[i];
    }
    if (unit === "s") return Math.abs(v) < 1 ? (v * 1000).toPrecision(3) + " ms" : v.toPrecision(3) + " s";
    return Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : +v.toPrecision(4) + "";
  }

  function fade(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function drawMarks(spec) {
    return function (u) {
      const ctx = u.ctx, b = u.bbox, X = (v) => u.valToPos(v, "x", true), Y = (v) => u.valToPos(v, "y", true);
      ctx.save();
      ctx.beginPath();
      ctx.rect(b.left, b.top, b.width, b.height);
      ctx.clip();
      ctx.font = (11 * devicePixelRatio) + "px sans-serif";
      for (const s of spec.spans || []) {
        const x0 = X(s.from - 0.5), x1 = X(s.to + 0.5);
        ctx.fillStyle = "rgba(214,39,40,0.10)";
        ctx.fillRect(x0, b.top, Math.max(x1 - x0, 2), b.height);
        ctx.fillStyle = "#a00";
        ctx.fillText(s.label, Math.max(x0, b.left) + 3, b.top + 12 * devicePixelRatio);
      }
      ctx.lineWidth = devicePixelRatio;
      for (const h of spec.hlines || []) {
        ctx.strokeStyle = "#555";
        ctx.setLineDash([6, 4]);
        ctx.beginPath(); ctx.moveTo(b.left, Y(h.y)); ctx.lineTo(b.left + b.width, Y(h.y)); ctx.stroke();
        ctx.fillStyle = "#333";
        ctx.fillText(h.label, b.left + b.width - ctx.measureText(h.label).width - 4, Y(h.y) - 4);
      }
      ctx.setLineDash([]);
      for (const v of spec.vlines || []) {
        ctx.strokeStyle = "#d62728";
        ctx.beginPath(); ctx.moveTo(X(v.x), b.top); ctx.lineTo(X(v.x), b.top + b.height); ctx.stroke();
        ctx.fillStyle = "#d62728";
        if (v.label) ctx.fillText(v.label, X(v.x) + 3, b.top + 26 * devicePixelRatio);
      }
      let key = 0;
      for (const p of spec.points || []) {
        ctx.fillStyle = p.color;
        if (!spec.lines.length) {  // no legend on a plot of marks alone: the marks name themselves
          ctx.fillText("● " + p.label, b.left + 4, b.top + (12 + 14 * key++) * devicePixelRatio);
        }
        for (let i = 0; i < p.x.length; i++) {
          // a skipped step without a recorded scale sits on the bottom edge
          const y = p.y[i] == null ? b.top + b.height - 4 : Y(p.y[i]);
          ctx.beginPath(); ctx.arc(X(p.x[i]), y, 3.5 * devicePixelRatio, 0, 2 * Math.PI); ctx.fill();
        }
      }
      ctx.restore();
    };
  }

  function yRange(spec) {
    const extra = (spec.hlines || []).map((h) => h.y)
      .concat(...(spec.points || []).map((p) => p.y.filter((v) => v != null)));
    return function (u, min, max) {
      for (const v of extra) { min = min == null ? v : Math.min(min, v); max = max == null ? v : Math.max(max, v); }
      if (min == null) return spec.log ? [1, 2] : [0, 1];  // only marks without a value (skips with no scale logged)
      if (spec.ymax != null) max = Math.min(max, spec.ymax);
      if (spec.log) return uPlot.rangeLog(Math.max(min, 1e-12), Math.max(max, 1e-12), 2, true);
      return uPlot.rangeNum(spec.bars ? 0 : min, max, 0.1, true);
    };
  }

  function build(spec, el) {
    const data = [spec.x], series = [{ label: spec.xlabel || "step" }], bands = [], at = {};
    for (const line of spec.lines) {
      const value = (u, v) => fmt(spec.unit, v);
      if (spec.bars && data.length === 1) {
        series.push({ label: line.label, stroke: line.color, fill: fade(line.color, 0.6), value,
                      paths: uPlot.paths.bars({ size: [0.6, 60] }), points: { show: false } });
      } else if (spec.bars) {
        series.push({ label: line.label, stroke: line.color, value, paths: () => null,
                      points: { show: true, size: 9, fill: line.color } });
      } else {
        // overlaid runs share the x of all of them: each line is drawn across the steps only the others have
        series.push({ label: line.label + (line.min ? " (max)" : ""), stroke: line.color, width: 1.5, value,
                      scale: line.axis === "right" ? "r" : "y", spanGaps: !!spec.overlay });
      }
      data.push(line.max);
      at[line.label] = data.length - 1;
      if (line.min) {
        series.push({ label: line.label + " (min)", stroke: fade(line.color, 0.5), width: 1, value,
                      scale: line.axis === "right" ? "r" : "y" });
        data.push(line.min);
        bands.push({ series: [data.length - 2, data.length - 1], fill: fade(line.color, 0.15) });
      }
    }
    if (spec.gap && at[spec.gap.upper] != null && at[spec.gap.lower] != null) {
      // reserved above allocated: the memory the allocator holds but no tensor uses, shaded
      bands.push({ series: [at[spec.gap.upper], at[spec.gap.lower]], fill: "rgba(255,127,14,0.25)" });
    }
    const xr = spec.xrange;
    const opts = {
      title: spec.title, width: Math.max(el.clientWidth, 320), height: 260, series, bands,
      scales: {
        x: { time: false, range: xr ? (u, a, b) => [xr[0] - 0.5, xr[1] + 0.5] : undefined },
        y: { distr: spec.log ? 3 : 1, log: 2, range: yRange(spec) },
      },
      // whole steps only: a step axis never reads 12.5
      axes: [{ label: spec.xlabel || "step", incrs: [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500,
                                                      5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000] },
             { size: 70, values: (u, vals) => vals.map((v) => fmt(spec.unit, v)) }],
      // the legend names the lines; values show while hovering (a resting legend read "step: --")
      legend: { live: false, show: spec.lines.length > 0 },
      hooks: { draw: [drawMarks(spec)] },
    };
    if (spec.lines.some((l) => l.axis === "right")) {
      opts.scales.r = { range: (u, min, max) => uPlot.rangeNum(min == null ? 0 : min, max == null ? 1 : max, 0.1, true) };
      const right = spec.lines.find((l) => l.axis === "right");
      opts.axes.push({ scale: "r", side: 1, size: 70, stroke: right.color, grid: { show: false },
                       values: (u, vals) => vals.map((v) => fmt(spec.unit, v)) });
    }
    if (spec.bars) {
      opts.scales.x = { time: false, range: (u, a, b) => [a - 0.6, b + 0.6] };
      // whole ranks only (never rank 0.25), at most ~16 labels however many ranks
      const every = Math.ceil(spec.x.length / 16);
      opts.axes[0].splits = () => spec.x.filter((r, i) => i % every === 0);
    }
    return new uPlot(opts, data, el);
  }

  // The profiled window: one row per rank and kind of work, each range a bar where it ran. The rows are
  // y values (the top row highest), drawn in the draw hook, so uPlot's axes, zoom and resize apply.
  function drawLanes(spec) {
    return function (u) {
      const ctx = u.ctx, b = u.bbox, n = spec.rows.length, X = (v) => u.valToPos(v, "x", true);
      const Y = (i) => u.valToPos(n - 1 - i, "y", true), h = Math.abs(u.valToPos(0, "y", true) - u.valToPos(1, "y", true)) * 0.7;
      ctx.save();
      ctx.beginPath();
      ctx.rect(b.left, b.top, b.width, b.height);
      ctx.clip();
      spec.rows.forEach((row, i) => {
        ctx.fillStyle = row.color;
        const r = row.x, y = Y(i) - h / 2;
        for (let k = 0; k < r.length; k += 2) {
          const x0 = X(r[k]), x1 = X(r[k + 1]);
          if (x1 >= b.left && x0 <= b.left + b.width) ctx.fillRect(x0, y, Math.max(x1 - x0, devicePixelRatio), h);
        }
      });
      ctx.font = (11 * devicePixelRatio) + "px sans-serif";
      ctx.textAlign = "left";  // uPlot leaves the context as its last axis drew (the row names: right-aligned)
      ctx.textBaseline = "alphabetic";
      ctx.strokeStyle = "#333";
      ctx.fillStyle = "#333";
      ctx.lineWidth = devicePixelRatio;
      ctx.setLineDash([3, 3]);
      for (const m of spec.steps) {  // a step's start, across its rank's rows; named above the top rank
        const top = Y(m.row) - h * 0.7, bottom = Y(m.row + m.rows - 1) + h * 0.7;
        ctx.beginPath(); ctx.moveTo(X(m.x), top); ctx.lineTo(X(m.x), bottom); ctx.stroke();
        if (m.row === 0 && m.label) ctx.fillText(m.label, X(m.x) + 3, b.top + 10 * devicePixelRatio);
      }
      ctx.restore();
    };
  }

  function buildTimeline(spec, el) {
    const n = spec.rows.length, height = 100 + 20 * n;
    for (const row of spec.rows) {  // whole ticks, each from the one before (report/timeline.py) → seconds
      let at = 0;
      row.x = row.ranges.map((d) => (at += d) * spec.tick);
    }
    const opts = {
      title: spec.title, width: Math.max(el.clientWidth, 320), height,
      series: [{ label: "time" }, { label: "lanes", paths: () => null, points: { show: false } }],
      scales: { x: { time: false, range: (u, a, b) => [Math.max(a, 0), Math.min(b, spec.xmax)] },
                y: { range: [-0.5, n + 0.4] } },  // a band above the rows for the steps' names
      axes: [{ label: spec.xlabel, values: (u, vals) => vals.map((v) => fmt("s", v)) },
             { size: 190, gap: 4, splits: () => spec.rows.map((r, i) => n - 1 - i), grid: { show: false },
               values: (u, vals) => vals.map((v) => (spec.rows[n - 1 - v] || {}).label || "") }],
      cursor: { y: false, drag: { x: true, y: false } },
      legend: { show: false },
      hooks: { draw: [drawLanes(spec)] },
    };
    el.setAttribute("role", "img");  // a canvas says nothing to a screen reader: the rows are named here
    el.setAttribute("aria-label", spec.title + ". Rows: " + spec.rows.map((r) => r.label).join("; "));
    return [new uPlot(opts, [[0, spec.xmax], [null, null]], el), height];
  }

  const plots = [];
  // Draws #zd-data's plots into their divs; again after a live page put a new body in place (live.js).
  function draw() {
    for (const [u] of plots.splice(0)) u.destroy();
    const payload = JSON.parse(document.getElementById("zd-data").textContent);
    for (const run of payload.runs) {
      for (const spec of run.plots) {
        const el = document.getElementById(run.id + "-" + spec.id);
        plots.push([...(spec.timeline ? buildTimeline(spec, el) : [build(spec, el), 260]), el]);
        if (spec.note) {  // outliers left above the top edge: said under the plot (it wraps), never cut silently
          const note = document.createElement("p");
          note.className = "plot-note";
          note.textContent = "▲ " + spec.note;
          el.appendChild(note);
        }
      }
    }
    document.body.dataset.plots = plots.length;
  }
  draw();
  window.zdDraw = draw;
  window.addEventListener("resize", () => { for (const [u, height, el] of plots) u.setSize({ width: el.clientWidth, height }); });
  document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
})();
