"""ZeRO-3's allocator cache-flush warning, counted per step: ``memory.cache_flush_steps`` and ZD409.

The lines are DeepSpeed's format string, not a paste: ``runtime/zero/stage3.py`` ``_pre_step`` (0.3.16 on,
``logger.warning`` on rank 0) prints ``"%d pytorch allocator cache flushes since last step. this happens when there
is high memory pressure and is detrimental to performance. …"`` whenever ``num_alloc_retries`` rose during the step;
the real pastes are tests/corpus/heldout10-peft-194-* and heldout10-easycontext-11-*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.pipeline import rules_from
from tests.conftest import console_log, findings_by_rule

FLUSHES = ("[2023-03-20 20:38:{s:02d},874] [WARNING] [stage3.py:1939:step] {n} pytorch allocator cache flushes since "
           "last step. this happens when there is high memory pressure and is detrimental to performance. if this is "
           "happening frequently consider adjusting settings to reduce memory consumption. If you are unable to make "
           "the cache flushes go away consider adding torch.cuda.empty_cache() calls in your training loop to ensure "
           "that all ranks flush their caches at the same time")
PROGRESS = ("[2023-03-20 20:38:{s:02d},900] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, "
            "lr=[0.0001], mom=[(0.9, 0.999)]")


@pytest.fixture(scope="module")
def rules():
    return rules_from()


def _found(tmp_path: Path, rules, lines: list[str]):
    return findings_by_rule(console_log(tmp_path, lines), rules)


def test_flushes_in_two_of_three_steps(tmp_path: Path, rules) -> None:
    lines = [FLUSHES.format(s=1, n=13), PROGRESS.format(s=1, step=1), PROGRESS.format(s=2, step=2),
             FLUSHES.format(s=3, n=4), PROGRESS.format(s=3, step=3)]
    finding = _found(tmp_path, rules, lines)["ZD409"]
    assert finding.evidence["memory.cache_flush_steps"] == 2 and finding.evidence["memory.alloc_retries"] == 17
    assert "17 times in 2 steps" in finding.message, finding.message


def test_steps_without_a_flush_say_nothing(tmp_path: Path, rules) -> None:
    assert "ZD409" not in _found(tmp_path, rules, [PROGRESS.format(s=i, step=i) for i in range(1, 4)])
