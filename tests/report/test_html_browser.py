"""The HTML report in a real headless Chromium: the plots are drawn, no JS error, nothing fetched.

Each page is written by the real CLI (``diagnose --format html -o``); the screenshots stay in
``test-artifacts/`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.report.browser import Browser, chromium

ARTIFACTS = ROOT / "test-artifacts"

# input (a sample run directory, or a real console log among the fixtures) → the plots its page must draw
EXPECTED = {
    "samples/fp16-min-scale": {"scale", "loss", "time", "ranks"},
    "samples/fragmentation-oom": {"loss", "time", "memory", "ranks"},
    "samples/healthy-zero2": {"loss", "time", "ranks"},
    "samples/gpu-capacity-oom-h200": {"loss", "time", "memory"},
    "samples/offload-zero3": {"loss", "time", "ranks"},
    # skips logged without a scale, and timers and memory on the last step only
    "tests/fixtures/logs/deepspeed_progress_throughput_memory.log": {"scale", "time", "memory"},
    "tests/fixtures/logs/deepspeed_loss_scaler_calibration.log": {"scale"},
}

# per plot on the page: its id, canvases drawn, and how many pixels are not background
PROBE = """JSON.stringify([...document.querySelectorAll('.plot')].map(el => ({
  id: el.id.replace(/^run\\d+-/, ''),
  canvases: el.querySelectorAll('.uplot canvas').length,
  inked: [...el.querySelectorAll('canvas')].map(c => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }).reduce((a, b) => a + b, 0),
  legend: [...el.querySelectorAll('.u-legend .u-label')].map(l => l.textContent),
})))"""


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed here (CI installs it)")
    with Browser() as b:
        yield b


@pytest.mark.parametrize("source", sorted(EXPECTED))
def test_sample_page_draws_its_plots_without_errors(browser: Browser, source: str, tmp_path: Path) -> None:
    sample = Path(source).stem
    page = tmp_path / f"{sample}.html"
    proc = run_cli("diagnose", str(ROOT / source), "--format", "html", "-o", str(page), "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report-{sample}.png"
    rendered = browser.render(page, PROBE, shot)
    print(f"screenshot: {shot} (page {page.stat().st_size} bytes, loaded in {rendered.load_s:.2f} s)")

    assert rendered.errors == []
    assert rendered.requests == [page.absolute().as_uri()]  # self-contained: nothing else fetched
    plots = {p["id"]: p for p in json.loads(rendered.value)}
    assert set(plots) == EXPECTED[source]
    for p in plots.values():
        assert p["canvases"] >= 1 and p["inked"] > 2000, p  # drawn, not an empty frame
        assert p["legend"] or p["id"] == "scale" and source.endswith("throughput_memory.log"), p  # marks alone
    assert shot.stat().st_size > 10_000


def test_a_script_error_is_caught(browser: Browser, tmp_path: Path) -> None:
    """The capture itself can fail: a page that throws is reported."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><body><script>console.error('logged'); undefinedCall();</script></body>")
    rendered = browser.render(page, "1")
    assert any("logged" in e for e in rendered.errors)
    assert any("undefinedCall" in e for e in rendered.errors)


def test_new_plot_elements_are_drawn(browser: Browser, tmp_path: Path) -> None:
    """The H200 capacity OOM: its 554 ms first step is clipped with a note under the time plot (the other 93
    steps were a flat line at 0 before), the memory plot has the usable-memory line, the reserved-minus-allocated
    gap is a band, step ticks are whole, and the legend rests on its labels ("step: --" before)."""
    page = tmp_path / "h200.html"
    proc = run_cli("diagnose", str(ROOT / "samples/gpu-capacity-oom-h200"), "--format", "html", "-o", str(page),
                   "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    probe = """JSON.stringify({
      notes: [...document.querySelectorAll('.plot-note')].map(n => [n.parentElement.id.replace(/^run\\d+-/, ''),
                                                                  n.textContent]),
      ticks: [...document.querySelectorAll('.plot')].length,
      legend: [...document.querySelectorAll('.u-legend .u-value')].map(v => v.textContent),
      specs: JSON.parse(document.getElementById('zd-data').textContent).runs[0].plots})"""
    rendered = browser.render(page, probe, ARTIFACTS / "report-h200-new-elements.png")
    assert rendered.errors == []
    got = json.loads(rendered.value)
    assert got["notes"] == [["time", "▲ 4 values above the top edge, up to 554 ms at step 1: clipped so the other "
                                     "steps stay readable"]]
    memory = next(s for s in got["specs"] if s["id"] == "memory")
    assert memory["hlines"][0]["label"] == "usable device memory 6.00 GiB"
    assert memory["gap"] == {"upper": "reserved", "lower": "allocated", "label": "reserved but unallocated"}
    assert "--" not in got["legend"]


# the timeline's canvas: pixels of each row's own colour (its bars), its rows as the element names them
TIMELINE_PROBE = """(() => {
  const el = document.querySelector('.plot[id$="-timeline"]');
  if (!el) return null;
  const c = el.querySelector('.uplot canvas'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const colours = {compute: [31, 119, 180], communication: [214, 39, 40], idle: [158, 158, 158]}, count = {};
  for (const k in colours) count[k] = 0;
  for (let i = 0; i < d.length; i += 4)
    for (const k in colours) if (d[i] === colours[k][0] && d[i + 1] === colours[k][1] && d[i + 2] === colours[k][2])
    count[k]++;
  return JSON.stringify({label: el.getAttribute('aria-label'), wide: el.classList.contains('wide'),
                         width: c.width, count});
})()"""


def test_a_profiled_run_draws_its_timeline_one_row_per_rank_and_kind(browser: Browser, tmp_path: Path) -> None:
    """A real 2-rank gloo ZeRO-3 run on CPU under ``zerodoctor run --profile 5-7`` (the ZD302 fixture): its page
    draws the profiled window, one row per rank and kind of work measured on a CPU-only trace's host threads
    (no memcpy row: such a trace has no copies), each row's bars on the canvas."""
    page = tmp_path / "profiled.html"
    proc = run_cli("diagnose", str(ROOT / "tests/fixtures/rules/ZD302/fires.run"), "--format", "html", "-o", str(page),
                   "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    ARTIFACTS.mkdir(exist_ok=True)
    rendered = browser.render(page, TIMELINE_PROBE, ARTIFACTS / "report-timeline-zd302.png")
    assert rendered.errors == [] and rendered.requests == [page.absolute().as_uri()]
    got = json.loads(rendered.value)
    title, rows = got["label"].split(". Rows: ")
    assert title.startswith("Profiled window per rank, host threads (a CPU-only trace)")
    assert rows.split("; ") == [f"rank {r} · {k}" for r in (0, 1) for k in ("compute", "communication", "idle")]
    assert got["wide"] and got["width"] > 1000  # the page's whole width, not half a grid cell
    assert all(n > 500 for n in got["count"].values()), got["count"]  # each kind's bars are on the canvas
    print(f"page {page.stat().st_size} bytes; timeline pixels {got['count']}")


def _overlays(browser: Browser, page: Path, section: str, shot: str) -> dict[str, dict]:
    """The plots drawn under ``section`` (an overlay's: ``overlay``, ``attempts0``), by plot id."""
    rendered = browser.render(page, PROBE, ARTIFACTS / shot)
    assert rendered.errors == [] and rendered.requests == [page.absolute().as_uri()]
    return {p["id"].removeprefix(section + "-"): p for p in json.loads(rendered.value)
            if p["id"].startswith(section + "-")}


def test_compare_draws_both_runs_on_one_step_axis(browser: Browser, tmp_path: Path) -> None:
    """``compare`` stacked A's plots above B's; the headline of each plot both have is drawn once, A and B in
    their own colours on one step axis."""
    page = tmp_path / "compare.html"
    proc = run_cli("compare", str(ROOT / "samples/healthy-zero2"), str(ROOT / "samples/fp16-min-scale"),
                   "--format", "html", "-o", str(page))
    assert proc.returncode in (0, 1), proc.stderr
    ARTIFACTS.mkdir(exist_ok=True)
    overlays = _overlays(browser, page, "overlay", "compare-overlay.png")
    assert set(overlays) == {"loss", "time"}  # fp32 A has no loss scale, neither has memory
    for plot in overlays.values():
        assert {"A: healthy-zero2", "B: fp16-min-scale"} <= set(plot["legend"]), plot
        assert plot["inked"] > 2000, plot


def test_a_fix_and_resume_run_draws_its_attempts_on_one_step_axis(browser: Browser, tmp_path: Path) -> None:
    """A run directory holding two attempts (``attempt-K/``, run ids ``<id>.attempt-K``): the page overlays them.
    The attempts are two recorded sample runs' real rank files, their run ids set to the attempts'."""
    job = tmp_path / "job"
    for number, sample in ((1, "fp16-min-scale"), (2, "healthy-zero2")):
        attempt = job / f"attempt-{number}"
        attempt.mkdir(parents=True)
        for rank_file in sorted((ROOT / "samples" / sample).glob("rank-*.jsonl")):
            lines = [json.loads(line) for line in rank_file.read_text().splitlines()]
            (attempt / rank_file.name).write_text("".join(json.dumps({**e, "run": f"job.attempt-{number}"}) + "\n"
                                                          for e in lines))
    page = tmp_path / "attempts.html"
    proc = run_cli("diagnose", str(job), "--format", "html", "-o", str(page), "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    assert "run job: its attempts on one step axis" in page.read_text()
    ARTIFACTS.mkdir(exist_ok=True)
    overlays = _overlays(browser, page, "attempts0", "attempts-overlay.png")
    assert set(overlays) == {"loss", "time"}
    for plot in overlays.values():
        assert {"attempt 1", "attempt 2"} <= set(plot["legend"]), plot


def test_pages_of_hostile_values_are_drawn_without_a_script_error(browser: Browser, tmp_path: Path) -> None:
    """A NaN ``min_loss_scale`` and steps from -1 to 2^63-1 (issue 23's hostile runs): the pages load and draw
    (before: the page was not written; then written with null where the JSON had NaN)."""
    def line(run: str, kind: str, **fields) -> str:
        return json.dumps({"v": 1, "t": 1000.0, "run": run, "rank": 0, "kind": kind, **fields}, allow_nan=True) + "\n"

    nan = tmp_path / "nan" / "rank-0.jsonl"
    nan.parent.mkdir()
    nan.write_text(line("nan", "run_start", world_size=1, precision="fp16",
                        config={"train_batch_size": 8, "fp16": {"enabled": True, "min_loss_scale": float("nan")}})
                   + "".join(line("nan", "step", step=i, loss=1.0, overflow=i % 4 == 3, loss_scale=65536.0)
                             for i in range(1, 30)))
    steps = tmp_path / "steps" / "rank-0.jsonl"
    steps.parent.mkdir()
    steps.write_text(line("steps", "run_start", world_size=1, config={"train_batch_size": 8})
                     + "".join(line("steps", "step", step=s, loss=float("nan") if s == 2 ** 63 - 1 else 1.0)
                               for s in (-1, 0, 1, 2 ** 63 - 1)))
    for run_dir in (nan.parent, steps.parent):
        page = tmp_path / f"{run_dir.name}.html"
        proc = run_cli("diagnose", str(run_dir), "--format", "html", "-o", str(page), "--fail-on", "never")
        assert proc.returncode == 0, proc.stderr
        rendered = browser.render(page, PROBE)
        assert rendered.errors == [], (run_dir.name, rendered.errors)
        plots = json.loads(rendered.value)
        assert plots and all(p["canvases"] >= 1 for p in plots), (run_dir.name, plots)
