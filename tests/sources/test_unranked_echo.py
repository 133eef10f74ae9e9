"""A crash a named rank reported, echoed on lines that name no rank, is that rank's alone.

axolotl#1706: rank 22's traceback ends in "CUDA error: an illegal memory access", then C++'s unprefixed
"terminate called after throwing an instance of 'c10::Error'" and "what():  CUDA error: an illegal memory access
was encountered" repeat it. Read as a line of its own with no rank, the repeat became rank 0's, and ZD903 said
"on ranks 0, 22" of a log that shows only rank 22.
"""

from __future__ import annotations

from tests.conftest import ROOT
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

PASTE = ROOT / "tests" / "corpus" / "heldout8-axolotl-1706-rank22-illegal-memory-access" / "console.log"


def test_an_unprefixed_echo_of_a_named_ranks_crash_adds_no_rank_0() -> None:
    report = diagnose([PASTE], rules=rules_from(), input_format="text")
    finding = next(f for f in report.findings if f.rule == "ZD903")
    assert finding.ranks == [22], finding.ranks
    assert "on rank 22;" in finding.message, finding.message
