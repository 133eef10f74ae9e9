"""Slurm's ``srun --label`` prefix read as the rank: a task's OOM kill is ZD405 of that task.

The lines are built from Slurm's format strings (labelled, not pasted): common/write_labelled_message.c
_build_label ``"%*d: "``, the task id right-aligned to the widest; slurmstepd's task/cgroup "Detected %"PRIu64"
oom_kill event%s in %ps. Some of the step tasks have been OOM Killed." (23.02+) after log.c's "slurmstepd: error: ";
srun's launch.c "%s: %s %s: Out Of Memory" after "srun: error: ", srun's own line, which no label carries.
"""

from __future__ import annotations

from pathlib import Path

from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.sources.text import unprefixed


def test_the_label_is_the_rank_and_torchs_own_prefix_wins() -> None:
    assert unprefixed(" 2: step 812") == (2, "step 812")
    assert unprefixed("12: [rank5]:[E ProcessGroupNCCL.cpp:1515]") == (5, "[E ProcessGroupNCCL.cpp:1515]")
    assert unprefixed("10:00:00 started") == (None, "10:00:00 started")


def test_a_labelled_task_oom_kill_names_its_rank(tmp_path: Path) -> None:
    path = tmp_path / "slurm-4312.out"
    path.write_text("\n".join([
        " 0: [2024-05-01 10:00:00,123] [INFO] [launch.py:145:main] step 811",
        " 2: slurmstepd: error: Detected 1 oom_kill event in StepId=4312.0. Some of the step tasks have been OOM "
        "Killed.",
        "srun: error: node07: task 2: Out Of Memory",
    ]) + "\n", encoding="utf-8")
    findings = {f.rule: f for f in diagnose([path], rules=rules_from(), input_format="text").findings}
    assert "ZD405" in findings, findings
    assert findings["ZD405"].ranks == [2], findings["ZD405"]
