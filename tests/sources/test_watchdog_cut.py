"""A watchdog line cut after its op type is still a timeout: its rank, SeqNum and op, in every wrapping a console
makes (``test_message_families.py``'s), each work item once.

The lines are torch 2.2-2.3's format (``ProcessGroupNCCL.cpp``: ``"Watchdog caught collective operation timeout: "``
+ ``WorkNCCL(SeqNum=S, OpType=OP, NumelIn=…``), cut as huggingface/accelerate#2536's paste cut them
(``message_families.CUT_TIMEOUTS``); the paste itself is tests/corpus/heldout10-accelerate-2536-*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import parsed
from tests.sources import test_message_families as families
from tests.sources.message_families import CUT_TIMEOUTS
from zerodoctor.sources.batches import make_parser, read_batches

(CUT,) = CUT_TIMEOUTS


@pytest.mark.parametrize("wrapping", [w for w in families.WRAPPINGS if families._applies(CUT, w) and w != "mid_line"])
def test_each_cut_work_item_is_one_timeout(tmp_path: Path, wrapping: str) -> None:
    path = tmp_path / "console.log"
    path.write_text("\n".join(families.WRAPPINGS[wrapping](CUT)) + "\n", encoding="utf-8")
    events = parsed(list(read_batches(path, make_parser("text", "t"))))
    got = sorted((e["rank"], e["data"]["seq"], e["data"]["op"]) for e in events
                 if e.get("what") == "collective_timeout")
    assert got == [(3, 1008, "ALLREDUCE"), (3, 956300, "_ALLGATHER_BASE")]
