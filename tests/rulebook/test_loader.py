"""The rule loader is strict, reports every error at once, and never runs a hostile condition."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

GOOD_RULE = (ROOT / "rules" / "batch_size" / "ZD103-micro-batches-per-step-mismatch.yaml").read_text()
DOC = "doc: |\n  ## What it does\n  x\n\n  ## Why is this bad?\n  y\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / name).write_text(text)
    return rules


def test_a_valid_extra_rule_directory_loads(tmp_path: Path) -> None:
    rules = _write(tmp_path, "ZD991-custom-check.yaml", GOOD_RULE.replace("ZD103", "ZD991").replace(
        "micro-batches-per-step-mismatch", "custom-check"))
    proc = run_cli("rules", "list", "--rules", str(rules))
    assert proc.returncode == 0, proc.stderr
    assert "ZD991  custom-check" in proc.stdout


def test_every_error_in_a_file_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    text = (
        "code: ZD992\n"                                   # 1
        "name: several-errors\n"                          # 2
        "category: batch_size\n"                          # 3
        "severity: critical\n"                            # 4  bad value
        "when: batch.grad_acum > 1\n"                     # 5  unknown signal
        "message: 'x {batch.nope}'\n"                     # 6  unknown signal in a template field
        "fixes:\n"                                        # 7
        "  - title: t\n"                                  # 8
        "    safety: safe\n"                             # 9
        "    confg_patch: {a: 1}\n"                       # 10 unknown key, did-you-mean
        "doc: |\n  ## What it does\n  only this\n"        # 11 missing 'Why is this bad?'
    )
    rules = _write(tmp_path, "ZD992-several-errors.yaml", text)
    proc = run_cli("diagnose", "--rules", str(rules), str(ROOT / "tests/fixtures/rules/ZD101/fires.jsonl"))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith(str(rules))]
    where = {(line.split(":")[1], line.split(": ")[1]) for line in errors}
    assert ("4", "RL103") in where
    assert ("5", "RL202") in where
    assert ("6", "RL202") in where  # an unknown signal, in a condition or a template field
    assert ("10", "RL101") in where and "did you mean 'config_patch'" in proc.stderr
    assert ("11", "RL301") in where
    assert "5 error(s) in rule files" in proc.stderr


def test_unknown_top_level_key_and_misnamed_file(tmp_path: Path) -> None:
    text = GOOD_RULE.replace("ZD103", "ZD993").replace("severity: warning", "severty: warning")
    rules = _write(tmp_path, "ZD993-wrong-name.yaml", text)
    proc = run_cli("rules", "list", "--rules", str(rules))
    assert proc.returncode == 2
    assert "RL101: unknown key 'severty' (did you mean 'severity'?)" in proc.stderr
    assert "RL102: missing key 'severity'" in proc.stderr
    assert "RL402: file should be named 'ZD993-micro-batches-per-step-mismatch.yaml'" in proc.stderr


def test_duplicate_code_is_refused(tmp_path: Path) -> None:
    rules = _write(tmp_path, "ZD103-micro-batches-per-step-mismatch.yaml", GOOD_RULE)
    proc = run_cli("rules", "list", "--rules", str(rules))
    assert proc.returncode == 2 and "RL401: code ZD103 is already used by" in proc.stderr


@pytest.mark.parametrize("condition", [
    "__import__('os').system('touch {marker}')",
    "().__class__.__bases__[0].__subclasses__()",
    "open('{marker}', 'w')",
    "batch.grad_accum.__class__",
    "[x for x in (1, 2)]",
    "(lambda: open('{marker}', 'w'))()",
])
def test_condition_that_reaches_for_python_is_refused_at_load_and_runs_nothing(tmp_path: Path, condition: str) -> None:
    marker = tmp_path / "pwned"
    text = GOOD_RULE.replace("ZD103", "ZD994").replace("micro-batches-per-step-mismatch", "hostile").replace(
        "when: batch.micro_batches_per_step != batch.grad_accum", f'when: "{condition.format(marker=marker)}"')
    rules = _write(tmp_path, "ZD994-hostile.yaml", text)
    proc = run_cli("diagnose", "--rules", str(rules), str(ROOT / "tests/fixtures/rules/ZD103/fires.jsonl"))
    assert proc.returncode == 2
    assert "RL203" in proc.stderr or "RL201" in proc.stderr, proc.stderr
    assert not marker.exists()


def test_a_message_field_the_condition_does_not_guarantee_must_sit_in_a_clause(tmp_path: Path) -> None:
    from zerodoctor.rulebook.loader import RuleLoadError, load_rules
    from zerodoctor.signals import catalog

    text = GOOD_RULE.replace("ZD103", "ZD995").replace("micro-batches-per-step-mismatch", "holes")
    hole = text.replace("per optimizer step, but", "per optimizer step on {run.world_size} ranks, but")
    with pytest.raises(RuleLoadError) as err:
        load_rules([_write(tmp_path, "ZD995-holes.yaml", hole)], catalog())
    assert [(e.line, e.code) for e in err.value.errors] == [(7, "RL206")], err.value
    assert "run.world_size may be missing" in str(err.value)
    clause = text.replace("per optimizer step, but", "per optimizer step[ on {run.world_size} ranks], but")
    assert load_rules([_write(tmp_path, "ZD995-holes.yaml", clause)], catalog())


def test_a_fix_patch_expression_is_checked_like_a_condition(tmp_path: Path) -> None:
    from zerodoctor.rulebook.loader import RuleLoadError, load_rules
    from zerodoctor.signals import catalog

    text = GOOD_RULE.replace("ZD103", "ZD996").replace("micro-batches-per-step-mismatch", "patchy").replace(
        "    action: >-", "    config_patch: {gradient_accumulation_steps: \"{batch.grad_acum * 2}\"}\n    action: >-")
    with pytest.raises(RuleLoadError) as err:
        load_rules([_write(tmp_path, "ZD996-patchy.yaml", text)], catalog())
    assert [e.code for e in err.value.errors] == ["RL202"] and "batch.grad_acum" in str(err.value)


def test_phrases_beside_the_rules_are_checked_and_shared_by_every_directory(tmp_path: Path) -> None:
    from zerodoctor.rulebook.loader import RuleLoadError, load_rules
    from zerodoctor.signals import catalog

    text = GOOD_RULE.replace("ZD103", "ZD997").replace("micro-batches-per-step-mismatch", "phrased").replace(
        "per optimizer step, but", "per optimizer step[ ({hang.stuck_states:each:rank-state})], but")
    rules = _write(tmp_path, "ZD997-phrased.yaml", text)  # uses the core's phrase from another directory
    core = ROOT / "rules"
    assert [r.code for r in load_rules([core, rules], catalog()) if r.code == "ZD997"] == ["ZD997"]
    (rules / "phrases.yaml").write_text(
        "where:\n  fields: [rank]\n  txt: rank {rank}\n"                 # 1-3: unknown key
        "there:\n  fields: [rank]\n  text: rank {rnak}\n"               # 4-6: unknown field
        "rank-state:\n  fields: [rank]\n  text: rank {rank}\n")         # 7-9: defined by the core already
    with pytest.raises(RuleLoadError) as err:
        load_rules([core, rules], catalog())
    found = {(Path(e.path).name, e.line, e.code) for e in err.value.errors}
    assert {("phrases.yaml", 3, "RL101"), ("phrases.yaml", 6, "RL202"), ("phrases.yaml", 7, "RL401")} <= found, found
    assert "did you mean 'text'" in str(err.value)


def test_rules_show_prints_the_explanation() -> None:
    proc = run_cli("rules", "show", "ZD201")
    assert proc.returncode == 0
    assert "fp16-loss-scale-collapse" in proc.stdout and "## Why is this bad?" in proc.stdout
    assert run_cli("rules", "show", "ZD999").returncode == 2
