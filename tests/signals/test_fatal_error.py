"""``fatal.error``: the root fatal error as its log line reads, one field for a rule's words or evidence.

ZD901 needed a clause for the exception class and one for its message; a fatal log line has no class and a bare
exception no message, so the signal joins what there is.
"""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json
from zerodoctor.signals.fatal import _error

PASTE = ROOT / "tests" / "corpus" / "heldout7-ds-1270-auto-gradient-clipping-str-compare" / "console.log"


def test_a_real_traceback_gives_its_class_and_message_as_one_line() -> None:
    """DeepSpeed#1270's TypeError, as ZD627 shows it in its evidence."""
    found = {f["rule"]: f for f in diagnose_json(PASTE)["findings"]}
    assert found["ZD627"]["evidence"]["fatal.error"] == (
        "TypeError: '>' not supported between instances of 'str' and 'float'")


def test_a_missing_class_or_message_leaves_the_other_alone() -> None:
    assert _error(None, "NCCL communicator was aborted") == "NCCL communicator was aborted"
    assert _error("KeyboardInterrupt", "") == "KeyboardInterrupt"
    assert _error(None, "") is None
