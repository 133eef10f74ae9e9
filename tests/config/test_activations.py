"""Activations in the memory plan (``check --model``): the paper's per-layer estimate, real HF configs, the largest
micro-batch that fits at its boundary, and the JSON rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerodoctor.config.memory_plan import budget, largest_micro_batch, plan
from zerodoctor.config.model_shape import read_shape
from zerodoctor.deepspeed.activations import Shape, activation_bytes, checkpointing_of, layer_bytes
from zerodoctor.deepspeed.stepinputs import Hardware, inputs_for, workload_for
from tests.conftest import ROOT, run_cli

MODELS = ROOT / "tests/fixtures/model_config"  # real config.json files, their URLs in SOURCES.md
GPT3 = Shape(hidden=12288, layers=96, heads=96)  # Korthikanti et al. 2022, Table 3: GPT-3 175B, sequence 2048


def test_a_layer_of_gpt3_keeps_114_sbh_bytes_as_the_paper_works_it() -> None:
    """The paper's own example: for GPT-3, 5·a·s/h = 5 · 96 · 2048 / 12288 = 80, beside the 34 of the linear layers,
    norms and dropout, so a layer keeps s·b·h·(34 + 80) bytes without recomputation; full recomputation keeps 2·s·b·h
    a layer (Table 2)."""
    sbh = 2048 * 1 * 12288
    assert layer_bytes(GPT3, 2048, 1) == sbh * 114
    assert activation_bytes(GPT3, 2048, 1) == 96 * sbh * 114
    assert activation_bytes(GPT3, 2048, 1, "full") == 96 * 2 * sbh + sbh * 114  # plus the one layer rebuilt
    assert activation_bytes(GPT3, 2048, 1, "full, kept on the host") == sbh * 114
    assert activation_bytes(GPT3, 2048, 3) == 3 * activation_bytes(GPT3, 2048, 1)  # linear in the micro-batch
    assert activation_bytes(Shape(12288, 96, 96, vocab=50257), 2048, 1) == 96 * sbh * 114 + 4 * 2048 * 50257


@pytest.mark.parametrize(("name", "shape"), [("gpt2.config.json", (768, 12, 12, 50257)),
                                             ("tinyllama.config.json", (2048, 22, 32, 32000))])
def test_a_real_hugging_face_config_gives_its_shape(name: str, shape: tuple) -> None:
    got = read_shape(MODELS / name)
    assert (got.hidden, got.layers, got.heads, got.vocab) == shape


def test_a_config_without_a_shape_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12}))
    with pytest.raises(ValueError, match=r"config.json: no num_attention_heads or n_head"):
        read_shape(path)
    path.write_text('{"hidden_size": 768,\n oops}')
    with pytest.raises(ValueError, match=r"config.json:2:2: not JSON"):
        read_shape(path)
    proc = run_cli("check", str(ROOT / "samples/offload-zero3/ds_config.json"), "--params", "1e9", "--model",
                   str(path), "--no-deepspeed")
    assert proc.returncode == 2 and "config.json:2:2: not JSON" in proc.stderr


def test_the_config_section_says_whether_layers_are_checkpointed() -> None:
    assert checkpointing_of({}) is None
    assert checkpointing_of({"activation_checkpointing": {"partition_activations": True}}) == "full"
    assert checkpointing_of({"activation_checkpointing": {"cpu_checkpointing": True}}) == "full, kept on the host"


def test_a_micro_batch_fits_up_to_the_byte_and_not_one_past() -> None:
    """GPU memory set so that model states + 3 samples' activations are exactly the budget: 3 fits, 4 does not."""
    shape = read_shape(MODELS / "gpt2.config.json")
    config = {"train_micro_batch_size_per_gpu": 3, "bf16": {"enabled": True}}
    work = workload_for(config, shape, Hardware(seq_len=1024))
    states = next(r.model_states_bytes_per_gpu for r in plan(124_000_000, 1, estimators=False)
                  if (r.stage, r.offload) == (2, "none"))
    exact = states + work.bytes_at(3)
    gpu_mem = int(exact / 0.9) + 1
    assert budget(gpu_mem, True) >= exact > budget(gpu_mem - 2, True)
    assert largest_micro_batch(states, gpu_mem, work) == 3
    assert largest_micro_batch(states, gpu_mem - 2, work) == 2

    def row(mem: int):
        rows = plan(124_000_000, 1, mem, estimators=False, timing=inputs_for(config, 124_000_000, 1),
                    workload=work)
        return next(r for r in rows if (r.stage, r.offload) == (2, "none"))

    assert row(gpu_mem).fits and row(gpu_mem).max_micro_batch.value == 3
    assert not row(gpu_mem - 2).fits and row(gpu_mem - 2).max_micro_batch.value == 2


def test_throughput_at_the_largest_micro_batch_is_its_samples_over_its_own_step() -> None:
    """8 GPUs, grad-accum 2: a step of micro-batch b moves b × 2 × 8 samples; compute grows with b, CPU Adam not."""
    shape = read_shape(MODELS / "tinyllama.config.json")
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
              "activation_checkpointing": {}}
    hw = Hardware(seq_len=2048, gpu="A100")
    timing = inputs_for(config, 1.1e9, 8, hw)
    rows = plan(1_100_000_000, 8, 24 * 10**9, estimators=False, timing=timing, workload=workload_for(config, shape, hw))
    offload = next(r for r in rows if (r.stage, r.offload) == (2, "optimizer"))
    big = offload.largest
    assert big is not None and big.micro_batch == offload.max_micro_batch.value > 1
    assert big.samples_per_s.value == pytest.approx(big.micro_batch * 2 * 8 / big.step.total.value)
    assert big.step.compute.value == pytest.approx(big.micro_batch * offload.step.compute.value)
    assert big.step.optimizer.value == pytest.approx(offload.step.optimizer.value)
    assert offload.samples_per_s.value == pytest.approx(1 * 2 * 8 / offload.step.total.value)


def test_check_with_a_model_carries_activations_and_the_largest_batch_per_json_row(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 2}}))
    args = ("check", str(path), "--world-size", "8", "--params", "1.1e9", "--gpu-mem", "24GB", "--seq-len", "2048",
            "--no-deepspeed", "--format", "json")
    bare = json.loads(run_cli(*args).stdout)
    assert all(r["activation_bytes"] is None and r["max_micro_batch"] is None for r in bare["memory_plan"])
    assert bare["assumption"].endswith("; activations: not priced, no --model")
    data = json.loads(run_cli(*args, "--model", str(MODELS / "tinyllama.config.json")).stdout)
    paper = [r for r in data["memory_plan"] if r["source"] == "zero-paper"]
    assert len(paper) == 8
    shape = read_shape(MODELS / "tinyllama.config.json")
    assert all(r["activation_bytes"] == activation_bytes(shape, 2048, 4) for r in paper)
    # 72.65 GB each; assumed: the config has no activation_checkpointing section, so none is assumed
    assert all(r["activation_bytes_mark"] == "assumed" and r["fits"] is False for r in paper)
    stage3 = next(r for r in paper if (r["stage"], r["offload"]) == (3, "none"))
    assert stage3["max_micro_batch"] == 1 and stage3["max_micro_batch_mark"] == "assumed"
    assert stage3["at_max_micro_batch"]["samples_per_s"] == pytest.approx(
        8 / stage3["at_max_micro_batch"]["step_time_s"])
    stage0 = paper[0]
    assert stage0["max_micro_batch"] == 0 and stage0["at_max_micro_batch"] is None
    assert data["recommendation"] is None
    assert data["activation_inputs"]["checkpointing"] == {"value": "none", "mark": "assumed",
                                                          "source": "activation_checkpointing"}
    text = run_cli(*args[:-2], "--model", str(MODELS / "tinyllama.config.json")).stdout
    assert "micro-batch 4 does not fit under stage 2 offload optimizer (largest 1)" in text
    assert "No ZeRO option fits: add GPUs, offload to NVMe, or take a smaller micro-batch" in text


def test_a_measured_compute_grows_with_the_batch_and_takes_the_batch_mark() -> None:
    """``check --from``: the run's forward + backward was at its own micro-batch; three times the samples cost three
    times that, and the figure is no surer than the batch it is priced at."""
    from zerodoctor.deepspeed import steptime as st

    inputs = st.with_compute(inputs_for({"train_micro_batch_size_per_gpu": 2}, 1e9, 1, Hardware(seq_len=512)), 2.0)
    bigger = st.scaled_batch(inputs, 3, "assumed")
    assert bigger.compute_s is not None and bigger.compute_s.value == pytest.approx(6.0)
    assert (bigger.compute_s.mark, bigger.tokens_per_gpu.value, bigger.tokens_per_gpu.mark) == ("assumed", 3072,
                                                                                               "assumed")
