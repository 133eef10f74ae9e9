"""Rule files cannot exhaust anything: each hostile construct is refused at load as ``file:line: CODE: what``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

GOOD_RULE = (ROOT / "rules" / "batch_size" / "ZD103-micro-batches-per-step-mismatch.yaml").read_text()
NAME = "ZD904-hostile-rule.yaml"


def _rules(tmp_path: Path, text: str | None = None) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    if text is not None:
        (rules / NAME).write_text(text)
    return rules


def _hostile(**replace: str) -> str:
    text = GOOD_RULE.replace("ZD103", "ZD904").replace("micro-batches-per-step-mismatch", "hostile-rule")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def _errors(rules: Path, timeout: float = 60) -> list[str]:
    """``rules list`` on the directory: it must exit 2 and name each problem on its own line."""
    proc = run_cli("rules", "list", "--rules", str(rules), timeout=timeout)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("error(s) in rule files")
    return [line for line in proc.stderr.splitlines() if line.startswith(str(rules))]


def test_rule_file_over_256_kib_is_refused_with_a_clear_error(tmp_path):
    rules = _rules(tmp_path, _hostile() + "#" + "x" * (300 * 1024) + "\n")
    assert _errors(rules) == [f"{rules / NAME}:0: RL100: rule file is over the 256 KiB cap for rule files"]


def test_yaml_aliases_are_refused_so_a_billion_laughs_cannot_hang_the_loader(tmp_path):
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    laughs += [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    rules = _rules(tmp_path, _hostile() + "\n".join(laughs) + "\n")
    errors = _errors(rules, timeout=30)  # before: > 120 s and gigabytes
    line = GOOD_RULE.count("\n") + 2  # the first alias, on the line after the anchor
    assert errors == [f"{rules / NAME}:{line}: RL100: aliases (*a) are not allowed in rule files"]


@pytest.mark.parametrize("spec, problem", [(">2000000000", "width 2000000000 in '>2000000000' is over 100"),
                                           (".200000000f", "precision 200000000 in '.200000000f' is over 20")])
def test_format_width_and_precision_are_bounded_at_load(tmp_path, spec, problem):
    rules = _rules(tmp_path, _hostile(**{"{batch.grad_accum}": f"{{batch.grad_accum:{spec}}}"}))
    [error] = _errors(rules)
    assert error.startswith(f"{rules / NAME}:7: RL204: template '") and error.endswith(f"': {problem}")


def test_nested_fields_inside_a_format_spec_are_refused_at_load(tmp_path):
    rules = _rules(tmp_path, _hostile(**{"{batch.grad_accum}": "{batch.grad_accum:{batch.grad_accum}}"}))
    [error] = _errors(rules)
    assert error.startswith(f"{rules / NAME}:7: RL204: template '")
    assert error.endswith("': nested fields in a format spec are not supported")


def test_sequence_multiplication_is_refused_at_load(tmp_path):
    rules = _rules(tmp_path, _hostile(**{
        "when: batch.micro_batches_per_step != batch.grad_accum":
            "when: \"'x' * 10000000000 != batch.grad_accum\""}))
    assert _errors(rules) == [f"{rules / NAME}:6: RL203: 'x' * 10000000000: repeating or %-formatting a string "
                              "or list is not allowed"]


@pytest.mark.parametrize("expr, problem", [("10 ** 10 ** 10", "an exponent must be a number up to 64 or a signal"),
                                           ("10 ** 100000000", "an exponent over 64 is not allowed")])
def test_huge_exponent_is_refused_at_load(tmp_path, expr, problem):
    rules = _rules(tmp_path, _hostile(**{
        "when: batch.micro_batches_per_step != batch.grad_accum": f"when: {expr} > batch.grad_accum"}))
    assert _errors(rules) == [f"{rules / NAME}:6: RL203: {expr}: {problem}"]


def test_deeply_nested_yaml_is_one_error_not_a_crash(tmp_path):
    rules = _rules(tmp_path, _hostile() + "deep: " + "[" * 10_000 + "]" * 10_000 + "\n")
    # libyaml stops at its nesting limit and names the line; pure-Python PyYAML recurses until Python stops it
    assert _errors(rules) in ([f"{rules / NAME}:34: RL100: exceeded maximum nesting depth"],
                              [f"{rules / NAME}:0: RL100: nested too deeply to be a rule"])


def test_fifo_named_like_a_rule_file_is_refused_not_opened(tmp_path):
    rules = _rules(tmp_path)
    os.mkfifo(rules / NAME)
    assert _errors(rules, timeout=30) == [
        f"{rules / NAME}:0: RL100: {rules / NAME}: not a regular file (a FIFO), not read"]


def test_clauses_nested_3000_deep_are_refused_at_load_not_left_to_break_every_run(tmp_path):
    deep = "[" * 3000 + "{batch.grad_accum}" + "]" * 3000
    rules = _rules(tmp_path, _hostile(**{"{batch.grad_accum}": deep}))
    # before: it loaded, every run was set aside (RecursionError) and diagnose exited 0 with no finding
    proc = run_cli("diagnose", "--rules", str(rules), str(ROOT / "samples" / "fp16-min-scale"))
    assert proc.returncode == 2, proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if line.startswith(str(rules))]
    assert error.startswith(f"{rules / NAME}:7: RL204: template '{{batch.micro_batches_per_step:g}} backward")
    assert error.endswith("[[[[[[['… (6,204 characters): clauses nested more than 3 deep at character 106")
    assert len(error) < len(str(rules / NAME)) + 400


def test_a_deeply_nested_condition_is_named_not_echoed_whole(tmp_path):
    rules = _rules(tmp_path, _hostile(**{
        "when: batch.micro_batches_per_step != batch.grad_accum":
            "when: \"" + "(" * 1000 + "batch.grad_accum" + ")" * 1000 + " > 0\""}))
    [error] = _errors(rules)
    assert error.startswith(f"{rules / NAME}:6: RL201: condition '((((")
    assert error.endswith("… (2,020 characters) is not a valid expression: too many nested parentheses")
    assert len(error) < len(str(rules / NAME)) + 400


def test_a_plain_message_with_four_optional_clauses_is_refused_as_not_flat(tmp_path):
    four = "[ ({batch.grad_accum})]" * 4
    rules = _rules(tmp_path, _hostile(**{"per optimizer step, but": f"per optimizer step{four}, but"}))
    assert _errors(rules) == [f"{rules / NAME}:7: RL208: the message is not flat: 4 optional clauses (at most 3: "
                              "where a clause decides the meaning, the branching belongs in a verdict signal)"]
    three = "[ ({batch.grad_accum})]" * 3
    text = _hostile(**{"per optimizer step, but": f"per optimizer step{three}, but"}).replace("ZD904", "ZD989")
    (rules / NAME).unlink()
    (rules / NAME.replace("ZD904", "ZD989")).write_text(text)  # ZD904 is a built-in's code: a clash is RL401
    assert run_cli("rules", "list", "--rules", str(rules)).returncode == 0
