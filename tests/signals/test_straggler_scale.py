"""Stragglers at scale and in time: one slow rank among 4,096, a rank that turns slow late, a slow node.

The expected findings, written before the code that gives them:
- one rank among 4,096 whose device is 40 % slower from step 3 of 44: ZD711 names that rank alone, over the
  whole run ("rank N holds the others up");
- the same rank turning slow at step 20 of 44: ZD711 names it alone over its recent steps ("has held the
  others up for its last 16 steps"), though its mean over the run stays under the rule's share;
- the 8 ranks of one node slow from step 3 among 512: ZD711 names the node and its 8 ranks;
- 4,096 healthy ranks whose waits differ widely (a fixed per-rank offset): no straggler — the rank that waits
  least, and the ranks near it, are only the tail of their spread.

The events are synthetic, shaped like the probe's ``run_start`` and ``step`` lines (``probe/events.py``),
all ranks in one events file; 8 ranks a host.
"""

from __future__ import annotations

import random

from tests.conftest import diagnose_json

STEPS = 44
START = ('{"v":1,"t":1000.0,"run":"big","rank":%d,"kind":"run_start","world_size":%d,"local_rank":%d,'
         '"host":"node%04d","zero_stage":2,"params":7000000000,"config":{"zero_optimization":{"stage":2}}}\n')
STEP = ('{"v":1,"t":%.1f,"run":"big","rank":%d,"kind":"step","step":%d,"step_time_s":%.4f,"fwd_s":0.1,'
        '"bwd_s":%.4f,"optim_s":0.05,"comm_s":%.4f}\n')
# 0.35 s on the device, 0.1 s in collectives, 0.05 s outside the engine; a slow device takes 0.14 s more,
# which every other rank waits in its collectives
DEVICE, COMM, OUTSIDE, EXTRA = 0.35, 0.1, 0.05, 0.14


def _diagnose(tmp_path, ranks: int, slow: set[int], slow_from: int, offsets: dict[int, float] | None = None):
    lines = [START % (r, ranks, r % 8, r // 8) for r in range(ranks)]
    for step in range(1, STEPS + 1):
        turned = step >= slow_from
        for r in range(ranks):
            device = DEVICE + (EXTRA if r in slow and turned else 0.0)
            comm = COMM + (EXTRA if turned and r not in slow else 0.0) + (offsets or {}).get(r, 0.0)
            lines.append(STEP % (1000.0 + step, r, step, device + comm + OUTSIDE, device + comm - 0.15, comm))
    path = tmp_path / "big.jsonl"
    path.write_text("".join(lines))
    return [f for f in diagnose_json(path)["findings"] if f["category"] == "straggler"]


def test_one_slow_rank_among_4096_is_named_alone(tmp_path):
    found = _diagnose(tmp_path, 4096, {2051}, slow_from=3)
    assert [(f["rule"], f["ranks"]) for f in found] == [("ZD711", [2051])]
    assert found[0]["message"].startswith("rank 2051 holds the others up")


def test_a_rank_turning_slow_at_step_20_of_44_is_named_over_its_recent_steps(tmp_path):
    found = _diagnose(tmp_path, 4096, {2051}, slow_from=20)
    assert [(f["rule"], f["ranks"]) for f in found] == [("ZD711", [2051])]
    assert found[0]["message"].startswith("rank 2051 has held the others up for its last 16 steps")
    assert abs(found[0]["evidence"]["straggler.cost_s"] - EXTRA) < 1e-3


def test_eight_slow_ranks_of_one_node_among_512_name_the_node(tmp_path):
    found = _diagnose(tmp_path, 512, set(range(8, 16)), slow_from=3)
    assert [(f["rule"], f["ranks"]) for f in found] == [("ZD711", list(range(8, 16)))]
    assert found[0]["message"].startswith("the ranks of node node0001 hold the others up")


def test_the_least_wait_of_4096_ranks_that_differ_widely_is_no_straggler(tmp_path):
    # each rank waits 0.3 s ± 0.07 in its collectives: the least of 4,096 such waits is 3.5 deviations below the
    # median, 36 % of the step; without the spread its tail of 145 ranks would be named, 21 % of the step
    rng = random.Random(37)
    offsets = {r: 0.2 + rng.gauss(0.0, 0.07) for r in range(4096)}
    assert _diagnose(tmp_path, 4096, set(), slow_from=STEPS + 1, offsets=offsets) == []
