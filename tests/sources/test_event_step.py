"""An event a console log gives no step of its own (an OOM, a traceback, a timeout) is placed at the last
step the log showed, including a ``step=N`` line whose step the clock is still gathering."""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json

LOGS = ROOT / "tests/fixtures/logs"


def test_an_oom_right_after_a_progress_line_is_at_that_step() -> None:
    """``step=40`` then the allocator's message: the finding said no step at all (the step was still pending)."""
    body = diagnose_json(LOGS / "torch_oom_2_4_fragmentation_wrapped.log")
    (oom,) = [f for f in body["findings"] if f["rule"] == "ZD401"]
    assert oom["steps"] == [40, 40]
