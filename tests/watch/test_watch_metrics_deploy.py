"""The shipped Prometheus rules and Grafana dashboard (``deploy/``): promtool checks and unit-tests the rules,
and every metric either one queries is one a real exporter serves, scraped over HTTP."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.watch.test_watch_metrics import copy_run, scrape
from zerodoctor.store.db import open_engine
from zerodoctor.watch.daemon import Watcher
from zerodoctor.watch.metrics import LiveMetrics, serve

RULES = ROOT / "deploy/prometheus/zerodoctor-alerts.yml"
RULE_TESTS = ROOT / "deploy/prometheus/zerodoctor-alerts.test.yml"
DASHBOARD = ROOT / "deploy/grafana/zerodoctor-dashboard.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
NAME = re.compile(r"\bzerodoctor_[a-z0-9_]+")


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="no promtool (Debian: apt-get install prometheus)")
@pytest.mark.parametrize("command", [["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]])
def test_promtool_passes_the_shipped_rules(command: list[str]) -> None:
    done = subprocess.run([PROMTOOL, *command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _queries() -> dict[str, set[str]]:
    """Where each metric name the shipped files query appears: the dashboard's targets and variables, the rules."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", ())]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    out: dict[str, set[str]] = {}
    for where, texts in (("dashboard", exprs), ("rules", [RULES.read_text()])):
        for text in texts:
            for name in NAME.findall(text):
                out.setdefault(name, set()).add(where)
    return out


def test_every_queried_metric_is_served(tmp_path: Path, rules) -> None:
    """A real watcher over a CPU fp16 run, a real H200 run with memory stats and a run with a malformed line
    publishes; its exporter is scraped over HTTP; a name the board or the rules query and nobody serves is a
    panel that stays empty forever."""
    runs = tmp_path / "runs"
    copy_run(runs)
    copy_run(runs, ROOT / "samples/gpu-fragmentation-oom-h200")
    bad = copy_run(runs, ROOT / "samples/healthy-zero2")
    with open(bad / "rank-0.jsonl", "a") as f:
        f.write('{"v": 1, "kind": "step", "run": \n')  # a line cut short: quarantined
    engine = open_engine(runs / "zerodoctor.db")
    watcher = Watcher(engine, [runs], rules, lambda *said: None, metrics=LiveMetrics())
    server = None
    try:
        watcher.look(final=True)
        server = serve(watcher.metrics, "127.0.0.1", 0)
        served = {name for name, _ in scrape("%s:%d" % server.address)}
    finally:
        if server is not None:
            server.close()
        watcher.close()
        engine.dispose()
    queried = _queries()
    assert {"dashboard", "rules"} <= set().union(*queried.values())
    assert {name: where for name, where in queried.items() if name not in served} == {}
