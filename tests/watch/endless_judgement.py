"""``python -m tests.watch.endless_judgement ARGS``: the zerodoctor CLI, where judging the run named "endless"
never ends.

The stand-in for a loop no input should cause (the real ones, in the fp16 scaler replay, are fixed and
tested in test_watch_isolation.py): a plain Python loop, which only a signal can end.
``ZERODOCTOR_TEST_BUDGET_S`` sets the judgement budget; the file ``ZERODOCTOR_TEST_MARK`` names is made
when the endless judgement starts, so a test waits on it rather than on time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zerodoctor.cli import main
from zerodoctor.rulebook import engine
from zerodoctor.watch import budget

_evaluate = engine.evaluate


def _endless(rules, values, name, ranks):
    if name == "endless":
        Path(os.environ["ZERODOCTOR_TEST_MARK"]).touch()
        while True:
            pass
    return _evaluate(rules, values, name, ranks)


engine.evaluate = _endless  # what judge_view calls, under every judgement
budget.JUDGE_BUDGET_S = float(os.environ.get("ZERODOCTOR_TEST_BUDGET_S", budget.JUDGE_BUDGET_S))
sys.argv = ["zerodoctor", *sys.argv[1:]]
sys.exit(main())
