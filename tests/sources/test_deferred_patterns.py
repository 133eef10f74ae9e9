"""The message patterns compile at their first use (``messages/deferred.py``): every one compiles, and a one-line
log compiles only the few it reads, not the ~150 every dialect, crash family and signature holds."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from zerodoctor.messages import deferred
from zerodoctor.signals import signal_modules
from zerodoctor.sources.text import dialects

OOM_LOG = ROOT / "samples" / "fragmentation-oom" / "console.log"

# Runs the CLI as the console script does, then says how many deferred patterns were made and how many compiled.
_PROBE = """
import sys
from zerodoctor.cli import app
from zerodoctor.messages.deferred import MADE
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    print([len(MADE), sum("search" in vars(p) for p in MADE)], file=sys.stderr)
"""


def test_every_message_pattern_compiles() -> None:
    dialects()  # every dialect module, and through them the message families and signatures
    signal_modules()
    assert len(deferred.MADE) > 100
    for pattern in deferred.MADE:
        pattern.search("" if isinstance(pattern.pattern, str) else b"")  # re.error on a broken pattern


def test_a_one_line_log_compiles_only_the_patterns_it_reads(tmp_path: Path) -> None:
    log = tmp_path / "one.log"
    log.write_text(next(line for line in OOM_LOG.read_text().splitlines(keepends=True)
                        if "CUDA out of memory" in line))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "TMPDIR": str(tmp_path),
           "ZERODOCTOR_CACHE_DIR": os.environ["ZERODOCTOR_CACHE_DIR"]}
    proc = subprocess.run([sys.executable, "-c", _PROBE, "diagnose", str(log)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert "ZD401" in proc.stdout  # the OOM is found
    made, compiled = ast.literal_eval(proc.stderr.strip().splitlines()[-1])
    assert made > 100
    assert compiled < made / 3, f"{compiled} of {made} message patterns compiled for a one-line log"
