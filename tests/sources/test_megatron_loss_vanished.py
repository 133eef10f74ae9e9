"""A Megatron iteration line that prints no loss though an iteration advanced: the loss was NaN, in every wrapping a
console makes (``test_message_families.py``'s).

The lines are Megatron's ``training.py`` ``training_log`` format (2021-2024 form, ``perf_families._MEG_ITER``): each
loss is printed ``if avg > 0.0`` (664cd28b27 on; ``>= 0.0`` since b09ee64ae1), so a NaN average leaves the key out.
The real paste is tests/corpus/heldout10-megatron-ds-pr434-*.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import console_log, parsed
from tests.sources import test_message_families as families
from tests.sources.message_families import Message
from zerodoctor.sources.batches import make_parser, read_batches

_LINE = (" iteration {i:8d}/{n:8d} | consumed samples: {s:12d} | elapsed time per iteration (ms): 1979.2 | "
         "learning rate: 4.219E-07 | global batch size:    12 |{loss} loss scale: 1.0 | number of skipped "
         "iterations: {k:3d} | number of nan iterations:   0 |")


def _line(i: int, loss: float | None, skipped: int = 0) -> str:
    return _LINE.format(i=i, n=100, s=12 * i, k=skipped, loss=f" lm loss: {loss:.6E} |" if loss is not None else "")


def _losses(tmp_path: Path, records: tuple[str, ...], wrapping: str = "plain") -> dict[int, float]:
    message = Message("megatron_iteration", "", "megatron 2020-11-latest", "megatron/training.py", records)
    path = tmp_path / "console.log"
    path.write_text("\n".join(families.WRAPPINGS[wrapping](message)) + "\n", encoding="utf-8")
    return {e["step"]: e["loss"] for e in parsed(list(read_batches(path, make_parser("text", "t"))))
            if e["kind"] == "step" and "loss" in e}


@pytest.mark.parametrize("wrapping", [w for w in families.WRAPPINGS if w not in ("rich", "mid_line")])
def test_a_line_after_one_with_a_loss_that_prints_none_is_a_nan_loss(tmp_path: Path, wrapping: str) -> None:
    losses = _losses(tmp_path, (_line(10, 2.5), _line(20, None)), wrapping)
    assert losses[10] == 2.5 and math.isnan(losses[20]), losses


def test_a_single_line_without_a_loss_and_no_skipped_iteration_is_a_nan_loss(tmp_path: Path) -> None:
    losses = _losses(tmp_path, (_line(9, None),))
    assert list(losses) == [9] and math.isnan(losses[9]), losses


def test_a_line_whose_iterations_were_all_skipped_has_no_loss_to_print(tmp_path: Path) -> None:
    """Ten of ten skipped (fp16 start-up): nothing advanced, nothing averaged, no loss, no NaN."""
    losses = _losses(tmp_path, (_line(10, None, skipped=10), _line(20, 2.5)))
    assert losses == {20: 2.5}, losses


# Megatron-LLM#33 (held-out 11), as pasted: the third line cut after 'gr', its counts never printed.
_FALCON = (
    "iteration     3384/    8000 | consumed samples:       216576 | elapsed time per iteration (ms): 7845.5 | "
    "learning rate: 6.678E-06 | global batch size:    64 | lm loss: 7.072597E-01 | loss scale: 1.0 | grad norm: "
    "0.741 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "iteration     3385/    8000 | consumed samples:       216640 | elapsed time per iteration (ms): 7624.3 | "
    "learning rate: 6.676E-06 | global batch size:    64 | loss scale: 1.0 | gr",
)


def _read(tmp_path: Path, lines: tuple[str, ...]) -> dict[int, float]:
    path = console_log(tmp_path, lines)
    return {e["step"]: e["loss"] for e in parsed(list(read_batches(path, make_parser("text", "t"))))
            if e["kind"] == "step" and "loss" in e}


def test_a_line_cut_after_an_unscaled_loss_scale_without_a_loss_is_a_nan_loss(tmp_path: Path) -> None:
    """The losses come before the loss scale in every training_log, and at 1.0 nothing is skipped: the cut line
    reached past where its loss would be. Before, a line without its skipped count said nothing."""
    losses = _read(tmp_path, _FALCON)
    assert losses[3384] == pytest.approx(0.7072597) and math.isnan(losses[3385]), losses


def test_a_line_cut_after_an_fp16_loss_scale_says_nothing(tmp_path: Path) -> None:
    """The same cut at an fp16 scale (the format string's, built here): its iterations may all have been skipped
    for overflow, which also prints no loss, and the count that would tell was cut."""
    losses = _read(tmp_path, (_FALCON[0], _FALCON[1].replace("loss scale: 1.0", "loss scale: 65536.0")))
    assert 3385 not in losses, losses
