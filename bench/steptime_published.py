"""Benchmark: the step-time model against step times people published, as ratios between ZeRO options.

Each setup in ``bench/steptime_published.json`` is one job measured under several options (its source's URL
and where in it). The model is calibrated as ``check --from`` calibrates it: forward + backward from the
published time of one option (``calibrate_from``: the step less what the model puts around compute), then
each compared pair's ratio is predicted. Where the setup states its batch, sequence length and GPU, the
uncalibrated prediction (nominal peak × assumed utilisation) is shown beside it.

Per row: published ratio, predicted ratio, error (predicted / published - 1), and for a ratio with a ZeRO-3
option the per-layer fetch cost that would make it exact (the model assumes ``steptime.LAYER_FETCH_S``; it is
not fitted to these rows: the column shows how far each row is from it). Then per kind of ratio the median and
worst absolute error. Goal: median error of the stage 3 / stage 2 and offload all / optimizer only ratios
within 25 %.

    python bench/steptime_published.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.stepinputs import Hardware, calibrate, inputs_for
from zerodoctor.deepspeed.steptime import Figure

DATA = Path(__file__).with_suffix(".json")
GOAL_KINDS = ("stage 3 / stage 2", "offload all / optimizer only")
GOAL = 0.25


_OFFLOADS = {"none": "none", "optimizer": "optimizer only", "optimizer+param": "offload all"}


def kind(a: str, b: str) -> str:
    """What a pair compares: ``stage 3 / stage 2``, ``offload all / optimizer only``, or both at once."""
    (sa, oa), (sb, ob) = (_option(x) for x in (a, b))
    if oa == ob:
        return f"stage {sa} / stage {sb}"
    if sa == sb:
        return f"{_OFFLOADS[oa]} / {_OFFLOADS[ob]}"
    return f"stage {sa} {_OFFLOADS[oa]} / stage {sb} {_OFFLOADS[ob]}"


def setup_inputs(setup: dict[str, Any]) -> st.Inputs:
    config: dict[str, Any] = {"gradient_accumulation_steps": setup["grad_accum"] or 1}
    if setup["micro_batch"]:
        config["train_micro_batch_size_per_gpu"] = setup["micro_batch"]
    if setup["half"]:
        config["fp16"] = {"enabled": True}
    if setup["overlap_comm"] is not None:
        config["zero_optimization"] = {"overlap_comm": setup["overlap_comm"]}
    hw = Hardware(seq_len=setup["seq_len"], gpu=setup["gpu"], gpus_per_node=setup["gpus_per_node"],
                  inter_node=setup["inter_node"])
    inputs = inputs_for(config, setup["params"], setup["world_size"], hw)
    if setup["layers"]:
        inputs = replace(inputs, layers=Figure(setup["layers"], "nominal", "the model's config"))
    if setup["cpu_adam_params_s"]:
        inputs = replace(inputs, cpu_adam=Figure(setup["cpu_adam_params_s"], "measured", setup["source"]))
    return inputs


def step_times(setup: dict[str, Any]) -> dict[str, float]:
    """Seconds per step of each option: as published, or from a throughput per GPU (6Ψ·T / throughput)."""
    if "options" in setup:
        return setup["options"]
    tokens = setup["micro_batch"] * (setup["grad_accum"] or 1) * setup["seq_len"]
    return {k: 6 * setup["params"] * tokens / (tflops * 1e12) for k, tflops in setup["tflops_per_gpu"].items()}


def rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for setup in data["setups"]:
        nominal = setup_inputs(setup)
        stage, offload = _option(setup["calibrate_from"])
        times = step_times(setup)
        run = {"run.zero_stage": stage, "run.world_size": setup["world_size"],
               "run.step_s": times[setup["calibrate_from"]],
               "offload.optimizer": offload != "none", "offload.param": offload == "optimizer+param"}
        stated = bool(setup["micro_batch"] and setup["seq_len"] and setup["gpu"])
        for a, b in setup["pairs"]:
            published = times[a] / times[b]
            predicted = _ratio(calibrate(nominal, run), a, b)
            out.append({"setup": setup["id"], "source": setup["source"], "kind": kind(a, b), "pair": f"{a} ÷ {b}",
                        "published": published, "predicted": predicted, "error": predicted / published - 1,
                        "uncalibrated": _ratio(nominal, a, b) if stated else None,
                        "exact_fetch_s": _exact_fetch(nominal, run, a, b, published)})
    return out


def _exact_fetch(nominal: st.Inputs, run: dict[str, Any], a: str, b: str, published: float) -> float | None:
    """The per-layer ZeRO-3 fetch cost at which the predicted ratio equals the published one (the ratio is a
    ratio of two sums linear in it, so two evaluations give it); None without a ZeRO-3 option, or below 0."""
    if 3 not in (_option(a)[0], _option(b)[0]):
        return None

    def gap(fetch: float) -> float:
        inputs = calibrate(replace(nominal, layer_fetch_s=Figure(fetch, "assumed")), run)
        return st.predict(*_option(a), inputs).total.value - published * st.predict(*_option(b), inputs).total.value

    g0, g1 = gap(0.0), gap(0.01)
    if g1 == g0:
        return None
    fetch = -g0 * 0.01 / (g1 - g0)
    return fetch if fetch >= 0 else None


def summary(table: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds: dict[str, list[float]] = {}
    for row in table:
        kinds.setdefault(row["kind"], []).append(abs(row["error"]))
    return {k: {"rows": len(errs), "median": statistics.median(errs), "worst": max(errs)} for k, errs in kinds.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows and summary as JSON")
    args = parser.parse_args()
    table = rows(json.loads(DATA.read_text()))
    kinds = summary(table)
    if args.json:
        print(json.dumps({"rows": table, "summary": kinds}, indent=2))
        return 0
    print(f"{'setup':<36}{'pair':<34}{'published':>10}{'predicted':>10}{'error':>8}{'uncalib.':>10}"
          f"{'exact fetch':>13}")
    for row in table:
        unc = f"{row['uncalibrated']:>10.2f}" if row["uncalibrated"] is not None else f"{'-':>10}"
        fetch = f"{row['exact_fetch_s'] * 1000:>10.1f} ms" if row["exact_fetch_s"] is not None else f"{'-':>13}"
        print(f"{row['setup']:<36}{row['pair']:<34}{row['published']:>10.2f}{row['predicted']:>10.2f}"
              f"{row['error']:>+8.0%}{unc}{fetch}")
    print(f"(the model assumes {st.LAYER_FETCH_S * 1000:.0f} ms per layer per gather)")
    print()
    for name, k in kinds.items():
        goal = (f"  goal: median within {GOAL:.0%}, {'met' if k['median'] <= GOAL else 'NOT met'}"
                if name in GOAL_KINDS else "")
        print(f"{name:<44} {k['rows']} rows, median error {k['median']:.1%}, worst {k['worst']:.0%}{goal}")
    for name in GOAL_KINDS:
        if name not in kinds:
            print(f"{name:<44} no published pair in the data file: not measured")
    return 0


def _option(key: str) -> tuple[int, str]:
    stage, offload = key.split("/")
    return int(stage), offload


def _ratio(inputs: st.Inputs, a: str, b: str) -> float:
    return st.predict(*_option(a), inputs).total.value / st.predict(*_option(b), inputs).total.value


if __name__ == "__main__":
    sys.exit(main())
