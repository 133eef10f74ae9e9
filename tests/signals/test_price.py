"""A slow run's remedies priced in time (signals/price.py): the step-time model calibrated on the run's own step,
on the rule fixtures and the real offloaded CPU sample; what the run lacks is named instead of a number."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, run_cli
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.signals import price

RULES = rules_from()


def _fixes(path: Path, rule: str) -> list[str]:
    report = diagnose([path], rules=RULES)
    return [fix.title for f in report.findings if f.rule == rule for fix in f.fixes]


def test_dropping_an_offload_the_gpu_can_hold_is_priced_below_the_runs_step() -> None:
    """ZD502's fixture: ZeRO-2, 1.3B parameters on 2 GPUs, optimizer offloaded, 1 s steps of which 0.7 s is the
    optimizer step. Without offload CPU Adam and its copies go: the model calibrated on the run prices the step at
    311 ms (its GPU optimizer step counted as nothing beside the rest), from the assumed host bandwidth."""
    titles = _fixes(ROOT / "tests/fixtures/rules/ZD502/fires.jsonl", "ZD502")
    drop = next(t for t in titles if t.startswith("Drop offload altogether"))
    assert drop.endswith("; a step takes 1 s now; it would take 311 ms (predicted from assumed rates)")


def test_collective_time_the_run_measured_is_priced_as_exposed() -> None:
    """ZD301's fixture: ZeRO-3 steps of 500 ms, 300 ms of them in collectives. Stage 2 makes two ring passes where
    stage 3 makes three and drops the per-layer fetch: 358 ms. With the model's own overlap (on at stage 3) the three
    would hide behind compute the run showed them not hiding behind, and stage 2 came out slower (515 ms)."""
    titles = _fixes(ROOT / "tests/fixtures/rules/ZD301/fires.jsonl", "ZD301")
    stage2 = next(t for t in titles if "ZeRO stage 2" in t)
    assert stage2.endswith("; a step takes 500 ms now; it would take 358 ms (predicted from assumed rates)")


def test_on_the_cpu_accelerator_dropping_offload_is_refuted_and_not_offered() -> None:
    """The real offloaded sample (ZeRO-2, torch's AdamW on the host, DS_ACCELERATOR=cpu): without offload the
    "device" optimizer step is the same host's Adam, so the model prices dropping offload at about the step it has
    (2.08 s), not at the 1 s it would be if the optimizer step went away as on a GPU: a gain inside the model's
    error is no gain the run supports, and ZD502 does not offer it (it did, "it would take 2.08 s", before
    ``price.refuted``)."""
    report = diagnose([ROOT / "samples/offload-zero2-torch-adam"], rules=RULES)
    zd502 = next(f for f in report.findings if f.rule == "ZD502")
    assert [fix.title for fix in zd502.fixes] == ["Give CPU Adam more threads than OMP_NUM_THREADS=1"]


def test_the_priced_fix_in_the_docs_is_the_real_output() -> None:
    """docs/check.md shows ZD502's fixture priced on a GPU (1 s → 311 ms): the line is diagnose's own."""
    shown = [line for line in (ROOT / "docs/check.md").read_text().splitlines() if "fix (safe): Drop offload" in line]
    fixture = ROOT / "tests/fixtures/rules/ZD502/fires.jsonl"
    assert shown and shown[0] in run_cli("diagnose", str(fixture)).stdout.splitlines()


def test_a_run_that_does_not_show_what_the_model_needs_is_named_not_priced(tmp_path: Path) -> None:
    """ZD301's fixture with overlap_comm turned off and no parameter count (a run_start without it): the
    overlap fix is offered, and its price says what the model lacks rather than a number."""
    lines = (ROOT / "tests/fixtures/rules/ZD301/fires.jsonl").read_text().splitlines(keepends=True)
    start = '"config": {"zero_optimization": {"stage": 3}}, "zero_stage": 3, "params": 30000000,'
    unpriced = '"config": {"zero_optimization": {"stage": 3, "overlap_comm": false}}, "zero_stage": 3,'
    path = tmp_path / "run.jsonl"
    path.write_text("".join(line.replace(start, unpriced) for line in lines))
    overlap = next(t for t in _fixes(path, "ZD301") if t.startswith("Turn overlap_comm on"))
    assert overlap.endswith("; a step takes 500 ms now; the model cannot price this without model parameters")
    records = price.compute(SimpleNamespace(config={}), {"run.step_s": 24.1})  # type: ignore[arg-type]
    assert records["price.no_offload"] == {"now_s": 24.1, "missing": "model parameters, ranks in the job, ZeRO stage"}


@pytest.mark.parametrize(("device", "kind"), [
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"),
    ("NVIDIA TITAN RTX", "TITAN-RTX"), ("cpu", None), (None, None),
])
def test_a_device_name_gives_its_datasheet(device: str | None, kind: str | None) -> None:
    assert price._gpu(device) == kind
