"""The clock a console log prints, after its last step: what ZD714 (a stall while the log went on) reads.

Lines are built from the loggers' own formats: DeepSpeed's (utils/logging.py, ``[%(asctime)s] [%(levelname)s]
[%(filename)s:%(lineno)d:%(funcName)s] %(message)s``, the step line from runtime/engine.py's ``step={}, skipped={},
lr={}, mom={}``), Python logging's ``%(asctime)s %(levelname)s %(name)s: %(message)s``, under torchrun's
``[rankN]:`` prefix and with colours kept.
"""

from __future__ import annotations

import pytest

from zerodoctor.sources.text import TextParser

STEP = "[{t}] [INFO] [logging.py:96:log_dist] [Rank 0] step={n}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
WARN = "{t} WARNING train: shard not ready, retrying in 10 s"


def _went_on(lines: list[str]) -> list[dict]:
    parser = TextParser("r")
    out = []
    for line in lines:
        out += parser.feed(line.encode() + b"\n")
    out += parser.finish()
    return [e for e in out if e.get("what") == "log_clock"]


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: "[rank1]:" + s, lambda s: "\x1b[33m" + s + "\x1b[0m"],
                         ids=["plain", "rank-prefix", "ansi"])
def test_a_stamped_line_after_the_last_step_says_how_long_the_log_went_on(wrap) -> None:
    lines = [STEP.format(t="2024-03-01 10:00:00,100", n=1), STEP.format(t="2024-03-01 10:00:01,100", n=2),
             wrap(WARN.format(t="2024-03-01 10:03:01,100")), "Traceback (most recent call last):",
             '  File "train.py", line 3, in <module>', "KeyboardInterrupt"]
    (went_on,) = _went_on(lines)
    assert went_on["t"] - went_on["data"]["progress_t"] == pytest.approx(180.0)
    assert went_on["data"]["step"] == 2


def test_a_log_cut_at_its_last_step_shows_no_clock_after_it() -> None:
    (went_on,) = _went_on([STEP.format(t="2024-03-01 10:00:00,100", n=1), "  5%|▌  | 1/20 [00:01<00:19,  1.00it/s]"])
    assert went_on["t"] == went_on["data"]["progress_t"]  # judged: it went on for 0 s


def test_a_step_on_an_unstamped_line_has_no_time_to_measure_from() -> None:
    lines = [WARN.format(t="2024-03-01 10:00:00,100"), "{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}",
             WARN.format(t="2024-03-01 11:00:00,100")]
    assert _went_on(lines) == []
