"""Watch judges a run in progress on its timer: a stall is named although no new line arrives."""

from __future__ import annotations

import json
import time

from zerodoctor.signals import hang


def _line(t: float, rank: int, kind: str, **fields) -> str:
    return json.dumps({"v": 1, "t": t, "run": "r", "rank": rank, "kind": kind, **fields}) + "\n"


def test_a_stall_crosses_the_threshold_between_two_passes_with_no_new_event(tmp_path, make_watcher):
    announced: list = []
    watcher = make_watcher(announced)
    watcher.recheck_s = 0.5
    now = time.time()
    last_step_t = now - hang.HANG_WITHIN_S + hang.NAMING_LATENCY_S + 2  # 2 s short of the window
    for rank, phase in ((0, {"phase": "collective", "op": "all_reduce", "group": "0", "seq": 9, "outer": "backward"}),
                        (1, {"phase": "data"})):
        lines = [_line(now - 100, rank, "run_start", world_size=2)]
        lines += [_line(last_step_t - 10 + i, rank, "step", step=i, step_time_s=1.0) for i in range(1, 11)]
        lines.append(_line(now - 1, rank, "heartbeat", since_t=last_step_t, last_step=10, **phase))
        (tmp_path / "runs" / "r").mkdir(parents=True, exist_ok=True)
        (tmp_path / "runs" / "r" / f"rank-{rank}.jsonl").write_text("".join(lines))
    watcher.discover()
    watcher.ingest()
    watcher.judge(force=True)
    assert not [f for f in announced if f.rule == "ZD702"]
    time.sleep(3)  # nothing is written meanwhile: a stuck rank writes no step
    watcher.ingest()
    watcher.judge()
    stuck = [f for f in announced if f.rule == "ZD702"]
    assert stuck and stuck[0].ranks == [1] and "in the data loader" in stuck[0].message
