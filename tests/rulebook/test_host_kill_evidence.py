"""ZD405 on real pastes: its evidence shows the kill counts a log can know, never an unknown as 0.

A console log without exit records (a kernel OOM line alone, Ray's memory monitor) cannot say how many ranks
SIGKILL ended; a log Ray's memory monitor never spoke in has no Ray kills to count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
RULES = rules_from()


@pytest.mark.parametrize(("case", "evidence"), [
    # slurmstepd's "Detected 1 oom-kill event(s)": no exit record, no Ray
    ("arjuna-users-52-slurmstepd-oom-kill", {"fatal.host_oom_kill": 1}),
    # DeepSpeed's launcher "exits with return code = -9": the exit is known, Ray is not there
    ("ds-3232-sigkill-return-code-9", {"fatal.host_oom_kill": 0, "crash.sigkilled": 1}),
    # Ray's "Task was killed due to the node running low on memory": no rank's exit is shown
    ("heldout-openrlhf-911-ray-node-low-memory", {"fatal.host_oom_kill": 0, "crash.ray_killed": 1}),
])
def test_the_evidence_holds_only_the_counts_the_log_can_know(case: str, evidence: dict) -> None:
    (finding,) = [f for f in diagnose([CORPUS / case / "console.log"], rules=RULES).findings if f.rule == "ZD405"]
    assert finding.evidence == evidence
