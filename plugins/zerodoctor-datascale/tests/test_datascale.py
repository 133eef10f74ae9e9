"""The data-scale plugin, installed as a package: found through its entry point, judged like core rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "ZD801"


def _zerodoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", *args], capture_output=True, text=True, timeout=120)


def _diagnose(path: Path) -> dict:
    proc = _zerodoctor("diagnose", "--format", "json", "--fail-on", "never", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plugin_is_loaded_through_its_entry_point() -> None:
    proc = _zerodoctor("plugins", "list", "--format", "json")
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert plugins["datascale"]["origin"].startswith("zerodoctor-datascale ")
    assert plugins["datascale"]["hooks"] == ["register_rules", "register_signals"]
    assert "ZD801" in _zerodoctor("rules", "list").stdout


def test_fires_when_planned_far_below_twenty_tokens_per_parameter() -> None:
    finding, = [f for f in _diagnose(FIXTURES / "fires.jsonl")["findings"] if f["rule"] == "ZD801"]
    assert finding["category"] == "data"
    # 8 ranks × 4 sequences × 2048 tokens = 65,536 tokens per step, × 100,000 planned steps, / 6.7e9 parameters
    assert abs(finding["evidence"]["data.tokens_per_param"] - 65_536 * 100_000 / 6.7e9) < 1e-3
    assert "6.55e+09 tokens" in finding["message"]


def test_silent_and_judged_when_the_data_fits_the_model() -> None:
    out = _diagnose(FIXTURES / "silent.jsonl")
    assert "ZD801" not in {f["rule"] for f in out["findings"]}
    assert "ZD801" not in {u["rule"] for u in out["unevaluated"]}
