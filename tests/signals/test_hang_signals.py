"""Hang signals after the fact: a stall that ended long before the run did is still found and measured."""

from __future__ import annotations

import json

from tests.conftest import diagnose_json

T0 = 1_760_000_000.0


def _e(t: float, rank: int, kind: str, **fields) -> dict:
    return {"v": 1, "t": T0 + t, "run": "r", "rank": rank, "kind": kind, **fields}


def test_a_stall_followed_by_an_hour_of_training_is_reported_with_its_length(tmp_path):
    lines = [_e(0, r, "run_start", world_size=2) for r in (0, 1)]
    lines += [_e(i, r, "step", step=i, step_time_s=1.0) for i in range(1, 21) for r in (0, 1)]
    for t in range(21, 112, 5):  # rank 1 in a data loader 90 s; rank 0 in the gradient all_reduce
        lines.append(_e(t, 0, "heartbeat", phase="collective", since_t=T0 + 20.2, op="all_reduce", group="1", seq=50,
                        outer="backward", last_step=20))
        lines.append(_e(t, 1, "heartbeat", phase="data", since_t=T0 + 20.1, last_step=20))
    for i in range(21, 21 + 720):  # then an hour of 5 s steps, each rank beating in a new phase every time
        t = 110 + (i - 20) * 5
        for r in (0, 1):
            lines.append(_e(t, r, "step", step=i, step_time_s=5.0))
            lines.append(_e(t + 1, r, "heartbeat", phase=("forward", "backward", "user")[i % 3], since_t=T0 + t + 0.5,
                            last_step=i))
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = {f["rule"]: f for f in diagnose_json(path)["findings"]}
    recovered = found["ZD706"]
    assert recovered["ranks"] == [1] and recovered["steps"] == [21, 21]
    assert "stood still for 95 s" in recovered["message"] and "rank 1 in the data loader" in recovered["message"]
    assert not {"ZD702", "ZD703", "ZD704", "ZD705"} & set(found)


def test_a_job_whose_every_rank_went_quiet_at_once_is_not_called_hung(tmp_path):
    """Killed with its wrapper (no run_end): the last beats show an ordinary mid-step moment, 10 min old."""
    lines = [_e(0, r, "run_start", world_size=2) for r in (0, 1)]
    lines += [_e(i, r, "step", step=i, step_time_s=1.0) for i in range(1, 21) for r in (0, 1)]
    lines.append(_e(20.5, 0, "heartbeat", phase="collective", since_t=T0 + 20.4, op="all_reduce", group="1", seq=50,
                    outer="backward", last_step=20))
    lines.append(_e(20.5, 1, "heartbeat", phase="forward", since_t=T0 + 20.45, last_step=20))
    lines.append(_e(620, 0, "log", message="a line the launcher printed later", source="torch"))
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = {f["rule"] for f in diagnose_json(path)["findings"]}
    assert not {"ZD702", "ZD703", "ZD704", "ZD705"} & found


def test_a_wait_that_just_began_while_the_other_ranks_beat_is_stale_is_not_a_stuck_rank(tmp_path):
    """Seen live: rank 0's last beat still in save_checkpoint, rank 1 0 s into the next step's all_reduce."""
    lines = [_e(0, r, "run_start", world_size=2) for r in (0, 1)]
    lines += [_e(i, r, "step", step=i, step_time_s=1.0) for i in range(1, 7) for r in (0, 1)]
    lines += [_e(t, 0, "heartbeat", phase="save_checkpoint", since_t=T0 + 6.1, last_step=6) for t in range(7, 68, 5)]
    lines += [_e(t, 1, "heartbeat", phase="save_checkpoint", since_t=T0 + 6.1, last_step=6) for t in range(7, 64, 5)]
    lines.append(_e(67.5, 1, "heartbeat", phase="collective", since_t=T0 + 67.4, op="all_reduce", group="1", seq=56,
                    outer="backward", last_step=6))
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = {f["rule"] for f in diagnose_json(path)["findings"]}
    assert "ZD702" not in found and "ZD704" in found
