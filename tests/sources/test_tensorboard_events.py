"""DeepSpeed Monitor's TensorBoard event files, read through TensorBoard's own reader (the optional extra).

``tests/fixtures/perf/zero2-cpu-tb/`` is what ``tests/fixtures/perf/record.py OUT 2 tensorboard`` wrote (DeepSpeed
0.19.8, torch 2.13 CPU, tensorboard 2.21, gloo, 2 ranks, ZeRO-2, ``wall_clock_breakdown``, ``csv_monitor`` and the
``tensorboard`` monitor both on): the same engine events in both writers, so each step's phase split read from the
event file must be the CSV files' (TensorBoard keeps a scalar as float32: equal to 1e-6).
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import parsed
from tests.sources.test_perf_real_run import PERF
from zerodoctor.sources.batches import detect_format, make_parser, read_batches, run_files, run_id_for
from zerodoctor.sources.tensorboard_events import MISSING_EXTRA

RUN = PERF / "zero2-cpu-tb"
FIELDS = ("fwd_s", "bwd_s", "optim_s", "comm_s", "step_time_s", "lr")


def _read(path: Path, fmt: str = "tensorboard") -> tuple[dict[int, dict], list[str]]:
    batches = list(read_batches(path, make_parser(fmt, run_id_for(path), path=path)))
    steps = {e["step"]: e for e in parsed(batches) if e["kind"] == "step"}
    return steps, [r.reason for b in batches for r in b.rejected]


def test_the_event_file_and_the_csv_files_of_one_run_agree_step_by_step() -> None:
    pytest.importorskip("tensorboard")
    ((path, fmt),) = run_files(RUN / "tb")
    assert fmt == "tensorboard" and run_id_for(path) == "zero2"
    board, rejected = _read(path)
    ((monitor, csv_fmt),) = run_files(RUN / "csv")
    csv, _ = _read(monitor, csv_fmt)
    assert not rejected and len(board) == 6 and sorted(board) == sorted(csv) == list(range(1, 7))
    for step, row in csv.items():
        for field in FIELDS:
            assert math.isclose(board[step][field], row[field], rel_tol=1e-6), (step, field)


def test_an_event_file_is_known_by_its_content_whatever_its_name(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    (path, _), = run_files(RUN / "tb")
    copy = tmp_path / "zero2" / "copied.bin"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    assert detect_format(copy) == "tensorboard" and run_id_for(copy) == "zero2"
    assert len(_read(copy)[0]) == 6


def test_a_file_cut_mid_record_gives_the_steps_before_the_cut(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    (path, _), = run_files(RUN / "tb")
    data = path.read_bytes()
    cut = tmp_path / path.name
    cut.write_bytes(data[:-20])
    steps, _ = _read(cut)
    assert 5 <= len(steps) <= 6 and all(math.isfinite(s["fwd_s"]) for s in steps.values() if "fwd_s" in s)


def test_without_tensorboard_the_file_is_set_aside_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No crash and no steps: one rejected entry saying which package would read it."""
    for name in [n for n in sys.modules if n.split(".")[0] == "tensorboard"] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # import tensorboard.… raises ImportError
    (path, _), = run_files(RUN / "tb")
    steps, rejected = _read(path)
    assert steps == {} and rejected == [MISSING_EXTRA]
