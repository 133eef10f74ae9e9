"""The terminal report: the finding first and on one screen, rules not judged in one line unless
``--explain``, evidence in words and units (JSON keeps the signal names), and an input nothing
was recognised in said so plainly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_cli
from zerodoctor.report.units import evidence_items, quantity

SCREEN = 24  # lines of a default terminal


def test_console_log_diagnosis_fits_one_screen_with_the_finding_first() -> None:
    proc = run_cli("diagnose", str(ROOT / "samples/fp16-min-scale/console.log"))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ERROR ZD201 fp16-loss-scale-collapse")
    assert len(lines) <= SCREEN, proc.stdout
    not_judged = [line.split(" ", 1)[1] for line in lines if "not judged" in line]  # the count moves with the rules
    # a CPU run (its console says DeepSpeed built the CPU accelerator's shm op) is not asked for its MFU
    assert not_judged == ["rules not judged: this log has no per-step lines, config dump, profiler traces, heartbeats "
                          "or flight-recorder dumps; needs model parameters, time the log went on past the last step, "
                          "expected tokens / parameters; `--explain` lists them"]


def test_summary_and_evidence_say_words_not_identifiers() -> None:
    """What a run lacks is said in the catalogue's labels ("whether fp16 mixed precision is on"), never the signal's
    dotted name ("needs batch.effective_ratio, fp16.enabled" on accelerate#1589's log); a crash family in words
    ("missing shared library", not missing_shared_library) and a value per key as "key → value", never a Python dict."""
    corpus = ROOT / "tests/corpus"
    proc = run_cli("diagnose", "--fail-on", "never", str(corpus / "accelerate-1589-zero2-timers/console.log"))
    not_judged = next(line for line in proc.stdout.splitlines() if "not judged" in line)
    assert not re.search(r"\b[a-z][a-z0-9]*\.[a-z][a-z0-9_]*\b", not_judged.split("`--explain`")[0]), not_judged
    assert "whether fp16 mixed precision is on" in not_judged
    proc = run_cli("diagnose", str(corpus / "heldout2-diffusers-1207-undefined-symbol-cudaruntime/console.log"))
    assert "  evidence: crash family: missing shared library" in proc.stdout.splitlines(), proc.stdout
    (matches,) = evidence_items({"config.close_matches": {"zero_optimisation": "zero_optimization"}})
    assert matches.endswith(": zero_optimisation → zero_optimization"), matches


def test_explain_lists_every_rule_not_judged() -> None:
    proc = run_cli("diagnose", "--explain", str(ROOT / "samples/fp16-min-scale/console.log"))
    assert "not judged (signal missing):" in proc.stdout
    for code in ("ZD102", "ZD301", "ZD601", "ZD609", "ZD801"):
        assert code in proc.stdout
    assert "`--explain` lists them" not in proc.stdout


def test_evidence_reads_as_words_and_units_in_text_and_markdown_but_json_keeps_names() -> None:
    sample = str(ROOT / "samples/fp16-min-scale")
    text = run_cli("diagnose", sample).stdout
    assert "skipped share of the recent steps: 23%" in text  # the doc's head: the rest is in JSON and rules show
    assert "consecutive overflows left before DeepSpeed aborts at min scale: 0" in text
    assert "fp16.recent_overflow_rate" not in text
    markdown = run_cli("diagnose", "--format", "markdown", sample).stdout
    assert "- skipped share of the recent steps: 23%" in markdown
    body = json.loads(run_cli("diagnose", "--format", "json", sample).stdout)
    (collapse,) = [f for f in body["findings"] if f["rule"] == "ZD201"]
    assert collapse["evidence"]["fp16.recent_overflow_rate"] == 0.230769
    assert set(body["inputs"][0]) == {"path", "format", "events", "quarantined"}


def test_quantities_in_their_units() -> None:
    assert quantity(3 * 2**30 + 2**29, "bytes") == "3.50 GiB"  # as PyTorch prints it
    assert quantity(64 * 2**20, "bytes") == "64.00 MiB"
    assert quantity(0.2308, "ratio") == "23%"
    assert quantity(0.0426, "s") == "42.6 ms"
    assert quantity(12.5, "s") == "12.5 s"
    assert quantity(2.92e7, "elements") == "29.2M elements"
    assert quantity(True, "bool") == "yes"
    assert quantity(-9e-06, "s") == "-9 µs" and quantity(1800, "s") == "30 min"
    assert quantity(0.7327, "steps") == "less than 1" and quantity(2212.4, "steps") == "2,212"
    assert quantity(6, "rank") == "rank 6" and quantity([0, 1, 2, 3, 7], "ranks") == "0-3, 7"
    assert quantity(57.6, "GB") == "53.64 GiB"  # the ZeRO paper's 10^9 bytes, in the units every size is printed in
    assert evidence_items({"run.zero_stage": 3, "run.precision": "bf16", "fatal.rank": 6}) == [
        "ZeRO stage: 3", "run precision: bf16", "the rank where the root fatal error was seen first: rank 6"]
    assert evidence_items({"memory.oom_requested_bytes": 2 << 30, "not.a.signal": 3}) == [
        "size of the failed allocation: 2.00 GiB", "not.a.signal=3"]


def test_a_log_with_nothing_recognised_says_so(tmp_path: Path) -> None:
    log = tmp_path / "train.out"
    log.write_text("epoch 1 done\nsaving checkpoint\nall good\n")
    proc = run_cli("diagnose", str(log))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"{log}: nothing to judge (3 lines read, as text): no step, config dump, error or hang line zerodoctor reads; "
        "it reads zerodoctor's events (rank-N.jsonl) and the deepspeed, torch, nccl, hf, megatron, crash, fatal, "
        "stackdump, amp, nvidia-smi lines of a console log")
    assert "no findings" not in proc.stdout
    markdown = run_cli("diagnose", "--format", "markdown", str(log)).stdout
    assert "nothing to judge (3 lines read" in markdown and "No findings" not in markdown


def test_output_file_for_any_format(tmp_path: Path) -> None:
    for fmt in ("text", "json", "markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        proc = run_cli("diagnose", "--format", fmt, "-o", str(out), "--fail-on", "never",
                       str(ROOT / "samples/healthy-zero2"))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == ""
        assert f"wrote {out}" in proc.stderr
        assert out.stat().st_size > 100
    assert json.loads((tmp_path / "report.json").read_text())["findings"] == []


def test_a_log_showing_no_precision_and_no_scaler_says_overflow_status_is_unknown() -> None:
    """Since DeepSpeed 0.17.6 the OVERFLOW lines are INFO: a log without them says so, with the switch; a log
    that shows overflows (the fp16 sample) makes no such claim."""
    oom_only = run_cli("diagnose", str(ROOT / "tests/corpus/ds-3208-oom-1x-near-capacity/console.log")).stdout
    assert 'overflow status unknown from this log (DeepSpeed 0.17.6+ prints its OVERFLOW lines only with ' \
           '"log_level": "info")' in oom_only
    with_overflows = run_cli("diagnose", str(ROOT / "samples/fp16-min-scale/console.log")).stdout
    assert "overflow status unknown" not in with_overflows
    # DeepSpeed 0.19.6+'s WARNING for a step skipped under bf16 or a static scale, and fairseq's own scaler
    for shows in ("tests/fixtures/rules/ZD206/fires.log", "tests/fixtures/rules/ZD205/fires.log"):
        assert "overflow status unknown" not in run_cli("diagnose", str(ROOT / shows)).stdout, shows


# Pronouns whose antecedent is inside the label itself ("ranks that said they ended"), not a signal before it.
_SELF_CONTAINED = {"run.ranks_ended", "amp.min_reached", "creep.host_steps_left", "config.close_matches",
                   "config.unknown_keys_patch", "hang.seq", "hang.fr_behind", "trainer.mismatches"}
_LEANS = re.compile(r"^(it|its|that|this|those|these|they|them)\b|\b(it|its|they|them|those|these)\b", re.I)


def test_every_evidence_label_stands_alone() -> None:
    """An evidence line is read alone, under whichever rule fired: "that cost / the median rank's step time: 0.98%"
    (the signal after the one it leaned on, in the catalogue) named nothing. A label leans on no other signal."""
    from zerodoctor import signals

    leaning = {name: signal.label for name, signal in signals.catalog().items()
               if name not in _SELF_CONTAINED and _LEANS.search(signal.label)}
    assert leaning == {}


def test_piped_output_wraps_to_columns_when_set() -> None:
    """``diagnose … | less`` in an 80-column window with COLUMNS exported: the report is wrapped to 80 with its
    hanging indents, as on the terminal; without COLUMNS a pipe gets one line per row (a tool reads it whole)."""
    sample = str(ROOT / "samples/fp16-min-scale")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    whole = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", sample], env=env,
                           capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert max(map(len, whole)) > 200
    wrapped = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", sample], env={**env, "COLUMNS": "80"},
                             capture_output=True, text=True, timeout=120).stdout.splitlines()
    too_wide = [line for line in wrapped if len(line) > 80 and " " in line.strip()]
    assert not too_wide and len(wrapped) > len(whole), too_wide
    assert all(line.startswith("  ") for line in wrapped[1:wrapped.index("")]), wrapped  # the first finding's indent


def test_a_run_waiting_on_a_stale_build_lock_is_stuck_and_exits_1() -> None:
    """A real process waiting on a stale lock (torch 2.13, DeepSpeed 0.19.8, DS_ACCELERATOR=cpu, a private
    TORCH_EXTENSIONS_DIR holding fused_adam/lock; ``FusedAdamBuilder().load()`` under PYTHONFAULTHANDLER=1, killed
    with SIGABRT after 20 s): its only words are the stack in file_baton's wait. That run is stuck, an error (exit
    1), and the finding claims no "Using … extensions root" line the log never printed."""
    proc = run_cli("diagnose", str(ROOT / "tests/fixtures/logs/stale_build_lock_faulthandler.log"))
    assert proc.returncode == 1, proc.stdout
    head, message = proc.stdout.splitlines()[:2]
    assert head.startswith("ERROR ZD712 stalled-on-jit-build-lock"), proc.stdout
    assert message.startswith("  the run is stuck on the JIT build lock of an op (1 rank waiting"), message


def test_check_names_what_is_missing_in_words() -> None:
    """``check``'s "not judged" lines say what each rule lacks by the catalogue's labels ("model parameters"),
    not the signals' dotted names ("needs run.params, config.bucket_waste_bytes")."""
    proc = run_cli("check", str(ROOT / "samples/batch-mismatch/ds_config.json"))
    needs = [line for line in proc.stdout.splitlines() if ": needs " in line]
    assert needs and all("model parameters" in line for line in needs), proc.stdout
    assert not any(re.search(r"\b[a-z][a-z0-9]*\.[a-z][a-z0-9_]*\b", line) for line in needs), needs


def test_a_cuda_oom_message_cut_before_its_figures_is_not_called_unknown(tmp_path: Path) -> None:
    """PyTorch 2.x's OOM message cut after "… of which 1.50 GiB is free." (a paste of its first line): the memory
    rules cannot judge it without the allocated and reserved figures that follow. ZD901 said it was "not a fault
    zerodoctor knows"; it says no rule explains it from this log, and what would show the memory rules' verdict."""
    log = tmp_path / "console.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 79.15 GiB of which 1.50 GiB is free.\n")
    lines = run_cli("diagnose", str(log)).stdout.splitlines()
    assert lines[0].startswith("ERROR ZD901 fatal-error") and lines[1].endswith(
        "; no rule explains it from what this log shows, so no fix is offered"), lines
    assert "needs the OOM's allocated and reserved memory" in next(line for line in lines if "not judged" in line)
    explained = run_cli("diagnose", "--explain", str(log)).stdout
    assert ("to see it: the whole CUDA out-of-memory message, with the memory PyTorch had allocated and reserved "
            "(a message cut before those figures cannot be judged)") in explained, explained
