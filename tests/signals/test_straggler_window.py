"""The straggler fold's recent window, walked from each block's end, keeps what a walk over every step keeps.

``straggler.Fold.add_steps`` reads only each rank's last ``WINDOW_STEPS`` timed steps of a block (a walk over
every step and rank cost 6 s of a 1M-event ``diagnose``). Over random by-rank histories — ranks that join
late or stop, steps where a rank has a wait but no step time, steps with no ranks at all — its windows, and the
order its ranks were first met (``_judge`` names the first of equally slow ranks), must equal those of the
step-by-step walk it replaced, whatever blocks the steps come in, given as lists of dicts or as the
``ByRank`` columns ``merges.merge`` makes.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from zerodoctor.events.columns import Columns, Steps
from zerodoctor.events.merges import merge
from zerodoctor.signals import straggler

_SUMS = ("comm_s", "step_time_s", "fwd_s", "bwd_s", "optim_s", "data_s")


def _history(seed: int, n: int) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    ranks = list(range(rng.choice((2, 8, 40))))
    joins = {r: rng.choice((0, 0, 0, rng.randrange(n))) for r in ranks}
    stops = {r: rng.choice((n, n, n, rng.randrange(n))) for r in ranks}
    cols: dict[str, list[Any]] = {"step": [], **{f"straggler_{k}_by_rank": [] for k in _SUMS}}
    for i in range(n):
        cols["step"].append(i + 1)
        here = [r for r in ranks if joins[r] <= i < stops[r]]
        rng.shuffle(here)  # the rows of a step come in the order their lines were read
        for name in _SUMS:
            values = {r: round(rng.uniform(0.0, 0.5), 9) for r in here
                      if name == "comm_s" or rng.random() > (0.2 if name == "step_time_s" else 0.4)}
            cols[f"straggler_{name}_by_rank"].append(values or None)
    return cols


def _step_by_step(cols: dict[str, list[Any]]) -> dict[str, list[list[Any]]]:
    """The walk over every step and rank the fold did before, as it was."""
    recent: dict[str, list[list[Any]]] = {}
    comm, step_time, fwd, bwd, optim, data = (cols[f"straggler_{name}_by_rank"] for name in _SUMS)
    for i, step in enumerate(cols["step"]):
        times = step_time[i] or {}
        for rank, wait in (comm[i] or {}).items():
            total = times.get(rank)
            if total is None:
                continue
            engine = sum((part[i] or {}).get(rank, 0.0) for part in (fwd, bwd, optim))
            device = max(engine - wait, 0.0)
            ring = recent.setdefault(str(rank), [])
            ring.append([step, round(wait, 6), round(device, 6), round(max(total - wait - device, 0.0), 6),
                         (data[i] or {}).get(rank)])
            if len(ring) > straggler.WINDOW_STEPS:
                del ring[0]
    return recent


def _merged(cols: dict[str, list[Any]]) -> dict[str, Any]:
    """The same history as ``merges.merge`` hands it to the fold: one row per rank and step, the ``ranks``
    columns as ``ByRank`` (a step's dict built when read)."""
    rows = [(step, rank) for i, step in enumerate(cols["step"])
            for rank in {r: None for name in _SUMS for r in cols[f"straggler_{name}_by_rank"][i] or {}}]
    values = {name: [(cols[f"straggler_{name}_by_rank"][cols["step"].index(step)] or {}).get(rank)
                     for step, rank in rows] for name in _SUMS}
    n = len(rows)
    columns = Columns(n, {"step": np.array([s for s, _ in rows], dtype=np.int64),
                          "rank": np.array([r for _, r in rows], dtype=np.int64),
                          "t": np.zeros(n), **{k: np.array(v, dtype=np.float64) for k, v in values.items()}},
                      {"step": None, "rank": None, "t": None, **{k: None for k in _SUMS}})
    merged = merge(columns, {f"straggler_{name}_by_rank": (name, "ranks") for name in _SUMS})
    held = [i for i, step in enumerate(cols["step"]) if step in set(merged["step"])]  # a step no rank reported: none
    for name in _SUMS:  # the merge gives each step's dict
        key = f"straggler_{name}_by_rank"
        assert list(merged[key]) == [cols[key][i] or {} for i in held]
    return merged


@pytest.mark.parametrize("by_rank", [False, True], ids=["lists", "ByRank"])
@pytest.mark.parametrize("seed", range(40))
def test_the_window_equals_a_walk_over_every_step_in_any_blocks(seed, by_rank):
    cols = _history(seed, random.Random(seed).choice((5, 30, 200)))
    expected = _step_by_step(cols)
    given = _merged(cols) if by_rank else cols
    rng = random.Random(seed + 1000)
    fold, start, n = straggler.Fold(), 0, len(given["step"])
    while start < n:
        end = min(n, start + rng.choice((1, 3, 17, 64, n)))
        fold.add_steps(Steps({k: v[start:end] for k, v in given.items()}), None)  # type: ignore[arg-type]
        # the state goes through JSON between blocks, as a store keeps it
        fold = straggler.Fold.load(json.loads(json.dumps(fold.dump())))
        start = end
    assert list(fold.recent.items()) == list(expected.items())
