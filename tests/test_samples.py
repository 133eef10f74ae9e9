"""Every sample under ``samples/`` is diagnosed as its ``expected.json`` says (empty list: silent).

``diagnose --format json``'s findings, whole, are pinned in ``tests/snapshots/samples/``.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, diagnose_json

SAMPLES = sorted(p.parent for p in (ROOT / "samples").glob("*/expected.json"))


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_findings_match_expected(sample, snapshot):
    expected = json.loads((sample / "expected.json").read_text())
    assert expected["origin"] in ("recorded", "synthetic") and expected["note"]
    findings = diagnose_json(sample)["findings"]
    snapshot(f"samples/{sample.name}", findings)
    assert sorted({f["rule"] for f in findings}) == expected["findings"]


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_gives_identical_findings_on_postgresql(sample, pg_url):
    """Every event stored and the same findings, word for word, as the SQLite scratch store gives."""
    on_sqlite, on_pg = diagnose_json(sample), diagnose_json(sample, extra=("--db", pg_url))
    assert sum(i["events"] for i in on_pg["inputs"]) > 0
    assert on_pg["inputs"] == on_sqlite["inputs"]
    assert on_pg["findings"] == on_sqlite["findings"]
    assert on_pg["unevaluated"] == on_sqlite["unevaluated"]


def test_each_sample_is_small_and_complete():
    assert len(SAMPLES) >= 9
    for sample in SAMPLES:
        names = {p.name for p in sample.iterdir()}
        assert {"rank-0.jsonl", "console.log", "meta.json", "ds_config.json"} <= names, sample.name
        assert sum(p.stat().st_size for p in sample.iterdir()) < 512 * 1024, sample.name
