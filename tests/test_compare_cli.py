"""``zerodoctor compare A B``: the healthy ZeRO-2 run against the one whose fp16 loss scale collapsed.

The explanation must come first and name the rule that fires in B only with the config keys
behind it; the numbers side by side must show the skipped steps; JSON, text and HTML agree.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, run_cli

A, B = str(ROOT / "samples/healthy-zero2"), str(ROOT / "samples/fp16-min-scale")


def test_text_explains_the_difference_first() -> None:
    proc = run_cli("compare", A, B)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("ERROR only in fp16-min-scale (not in healthy-zero2): ZD200 loss-diverged")
    assert lines[2].startswith("ERROR only in fp16-min-scale (not in healthy-zero2): ZD201 fp16-loss-scale-collapse")
    assert "the configs differ where its fix acts: fp16.enabled (absent → true)" in lines[2]
    table = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.startswith("  ") and line.split()}
    assert table["fp16.enabled"] == ["absent", "true"]
    assert table["train_batch_size"] == ["16", "8"]
    skipped = next(line for line in lines if "steps skipped (overflow)" in line).split()
    assert skipped[-2:] == ["0%", "23%"]


def test_json_keeps_keys_and_numbers() -> None:
    proc = run_cli("compare", A, B, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert (body["a"]["run"], body["b"]["run"]) == ("healthy-zero2", "fp16-min-scale")
    assert [(o["in"], o["rule"]) for o in body["only"]] == [("b", "ZD200"), ("b", "ZD201")]
    assert {"key": "fp16.enabled", "b": True} in body["config"]  # absent in A: no "a" key
    numbers = {n["name"]: (n["a"], n["b"]) for n in body["numbers"]}
    assert numbers["steps skipped (overflow)"] == (0.0, 9 / 39)
    assert numbers["samples per step (all ranks)"] == (16, 8)


def test_same_run_twice_says_so_and_html_is_one_page(tmp_path: Path) -> None:
    proc = run_cli("compare", A, A)
    assert "the same rules fire in both (none)" in proc.stdout
    assert "config: the same" in proc.stdout
    page = tmp_path / "compare.html"
    proc = run_cli("compare", A, B, "--format", "html", "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "<script src" not in text and "ZD201" in text
    assert 'id="run0-loss"' in text and 'id="run1-scale"' in text


def test_console_log_against_run_dir_and_bad_input(tmp_path: Path) -> None:
    proc = run_cli("compare", A, str(ROOT / "samples/fp16-min-scale/console.log"))
    assert proc.returncode == 0, proc.stderr
    assert "ZD201" in proc.stdout.splitlines()[1]
    proc = run_cli("compare", A, str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("zerodoctor: error: ") and "missing" in proc.stderr
