"""ZD715: ranks still waiting in a new process group's store-based barrier, before its timeout (issue 33, item 8).

torch logs the wait every 10 s or more, ``_store_based_barrier`` in torch/distributed/distributed_c10d.py, in three
forms, the test lines built from each copy's own format string:

- 1.8-1.13 (``logging.info``/``logger.info`` and ``str.format``): ``Waiting in store based barrier to initialize
  process group for rank: {}, key: {} (world_size={}, worker_count={}, timeout={})``;
- 2.0-2.1 (``logger.info``): ``... for rank: %s, key: %s (world_size=%s, num_workers_joined=%s, timeout=%s)``;
- 2.2-2.13 (``logger.debug``, shown by ``TORCH_LOGS=+c10d``): ``... for %s seconds" "rank: %s, key: %s
  (world_size=%s, num_workers_joined=%s, timeout=%s error=%s)`` (the two literals join with no space between them).

A count above the world size is another job (or a process an earlier run left) on the same MASTER_ADDR:MASTER_PORT
store: the count never equals the world size again. Below it, processes have not arrived. The real run (fixtures/
rules/ZD715, record.py) is rank 0 of 2 calling ``new_group`` alone: 1 of 2 joined, waiting, stopped before the
timeout. A barrier that timed out is ZD701's; one that completed ("Rank 0: Completed store-based barrier for key:…
with 2 nodes.", logged by every form) is no finding.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, console_log, diagnose_json

WAIT_1X = ("INFO:root:Waiting in store based barrier to initialize process group for rank: {rank}, key: "
           "store_based_barrier_key:1 (world_size={world}, worker_count={joined}, timeout=0:30:00)")
WAIT_20 = ("INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
           "rank: {rank}, key: store_based_barrier_key:1 (world_size={world}, num_workers_joined={joined}, "
           "timeout=1 day, 0:00:00)")
WAIT_22 = ("[rank{rank}]:V1206 20:06:01.467000 29760 torch/distributed/distributed_c10d.py:1068] Waiting in store "
           "based barrier to initialize process group for {waited} secondsrank: {rank}, key: store_based_barrier_key:1 "
           "(world_size={world}, num_workers_joined={joined}, timeout=0:30:00 error=wait timeout after 10002ms, keys: "
           "/0//store_based_barrier_key:1:last_worker)")
DONE = "INFO:root:Rank {rank}: Completed store-based barrier for key:store_based_barrier_key:1 with {world} nodes."
TIMED_OUT = ("RuntimeError: Timed out initializing process group in store based barrier on rank: {rank}, for key: "
             "store_based_barrier_key:1 (world_size={world}, worker_count={joined}, timeout=0:30:00)")


def _findings(tmp_path: Path, lines: list[str]) -> dict[str, dict]:
    return {f["rule"]: f for f in diagnose_json(console_log(tmp_path, lines))["findings"]}


def test_more_workers_than_the_world_size_is_a_shared_store(tmp_path: Path) -> None:
    """torch 1.x's form, 4 ranks each logging 8 workers twice: a second job on the same store."""
    found = _findings(tmp_path, [WAIT_1X.format(rank=r, world=4, joined=8) for _ in range(2) for r in range(4)])
    finding = found["ZD715"]
    assert finding["severity"] == "error" and finding["ranks"] == [0, 1, 2, 3]
    assert "more processes reached it (8) than the group holds (4)" in finding["message"]
    assert "MASTER_ADDR:MASTER_PORT" in finding["message"]
    assert finding["fixes"][0]["title"].startswith("Give each job its own rendezvous store")
    assert "ZD701" not in found  # nothing timed out yet


def test_the_2_0_form_and_a_one_day_timeout_are_read(tmp_path: Path) -> None:
    found = _findings(tmp_path, [WAIT_20.format(rank=0, world=2, joined=4)])
    assert "more processes reached it (4) than the group holds (2)" in found["ZD715"]["message"]


def test_the_2_2_form_says_how_long_the_rank_has_waited(tmp_path: Path) -> None:
    lines = [WAIT_22.format(rank=0, world=8, joined=7, waited=w) for w in ("10.011", "20.024", "40.05", "90.1")]
    finding = _findings(tmp_path, lines)["ZD715"]
    assert "7 of 8 processes reached it" in finding["message"] and "at least 90.1 s" in finding["message"]
    assert finding["fixes"][0]["title"] == "Find the processes that never reached the barrier"


def test_a_real_rank_waiting_for_a_group_only_it_created() -> None:
    """The real run: rank 0 called new_group([0]) alone, and waited 1 of 2 until stopped."""
    found = diagnose_json(ROOT / "tests/fixtures/rules/ZD715/fires.log")["findings"]
    finding = {f["rule"]: f for f in found}["ZD715"]
    assert finding["ranks"] == [0]
    assert "rank 0 still waiting (for at least 20 s)" in finding["message"]
    assert "1 of 2 processes reached it" in finding["message"]


def test_a_barrier_that_completed_after_waiting_is_no_finding(tmp_path: Path) -> None:
    lines = [WAIT_1X.format(rank=0, world=2, joined=1), DONE.format(rank=0, world=2), DONE.format(rank=1, world=2)]
    assert "ZD715" not in _findings(tmp_path, lines)


def test_a_barrier_that_timed_out_is_the_timeouts_finding_alone(tmp_path: Path) -> None:
    lines = [WAIT_1X.format(rank=0, world=4, joined=16), TIMED_OUT.format(rank=0, world=4, joined=16)]
    found = _findings(tmp_path, lines)
    assert "ZD715" not in found and "more processes reached it (16)" in found["ZD701"]["message"]
