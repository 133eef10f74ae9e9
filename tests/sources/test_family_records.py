"""A message family's record is its one home: the readers' prefilters and line families come from it.

``messages/crashes.py``'s families and ``messages/signatures.py``'s signatures hold their keywords; the fatal
and crash dialects take theirs from them (docs/families.md). These tests hold the records to the shape the
derivation needs; what each family reads is ``test_message_families.py``'s.
"""

from __future__ import annotations

import pytest

from zerodoctor.messages import crashes
from zerodoctor.messages.signatures import SIGNATURES, Signature
from zerodoctor.sources.crashes import CrashDialect
from zerodoctor.sources.fatal import FatalDialect

RECORDS = [*crashes.FAMILIES, *SIGNATURES]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_keywords_are_a_tuple_of_words(record: crashes.Family | Signature) -> None:
    """``keywords=(b"NCCL error")`` without its comma is bytes, and the prefilter would get single bytes."""
    assert isinstance(record.keywords, tuple), record.keywords
    assert all(isinstance(k, bytes) and len(k) >= 3 for k in record.keywords), record.keywords


@pytest.mark.parametrize("family", crashes.FAMILIES, ids=lambda f: f.name)
def test_words_alone_belong_to_a_family_a_line_may_show(family: crashes.Family) -> None:
    """A line the prefilter never hands the fatal dialect cannot be read by its ``alone`` words."""
    assert family.alone is None or family.line


def test_the_fatal_dialect_reads_every_line_familys_words() -> None:
    line_words = {k for f in crashes.FAMILIES if f.line for k in f.keywords}
    assert line_words <= set(FatalDialect.keywords)
    assert len(FatalDialect.keywords) == len(set(FatalDialect.keywords))


def test_the_crash_dialect_reads_every_signatures_words() -> None:
    assert {k for s in SIGNATURES for k in s.keywords} <= set(CrashDialect.keywords)
    assert len({s.name for s in SIGNATURES}) == len(SIGNATURES)
