"""A fatal error's message, shown in the finding, is cut at a word and marked, never mid-word.

DeepSpeed#7568's c10d mismatch runs to 800 characters; cut at 300 it ended "pinned_memory=false (default), pi" in
ZD901's words. Only the fallback rule shows ``fatal.message`` whole there, so the test asks it alone.
"""

from __future__ import annotations

from tests.conftest import ROOT
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.signals.fatal import MESSAGE_CHARS

PASTE = ROOT / "tests" / "corpus" / "heldout8-ds-7568-collective-mismatch-detail" / "console.log"


def test_a_long_message_is_cut_after_a_whole_word_and_marked() -> None:
    fallback = [r for r in rules_from() if r.code == "ZD901"]
    report = diagnose([PASTE], rules=fallback, input_format="text")
    message = next(f.message for f in report.findings if f.rule == "ZD901")
    shown = message.split("RuntimeError: ", 1)[1].split(", raised in ", 1)[0].split("; no rule explains it", 1)[0]
    assert shown.endswith("requires_grad=false (default)…"), shown
    assert len(shown) <= MESSAGE_CHARS + 1
    assert "Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=32, OpType=ALLREDUCE" in shown
