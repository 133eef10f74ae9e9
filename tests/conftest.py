"""Shared fixtures: paths of the repository, a way to run the real CLI in a subprocess, snapshots, and
``store_url``: each store test runs on a real SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import difflib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest

from tests import extensions

ROOT = Path(__file__).resolve().parents[1]
# The PostgreSQL server the store tests also run on (``.ci/postgres`` starts one; CI always has it).
PG_URL = os.environ.get("ZERODOCTOR_TEST_PG_URL")
NO_PG = "no PostgreSQL server: set ZERODOCTOR_TEST_PG_URL (eval \"$(.ci/postgres DIR)\" starts one)"


def parsed(batches) -> list[dict]:
    """Every event the batches hold, steps as event dicts too (absent fields absent), in line order."""
    out: list[tuple[int, int, dict]] = []
    for b in batches:
        out += [(line, len(out) + i, e) for i, (line, e) in enumerate(zip(b.event_lines, b.events))]
        steps = [*zip(b.step_lines, b.steps),
                 *(pair for name, cols in b.columns.items() for pair in cols.records(name))]
        out += [(line, len(out) + i, {k: v for k, v in msgspec.to_builtins(s).items() if v is not None})
                for i, (line, s) in enumerate(steps)]
    return [e for _, _, e in sorted(out, key=lambda x: (x[0], x[1]))]


def step_rows(conn) -> list[dict]:
    """Every stored step as a dict, in the order stored: ``run`` (its name), ``rank``, ``step`` and each
    field the step had (store/steps.py's chunks decoded; what a store test checks)."""
    from sqlalchemy import select

    from zerodoctor.store.schema import runs
    from zerodoctor.store.steps import rows_of

    out: list[dict] = []
    for run_id, name in conn.execute(select(runs.c.id, runs.c.name).order_by(runs.c.id)):
        cols = rows_of(conn, run_id)
        if cols is None:
            continue
        columns = {}
        for field, values in cols.values.items():
            mask = cols.mask(field)
            columns[field] = [v if mask is None or ok else None for v, ok in
                              zip(values.tolist(), mask.tolist() if mask is not None else [True] * cols.n)]
        out += [{"run": name, **{k: c[i] for k, c in columns.items() if c[i] is not None}} for i in range(cols.n)]
    return out


def console_log(tmp_path: Path, lines) -> Path:
    """``tmp_path/console.log`` holding ``lines``, one a line: a console built from a library's format strings."""
    path = tmp_path / "console.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def findings_by_rule(path: Path, rules) -> dict:
    """The findings ``diagnose`` gives a console log in process, by rule code."""
    from zerodoctor.pipeline.diagnose import diagnose

    return {f.rule: f for f in diagnose([path], rules=rules, input_format="text").findings}


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m zerodoctor ARGS`` as a user would, capturing output; ``stdin`` is piped in.

    COLUMNS is wide (tables, help) and past any report line, so a pipe's report keeps one line per row
    (a piped report wraps to COLUMNS when set): tests look for whole sentences."""
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run([sys.executable, "-m", "zerodoctor", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env, input=stdin)


def diagnose_json(*paths: str | Path, extra: tuple[str, ...] = ()) -> dict:
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", *extra, *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def root() -> Path:
    return ROOT


SNAPSHOTS = ROOT / "tests" / "snapshots"


def pytest_configure(config: pytest.Config) -> None:
    """Every DeepSpeed process a test starts builds its ops into this session's own directory (tests/extensions.py),
    and keeps its rules cache (rulebook/cache.py) in a directory of the session's, never the user's ~/.cache."""
    directory, made = extensions.private_directory()
    os.environ["TORCH_EXTENSIONS_DIR"] = str(directory)
    config.stash[_EXTENSIONS] = (directory, made)
    os.environ["ZERODOCTOR_CACHE_DIR"] = config.stash[_CACHE] = tempfile.mkdtemp(prefix="zerodoctor-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    directory, made = config.stash.get(_EXTENSIONS, (None, False))
    if made:
        extensions.remove(directory)
    shutil.rmtree(config.stash.get(_CACHE, ""), ignore_errors=True)


_EXTENSIONS = pytest.StashKey[tuple]()
_CACHE = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--snapshot-update", action="store_true",
                     help="rewrite tests/snapshots/ from what the code produces now (review the git diff)")


@pytest.fixture
def snapshot(request: pytest.FixtureRequest):
    """``snapshot(name, data)``: compare ``data`` with ``tests/snapshots/<name>.json``, like ruff's insta snapshots.

    A mismatch fails with the diff and leaves ``<name>.json.new`` beside it for review; pass
    ``--snapshot-update`` to accept what the code produces now. Only the command-line option updates: a
    variable left in a shell's environment would turn every snapshot test into a pass.
    """
    update = request.config.getoption("--snapshot-update")

    def check(name: str, data: object) -> None:
        path = SNAPSHOTS / f"{name}.json"
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        pending = path.with_name(path.name + ".new")
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            pending.unlink(missing_ok=True)
            return
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if old != text:
            pending.parent.mkdir(parents=True, exist_ok=True)
            pending.write_text(text, encoding="utf-8")
            diff = "".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                f"a/{path.relative_to(ROOT)}", f"b/{path.relative_to(ROOT)}"))
            pytest.fail(f"snapshot {name} {'differs' if old else 'is new'} (review {pending.relative_to(ROOT)}, "
                        f"then rerun with --snapshot-update):\n{diff}", pytrace=False)
        pending.unlink(missing_ok=True)

    return check


def free_port() -> int:
    """A TCP port free on loopback now, for a store two test processes meet at."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real filesystem of 512 KiB (a tmpfs mounted for the test): filled with ``fill``, a real full disk."""
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs (a real full disk) needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until its filesystem has no space left."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    """A fresh, empty store: an SQLite file, or a schema of its own on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return _fresh_pg_schema(request)


@pytest.fixture
def pg_url(request) -> str:
    """A fresh, empty PostgreSQL store (a schema of its own), for the cases only PostgreSQL has."""
    return _fresh_pg_schema(request)


def _fresh_pg_schema(request) -> str:
    if not PG_URL:
        pytest.skip(NO_PG)
    from sqlalchemy import create_engine

    schema = f"zd_{secrets.token_hex(6)}"
    admin = create_engine(PG_URL, pool_pre_ping=True)  # a test may restart the server under it
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    request.addfinalizer(lambda: _drop_schema(admin, schema))
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={quote(f'-csearch_path={schema}')}"


def _drop_schema(admin, schema: str) -> None:
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


def ingested_series(tmp_path: Path, rows: list[dict], run: str):
    """``rows`` written as each rank's ``rank-N.jsonl`` of one run directory, read the way ``diagnose`` reads
    them, and the plot series of ``run`` as its view keeps it."""
    from zerodoctor.pipeline import Pipeline, rules_from
    from zerodoctor.store.db import open_engine

    run_dir = tmp_path / f"{run}-{len(rows)}"
    run_dir.mkdir()
    for rank in sorted({r["rank"] for r in rows}):
        (run_dir / f"rank-{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["rank"] == rank))
    engine = open_engine(run_dir / "store.db", scratch=True)
    try:
        pipeline = Pipeline(engine, rules_from(), lasting=False)
        pipeline.ingest([(path, "jsonl") for path in sorted(run_dir.glob("rank-*.jsonl"))], jobs=1)
        return pipeline.series(run)
    finally:
        engine.dispose()

