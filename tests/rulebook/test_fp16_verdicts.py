"""The fp16 rules' verdicts on a real log whose overflows could be read two ways."""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json

# LLaMA-Factory#251 (held-out 6): a log cut mid-run, four straight overflows halving 128 -> 8, lr printed as 0
MID_RUN = ROOT / "tests" / "corpus" / "heldout6-llamafactory-251-overflow-128-to-8-mid-run" / "console.log"


def test_overflows_with_no_clean_streak_after_them_are_a_collapse_not_calibration() -> None:
    """Nothing in the log shows the 20 clean steps that end calibration, so ZD202 ("expected and harmless")
    must not stand beside ZD201's collapse, ZD201 says nothing of "after the start-up calibration", and the
    lr fix is not offered where the log's lr is 0 ("Lower the learning rate to 0 (was 0)")."""
    findings = {f["rule"]: f for f in diagnose_json(MID_RUN)["findings"]}
    assert set(findings) == {"ZD201"}
    collapse = findings["ZD201"]
    assert "calibration" not in collapse["message"]
    assert not [fix for fix in collapse["fixes"] if "learning rate" in fix["title"]]


def test_the_scale_named_is_the_one_the_logs_last_overflow_line_set() -> None:
    """A step carries the scale it tried; the line that skipped it says the scale it set. LLaMA-Factory#251 ends
    "Attempted loss scale: 16, reducing to 8", DeepSpeed#5779's calibration "… 1024, reducing to 512": ZD201 said
    "scale last 16" and ZD202 "calibrated down to 1024"."""
    (collapse,) = [f for f in diagnose_json(MID_RUN)["findings"] if f["rule"] == "ZD201"]
    assert "(last set to 8)" in collapse["message"], collapse["message"]
    calibration = ROOT / "tests" / "corpus" / "ds-5779-calibration-to-512" / "console.log"
    (calibrated,) = [f for f in diagnose_json(calibration)["findings"] if f["rule"] == "ZD202"]
    assert "calibrated down to 512, none after" in calibrated["message"]


def test_a_calibration_that_skipped_most_steps_is_a_warning_never_harmless() -> None:
    """A real 2-rank run (DeepSpeed 0.19.8, fp16 through the test-only shim; samples/train.py --steps 25, the
    fixture's config: initial_scale_power 32, hysteresis 2) skipped 13 of its 25 steps halving from 2^32 to 2^20:
    ZD202 called it "expected and harmless" (info). It is ZD207, a warning, with the scale to start at."""
    findings = diagnose_json(ROOT / "tests" / "fixtures" / "rules" / "ZD207" / "fires.jsonl")["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("ZD207", "warning")]
    (costly,) = findings
    assert costly["message"].startswith("13 of the 25 steps shown (52%) were skipped"), costly["message"]
    assert "harmless" not in costly["message"]
    assert costly["fixes"][0]["config_patch"] == {"fp16": {"initial_scale_power": 20}}
