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
