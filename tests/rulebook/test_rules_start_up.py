"""Commands that only read the rules start without the store, numpy or the pipeline.

Loading the rules reads the signal catalogue, whose modules name the run view; the view imports the
store (SQLAlchemy) only where it is given a connection. These imports cost ~0.3 s of a 2-core
machine's start-up, for nothing a rule listing uses.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

UNUSED = ("sqlalchemy", "numpy", "zerodoctor.pipeline", "zerodoctor.store")


@pytest.mark.parametrize("command", ["rules list", "rules show ZD201"])
def test_reading_the_rules_imports_no_store_numpy_or_pipeline(command: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # python -X importtime: one stderr line per module
    proc = run_cli(*command.split())
    assert proc.returncode == 0, proc.stderr
    assert "ZD201" in proc.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "zerodoctor.rulebook.loader" in imported  # the profile was read: the rules were loaded
    assert sorted(m for m in UNUSED if m in imported) == []
