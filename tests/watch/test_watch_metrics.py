"""``watch --metrics``: a real watch subprocess serving /metrics, scraped by a real Prometheus server (Debian's
package) with the shipped alerting rules loaded, and read back through Prometheus's query API; the findings'
series going to 0 once acknowledged (SQLite and PostgreSQL) or gone."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT
from tests.watch.conftest import ENV, start_watch, stop, wait_for
from zerodoctor.rulebook.finding import Finding
from zerodoctor.store.db import open_engine
from zerodoctor.watch.metrics import LiveMetrics

SAMPLE = ROOT / "samples/fp16-min-scale"
RULES_FILE = ROOT / "deploy/prometheus/zerodoctor-alerts.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ZD201 = 'zerodoctor_findings{run="fp16-min-scale",rule="ZD201",severity="error"}'


def copy_run(runs: Path, sample: Path = SAMPLE) -> Path:
    """A sample's rank files as a run directory of ``runs`` (its expected.json is the test's, not the run's)."""
    run_dir = runs / sample.name
    run_dir.mkdir(parents=True)
    for f in sample.glob("rank-*.jsonl"):
        shutil.copy(f, run_dir / f.name)
    return run_dir


def watch_with_metrics(runs: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """``watch runs --metrics 127.0.0.1:0`` and the address it says it serves on (its first log line)."""
    proc = start_watch(str(runs), "--metrics", "127.0.0.1:0", *args)
    line = proc.stderr.readline()
    if "serving Prometheus metrics on http://" not in line:
        _, out, err = stop(proc)
        raise AssertionError(f"no metrics address in {line!r}: {err}")
    return proc, line.split("http://", 1)[1].split("/", 1)[0]


def scrape(where: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://{where}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def finding(series: dict, run: str, rule: str) -> float | None:
    values = [v for (name, labels), v in series.items()
              if name == "zerodoctor_findings" and ("run", run) in labels and ("rule", rule) in labels]
    return values[0] if values else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(api: str, expr: str) -> list[dict]:
    url = f"{api}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)["data"]["result"]


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="no prometheus binary (Debian: apt-get install prometheus)")
def test_prometheus_scrapes_a_live_watch(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    copy_run(runs)
    proc, where = watch_with_metrics(runs)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{RULES_FILE}"]
scrape_configs:
  - job_name: zerodoctor
    static_configs: [{{targets: ["{where}"]}}]
""")
    with open(tmp_path / "prometheus.log", "w") as log:  # the server keeps its own copy of the descriptor
        prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    api = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            try:
                return bool(query(api, ZD201))
            except OSError:  # not listening yet
                assert prometheus.poll() is None, (tmp_path / "prometheus.log").read_text()
                return False

        wait_for(ready, timeout=90, every=0.5)
        assert [r["value"][1] for r in query(api, ZD201)] == ["1"]
        steps = query(api, 'zerodoctor_rank_last_step{run="fp16-min-scale"}')
        assert sorted((r["metric"]["rank"], r["value"][1]) for r in steps) == [("0", "39"), ("1", "39")]
        assert {r["metric"]["phase"] for r in query(api, 'zerodoctor_rank_step_phase_seconds{rank="0"}')} == {
            "forward", "backward", "optimizer", "communication"}

        # the shipped rules, evaluated by Prometheus itself: the error finding is a firing alert
        def firing() -> list[dict]:
            with urllib.request.urlopen(f"{api}/api/v1/alerts", timeout=10) as resp:
                alerts = json.load(resp)["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "ZerodoctorError" and a["state"] == "firing"
                    and a["labels"]["rule"] == "ZD201"]

        alert = wait_for(firing, timeout=30, every=0.5)[0]
        assert alert["annotations"]["summary"] == "Run fp16-min-scale: ZD201 fp16-loss-scale-collapse"
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        code, _, err = stop(proc)
    assert code == 0, err


def test_acknowledged_finding_goes_to_zero(tmp_path: Path, store_url: str) -> None:
    """``zerodoctor ack`` in another process, on a run that ended (judged no more): the series is 0 at the next
    look, the other finding still 1; on SQLite and on PostgreSQL."""
    runs = tmp_path / "runs"
    copy_run(runs)
    proc, where = watch_with_metrics(runs, "--db", store_url)
    try:
        wait_for(lambda: finding(scrape(where), "fp16-min-scale", "ZD201") == 1.0, timeout=60, every=0.2)
        acked = subprocess.run([sys.executable, "-m", "zerodoctor", "ack", "fp16-min-scale", "ZD201",
                                "--db", store_url], capture_output=True, text=True, env=ENV, timeout=60)
        assert acked.returncode == 0, acked.stderr
        wait_for(lambda: finding(scrape(where), "fp16-min-scale", "ZD201") == 0.0, timeout=30, every=0.2)
        after = scrape(where)
        assert finding(after, "fp16-min-scale", "ZD200") == 1.0
        assert after[("zerodoctor_rank_skipped_steps_total", (("rank", "1"), ("run", "fp16-min-scale")))] == 9
        assert after[("zerodoctor_ingest_passes_total", ())] > 0
    finally:
        code, _, err = stop(proc)
    assert code == 0, err


def test_gone_finding_goes_to_zero_and_keeps_its_labels(tmp_path: Path) -> None:
    """A rule that found something and no longer does is 0, under the labels it had, not a series that vanishes:
    an alert resolves, a board's timeline shows when it ended."""
    engine = open_engine(tmp_path / "store.db")
    metrics = LiveMetrics()
    scale = Finding("ZD201", "fp16-loss-scale-collapse", "fp16_overflow", "error", "…", "r")
    try:
        with engine.connect() as conn:
            metrics.judged("r", [scale])
            metrics.publish(conn, {})
            first = {tuple(s.labels.items()): s.value for f in metrics.collect() for s in f.samples
                     if s.name == "zerodoctor_findings"}
            metrics.judged("r", [])
            metrics.publish(conn, {})
            then = {tuple(s.labels.items()): s.value for f in metrics.collect() for s in f.samples
                    if s.name == "zerodoctor_findings"}
    finally:
        engine.dispose()
    labels = (("run", "r"), ("rule", "ZD201"), ("name", "fp16-loss-scale-collapse"), ("category", "fp16_overflow"),
              ("severity", "error"))
    assert first == {labels: 1.0} and then == {labels: 0.0}


def test_metrics_refuses_a_bad_address_and_once(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    for args, said in ((["--metrics", "9400"], "expected HOST:PORT"),
                       (["--metrics", "127.0.0.1:9400", "--once"], "--once exits after one look")):
        done = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", str(tmp_path / "runs"), *args],
                              capture_output=True, text=True, env=ENV, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", str(tmp_path / "runs"), "--metrics",
                               f"127.0.0.1:{taken.getsockname()[1]}"], capture_output=True, text=True, env=ENV,
                              timeout=60)
    assert done.returncode == 2 and "cannot serve there: Address already in use" in done.stderr, done.stderr


def test_run_info_names_the_slurm_job(tmp_path: Path) -> None:
    """A run is found by the Slurm job id a person searches for: zerodoctor_run_info carries what rank 0's
    run_start recorded. The start is the sample's real rank-0 run_start with Slurm's variables added as the
    probe records them under an array job's step (names from Slurm's sbatch/srun documentation)."""
    start = json.loads((SAMPLE / "rank-0.jsonl").read_text().splitlines()[0])
    start["env"].update(SLURM_JOB_ID="4243", SLURM_ARRAY_JOB_ID="4242", SLURM_ARRAY_TASK_ID="1", SLURM_STEP_ID="0",
                        SLURM_JOB_NODELIST="gpu[001-002]")
    engine = open_engine(tmp_path / "store.db")
    metrics = LiveMetrics()
    try:
        with engine.connect() as conn:
            metrics.judged("fp16-min-scale", [], start)
            metrics.publish(conn, {})
    finally:
        engine.dispose()
    info = [s.labels for f in metrics.collect() for s in f.samples if s.name == "zerodoctor_run_info"]
    assert info == [{"run": "fp16-min-scale", "host": "vm", "zero_stage": "2", "precision": "fp16",
                     "slurm_job_id": "4243", "slurm_array_job_id": "4242", "slurm_array_task_id": "1",
                     "slurm_step_id": "0", "slurm_job_nodelist": "gpu[001-002]"}]
