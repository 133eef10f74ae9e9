"""The allocator's OOM message reads the same from a console log and from the probe: one parser, binary units."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zerodoctor.probe.crash import oom_fields
from zerodoctor.sources.batches import make_parser, read_batches

# torch 2.4+ (c10/cuda/CUDACachingAllocator.cpp), as a rank prints it
MESSAGE_2_4 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity "
               "of 79.25 GiB of which 42.75 MiB is free. Including non-PyTorch memory, this process has 79.20 GiB "
               "memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 1.91 GiB is reserved "
               "by PyTorch but unallocated.")


def _from_log(tmp_path: Path, message: str) -> dict:
    path = tmp_path / "console.log"
    path.write_text(message + "\n")
    return next(e for b in read_batches(path, make_parser("text", "t")) for e in b.events if e["kind"] == "oom")


def test_a_2_4_message_in_bytes_from_the_probe_and_from_the_log(tmp_path: Path) -> None:
    probed = oom_fields(torch.OutOfMemoryError(MESSAGE_2_4.split(": ", 1)[1]))
    logged = _from_log(tmp_path, MESSAGE_2_4)
    assert probed["requested_bytes"] == logged["requested_bytes"] == 67108864
    assert logged["reserved_bytes"] == int(76.50 * 2**30) + int(1.91 * 2**30)


@pytest.mark.parametrize("size", ["20.00 MB", "1.50 GiB", "512.00 KiB", "2.00 GB"])
def test_probe_and_log_agree_on_every_unit(tmp_path: Path, size: str) -> None:
    message = (f"CUDA out of memory. Tried to allocate {size}. GPU 0 has a total capacity of 79.25 GiB "
               "of which 1 MiB is free")
    assert oom_fields(RuntimeError(message))["requested_bytes"] == _from_log(tmp_path, message)["requested_bytes"]


def test_a_size_no_int64_holds_is_left_out_and_the_oom_kept(tmp_path: Path) -> None:
    """Hypothesis found it: a mangled size made the OOM event invalid, and the parser's held message was lost."""
    oom = _from_log(tmp_path, "CUDA out of memory. Tried to allocate 9999999999999999999999999 GiB. GPU 0 has a "
                              "total capacity of 79.25 GiB of which 42.75 MiB is free.")
    assert "requested_bytes" not in oom and oom["capacity_bytes"] == int(79.25 * 2**30)
