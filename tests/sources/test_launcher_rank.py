"""DeepSpeed's launcher names a dead child by its command line, not by rank: the rank is the ``--local_rank=N``
the launcher put in that command (``launcher/launch.py``), as torchrun's ``local_rank: N`` names it. Real pastes
from held-out 9 (``tests/corpus``), one of them broken inside the list by the paste."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import parsed
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.sources.batches import make_parser, read_batches

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _ends(name: str) -> list[tuple[int, int]]:
    batches = list(read_batches(CORPUS / name / "console.log", make_parser("text", "t")))
    return [(e["rank"], e["exit_code"]) for e in parsed(batches) if e["kind"] == "run_end"]


def test_the_launcher_report_names_the_rank_of_its_command() -> None:
    # DeepSpeed#5302: "Killing subprocess" twice, then "[..., '--local_rank=4', ...] exits with return code = 1"
    assert _ends("heldout9-ds-5302-return-code-1-after-checkpoint") == [(4, 1)]


def test_a_command_broken_by_the_paste_still_names_its_rank() -> None:
    # LLaVA#1085: "--local_rank=7" on the first line, "'--save_total_limi" / "t', ... exits with return code = -9"
    assert _ends("heldout9-llava-1085-return-code-9-argv-wrapped") == [(7, -9)]


def test_a_rank_that_exited_with_an_error_status_and_no_error_is_named() -> None:
    report = diagnose([CORPUS / "heldout9-ds-5302-return-code-1-after-checkpoint" / "console.log"], rules=rules_from(),
                      input_format="text")
    found = [f for f in report.findings if f.rule == "ZD912"]
    assert found and found[0].message.startswith("rank 4 exited with status 1"), [f.message for f in report.findings]
