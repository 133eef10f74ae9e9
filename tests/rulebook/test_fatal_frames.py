"""Where a crash was raised, read from real pastes whose traceback lost its ``Traceback (most recent call last):``
line: the frames alone still name the user's call and the library line that raised."""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json

CORPUS = ROOT / "tests" / "corpus"


def _finding(case: str, rule: str) -> dict:
    found = {f["rule"]: f for f in diagnose_json(CORPUS / case / "console.log")["findings"]}
    assert rule in found, sorted(found)
    return found[rule]


def test_a_text_value_deepspeed_compared_is_a_config_fault_named_at_its_frame() -> None:
    """DeepSpeed#1270, pasted from the first frame on inside inline-code backticks: the TypeError was raised in
    DeepSpeed's engine, so it is the config's "auto" (ZD627), and the words name both ends of the call."""
    finding = _finding("heldout7-ds-1270-auto-gradient-clipping-str-compare", "ZD627")
    assert "at deepspeed/runtime/engine.py:1257 in _take_model_step" in finding["message"]
    assert "called from run_ner_crf.py:174 in train" in finding["message"]


def test_a_headless_traceback_still_says_where_the_fault_surfaced() -> None:
    """miles#308: an illegal memory access pasted from the first frame on; the user's frame it surfaced in is named."""
    finding = _finding("miles-308-illegal-memory-access-megatron-attention", "ZD903")
    assert "reported in models/hf_attention.py:99 in forward" in finding["message"]


def test_a_crash_with_no_frame_of_the_users_names_the_library_line_that_raised() -> None:
    """DeepSpeed#3645: after Ctrl-C, DeepSpeed's own launcher dies in its SIGINT handler; every frame is an installed
    package's, so the finding names the launcher's line instead of no place at all."""
    finding = _finding("heldout8-ds-3645-ctrl-c-launcher-nameerror", "ZD901")
    assert "inside deepspeed/launcher/runner.py:548 in sigkill_handler" in finding["message"]
