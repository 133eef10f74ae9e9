"""``zerodoctor fix`` never validates at a world size it guessed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, run_cli


def test_fix_from_a_log_without_world_size_asks_for_it(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                  "fp16": {"enabled": True, "loss_scale": 0}}))
    log = ROOT / "tests/fixtures/logs/deepspeed_collapse_min_scale_wrapped.log"
    proc = run_cli("fix", str(config), "--from", str(log), "--unsafe", "-o", str(tmp_path / "out.json"))
    assert proc.returncode == 2 and "--world-size" in proc.stderr
    assert not (tmp_path / "out.json").exists()
    done = run_cli("fix", str(config), "--from", str(log), "--unsafe", "--world-size", "8",
                   "-o", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text())["bf16"] == {"enabled": True}
