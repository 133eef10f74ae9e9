"""throughput.* (signals/throughput.py): model FLOPs utilisation from what the run printed or the probe counted,
against the GPU table's peak for the run's precision; ZD803 words it below LOW_MFU and is not judged without
the GPU's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, diagnose_json
from tests.sources.perf_families import _MEG_THROUGHPUT
from tests.sources.test_gpu_table import TABLES
from tests.sources.test_perf_families import events_of
from tests.sources.test_perf_real_pastes import MEGATRON_756
from zerodoctor.signals import throughput

FIRES = ROOT / "tests" / "fixtures" / "rules" / "ZD803" / "fires.jsonl"


class _View:
    def __init__(self, fold: throughput.Fold) -> None:
        self._fold = fold

    def fold(self, name: str) -> throughput.Fold:
        return self._fold


def test_megatron_756_printed_throughput_is_a_healthy_share_of_an_h100(tmp_path: Path) -> None:
    """The real lines' own TFLOP/s (median 238.7) against the H100's 989 bf16 peak: 24%, not low."""
    path = tmp_path / "console.log"
    path.write_text(MEGATRON_756)
    steps = [e for e in events_of(path) if e["kind"] == "step"]
    fold = throughput.Fold(recent=[[e["step"] for e in steps], [e["tflops"] for e in steps], [None] * len(steps),
                                   [e["step_time_s"] for e in steps]])
    got = throughput.compute(_View(fold), {"run.device_name": "NVIDIA H100 80GB HBM3", "run.precision": "bf16"})
    assert got["throughput.tflops"] == 238.7 and got["throughput.gpu"] == "H100"
    assert got["throughput.mfu"] == pytest.approx(238.7 / 989, abs=1e-4)
    assert got["throughput.verdict"] == "fine"
    assert (got["throughput.first_step"], got["throughput.last_step"]) == (71, 73)
    # the same figures on no GPU the table knows: the numbers, no verdict
    got = throughput.compute(_View(fold), {"run.device_name": "NVIDIA GeForce RTX 4090"})
    assert got == {"throughput.tflops": 238.7, "throughput.first_step": 71, "throughput.last_step": 73}


def _run(tmp_path: Path, **start: Any) -> Path:
    lines = FIRES.read_text().splitlines()
    first = {**json.loads(lines[0]), **start}
    path = tmp_path / "rank-0.jsonl"
    path.write_text("\n".join([json.dumps({k: v for k, v in first.items() if v is not None}), *lines[1:]]) + "\n")
    return path


def test_tokens_and_step_time_price_the_model_math() -> None:
    """6 × 1.3e9 × 16,384 tokens / 4.1 s = 31.2 TFLOP/s, 10% of an A100's 312: low."""
    (found,) = [f for f in diagnose_json(FIRES)["findings"] if f["rule"] == "ZD803"]
    assert found["message"] == (
        "each GPU reaches 31.2 TFLOP/s of model math, 10.0% of the A100's 312 TFLOP/s bf16 peak, where ZeRO and "
        "Megatron runs reach 30-55%: most of each step goes to something other than the model")


def test_an_unshown_precision_is_judged_against_the_half_precision_peak_and_said(tmp_path: Path) -> None:
    found = {f["rule"]: f for f in diagnose_json(_run(tmp_path, precision=None))["findings"]}
    assert "the run never shows its precision" in found["ZD803"]["message"]


def test_fp32_is_judged_against_fp32_peak(tmp_path: Path) -> None:
    """31.2 TFLOP/s is past an A100's 19.5 fp32 peak: no finding (and no bf16 remedy for a run not in fp32)."""
    report = diagnose_json(_run(tmp_path, precision="fp32"))
    assert "ZD803" not in {f["rule"] for f in report["findings"]}
    assert "ZD803" not in {u["rule"] for u in report["unevaluated"]}


def test_without_the_gpu_name_it_is_not_judged_and_says_so(tmp_path: Path) -> None:
    (missing,) = [u for u in diagnose_json(_run(tmp_path, device_name=None))["unevaluated"] if u["rule"] == "ZD803"]
    assert "throughput.peak_tflops" in missing["missing"]


def test_the_cpu_accelerator_is_silent(tmp_path: Path) -> None:
    """Judged and silent, not 'needs the GPU's peak': the CPU accelerator has none to reach."""
    report = diagnose_json(_run(tmp_path, env={"DS_ACCELERATOR": "cpu"}))
    assert "ZD803" not in {f["rule"] for f in report["findings"]}
    assert "ZD803" not in {u["rule"] for u in report["unevaluated"]}


def _console(tmp_path: Path, tflops: float) -> Path:
    """SparK#8's real nvidia-smi rows (tests/sources/test_gpu_table.py), then Megatron iteration lines built from
    training.py's format string (tests/sources/perf_families.py, labelled there) printing ``tflops``."""
    table, _ = TABLES["spark-8"]
    lines = [_MEG_THROUGHPUT.format(i, 1000, i * 64, 1000.0, tflops, 1.5e-4, 64, 2.5, 65536.0, 0, 0)
             for i in (10, 20, 30)]
    path = tmp_path / "console.log"
    path.write_text("\n".join([table, *lines]) + "\n")
    return path


def test_a_console_names_its_gpu_by_nvidia_smi_and_is_judged(tmp_path: Path) -> None:
    """No probe: the GPU from nvidia-smi's row, the TFLOP/s from Megatron's line, the precision unshown."""
    found = {f["rule"]: f for f in diagnose_json(_console(tmp_path, 31.2))["findings"]}
    assert found["ZD803"]["message"].startswith(
        "each GPU reaches 31.2 TFLOP/s of model math, 10.0% of the A100's 312 TFLOP/s fp16/bf16 peak")
    report = diagnose_json(_console(tmp_path, 150.0))
    assert "ZD803" not in {f["rule"] for f in report["findings"]} | {u["rule"] for u in report["unevaluated"]}
