"""``zerodoctor diagnose`` as CI runs it: ``-`` (a log on stdin), ``--select``/``--ignore`` and the
project's ``[tool.zerodoctor]`` table, ``--format concise`` and ``--format github``.

The logs are corpus excerpts people posted publicly (each case's ``expected.json`` has the URL):
``dle-252`` (NVIDIA/DeepLearningExamples#252, apex: NaN loss, ZD204, and a collapsing loss scale, ZD205)
and ``apps-9`` (hendrycks/apps#9, the HF Trainer refusing a config: ZD106 batch, ZD690 lr).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.conftest import ROOT, run_cli
from zerodoctor.report import ci
from zerodoctor.report.model import Report
from zerodoctor.rulebook.finding import Finding

CORPUS = ROOT / "tests" / "corpus"
APEX = CORPUS / "dle-252-apex-nan-overflow-loop" / "console.log"
HF = CORPUS / "apps-9-hf-mismatch-batch-and-lr" / "console.log"


def _rules(proc: subprocess.CompletedProcess) -> list[str]:
    """The rule codes of ``--format concise`` lines (the last line is the summary)."""
    return [line.split(": ")[1].split()[0] for line in proc.stdout.splitlines()[:-1]]


def test_stdin_log_is_diagnosed_like_the_file() -> None:
    piped = run_cli("diagnose", "--format", "concise", "--fail-on", "never", "-", stdin=APEX.read_text())
    from_file = run_cli("diagnose", "--format", "concise", "--fail-on", "never", str(APEX))
    assert piped.returncode == 0, piped.stderr
    assert _rules(piped) == _rules(from_file) == ["ZD204", "ZD205"]
    assert piped.stdout.startswith("<stdin>:")


def test_stdin_that_is_a_terminal_is_refused_in_one_line() -> None:
    main, tty = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "-"], stdin=tty, capture_output=True,
                              text=True, timeout=120)
    finally:
        os.close(main)
        os.close(tty)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "standard input is a terminal" in proc.stderr


def test_ignore_by_code_hides_the_finding_and_says_so() -> None:
    proc = run_cli("diagnose", "--ignore", "zd204", str(APEX))
    assert "ZD205" in proc.stdout and "ZD204" not in proc.stdout
    assert proc.stdout.rstrip().endswith("1 finding ignored (--select/--ignore)")
    assert proc.returncode == 1  # ZD205 is an error still


def test_prefixes_and_the_most_specific_selector_wins() -> None:
    only_batch = run_cli("diagnose", "--format", "concise", "--select", "ZD1", str(HF))
    assert _rules(only_batch) == ["ZD106"]
    no_numerics = run_cli("diagnose", "--format", "concise", "--ignore", "ZD2", "--fail-on", "never", str(APEX))
    assert _rules(no_numerics) == [] and no_numerics.returncode == 0
    assert no_numerics.stdout.splitlines()[-1].endswith("2 findings ignored (--select/--ignore)")
    back = run_cli("diagnose", "--format", "concise", "--ignore", "ZD2", "--select", "ZD205", str(APEX))
    assert _rules(back) == ["ZD205"]


def test_a_selector_no_rule_matches_is_bad_usage() -> None:
    proc = run_cli("diagnose", "--ignore", "ZD2,ZD99", str(APEX))
    assert proc.returncode == 2 and "no rule matches 'ZD99'" in proc.stderr


def test_pyproject_table_is_read_from_a_parent_and_the_command_line_wins(tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "train"\n\n[tool.zerodoctor]\nignore = ["ZD690"]\n')
    work = tmp_path / "jobs"
    work.mkdir()
    committed = run_cli("diagnose", "--format", "concise", str(HF), cwd=work)
    assert _rules(committed) == ["ZD106"]
    overridden = run_cli("diagnose", "--format", "concise", "--ignore", "ZD106", str(HF), cwd=work)
    assert _rules(overridden) == ["ZD690"]
    # a .zerodoctor.toml nearer the command wins over the pyproject.toml above it
    (work / ".zerodoctor.toml").write_text('select = ["ZD6"]\n')
    assert _rules(run_cli("diagnose", "--format", "concise", str(HF), cwd=work)) == ["ZD690"]


def test_a_bad_config_file_is_bad_usage(tmp_path) -> None:
    (tmp_path / ".zerodoctor.toml").write_text('ignore = "ZD690"\n')
    proc = run_cli("diagnose", str(HF), cwd=tmp_path)
    assert proc.returncode == 2 and "ignore must be a list" in proc.stderr


def test_concise_is_one_line_per_finding() -> None:
    proc = run_cli("diagnose", "--format", "concise", str(APEX))
    *lines, summary = proc.stdout.splitlines()
    assert lines[0] == (f"{APEX}:dle-252-apex-nan-overflow-loop: ZD204 error "
                        "a progress line of 1 rank shows the loss NaN/inf")
    assert summary == "2 errors from 4 events in 1 file"
    assert proc.returncode == 1


def test_github_annotations() -> None:
    proc = run_cli("diagnose", "--format", "github", "--ignore", "ZD205", str(APEX))
    assert proc.stdout.splitlines() == [
        "::error title=ZD204 non-finite-loss::a progress line of 1 rank shows the loss NaN/inf "
        f"({APEX}:dle-252-apex-nan-overflow-loop)"]


def test_github_escapes_what_ends_a_workflow_command() -> None:
    # a run name is the input's: GitHub's toolkit escapes %, CR and LF in data, and : and , in properties too
    finding = Finding(rule="ZD9,01", name="a:b", category="other", severity="info", message="100%\r\ndone",
                      run="r\n::warning::x")
    line = ci.github(Report(findings=[finding]))
    assert line == "::notice title=ZD9%2C01 a%3Ab::100%25%0D%0Adone (r ::warning::x)"
