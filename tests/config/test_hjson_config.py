"""A config with comments and trailing commas, which DeepSpeed reads (hjson) and trains with, is read the
same by ``check`` and ``fix`` (before: exit 2, "not valid JSON"). A file neither reads is one line naming
file, line and column: tests/config/test_check.py's bad-config cases."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.watch.test_watch_isolation import _write_run
from zerodoctor.config.static import load_config

# What the hjson reader of DeepSpeed 0.19.8 accepts: //, # and /* */ comments, trailing commas, an unquoted key
HJSON = """{
  // 8 samples a step
  "train_batch_size": 8,
  "fp16": {"enabled": true, "min_loss_scale": 0.5,},  # DeepSpeed's fp16 config wants an integer here
  /* ZeRO */
  zero_optimization: {"stage": 2},
}
"""
SAME = {"train_batch_size": 8, "fp16": {"enabled": True, "min_loss_scale": 0.5}, "zero_optimization": {"stage": 2}}


def test_the_config_is_read_as_deepspeed_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(HJSON)
    assert load_config(path) == SAME
    from deepspeed.runtime.config import DeepSpeedConfig  # the reader DeepSpeed trains with reads the same

    assert DeepSpeedConfig.__init__.__code__.co_names.count("hjson") >= 1


def test_check_and_fix_judge_an_hjson_config_as_its_json_twin(tmp_path: Path) -> None:
    commented, plain = tmp_path / "commented.json", tmp_path / "plain.json"
    commented.write_text(HJSON)
    plain.write_text(json.dumps(SAME))
    checked = {p: run_cli("check", "--no-deepspeed", "--format", "json", str(p)) for p in (commented, plain)}
    assert [c.returncode for c in checked.values()] == [1, 1], checked[commented].stderr
    rules = [sorted(f["rule"] for f in json.loads(c.stdout)["findings"]) for c in checked.values()]
    assert rules[0] == rules[1] and "ZD605" in rules[0]

    runs = tmp_path / "runs"
    _write_run(runs, "r", {"min_loss_scale": 0.5}, list(range(1, 11)))
    fixed = run_cli("fix", str(commented), "--from", str(runs / "r"), "--unsafe", "-o", str(tmp_path / "out.json"))
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads((tmp_path / "out.json").read_text())["fp16"]["min_loss_scale"] == 1
