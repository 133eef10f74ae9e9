"""``watch --html DIR``: a real watch subprocess, a run directory its ranks append to, and the live
page and index following along, written atomically, drawing in a real browser."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.report.browser import Browser, chromium
from tests.watch.conftest import start_watch, stop, wait_for

SAMPLE = ROOT / "samples/fp16-min-scale"
HEALTHY_LINES = 20  # run_start and the steps before the first overflow (step 31)


def _append(run_dir: Path, part: slice) -> None:
    for rank in (0, 1):
        lines = (SAMPLE / f"rank-{rank}.jsonl").read_text().splitlines(keepends=True)
        with open(run_dir / f"rank-{rank}.jsonl", "a") as f:
            f.writelines(lines[part])


def _watched_healthy_start(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen]:
    """The sample's healthy first lines in ``runs/``, and ``watch --html html/`` started on them."""
    runs, out = tmp_path / "runs", tmp_path / "html"
    run_dir = runs / "fp16-min-scale"
    run_dir.mkdir(parents=True)
    _append(run_dir, slice(0, HEALTHY_LINES))
    return run_dir, out, start_watch(str(runs), "--html", str(out))


def test_live_page_and_index_follow_the_run(tmp_path: Path) -> None:
    run_dir, out, proc = _watched_healthy_start(tmp_path)
    runs = run_dir.parent
    try:
        page, index = out / "fp16-min-scale.html", out / "index.html"
        wait_for(lambda: page.exists() and index.exists(), timeout=60)
        first = page.read_text()
        assert 'data-src="fp16-min-scale.live.js"' in first and "http-equiv" not in first  # updated, not reloaded
        assert (out / "fp16-min-scale.live.js").read_text().startswith("zdLive(")
        assert "no findings" in first and "ZD201" not in first
        assert "input file" not in first  # the run's judgement, not a diagnose of files: no "0 input files"
        assert "fp16-min-scale.html" in index.read_text()

        _append(run_dir, slice(HEALTHY_LINES, None))  # the overflows, then DeepSpeed's abort
        # the page, then the index: each written whole, one after the other; the index shows the run's worst
        # finding, its first error: the loss that diverged at step 31 (ZD200), before the scale's collapse (ZD201)
        wait_for(lambda: "ZD201" in page.read_text() and "loss-diverged" in index.read_text(), timeout=60)
        assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # os.replace left no temporary file

        # nothing new, nothing written: a page is written only after a judgement
        before = os.stat(page).st_mtime_ns
        time.sleep(4)
        assert os.stat(page).st_mtime_ns == before

        if chromium() is not None or os.environ.get("CI"):
            with Browser() as browser:
                rendered = browser.render(page, "document.querySelectorAll('.plot .uplot canvas').length")
            assert rendered.errors == [] and rendered.value >= 4
    finally:
        code, _, err = stop(proc)
    assert code == 0, err

    # a restarted watch judges only the run with new lines; the index still lists the other one
    healthy = runs / "healthy-zero2"
    healthy.mkdir()
    for f in (ROOT / "samples/healthy-zero2").glob("rank-*.jsonl"):
        (healthy / f.name).write_text(f.read_text())
    again = start_watch(str(runs), "--once", "--html", str(out))
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    listed = index.read_text()
    assert "healthy-zero2.html" in listed and "loss-diverged" in listed


def test_an_open_page_takes_the_new_findings_and_plots_in_place_without_a_reload(tmp_path: Path) -> None:
    """The page is open in Chromium when the overflows arrive: within a few polls it shows ZD201 and its plots,
    and a value the page held before (as a reader's place or zoom would be) is still there: no reload."""
    import threading

    if chromium() is None and not os.environ.get("CI"):
        pytest.skip("no chromium")
    run_dir, out, proc = _watched_healthy_start(tmp_path)
    try:
        page = out / "fp16-min-scale.html"
        wait_for(page.exists, timeout=60)
        later = threading.Timer(3.0, _append, (run_dir, slice(HEALTHY_LINES, None)))
        later.start()
        waiting = """new Promise((resolve) => {
            window.kept = "before";
            const t0 = Date.now();
            (function poll() {
              if (document.body.innerText.includes("ZD201") || Date.now() - t0 > 50000) {
                resolve({kept: window.kept, shown: document.body.innerText.includes("ZD201"),
                         updates: Number(document.body.dataset.liveUpdates || 0),
                         canvases: document.querySelectorAll(".plot .uplot canvas").length,
                         marks: document.querySelectorAll(".plots").length});
              } else setTimeout(poll, 200);
            })();
        })"""
        with Browser(timeout_s=90) as browser:
            rendered = browser.render(page, waiting)
        later.join()
    finally:
        code, _, err = stop(proc)
    assert code == 0, err
    assert rendered.errors == []
    assert rendered.value["shown"] and rendered.value["kept"] == "before"  # the same page, its state kept
    assert rendered.value["updates"] >= 1 and rendered.value["canvases"] >= 4


def test_html_dir_must_be_creatable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    (tmp_path / "runs").mkdir()
    proc = start_watch(str(tmp_path / "runs"), "--once", "--html", str(blocker / "sub"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.startswith("zerodoctor: error: ") and "file/sub" in err


@pytest.mark.parametrize("name", ["a/b", "run 1"])
def test_page_names_are_safe(name: str) -> None:
    from zerodoctor.report.live import page_name

    assert "/" not in page_name(name) and " " not in page_name(name)


COLLIDING = ["训练-7b", "测试-7b", "index", "r" * 300, "__-7b", ".hidden"]


def test_no_two_runs_share_a_page_and_none_is_the_index() -> None:
    from zerodoctor.report.live import page_name

    pages = [page_name(n) for n in COLLIDING]
    assert len(set(pages)) == len(pages) and "index.html" not in pages  # before: 训练/测试 one page, index the index
    assert all(len(p.encode()) <= 255 and not p.startswith(".") for p in pages)
    assert page_name("llama-7b_run.3") == "llama-7b_run.3.html"  # a plain name is kept as it is


def test_watch_html_writes_a_page_for_every_run_whatever_its_name(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "html"
    for name in COLLIDING:
        _write_min_scale_run(runs / f"dir{COLLIDING.index(name)}", name)
    proc = start_watch(str(runs), "--once", "--html", str(out))
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert all(f"run {name}" in stdout for name in COLLIDING)  # every run's finding announced
    from zerodoctor.report.live import page_name

    for name in COLLIDING:
        assert name in (out / page_name(name)).read_text(), name  # its own page, not another run's
    assert "<h1>zerodoctor watch</h1>" in (out / "index.html").read_text()


def _write_min_scale_run(run_dir: Path, name: str) -> None:
    """A run_start DeepSpeed refuses (fp16.min_loss_scale 0.5: ZD605), and one step."""
    import json

    run_dir.mkdir(parents=True)
    lines = [{"v": 1, "t": 1000.0, "run": name, "rank": 0, "kind": "run_start", "world_size": 1, "precision": "fp16",
              "config": {"train_batch_size": 8, "fp16": {"enabled": True, "min_loss_scale": 0.5}}},
             {"v": 1, "t": 1001.0, "run": name, "rank": 0, "kind": "step", "step": 1, "loss": 1.0, "samples": 8,
              "micro_batches": 1}]
    (run_dir / "rank-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("kept", ['{"stale-run-x": {"findings": 2, "worst": "ZD201"}, "stale-run-y": [1]}', "[1, 2]",
                                  '{"stale-run-x": {"findings": "two", "updated": "yesterday"}}', "{not json"])
def test_an_index_json_of_another_shape_never_stops_the_index(tmp_path: Path, kept: str) -> None:
    """Issue 34's round 4: a corrupt index.json stopped index.html forever; its entries of other shapes are left out."""
    runs, out = tmp_path / "runs", tmp_path / "html"
    _write_min_scale_run(runs / "r", "fresh")
    out.mkdir()
    (out / "index.json").write_text(kept)
    proc = start_watch(str(runs), "--once", "--html", str(out))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    index = (out / "index.html").read_text()
    assert "fresh" in index and "ZD605" in index and "stale-run" not in index
