"""Secrets stay out of the run directory, and the run directory is yours unless you share it (``--mode``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SECRETS = ["--hf_token", "tok-1", "--api-key=key-2", "--client_secret", "sec-3", "--db-password=pw-4"]
KEPT = ["--max_new_tokens", "128", "--no-token", "--epochs", "3", "--model", "gpt2"]


def zd_run(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp), "--name", "r", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_secret_flag_values_in_argv_are_redacted_in_meta_json(tmp_path):
    command = ["env", "HF_TOKEN=env-5", sys.executable, "-c", "pass", *SECRETS, *KEPT]
    done = zd_run(tmp_path, "--", *command)
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "r" / "meta.json").read_text())["argv"]
    assert argv == ["env", "HF_TOKEN=<redacted>", sys.executable, "-c", "pass",
                    "--hf_token", "<redacted>", "--api-key=<redacted>", "--client_secret", "<redacted>",
                    "--db-password=<redacted>", *KEPT]


def test_run_directory_is_0700_and_files_0600_by_default(tmp_path):
    done = zd_run(tmp_path, "--", sys.executable, "-c", "print('hello')")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "r"
    assert run_dir.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in run_dir.glob("*") if p.is_file()} == {
        "meta.json": 0o600, "console.log": 0o600}


def test_mode_750_shares_a_new_run_with_the_group(tmp_path):
    done = zd_run(tmp_path, "--mode", "750", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "r"
    assert run_dir.stat().st_mode & 0o777 == 0o750
    assert {(run_dir / n).stat().st_mode & 0o777 for n in ("meta.json", "console.log")} == {0o640}


def test_a_mode_that_locks_you_out_is_a_usage_error(tmp_path):
    done = zd_run(tmp_path, "--mode", "644", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert done.stderr.strip() == ("zerodoctor: error: --mode 644: give octal permissions that let you read and "
                                   "write the run, e.g. 700 or 750")
    assert not (tmp_path / "r").exists()
