"""ZD701's words on real console excerpts of one rank's watchdog lines (held-out 7's pastes)."""

from __future__ import annotations

from tests.conftest import ROOT, diagnose_json

CORPUS = ROOT / "tests" / "corpus"


def _timeout(case: str) -> dict:
    found = {f["rule"]: f for f in diagnose_json(CORPUS / case / "console.log")["findings"]}
    return found["ZD701"]


def test_an_excerpt_of_rank_3_accuses_no_rank_it_does_not_show() -> None:
    """F5-TTS#728: rank 3's watchdog line alone. The job has at least 4 ranks (not "ranks in the job: 1"), and
    ranks 0-2, whose output the paste does not hold, are not said to have "never reported it"."""
    finding = _timeout("heldout7-f5-tts-728-watchdog-allreduce-rank3")
    assert finding["evidence"]["run.world_size"] == 4
    assert "never reported" not in finding["message"] and "hang.silent_ranks" not in finding["evidence"]


def test_the_watchdog_line_and_its_epitaph_are_one_timeout() -> None:
    """DeepSpeed#6705: rank 1's "Watchdog caught collective operation timeout" and, after it, the generic "Some NCCL
    operations have failed or timed out" of the same rank: one collective timed out, not two."""
    finding = _timeout("heldout7-ds-6705-watchdog-pdsh-prefix-glued-bar")
    assert finding["evidence"]["hang.collective_timeouts"] == 1


def test_a_store_barrier_that_more_processes_reached_than_the_group_holds_names_the_shared_store() -> None:
    """pseco#15: "(world_size=4, worker_count=16)". Twelve processes too many is no rank that never joined: another
    job, or a leftover process, uses the same MASTER_ADDR:MASTER_PORT store, and the fix says where to look."""
    finding = _timeout("heldout7-pseco-15-store-barrier-worker-count-16")
    assert "more processes reached it (16) than the group holds (4)" in finding["message"]
    assert "never joined" not in finding["message"]
    assert finding["fixes"][0]["title"].startswith("Give each job its own rendezvous store")


def test_a_store_barrier_fewer_processes_reached_says_how_many() -> None:
    """metaseq#52: "(world_size=2048, worker_count=1792)": 256 processes never reached the new group's barrier."""
    finding = _timeout("heldout7-metaseq-52-store-barrier-2048-ranks")
    assert "store-based barrier timed out" in finding["message"]
    assert "1792 of 2048 processes reached the barrier" in finding["message"]
    assert finding["fixes"][0]["title"] == "Find the processes that never reached the barrier"


def test_two_ranks_in_different_collectives_name_the_one_behind() -> None:
    """LlamaFactory#2902 (held-out 9): rank 0's watchdog timed out in SeqNum 1516, rank 1's in 1517. Rank 1 finished
    1516, so rank 0 is behind: not "every rank that logged timed out on the same collective"."""
    finding = _timeout("heldout9-llamafactory-2902-watchdog-after-loss-line")
    assert "SeqNum 1517" in finding["message"] and "rank 0 stuck on an earlier collective" in finding["message"]
    assert "same collective" not in finding["message"]
