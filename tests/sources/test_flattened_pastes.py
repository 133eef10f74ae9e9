"""A console log pasted where its line breaks were lost (an issue body outside a code block, a chat message): the
NCCL watchdog's epitaph and the error it announces share one line, and the error still names the fault.

ProcessGroupNCCL's ``Some NCCL operations have failed or timed out`` ends any failed work, a timeout or an NCCL
result the watchdog found; the NCCL dialect tells the two apart by the exception after it. Each message of
``NCCL_ASYNC`` (built from torch's and NCCL's format strings) is put through every console wrapping of
``test_message_families`` and then flattened: its lines joined by a space, as such a paste shows them
(tatsu-lab/stanford_alpaca#207).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.score import CLAIMS
from tests.sources.message_families import NCCL_ASYNC, Message
from tests.sources.test_message_families import PREAMBLE, WRAPPINGS, _applies
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

TIMEOUT_RULE = "ZD701"


def flattened(lines: list[str]) -> str:
    """The lines as one, joined by a space (a line break rendered as a space, then copied)."""
    return " ".join(line.strip() for line in lines)


@pytest.fixture(scope="module")
def rules():
    return rules_from()


@pytest.mark.parametrize(("message", "wrapping"),
                         [pytest.param(m, w, id=f"{m.id}-{w}")
                          for m in NCCL_ASYNC for w in WRAPPINGS if _applies(m, w)])
def test_a_flattened_watchdog_error_is_an_nccl_error_not_a_timeout(tmp_path: Path, rules, message: Message,
                                                                   wrapping: str) -> None:
    log = tmp_path / "console.log"
    log.write_text("\n".join([*PREAMBLE, flattened(WRAPPINGS[wrapping](message))]) + "\n", encoding="utf-8")
    report = diagnose([log], rules=rules, input_format="text")
    claimed = {f.rule for f in report.findings if f.severity in CLAIMS}
    assert message.rule in claimed and TIMEOUT_RULE not in claimed, f"{message.versions}: got {claimed}"
