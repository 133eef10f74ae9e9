"""Flight recorder dumps as PyTorch writes them: any file prefix, and ranks placed by ``pg_status`` as well as entries.

The dumps under tests/fixtures/flight_recorder/ are real (2- and 4-rank gloo jobs on torch 2.13,
see its README). Two cases torch's gloo backend cannot produce are built here from a real dump or
from the writer's format, and say so: an ``entries`` list that is empty (NCCL's ``onlyActive``
dump of a rank whose collectives all completed) and a group carrying p2p ops under NCCL.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, diagnose_json, run_cli
from zerodoctor.sources.batches import run_files, run_id_for
from zerodoctor.sources.flight_recorder import dumps_in, is_dump

DUMPS = ROOT / "tests" / "fixtures" / "flight_recorder"


def zd707(run_dir: Path) -> dict | None:
    report = diagnose_json(run_dir)
    assert {i["format"] for i in report["inputs"]} == {"flight-recorder"}
    return next((f for f in report["findings"] if f["rule"] == "ZD707"), None)


def test_a_directory_of_dumps_is_known_by_content_whatever_the_prefix(tmp_path):
    assert run_files(DUMPS / "hang") == [(DUMPS / "hang" / f"_dump_{r}", "flight-recorder") for r in (0, 1)]
    assert run_id_for(DUMPS / "hang" / "_dump_1") == "hang"  # one run: the directory's, not one per file
    real = (DUMPS / "hang" / "_dump_0").read_bytes()
    (tmp_path / "fr_7").write_bytes(real)
    (tmp_path / "_dump_1").write_text("[rank1]: a console line\n")  # the name alone does not make a dump
    (tmp_path / "_dump_2").write_bytes(pickle.dumps([1, 2], protocol=2))  # nor does a pickle of something else
    (tmp_path / "_dump_3.part").write_bytes(real)  # the writer's file is named <prefix><rank>
    (tmp_path / "_dump_4").mkdir()
    assert dumps_in(tmp_path) == [tmp_path / "fr_7"]
    assert is_dump(pickle.dumps({"entries": [], "version": "1.4", "pg_config": {}}, protocol=2))  # 1.x: entries first


@pytest.mark.parametrize("scenario, behind, says", [
    ("hang", [1], "rank 1's last collective on group 0 (default_pg) is #2 gloo:all_reduce, the others reached #3"),
    ("hang-rank1-no-entries", [1], "rank 1's last collective on group 0 (default_pg) is #2, the others reached #3"),
    ("hang-no-entries", [1], "rank 1's last collective on group 0 is #2, the others reached #3"),
    ("hang-stale", [1], "rank 1's last collective on group 0 (default_pg) is #2, the others reached #3"),
    ("hang-4-ranks", [1, 3], "rank 3's last collective on group 0 (default_pg) is #2, the others reached #3"),
    ("hang-hashed-subgroup", [1], "rank 1's last collective on group 4a2ad14e7181d5235b64cf37fcd715cb5ce5c8e7 is #6, "
                                  "the others reached #7"),  # rank 1's dump knows the group by pg_id 1 only
])
def test_every_rank_behind_is_named_from_its_entries_or_its_pg_status(scenario, behind, says):
    finding = zd707(DUMPS / scenario)
    assert finding is not None and finding["ranks"] == behind
    assert says in finding["message"]


@pytest.mark.parametrize("scenario, faulty, says", [
    ("nvrx-gpu_error_1st", [12], "rank 12's last collective on group 41 (TENSOR_MODEL_PARALLEL_GROUP) is #42817 "
                                 "nccl:_all_gather_base, the others reached #42826 (behind on 5 groups)"),
    ("nvrx-gpu_error_2nd", [9, 14], "rank 14's last collective on group 38"),
    ("nvrx-lock_gil_1st", [9, 14], "rank 9's last collective on group 37 (TENSOR_MODEL_PARALLEL_GROUP) is #88683, "
                                   "the others reached #88688 (behind on 3 groups)"),
    ("nvrx-lock_gil_2nd", [10, 15], "rank 15's last collective on group 94 (EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP) "
                                    "is #3498, the others reached #3499"),
])
def test_a_16_rank_megatron_job_names_only_its_faulty_ranks(scenario, faulty, says):
    """NVRx's real dumps (16 ranks, Megatron's TP/PP/EP/DP groups; README): a ``pg_id`` is each rank's own
    count of its groups, so each group is compared among its ``pg_config`` members only. Faulty ranks per
    the run's fault_injection.log; in gpu_error_1st rank 14 is not behind on any group, as NVRx's own
    reference output (tests/attribution/unit/reference_outputs) also finds. The old comparison by
    ``pg_id`` across all ranks named all 16, in one message of ~60 clauses."""
    finding = zd707(DUMPS / scenario)
    assert finding is not None and finding["ranks"] == faulty
    assert says in finding["message"]
    text = run_cli("diagnose", "--fail-on", "never", str(DUMPS / scenario)).stdout
    block = text[text.index("ZD707"):].split("\n\n")[0]
    assert len(block.splitlines()) <= 6, block


def test_dumps_of_a_healthy_job_blame_no_rank():
    report = diagnose_json(DUMPS / "healthy")
    assert [f for f in report["findings"] if f["severity"] in ("warning", "error")] == []


def test_a_rank_whose_entries_list_is_empty_is_placed_by_pg_status(tmp_path):
    """Built from the real rank-1 dump of ``hang``: its entries emptied, as an ``onlyActive`` dump leaves them."""
    shutil.copy(DUMPS / "hang" / "_dump_0", tmp_path / "_dump_0")
    dump = pickle.loads((DUMPS / "hang" / "_dump_1").read_bytes())
    (tmp_path / "_dump_1").write_bytes(pickle.dumps({**dump, "entries": []}, protocol=2))
    finding = zd707(tmp_path)
    assert finding is not None and finding["ranks"] == [1]


def _nccl_dump(entries: list[dict], enqueued: int) -> bytes:
    """A dump in the writer's shape (FlightRecorderDetail.hpp, version 2.10): NCCL's pg_status of group 0
    holds the last enqueued work's own seq, a p2p seq when that work was a send or recv."""
    status = {"last_enqueued_collective": enqueued, "last_started_collective": enqueued,
              "last_completed_collective": enqueued}
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                         "comm_lib_version": "2.21.5", "pg_status": {"0": status}, "entries": entries}, protocol=2)


def _entry(seq: int, p2p_seq: int, name: str, is_p2p: bool) -> dict:
    return {"record_id": p2p_seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": p2p_seq, "op_id": seq + p2p_seq, "profiling_name": name, "time_created_ns": 0,
            "state": "completed", "retired": True, "timeout_ms": 600000, "is_p2p": is_p2p}


def test_on_a_group_with_p2p_ops_pg_status_places_no_rank(tmp_path):
    """Built from the format: rank 0 made all_reduce #5 then 9 sends; rank 1's dump has no entries and a
    pg_status of 7 (its 7th recv). 7 > 5 compares a p2p count with a collective one: no rank is behind."""
    sends = [_entry(5, i, "nccl:send 0->1", True) for i in range(1, 10)]
    (tmp_path / "_dump_0").write_bytes(_nccl_dump([_entry(5, 0, "nccl:all_reduce", False), *sends], enqueued=9))
    (tmp_path / "_dump_1").write_bytes(_nccl_dump([], enqueued=7))
    assert zd707(tmp_path) is None


def test_a_version_1_dump_counting_sends_in_its_seq_ids_places_no_rank(tmp_path):
    """Built from the version 1.4 format (TraceUtils.h's ``dump``: ``entries`` first, each with ``pg_id`` and
    ``seq_id``, one count for every kernel): a healthy 3-stage pipeline, rank 1 receiving and sending, so its
    second all_reduce is #4 where the others' is #3."""
    ops = {0: ["all_reduce", "send 0->1", "all_reduce"], 1: ["all_reduce", "recv 1<-0", "send 1->2", "all_reduce"],
           2: ["all_reduce", "recv 2<-1", "all_reduce"]}
    for rank, names in ops.items():
        entries = [{"record_id": i, "pg_id": 0, "seq_id": i + 1, "op_id": i + 1, "profiling_name": f"nccl:{name}",
                    "time_created_ns": 0, "state": "completed", "retired": True} for i, name in enumerate(names)]
        dump = {"entries": entries, "version": "1.4", "pg_config": {0: [0, 1, 2]}}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    assert zd707(tmp_path) is None
