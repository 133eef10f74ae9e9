"""The HTML page without a browser: self-contained, bounded however long the run, every overflow and
OOM in the plot data, the vendored script the version and licence VENDORED.md names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import ingested_series
from zerodoctor.report.html import to_html
from zerodoctor.report.model import Report
from zerodoctor.signals.plots import POINTS

ASSETS = Path(__file__).resolve().parents[2] / "zerodoctor" / "report" / "assets"


def _page(tmp_path: Path, n_steps: int, overflow_every: int) -> tuple[str, dict]:
    rows = [{"v": 1, "t": float(n), "run": "long", "rank": r, "kind": "step", "step": n, "loss": 2.0,
             "loss_scale": 1024.0, "overflow": n % overflow_every == 0, "step_time_s": 0.5, "comm_s": 0.1,
             "mem_allocated_bytes": 2**30, "mem_reserved_bytes": 2**31} for n in range(1, n_steps + 1) for r in (0, 1)]
    rows.append({"v": 1, "t": 1e6, "run": "long", "rank": 1, "kind": "oom", "step": n_steps, "reserved_bytes": 2**31})
    series = ingested_series(tmp_path, rows, "long")
    page = to_html(Report(configs={"long": {"fp16": {"enabled": True, "min_loss_scale": 1}}}, series={"long": series}))
    data = json.loads(re.search(r'<script type="application/json" id="zd-data">(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))
    return page, {p["id"]: p for p in data["runs"][0]["plots"]}


def test_page_is_bounded_and_keeps_every_overflow_and_oom(tmp_path: Path) -> None:
    short, _ = _page(tmp_path, 2_000, 1_000)
    page, plots = _page(tmp_path, 20_000, 40)
    assert POINTS // 2 < len(plots["loss"]["x"]) <= POINTS  # 20,000 steps drawn as 625 buckets with a min/max band
    assert plots["loss"]["lines"][0]["min"] is not None
    overflows = plots["scale"]["points"][0]["x"]
    assert overflows == list(range(40, 20_001, 40))  # all 500 of them, at their own step
    assert plots["scale"]["hlines"] == [{"y": 1, "label": "min_loss_scale 1"}]
    assert [v["x"] for v in plots["memory"]["vlines"]] == [20_000]
    # 10x the steps: the page grows by the overflow marks, not by the steps
    assert len(page) < len(short) + 40_000


def test_page_is_self_contained(tmp_path: Path) -> None:
    page, _ = _page(tmp_path, 100, 10)
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(http" not in page
    assert "<script>/*! https://github.com/leeoniya/uPlot (v1.6.32) */" in page


def test_vendored_asset_matches_its_record() -> None:
    header = (ASSETS / "uPlot.iife.min.js").read_text()[:60]
    version = re.search(r"\(v([\d.]+)\)", header).group(1)
    record = (ASSETS / "VENDORED.md").read_text()
    assert f"| {version} " in record and "uPlot.LICENSE" in record
    assert "MIT License" in (ASSETS / "uPlot.LICENSE").read_text()
