"""Config check: a DeepSpeed config file → the findings of the static rules, DeepSpeed's verdict, a plan of
memory and step time per ZeRO option.

``check`` reuses the pipeline rather than a second rules engine: the config becomes one
``run_start`` event, as the probe records it at launch (with the world size, parameter
count and GPU memory given on the command line), the signals run over it, and the rules
marked ``static`` judge it. Rules needing a running job are not asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zerodoctor import events, signals
from zerodoctor.deepspeed import config_file as deepspeed_config
from zerodoctor.config import deepspeed_validate
from zerodoctor.config.deepspeed_validate import Verdict
from zerodoctor.config.memory_plan import PlanRow, plan, recommend
from zerodoctor.deepspeed.activations import Shape, Workload
from zerodoctor.deepspeed.stepinputs import Hardware, calibrate, inputs_for, workload_for
from zerodoctor.deepspeed.config_file import ConfigSyntaxError
from zerodoctor.deepspeed.defaults import BATCH_KEYS
from zerodoctor.deepspeed.steptime import Figure, Inputs
from zerodoctor.rulebook.engine import judge_view
from zerodoctor.rulebook.finding import Finding, Unevaluated
from zerodoctor.rulebook.loader import Rule
from zerodoctor.signals.view import Reads, RunView


class ConfigError(ValueError):
    """A config file that cannot be checked; the message names the file (and line)."""


@dataclass
class CheckReport:
    path: str
    world_size: int
    config: dict[str, Any]
    world_size_from: str = "given"  # given | batch (train_batch_size / (micro × grad-accum)) | assumed (neither)
    params: int | None = None
    gpu_mem_bytes: int | None = None
    host_mem_bytes: int | None = None  # one node's host memory (``--host-mem``): what offload may fill
    findings: list[Finding] = field(default_factory=list)
    unevaluated: list[Unevaluated] = field(default_factory=list)
    deepspeed: Verdict | None = None  # None: skipped (``deepspeed_skipped``) or not installed
    deepspeed_skipped: bool = False
    memory_plan: list[PlanRow] = field(default_factory=list)
    recommendation: PlanRow | None = None
    timing: Inputs | None = None  # what the plan's step times were priced on, each input marked
    calibrated_from: str | None = None  # the run or log ``--from`` named, when it calibrated them
    workload: Workload | None = None  # the model's shape and batch that priced activations (``--model``)


def load_config(path: Path) -> dict[str, Any]:
    """The config as DeepSpeed reads it (hjson: comments, trailing commas), a dict in file order;
    a bad file is a ConfigError saying ``file:line:col: what``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        config = deepspeed_config.read(text)
    except ConfigSyntaxError as exc:
        where = f":{exc.line}:{exc.column}" if exc.line is not None else ""
        raise ConfigError(f"{path}{where}: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}:1:1: a DeepSpeed config must be a JSON object, not {type(config).__name__}")
    return config


def static_rules(rules: list[Rule]) -> list[Rule]:
    return [r for r in rules if r.spec.static]


def judge_config(config: dict[str, Any], rules: list[Rule], *, name: str, world_size: int,
                 params: int | None = None, gpu_mem: int | None = None) -> tuple[list[Finding], list[Unevaluated]]:
    """The static rules' findings on ``config`` as a run of ``world_size`` ranks would start it."""
    start = events.new("run_start", t=time.time(), run=name, rank=0, world_size=world_size, config=config,
                       params=params, device_memory_bytes=gpu_mem)
    modules = signals.signal_modules()
    view = RunView(0, name, Reads.of(modules))
    view.events["run_start"] = [start]
    found, unevaluated, _ = judge_view(static_rules(rules), view, modules, ranks=[])  # no ranks: nothing ran
    return found, unevaluated


def check(path: Path, rules: list[Rule], *, world_size: int | None = None, params: int | None = None,
          gpu_mem: int | None = None, use_deepspeed: bool = True, hardware: Hardware | None = None,
          run: dict[str, Any] | None = None, run_name: str | None = None, model: Shape | None = None,
          host_mem: int | None = None) -> CheckReport:
    """``world_size`` None: the one the config's three batch values imply, else 1 (the report says which).

    ``run``: the signals of a run that calibrate the step times (``deepspeed.stepinputs.calibrate``), named
    ``run_name``; it also gives the parameter count when ``params`` is None. ``model``: the transformer's shape
    (``--model``), which prices activations and gives the step times its layer count. ``host_mem``: one node's
    host memory, which an offloading option must fit as well. A bad --gpu or --inter-node is a ValueError."""
    params = params or (int(run["run.params"]) if run and run.get("run.params") else None)
    config = load_config(path)
    world_size, source = (world_size, "given") if world_size else implied_world_size(config)
    report = CheckReport(str(path), world_size, config, source, params, gpu_mem, host_mem)
    report.findings, report.unevaluated = judge_config(
        config, rules, name=Path(path).name, world_size=world_size, params=params, gpu_mem=gpu_mem)
    if use_deepspeed:
        report.deepspeed = deepspeed_validate.validate(config, world_size)
    report.deepspeed_skipped = not use_deepspeed
    if params:
        report.timing = inputs_for(config, params, world_size, hardware or Hardware())
        if model:
            report.workload = workload_for(config, model, hardware)
            report.timing = replace(report.timing, layers=Figure(model.layers, "nominal", model.source))
        if run:
            report.timing, report.calibrated_from = calibrate(report.timing, run), run_name
        report.memory_plan = plan(params, world_size, gpu_mem, estimators=use_deepspeed, timing=report.timing,
                                  workload=report.workload, host_mem=host_mem,
                                  ranks_per_node=report.timing.gpus_per_node)
        report.recommendation = recommend(report.memory_plan) if gpu_mem else None
    return report


def implied_world_size(config: dict[str, Any]) -> tuple[int, str]:
    """The world size a config's train_batch_size, micro-batch and grad-accum agree on, and ``"batch"``;
    else ``(1, "assumed")``.

    Checked at 1 rank, a config written for 2 GPUs (16 = 4 × 2 × 2) raised a batch error it does not
    have; DeepSpeed itself asserts exactly this product, so where it divides, that is the job's size.
    """
    values = [config.get(k) for k in BATCH_KEYS]  # train batch, micro-batch, grad accumulation
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        total, micro, accum = values
        if total % (micro * accum) == 0:
            return total // (micro * accum), "batch"
    return 1, "assumed"
