"""Secrets stay out of the run directory, and the run directory is yours unless you share it (``--mode``)."""

from __future__ import annotations

import json
import os
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


def test_a_run_name_is_never_code_in_the_generated_sitecustomize(tmp_path):
    """A newline in --name used to close the generated file's comment line and run what followed
    in every Python process of the job; such a name is refused, and any name taken is a literal."""
    runs = tmp_path / "runs"
    injected = "x\nopen('ran', 'w')\n#"  # run from tmp_path: the code would create tmp_path/ran
    done = zd_run_named(runs, injected, "pass")
    assert done.returncode == 2, done.stderr
    assert "holds a control character" in done.stderr
    assert not (tmp_path / "ran").exists() and not runs.exists()

    quoted = "a'b\"c; open('ran', 'w') #"  # quotes and code, no newline: taken, and only ever data
    done = zd_run_named(runs, quoted, "import os; print(os.environ['ZERODOCTOR_RUN_ID'])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == quoted and not (tmp_path / "ran").exists()


def test_names_that_are_no_single_directory_are_refused(tmp_path):
    for name in ["../escape", "a/b", "..", ".", "evil\x1b]0;title\x07", "x" * 201]:
        done = zd_run_named(tmp_path, name, "pass")
        assert done.returncode == 2, (name, done.stderr)
        assert done.stderr.startswith("zerodoctor: error: --name "), done.stderr
    assert not list(tmp_path.iterdir()) and not (tmp_path.parent / "escape").exists()


def zd_run_named(runs: Path, name: str, code: str) -> subprocess.CompletedProcess:
    """``zerodoctor run --name NAME -- python -c CODE``, from the directory above ``runs``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # zerodoctor importable from anywhere
    return subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(runs), "--name", name, "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=runs.parent,
                          env=env)


GH_TOKEN = "ghp_" + "Zq8" * 12  # shaped like a GitHub token, not one
HF_TOKEN = "hf_" + "Yx7" * 12


def test_secrets_found_by_pattern_anywhere_in_argv_stay_out_of_meta_json(tmp_path):
    command = [sys.executable, "-c", "pass",
               "bash -c 'HF_TOKEN=env-5 WANDB_API_KEY=\"k e y\" python train.py --hf_token tok-6 --epochs 3'",
               "--db", "postgresql://u:pw-7@db.example:5432/zd?sslmode=require&password=pw-8",
               "--auth", "auth-9", "--passphrase=phrase-10", "--password", "1234", "--pat", GH_TOKEN, HF_TOKEN,
               "--openai=Bearer sk-" + "w" * 40, *KEPT]
    done = zd_run(tmp_path, "--", *command)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "r" / "meta.json").read_text()
    for secret in ["env-5", "k e y", "tok-6", "pw-7", "pw-8", "auth-9", "phrase-10", "1234", GH_TOKEN, HF_TOKEN,
                   "w" * 40]:
        assert secret not in written, secret
    argv = json.loads(written)["argv"]
    assert argv[3] == ("bash -c 'HF_TOKEN=<redacted> WANDB_API_KEY=\"<redacted>\" python train.py "
                       "--hf_token <redacted> --epochs 3'")
    assert argv[5] == "postgresql://u:<redacted>@db.example:5432/zd?sslmode=require&password=<redacted>"
    assert argv[-len(KEPT):] == KEPT  # counts and names are no secrets


def test_short_password_flags_and_authorization_headers_stay_out_of_meta_json(tmp_path):
    """Issue 34's round 4: ``--pw X``, ``-p X`` and ``Authorization: Bearer X`` reached the run files and the store."""
    command = [sys.executable, "-c", "pass", "--pw", "pw-11", "-p", "pw-12", "--pass=pw-13",
               "-H", "Authorization: Bearer tok-14.abc", "Authorization=Basic dXNlcjpwdy0xNQ==",
               "bash -c 'mkdir -p /tmp/kept && mysql --pw=pw-16 -e select'", "x-token Bearer tok-17"]
    done = zd_run(tmp_path, "--", *command)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "r" / "meta.json").read_text()
    for secret in ["pw-11", "pw-12", "pw-13", "tok-14", "dXNlcjpwdy0xNQ", "pw-16", "tok-17"]:
        assert secret not in written, secret
    argv = json.loads(written)["argv"]
    assert "Authorization: Bearer <redacted>" in argv
    assert "bash -c 'mkdir -p /tmp/kept && mysql --pw=<redacted> -e select'" in argv  # mkdir's -p is no password
