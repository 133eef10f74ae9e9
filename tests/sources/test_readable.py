"""Every input gets an answer: compressed and BOM-marked logs are read, anything else that is no log says so
(exit 2)."""

from __future__ import annotations

import codecs
import gzip
import json
import lzma
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

CONSOLE = ROOT / "samples" / "fp16-min-scale" / "console.log"  # a real run's console output: ZD201 fires
RUN = ROOT / "samples" / "fp16-min-scale"


def _diagnosis(path: Path) -> tuple[list, list[str]]:
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(path))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return [(i["format"], i["events"], i["quarantined"]) for i in out["inputs"]], [f["rule"] for f in out["findings"]]


def test_gzip_log_is_read_transparently_by_its_magic_bytes_whatever_its_name(tmp_path):
    plain = _diagnosis(CONSOLE)
    assert plain[1] == ["ZD201"]
    packed = tmp_path / "console.log"  # no .gz: recognised by content
    packed.write_bytes(gzip.compress(CONSOLE.read_bytes()))
    assert _diagnosis(packed) == plain


def test_gzip_rank_files_in_a_run_directory_are_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    for rank in run.glob("rank-*.jsonl"):
        data = rank.read_bytes()
        # two gzip members, as ``cat a.gz b.gz`` or a writer reopening in append mode leaves them
        rank.write_bytes(gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2:]))
    assert _diagnosis(run) == _diagnosis(RUN)


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_logs_with_a_bom_are_decoded(tmp_path, codec):
    bom = {"utf-16": codecs.BOM_UTF16_LE if sys.byteorder == "little" else codecs.BOM_UTF16_BE,
           "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-be": codecs.BOM_UTF32_BE}.get(codec, b"")
    path = tmp_path / "console.log"  # as PowerShell's ``Tee-Object`` or a Windows editor saves it
    path.write_bytes(bom + CONSOLE.read_text().encode(codec))
    assert _diagnosis(path) == _diagnosis(CONSOLE)


def test_binary_input_says_not_a_log_and_exits_2(tmp_path):
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(Path(sys.executable).read_bytes()[:100_000])  # an ELF binary, named like a log
    proc = run_cli("diagnose", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"zerodoctor: error: {path}: not a log zerodoctor can read (an executable)"]


def test_binary_data_with_nul_bytes_is_not_read_as_a_log_with_0_events(tmp_path):
    path = tmp_path / "console.log"
    path.write_bytes(b"step 1 loss 2.0\n" + bytes(range(256)) * 4)
    proc = run_cli("diagnose", str(path))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "not a log zerodoctor can read (binary data: a NUL byte at offset 16)" in proc.stderr


def test_xz_compressed_log_asks_to_be_decompressed_first(tmp_path):
    path = tmp_path / "console.log.xz"
    path.write_bytes(lzma.compress(CONSOLE.read_bytes()))
    proc = run_cli("diagnose", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"zerodoctor: error: {path}: not a log zerodoctor can read (xz-compressed: " \
                                  "decompress it first)"
