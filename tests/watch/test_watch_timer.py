"""Watch judges a run in progress on its timer: a stall is named although no new line arrives."""

from __future__ import annotations

import shutil
import time

from tests.watch.conftest import event_line as _line
from tests.watch.conftest import stalled_run
from zerodoctor.signals import hang


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


def _verdict(tmp_path, make_watcher, skew_s: float, skews: tuple[float, float] = (0.0, 0.0)) -> list:
    if (tmp_path / "runs").exists():
        shutil.rmtree(tmp_path / "runs")
    announced: list = []
    watcher = make_watcher(announced)
    stalled_run(tmp_path / "runs", skew_s, skews)
    watcher.discover()
    watcher.ingest()
    watcher.judge(force=True)
    watcher.close()
    watcher.engine.dispose()
    return sorted((f.rule, tuple(f.ranks)) for f in announced if f.rule.startswith("ZD7"))


def test_a_hang_is_judged_on_the_watchers_clock_whatever_the_ranks_clocks_say(tmp_path, make_watcher):
    """The same hang with the ranks' clocks 45 s behind the watcher's, or ahead: the same verdict as at 0
    (before: 45 s behind, every rank looked silent, the job 'gone', and the hang went unnamed)."""
    verdicts = {skew_s: _verdict(tmp_path, make_watcher, skew_s) for skew_s in (0.0, -45.0, 45.0)}
    assert ("ZD705", (1,)) in verdicts[0.0], verdicts  # rank 1 dead, named
    assert verdicts[-45.0] == verdicts[0.0] == verdicts[45.0], verdicts


def test_ranks_on_nodes_whose_clocks_disagree_are_each_judged_on_their_own(tmp_path, make_watcher):
    """One node 45 s behind the other, either way: the dead rank is named all the same (before: with the
    live rank's clock ahead, the dead one looked 24 s quiet, not 69, and the hang was called a wait)."""
    verdicts = {skews: _verdict(tmp_path, make_watcher, 0.0, skews)
                for skews in ((0.0, 0.0), (45.0, 0.0), (0.0, 45.0), (-45.0, 0.0), (0.0, -45.0))}
    assert ("ZD705", (1,)) in verdicts[(0.0, 0.0)], verdicts
    assert all(v == verdicts[(0.0, 0.0)] for v in verdicts.values()), verdicts
