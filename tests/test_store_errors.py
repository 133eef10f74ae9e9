"""A bad ``--db`` is bad input: exit 2 with one line naming the store, never its password, never
SQLAlchemy's statement dump, on every command that opens a store."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import NO_PG, PG_URL, ROOT, run_cli

SECRET = "s3cret-Pa55"
SAMPLE = ROOT / "samples" / "batch-mismatch"
COMMANDS = {
    "watch": lambda db: ("watch", "--once", "--db", db, str(SAMPLE)),
    "status": lambda db: ("status", "--db", db),
    "diagnose": lambda db: ("diagnose", "--db", db, str(SAMPLE)),
}


def wrong_password() -> str:
    if not PG_URL:
        pytest.skip(NO_PG)
    return make_url(PG_URL).set(password=SECRET).render_as_string(hide_password=False)


CASES = {
    "wrong-password": (wrong_password, "password authentication failed"),
    "unreachable-server": (lambda: f"postgresql://zd:{SECRET}@127.0.0.1:1/zd", "Connection refused"),
    "missing-driver": (lambda: f"postgresql+pg8000://zd:{SECRET}@localhost/zd", "driver is not installed"),
    "bad-url": (lambda: f"postgresql://zd:{SECRET}@localhost:port/zd", "not a store URL"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", CASES)
def test_bad_db_exits_2_with_one_line_without_the_password(case, command):
    url_of, says = CASES[case]
    proc = run_cli(*COMMANDS[command](url_of()), timeout=60)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2, proc.stderr
    assert len(errors) == 1 and errors[0].startswith("zerodoctor: error: ") and says in errors[0], proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    assert "[SQL:" not in proc.stderr and len(proc.stderr) < 1000
