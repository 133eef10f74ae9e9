"""Memory plan: the ZeRO paper's figures, DeepSpeed's estimators and their units, the recommendation order."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from zerodoctor.config.memory_plan import parse_quantity, plan, recommend


def test_the_papers_figures_for_7_5b_parameters_on_64_gpus() -> None:
    """ZeRO (SC'20) Figure 1: 120 / 31.4 / 16.6 / 1.88 GB per GPU for stages 0-3."""
    paper = {r.stage: r.model_states_bytes_per_gpu / 1e9 for r in plan(7_500_000_000, 64, estimators=False)
             if r.offload == "none"}
    assert [round(paper[0]), round(paper[1], 1), round(paper[2], 1), round(paper[3], 2)] == [120, 31.4, 16.6, 1.88]


def test_deepspeed_estimators_print_gib_labelled_gb() -> None:
    """Our rows hold DeepSpeed's bytes; its own printout divides them by 2^30 and says "GB"."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs_all_cold

    rows = {(r.stage, r.offload): r for r in plan(7_500_000_000, 8) if r.source == "deepspeed-estimator"}
    assert set(rows) == {(2, "none"), (2, "optimizer"), (3, "none"), (3, "optimizer"), (3, "optimizer+param")}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        estimate_zero2_model_states_mem_needs_all_cold(7_500_000_000, num_gpus_per_node=8)
    table = printed.getvalue()
    per_gpu = [float(x) for x in re.findall(r"([\d.]+)GB \|\s*([\d.]+)GB \| offload_optimizer=none", table)[0]]
    assert per_gpu[1] == pytest.approx(rows[(2, "none")].model_states_bytes_per_gpu / 2**30, abs=0.01)


def test_optimizer_offload_takes_the_gradient_partition_to_the_host_as_deepspeed_does() -> None:
    """ZeRO-Offload keeps only the fp16 parameters on the GPU; DeepSpeed's estimator counts 2Ψ for stage 2 with
    offload, whatever the world size, and the stage-3 figures (less the largest layer) agree too."""
    rows = plan(7_500_000_000, 8)
    paper = {(r.stage, r.offload): r.model_states_bytes_per_gpu for r in rows if r.source == "zero-paper"}
    ds = {(r.stage, r.offload): r.model_states_bytes_per_gpu for r in rows if r.source == "deepspeed-estimator"}
    assert paper[(2, "optimizer")] == ds[(2, "optimizer")] == 15_000_000_000
    assert paper[(3, "optimizer")] == ds[(3, "optimizer")] == 2 * 7_500_000_000 // 8
    assert paper[(3, "optimizer+param")] == ds[(3, "optimizer+param")] == 0
    assert paper[(1, "optimizer")] == 30_000_000_000  # stage 1 reduces whole gradients at the step: they stay


@pytest.mark.parametrize(("params", "world", "gpu", "pick"), [
    (7_500_000_000, 64, "80GB", (1, "none")),        # stage 1 fits: no reason to shard gradients
    (7_500_000_000, 2, "80GB", (1, "optimizer")),    # 67.5 GB of states under stage 2: offload the optimizer
    (7_500_000_000, 4, "40GB", (2, "optimizer")),    # stage 1 + offload (30 GB, whole gradients) does not fit
    (30_000_000_000, 8, "80GB", (3, "optimizer")),   # only ZeRO-3 with optimizer offload gets under 56 GB
    (70_000_000_000, 16, "24GB", (3, "optimizer")),  # 8.75 GB of fp16 parameters; gradients go to the host
    # with both offloads the GPU keeps no model states (its buffers and activations are the headroom's); without
    # --host-mem the host's 18 TB are not judged (test_the_host_must_hold_what_offload_moves_there)
    (1_000_000_000_000, 8, "24GB", (3, "optimizer+param")),
])
def test_recommendation_is_the_fastest_option_that_fits(params: int, world: int, gpu: str, pick) -> None:
    rows = plan(params, world, parse_quantity(gpu, "gpu"), estimators=False)
    chosen = recommend(rows)
    assert (chosen.stage, chosen.offload) == pick if pick else chosen is None
    if chosen:
        assert chosen.model_states_bytes_per_gpu <= 0.7 * parse_quantity(gpu, "gpu")


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 8), (2, 4), (4, 8)])
def test_host_memory_per_node_is_deepspeeds_estimate_with_zero_init(nodes: int, per_node: int) -> None:
    """DeepSpeed's ``estimate_zero3_model_states_mem_needs`` (zero_init) counts 16Ψ / 18Ψ of host memory over the
    job's nodes, times its 1.5 buffer factor; a node of ``per_node`` ranks holds that share."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    params = 7_000_000_000
    rows = {r.offload: r for r in plan(params, nodes * per_node, estimators=False, ranks_per_node=per_node)
            if r.stage == 3}
    for offload in ("optimizer", "optimizer+param"):
        host, _, _ = estimate_zero3_model_states_mem_needs(
            params, 0, per_node, nodes, cpu_offload=True, cpu_offload_params=offload == "optimizer+param")
        assert rows[offload].host_need_bytes == pytest.approx(host, rel=1e-6)
    assert rows["none"].host_bytes_per_node == 0


def test_the_host_must_hold_what_offload_moves_there() -> None:
    """A trillion parameters on one node of 8 × 24 GB "fit" once everything is offloaded; 1 TB of host memory
    does not hold their 18 TB (27 TB with DeepSpeed's staging), so with the host known nothing fits, and on 256
    GPUs (32 nodes of 8: 750 GB a node with the staging) the per-node share does."""
    one_node = plan(10**12, 8, parse_quantity("24GB", "gpu"), estimators=False, host_mem=10**12, ranks_per_node=8)
    assert recommend(one_node) is None
    assert all(r.host_fits is False for r in one_node if r.offload != "none")
    many = plan(10**12, 256, parse_quantity("24GB", "gpu"), estimators=False, host_mem=10**12, ranks_per_node=8)
    chosen = recommend(many)
    assert chosen is not None and chosen.offload != "none" and chosen.host_fits is True
    assert chosen.host_need_bytes <= 10**12


@pytest.mark.parametrize(("text", "value"), [("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("7.5e9", 7_500_000_000),
                                             ("7B", 7 * 10**9), ("125M", 125 * 10**6)])
def test_quantities(text: str, value: int) -> None:
    assert parse_quantity(text, "--params") == value


def test_a_bad_quantity_names_the_option() -> None:
    with pytest.raises(ValueError, match="--gpu-mem '80 gigs'"):
        parse_quantity("80 gigs", "--gpu-mem")
