"""A loss that leaves its range is the finding, and a fix the run refutes is not offered: on real recorded runs.

``samples/fp16-min-scale`` is a real 2-rank CPU run (DeepSpeed 0.19.8, fp16 through the test-only shim) whose
loss the script multiplies by 1e9 from step 31 on: rank 0's loss goes 1.15 → 1.04e9, rank 1's to 1.2e9, at lr
0.001 and loss scale 256; the gradients overflow fp16 at every scale from 256 down to 2 and DeepSpeed aborts
at min_loss_scale 1. The expected findings were written before the rule.
"""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json

SHOWCASE = ROOT / "samples" / "fp16-min-scale"


def test_the_showcase_names_the_loss_divergence_first() -> None:
    """The injected fault is the loss's jump at step 31; the collapse of the loss scale (ZD201) follows from it."""
    findings = diagnose_json(SHOWCASE)["findings"]
    first = findings[0]
    assert first["rule"] == "ZD200", [f["rule"] for f in findings]
    assert first["severity"] == "error"
    assert first["steps"] == [31, 39] and first["ranks"] == [0, 1]
    message = first["message"]
    assert "from 1.15 to 1.2e+09 at step 31" in message, message
    assert "at lr 0.001" in message and "never came back" in message, message
    assert first["evidence"]["loss.spike_scale"] == 256


def test_no_fixed_loss_scale_the_run_overflowed_at() -> None:
    """After calibration the run overflowed at every scale from 256 (the one that held) down to 2, so a
    loss_scale fixed at 256 skips every step: no fixed-scale fix. lr was 0.001 on all 39 steps, so nothing may
    say the overflows began once lr reached its value."""
    (collapse,) = [f for f in diagnose_json(SHOWCASE)["findings"] if f["rule"] == "ZD201"]
    titles = [fix["title"] for fix in collapse["fixes"]]
    assert not [t for t in titles if t.startswith("Fix loss_scale")], titles
    actions = " ".join(fix.get("action") or "" for fix in collapse["fixes"])
    assert "began once lr reached" not in actions and "as lr rose" not in actions, actions
    assert "did not rise before the overflows" in actions, actions
    assert collapse["evidence"]["fp16.min_late_overflow_scale"] == 2


# Recorded here: a real 2-rank CPU run (DeepSpeed 0.19.8, fp16 through the test-only shim), `zerodoctor run --
# torchrun ... samples/train.py --steps 40 --loss-mult 1e9 --loss-mult-above-lr 0.0009 --cpu-fp16-shim` with the
# config beside it: WarmupLR from 0 to 0.001 over 20 steps, linear; the loss is multiplied by 1e9 once the lr passes
# 0.0009, at step 20 (19 clean steps: the scaler never calibrated), and DeepSpeed aborts at min_loss_scale after 9.
WARMUP_RUN = ROOT / "tests" / "fixtures" / "runs" / "fp16-warmup-diverges"


def test_a_divergence_as_the_warmup_ends_says_so_and_when_the_lr_rose() -> None:
    findings = {f["rule"]: f for f in diagnose_json(WARMUP_RUN)["findings"]}
    divergence = findings["ZD200"]
    assert divergence["steps"] == [20, 28]
    assert divergence["message"].endswith("at lr 0.0009; the config's warm-up ends at step 20"), divergence["message"]
    collapse = findings["ZD201"]
    assert collapse["steps"] == [20, 28], "the overflows of a run that never calibrated began at its first"
    (lower,) = [fix for fix in collapse["fixes"] if "learning rate" in fix["title"]]
    assert lower["config_patch"] == {"optimizer": {"params": {"lr": 0.00085}}}
    assert lower["action"].startswith("The overflows began at step 20 as lr rose past 0.00085"), lower["action"]
