"""Flight recorder dumps: real ones written by c10d's C++ writer (gloo, 2 ranks), and hostile pickles refused."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, diagnose_json, free_port, run_cli
from zerodoctor.sources.batches import make_parser
from zerodoctor.sources.flight_recorder import FlightRecorderError, dumps_in, load

HELPER = Path(__file__).with_name("fr_hang.py")


def dump_events(path: Path, run_id: str) -> list:
    """One rank's dump read whole by the parser the ``flight-recorder`` format names, as the tail reads it."""
    parser = make_parser("flight-recorder", run_id=run_id, path=path)
    parser.feed(path.read_bytes())
    return parser.finish()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """Rank 0 waits in an all_reduce (#3) that rank 1 never calls; both dump their flight recorder."""
    out = tmp_path_factory.mktemp("fr")
    port = str(free_port())  # not torch's default 29500: another checkout's tests may run beside these
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(HELPER), str(r), port, str(out / "nccl_trace_rank_")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    for proc in procs:
        proc.wait(timeout=120)
    return out


def test_each_ranks_last_collective_is_read_from_its_dump(dumps):
    found = dumps_in(dumps)
    assert [p.name for p in found] == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    events = [e for path in found for e in dump_events(path, "hung")]
    last = {e["rank"]: e["data"] for e in events}
    assert {r: (d["group"], d["seq"], d["op"]) for r, d in last.items()} == {
        0: ("0", 3, "gloo:all_reduce"), 1: ("0", 2, "gloo:all_reduce")}
    assert last[0]["completed_seq"] == 2 and last[0]["enqueued_seq"] == 3  # rank 0's #3 never completed
    assert all(e["what"] == "flight_recorder" and e["run"] == "hung" for e in events)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickle_that_names_a_class_or_function_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Boom()]}, protocol=2))
    with pytest.raises(FlightRecorderError, match="refused posix.system|refused os.system"):
        dump_events(path, "x")
    assert not (tmp_path / "pwned").exists()


def test_files_that_are_not_dumps_say_so_with_their_name(tmp_path):
    with pytest.raises(FlightRecorderError, match="nccl_trace_rank_1: not a flight recorder dump"):
        load(b"[rank1]: some text", "nccl_trace_rank_1")
    with pytest.raises(FlightRecorderError, match="unreadable"):
        load(pickle.dumps({"version": 1}, protocol=2)[:-3], "cut")
    with pytest.raises(FlightRecorderError, match="no version/entries"):
        load(pickle.dumps([1, 2], protocol=2), "list")
    (tmp_path / "notes_rank_0").write_text("not a pickle")
    assert dumps_in(tmp_path) == []


def test_diagnose_reads_the_dumps_of_a_run_directory_and_names_the_rank_behind(dumps, tmp_path):
    run_dir = tmp_path / "hung"
    run_dir.mkdir()
    for path in dumps_in(dumps):
        (run_dir / path.name).write_bytes(path.read_bytes())
    report = diagnose_json(run_dir)
    assert {i["format"] for i in report["inputs"]} == {"flight-recorder"}
    behind = next(f for f in report["findings"] if f["rule"] == "ZD707")
    assert behind["ranks"] == [1]
    says = "rank 1's last collective on group 0 (default_pg) is #2 gloo:all_reduce, the others reached #3"
    assert says in behind["message"]


def test_a_damaged_dump_is_kept_aside_with_its_name_and_the_rest_is_read(dumps, tmp_path):
    run_dir = tmp_path / "hung"
    run_dir.mkdir()
    good, other = dumps_in(dumps)
    (run_dir / good.name).write_bytes(good.read_bytes())
    (run_dir / other.name).write_bytes(other.read_bytes()[:200])
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    read = {Path(i["path"]).name: (i["events"], i["quarantined"]) for i in json.loads(proc.stdout)["inputs"]}
    assert read[good.name][0] >= 1 and read[good.name][1] == 0  # the rest is read
    assert read[other.name] == (0, 1)  # the damaged dump kept aside, counted
    assert "nccl_trace_rank_1" in proc.stderr  # and named
