"""Each crash family a CPU can produce, for real: a 2-rank DeepSpeed run under ``zerodoctor run`` where
rank 1 dies of it at step 3 (``samples/train.py --crash``), named by ``diagnose`` from the rank files
(the probe's events, and what the wrapper made of a rank that could not say it ended) and from the
console log alone, as a user would paste it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.probe.conftest import record_run

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
# (crash, rule that names it, extra train arguments)
FAMILIES = [
    ("segfault", "ZD902", ()),
    ("host-memory", "ZD406", ()),
    ("sigkill", "ZD405", ()),
    ("device-mismatch", "ZD905", ()),
    ("missing-module", "ZD906", ()),
    ("nan-loss", "ZD204", ("--loss-mult", "nan", "--loss-mult-from", "3", "--steps", "12")),
]


def _findings(path) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(path)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    return {f["rule"]: f for f in json.loads(proc.stdout)["findings"]}


def _rules(*paths) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           *map(str, paths)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {f["rule"] for f in json.loads(proc.stdout)["findings"] if f["severity"] in ("warning", "error")}


@pytest.mark.parametrize("crash, rule, extra", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_a_crash_is_named_from_events_and_from_the_console(tmp_path, crash: str, rule: str, extra: tuple) -> None:
    args = ("--steps", "8", *extra) if crash == "nan-loss" else ("--steps", "8", "--crash", crash)
    run = record_run(tmp_path, crash, CONFIG, *args)
    if crash != "nan-loss":
        assert run.returncode != 0, run.console()[-2000:]
    from_events = _rules(run.run_dir)
    assert rule in from_events, (from_events, run.console()[-3000:])
    copied = tmp_path / "pasted.log"  # what a user pastes: the console alone, without the run directory
    copied.write_bytes((run.run_dir / "console.log").read_bytes())
    from_console = _rules(copied)
    assert rule in from_console, (from_console, run.console()[-3000:])


def test_a_segfault_leaves_its_stack_in_the_events(tmp_path) -> None:
    """The fault handler's stack reaches the events: the finding names the frame of the user's code."""
    run = record_run(tmp_path, "segv", CONFIG, "--steps", "8", "--crash", "segfault")
    events = [json.loads(line) for line in (run.run_dir / "rank-1.jsonl").read_text().splitlines()]
    fatal = [e for e in events if e["kind"] == "exception" and e["type"] == "Fatal Python error"]
    assert fatal and fatal[0]["message"] == "Segmentation fault"
    assert any("train.py" in frame and "_segfault" in frame for frame in fatal[0]["traceback"])
    assert events[-1]["kind"] == "run_end" and events[-1]["signal"] == 11
    assert not (run.run_dir / "rank-0.fault").exists()  # an empty fault file of a rank that lived is removed


def test_a_rank_killed_in_teardown_after_training_is_told_apart_from_a_crash_in_training(tmp_path) -> None:
    """Rank 1 trains all 8 steps, writes its run_end, then dies of SIGABRT while the interpreter shuts down (as a
    process group alive at exit can make it): from the events a warning that training finished, no crash; from
    the console alone, which cannot show where the script returned, the signal death of rank 1 (rank 0 was
    torchrun's SIGTERM, in the same failure box, and no crash of its own)."""
    run = record_run(tmp_path, "teardown", CONFIG, "--steps", "8", "--crash", "teardown-abort")
    assert run.returncode != 0, run.console()[-2000:]
    events = run.events(1)
    steps = [e["step"] for e in events if e["kind"] == "step"]
    assert steps[-1] == 8
    assert [e["kind"] for e in events[-2:]] == ["run_end", "log"]
    assert events[-1]["data"] == {"family": "teardown_crash", "signal": 6}
    assert _rules(run.run_dir) == {"ZD911"}
    copied = tmp_path / "pasted.log"
    copied.write_bytes((run.run_dir / "console.log").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(copied)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] in ("warning", "error")]
    assert finding["rule"] == "ZD902" and finding["ranks"] == [1], finding


def test_an_auto_value_deepspeed_compares_with_a_number_is_named_a_config_fault(tmp_path) -> None:
    """The Hugging Face docs' ``"gradient_clipping": "auto"`` in a script that calls ``deepspeed.initialize`` itself
    (DeepSpeed#1270): DeepSpeed accepts the config and its engine raises CPython's TypeError at the first step.
    ZD627 names it from the probe's traceback and from the console a user would paste."""
    run = record_run(tmp_path, "auto-clip", {**CONFIG, "gradient_clipping": "auto"}, "--steps", "4")
    assert run.returncode != 0, run.console()[-2000:]
    assert "not supported between instances of 'str' and 'float'" in run.console()
    assert "ZD627" in _rules(run.run_dir), run.console()[-3000:]
    copied = tmp_path / "pasted.log"
    copied.write_bytes((run.run_dir / "console.log").read_bytes())
    assert "ZD627" in _rules(copied)


@pytest.mark.parametrize(("clipping", "args", "meant"), [("1.0", (), 1.0), ("auto", ("--max_grad_norm", "0.5"), 0.5)],
                         ids=["quoted", "auto-with-max-grad-norm"])
def test_the_text_a_run_shows_the_number_of_gets_a_patch_deepspeed_accepts(tmp_path, clipping, args, meant) -> None:
    """ZD627 had advice only. Where the run shows the number meant (a number in quotes; an "auto" whose
    TrainingArguments flag, ``--max_grad_norm``, the command gives) its fix writes it, and DeepSpeed's own parser
    accepts the patched config (``zerodoctor fix``)."""
    run = record_run(tmp_path, "clip", {**CONFIG, "gradient_clipping": clipping}, "--steps", "4", *args)
    finding = _findings(run.run_dir)["ZD627"]
    (fix,) = [f for f in finding["fixes"] if f.get("config_patch")]
    assert fix["config_patch"] == {"gradient_clipping": meant} and fix["safety"] == "safe", fix
    (tmp_path / "ds.json").write_text(json.dumps({**CONFIG, "gradient_clipping": clipping}))
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "fix", str(tmp_path / "ds.json"), "--from",
                           str(run.run_dir), "-o", str(tmp_path / "fixed.json")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert json.loads((tmp_path / "fixed.json").read_text())["gradient_clipping"] == meant, done.stderr
