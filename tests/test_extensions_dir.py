"""The test session's DeepSpeed op builds: a directory of its own, and a build killed at its timeout leaves no lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests import extensions

_USER_DEFAULT = Path.home() / ".cache" / "torch_extensions"


def test_deepspeed_processes_build_into_the_sessions_own_directory(tmp_path: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "from torch.utils.cpp_extension import _get_build_directory\n"
                            "print(_get_build_directory('fused_adam', False))"],
                           capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    private = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    assert Path(where).is_relative_to(private)
    assert not private.is_relative_to(_USER_DEFAULT)
    assert private.name.startswith("zerodoctor-test-ext-") or os.environ.get("ZERODOCTOR_TEST_EXTENSIONS_DIR")


def test_a_build_past_its_timeout_is_killed_whole_and_leaves_no_lock(tmp_path: Path) -> None:
    """As torch's FileBaton does, the stand-in build takes the lock first, then hangs (a compiler child too)."""
    hung = ("import pathlib, subprocess, sys, time, os\n"
            "d = pathlib.Path(os.environ['TORCH_EXTENSIONS_DIR']) / 'fused_adam'\n"
            "d.mkdir(parents=True)\n(d / 'lock').touch()\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\ntime.sleep(600)\n")
    started = time.monotonic()
    failed = extensions.build_ops(tmp_path, script=hung, timeout=3)
    assert failed is not None and "took over 3 s; killed" in failed
    assert time.monotonic() - started < 30
    assert (tmp_path / "fused_adam").is_dir() and not list(tmp_path.rglob("lock"))
    leftover = subprocess.run(["pgrep", "-f", "time.sleep(600)"], capture_output=True, text=True).stdout.split()
    assert not leftover
