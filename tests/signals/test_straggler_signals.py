"""Straggler signals on event lines: the slow rank, its cost, its cause; ZeRO-3 comm is not blamed for the wait."""

from __future__ import annotations

import json

from tests.conftest import diagnose_json


def _run(tmp_path, stage: int, fast: dict, slow: dict, steps: int = 40):
    lines = [{"v": 1, "t": 1000.0, "run": "s", "rank": r, "kind": "run_start", "world_size": 2, "zero_stage": stage,
              "params": 30_000_000, "config": {"zero_optimization": {"stage": stage}}} for r in (0, 1)]
    lines += [{"v": 1, "t": 1000.0 + i, "run": "s", "rank": r, "kind": "step", "step": i, **fields}
              for i in range(1, steps + 1) for r, fields in ((0, fast), (1, slow))]
    # what the probe's per-op totals say: under ZeRO-3 most collective time is parameter all-gathers
    lines += [{"v": 1, "t": 1000.0 + steps, "run": "s", "rank": r, "kind": "comm", "op": op, "count": steps,
               "total_s": total} for r in (0, 1) for op, total in (("all_gather_into_tensor", 4.0),
                                                                  ("reduce_scatter_tensor", 1.0))]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {f["rule"]: f for f in diagnose_json(path)["findings"]}


# Rank 1's loader takes 0.15 s: rank 0 waits for it inside its gradient collectives.
WAITS = {"step_time_s": 0.16, "comm_s": 0.152, "fwd_s": 0.003, "bwd_s": 0.153, "optim_s": 0.002, "data_s": 0.0}
LOADS = {"step_time_s": 0.16, "comm_s": 0.004, "fwd_s": 0.003, "bwd_s": 0.005, "optim_s": 0.002, "data_s": 0.15}


def test_under_zero3_the_wait_for_a_straggler_is_not_called_communication(tmp_path):
    found = _run(tmp_path, 3, WAITS, LOADS)
    assert "ZD301" not in found
    straggler = found["ZD710"]
    assert straggler["ranks"] == [1]
    assert abs(straggler["evidence"]["straggler.cost_s"] - 0.148) < 1e-6


def test_when_every_rank_spends_the_step_in_collectives_zd301_still_fires(tmp_path):
    both = {**WAITS, "step_time_s": 0.2, "comm_s": 0.12, "bwd_s": 0.15}
    found = _run(tmp_path, 3, both, both)
    assert "ZD301" in found and "ZD710" not in found
