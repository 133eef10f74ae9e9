"""DeepSpeed's op builds for a test session: a directory of the session's own, and a build timed apart from tests.

DeepSpeed builds ``cpu_adam`` and ``fused_adam`` on first use into ``TORCH_EXTENSIONS_DIR``
(``~/.cache/torch_extensions`` by default, shared by every checkout and venv on the machine). A build killed
mid-way there leaves a ``lock`` file, and every later DeepSpeed process, tests and real runs alike, waits on it
forever; a first build on a loaded machine also ate the 240 s a test gives its run. So each session builds into
a fresh directory (``ZERODOCTOR_TEST_EXTENSIONS_DIR`` names one to reuse on purpose), once, before the first test
that starts an engine, under a timeout of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

BUILD_TIMEOUT_S = 1200
# The ops a CPU engine of the tests builds: plain Adam (FusedAdam on the CPU accelerator) and offloaded Adam.
_BUILD = "from deepspeed.ops.op_builder.cpu import CPUAdamBuilder, FusedAdamBuilder\n" \
         "CPUAdamBuilder().load(verbose=False)\nFusedAdamBuilder().load(verbose=False)\n"


def private_directory() -> tuple[Path, bool]:
    """The session's extensions directory, and whether the session made it (and so removes it at the end)."""
    chosen = os.environ.get("ZERODOCTOR_TEST_EXTENSIONS_DIR")
    if chosen:
        return Path(chosen), False
    return Path(tempfile.mkdtemp(prefix="zerodoctor-test-ext-")), True


def build_ops(directory: Path, script: str = _BUILD, timeout: float = BUILD_TIMEOUT_S) -> str | None:
    """Build the ops into ``directory`` in a process group of its own; ``None``, or why the build failed.

    A build past ``timeout`` is killed whole (ninja and its compilers too) and its lock files removed,
    so the tests that follow fail on their own timeouts with a clear cause instead of waiting on the lock."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(directory), "DS_ACCELERATOR": "cpu"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        for lock in directory.rglob("lock"):
            lock.unlink(missing_ok=True)
        return f"DeepSpeed's op build into {directory} took over {timeout:g} s; killed"
    if proc.returncode != 0:
        return f"DeepSpeed's op build into {directory} failed (exit {proc.returncode}): {out.strip()[-2000:]}"
    return None


def ensure_built() -> Path:
    """The session's extensions directory with the ops built: the first caller builds, before its test's run starts;
    a build that failed fails every later caller at once, never builds again."""
    directory = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    failed = _built_once(directory)
    if failed:
        pytest.fail(failed, pytrace=False)
    return directory


@cache
def _built_once(directory: Path) -> str | None:
    return build_ops(directory)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
