"""Shell completion: the commands, their options and an option's choices complete in bash, as typed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _complete(words: str) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1),
           "_ZERODOCTOR_COMPLETE": "complete_bash"}
    done = subprocess.run([sys.executable, "-m", "zerodoctor"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(("words", "expected"), [
    ("zerodoctor dia", ["diagnose"]),
    ("zerodoctor diagnose --fail", ["--fail-on"]),
    ("zerodoctor diagnose --format ", ["text", "json", "markdown", "html", "concise", "github"]),
])
def test_bash_completes_commands_options_and_choices(words, expected):
    assert _complete(words) == expected


def test_the_completion_script_is_printed_for_bash():
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "--show-completion", "bash"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert "_ZERODOCTOR_COMPLETE=complete_bash" in done.stdout, done.stdout + done.stderr
