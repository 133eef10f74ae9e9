"""Host creep on heartbeat lines: the rate is each rank's RSS per step, whatever the last heartbeat saw at exit."""

from __future__ import annotations

import json

from tests.conftest import diagnose_json

LEAK = 16 * 2**20
BASE = 2 * 2**30


def _creep(tmp_path, heartbeats: list[tuple[int, int, int]]) -> dict:
    """Findings' ZD404 evidence for two ranks on one host; ``heartbeats`` are (rank, last_step, rss_bytes)."""
    lines = [{"v": 1, "t": 1000.0, "run": "c", "rank": r, "kind": "run_start", "world_size": 2, "zero_stage": 2,
              "host": "node-a", "host_memory_bytes": 64 * 2**30} for r in (0, 1)]
    lines += [{"v": 1, "t": 1001.0 + i, "run": "c", "rank": r, "kind": "heartbeat", "phase": "user", "since_t": 1000.0,
               "last_step": step, "rss_bytes": rss} for i, (r, step, rss) in enumerate(heartbeats)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = {f["rule"]: f for f in diagnose_json(path)["findings"]}
    assert "ZD404" in found, sorted(found)
    return found["ZD404"]["evidence"]


def test_a_heartbeat_during_exit_after_the_last_step_does_not_hide_the_leak(tmp_path):
    """The rank frees what it kept once training returns; the probe still beats, at the same last step."""
    climb = [(r, step, BASE + step * LEAK) for step in range(4, 40, 4) for r in (0, 1)]
    at_exit = [(r, 36, BASE) for r in (0, 1)]  # same step as the last point, the kept tensors already freed
    evidence = _creep(tmp_path, climb + at_exit)
    assert abs(evidence["creep.host_bytes_per_step"] - 2 * LEAK) < 0.01 * LEAK


def test_a_stalled_rank_still_growing_counts_its_highest_rss_at_that_step(tmp_path):
    climb = [(r, step, BASE + step * LEAK) for step in range(4, 40, 4) for r in (0, 1)]
    stalled = [(0, 36, BASE + 36 * LEAK + k * LEAK) for k in (1, 2, 3)]  # still at step 36, still growing
    evidence = _creep(tmp_path, climb + stalled)
    # rank 0's last point is 3 steps' worth higher: its line steepens by 3 * 16/960 of a leak
    assert abs(evidence["creep.host_bytes_per_step"] - 2.05 * LEAK) < 0.01 * LEAK
