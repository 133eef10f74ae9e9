"""Benchmark: the step-time model against step times people published, as ratios between ZeRO options.

Each setup in ``bench/steptime_published.json`` is one job measured under several options (its source's URL
and where in it). The model is calibrated as ``check --from`` calibrates it: forward + backward from the
published time of one option (``calibrate_from``: the step less what the model puts around compute), then
each compared pair's ratio is predicted. Where the setup states its batch, sequence length and GPU, the
uncalibrated prediction (nominal peak × assumed utilisation) is shown beside it.

ZeRO-3's per-layer fetch cost (``steptime.LAYER_FETCH_S``) has no published figure to take, so it is fitted
here: the cost on a 0.1 ms grid whose median absolute error over the ZeRO-3 rows is least. Fitted on every row,
it is the value the model ships, and the in-sample error is not the model's error. Each ZeRO-3 row is also
predicted with the cost fitted on the other rows only (leave-one-out, the "held out" column): that median is
the honest figure, and the one ``steptime.MODEL_ERROR`` carries for the pick.

Rows are of two kinds (``looked_at`` per setup). Looked at: rows someone saw while changing the model (its
parts, its constants, the fetch cost's fit); their error is not the model's. Untouched: rows added after the
model's last change and never used to change it; their error, each ZeRO-3 row held out of the fetch cost's fit
as well, is the honest figure, and a change made after reading them turns them into looked-at rows.

Some setups ran each option at the largest micro-batch its memory allowed (the ZeRO-3 Offload blog's one V100).
Where a setup states the model's shape and the GPU's memory (``shape``, ``gpu_mem_bytes``), each option is also
priced at its own largest micro-batch, as ``check --model`` prices it (``memory_plan.plan`` with activations):
calibrated on the calibrating option's published throughput at its largest batch, each option's time per sample
at its largest batch, and their ratio against the published one (the inverse of the throughputs). That ratio is
the row's prediction ("largest" column; the fixed-batch one is shown beside it): the published options differed
in batch, so the fixed-batch ratio compares what was never run.

Per row: published ratio, predicted ratio, error (predicted / published - 1) at the shipped cost, the error
held out, the uncalibrated ratio (only where batch, sequence length and GPU are stated, none assumed), the fetch
cost that would make a ZeRO-3 row exact, and whether the row was looked at. Then per kind of ratio the median and
worst absolute error in-sample, held out, and over the untouched rows alone. Goal: median error of the stage 3 /
stage 2 and offload all / optimizer only ratios within 25 %, held out.

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

from zerodoctor.config.memory_plan import PlanRow, plan
from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.activations import CHECKPOINTING, Shape, Workload
from zerodoctor.deepspeed.stepinputs import Hardware, calibrate, inputs_for
from zerodoctor.deepspeed.steptime import Figure

DATA = Path(__file__).with_suffix(".json")
GOAL_KINDS = ("stage 3 / stage 2", "offload all / optimizer only")
GOAL = 0.25


def kind(a: str, b: str) -> str:
    """What a pair compares, named as ``steptime.MODEL_ERROR`` names it."""
    return st.comparison(_option(a), _option(b))


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


def rows(data: dict[str, Any], fetch: float = st.LAYER_FETCH_S) -> list[dict[str, Any]]:
    """Published against predicted per compared pair, the ZeRO-3 per-layer fetch cost set to ``fetch``."""
    out = []
    for setup in data["setups"]:
        base = _at(replace(setup_inputs(setup), layer_fetch_s=Figure(fetch, "assumed")), setup, setup["calibrate_from"])
        nominal = _Options(base, setup)
        stage, offload = _option(setup["calibrate_from"])
        times = step_times(setup)
        run = {"run.zero_stage": stage, "run.world_size": setup["world_size"],
               "run.step_s": times[setup["calibrate_from"]],
               "offload.optimizer": offload != "none", "offload.param": offload == "optimizer+param"}
        stated = bool(setup["micro_batch"] and setup["seq_len"] and setup["gpu"]) and not {
            "micro_batch", "seq_len", "gpu"} & set(setup.get("assumed", ()))
        largest = at_largest(setup, fetch)
        for a, b in setup["pairs"]:
            published = times[a] / times[b]
            fixed = _ratio(nominal.calibrated(run), a, b)
            batches = (largest[_option(a)], largest[_option(b)]) if largest else None
            predicted = _per_sample(batches[0]) / _per_sample(batches[1]) if batches else fixed
            out.append({"setup": setup["id"], "source": setup["source"], "kind": kind(a, b), "pair": f"{a} ÷ {b}",
                        "published": published, "predicted": predicted, "error": predicted / published - 1,
                        "fixed_batch": fixed, "fixed_batch_error": fixed / published - 1,
                        "micro_batches": [r.max_micro_batch.value for r in batches
                                          if r.max_micro_batch] if batches else None,
                        "uncalibrated": _ratio(nominal, a, b) if stated else None,
                        "exact_fetch_s": None if batches else _exact_fetch(nominal, run, a, b, published),
                        "zero3": 3 in (_option(a)[0], _option(b)[0]), "looked_at": setup["looked_at"]})
    return out


def at_largest(setup: dict[str, Any], fetch: float = st.LAYER_FETCH_S) -> dict[tuple[int, str], PlanRow] | None:
    """Each option of a setup that states its model's shape and GPU memory, priced at its own largest micro-batch
    (the plan ``check --model`` makes), calibrated on the calibrating option's published throughput at its largest
    batch; None where the setup does not state them, or the calibrating option fits not one sample."""
    if not (setup.get("shape") and setup.get("gpu_mem_bytes") and "tflops_per_gpu" in setup):
        return None
    given = setup["shape"]
    shape = Shape(given["hidden"], setup["layers"], given["heads"], given.get("vocab"), setup["id"])
    mode = Figure(CHECKPOINTING.index(given["checkpointing"]), "nominal")
    seq = Figure(setup["seq_len"], "nominal")
    params, world, mem = setup["params"], setup["world_size"], setup["gpu_mem_bytes"]
    sizes = {(r.stage, r.offload): r for r in plan(params, world, mem, estimators=False,
                                                    workload=Workload(shape, seq, Figure(1, "nominal"), mode))}
    stage, offload = _option(setup["calibrate_from"])
    most = sizes[(stage, offload)].max_micro_batch
    if not most or most.value < 1:
        return None
    own = {**setup, "micro_batch": int(most.value)}
    nominal = replace(setup_inputs(own), layer_fetch_s=Figure(fetch, "assumed"))
    run = {"run.zero_stage": stage, "run.world_size": world, "run.step_s": step_times(own)[setup["calibrate_from"]],
           "offload.optimizer": offload != "none", "offload.param": offload == "optimizer+param"}
    rows = plan(params, world, mem, estimators=False, timing=calibrate(nominal, run),
                workload=Workload(shape, seq, Figure(most.value, "nominal"), mode))
    return {(r.stage, r.offload): r for r in rows}


def _per_sample(row: PlanRow) -> float:
    """Seconds per sample of an option at its largest micro-batch; infinite where not one sample fits."""
    return 1 / row.largest.samples_per_s.value if row.largest else float("inf")


FETCH_GRID = tuple(i / 10_000 for i in range(1001))  # the per-layer fetch costs tried: 0 to 100 ms by 0.1 ms


def tables(data: dict[str, Any]) -> dict[float, list[dict[str, Any]]]:
    """The rows at every fetch cost of the grid, computed once for the fits below."""
    return {fetch: rows(data, fetch) for fetch in FETCH_GRID}


def fit_fetch(tabs: dict[float, list[dict[str, Any]]], use: list[int]) -> float:
    """The per-layer fetch cost of the grid whose median absolute error over rows ``use`` (ZeRO-3 rows: the
    others do not depend on it) is least, the smaller cost on a tie. The loss is the figure the pick leans on."""
    return min(FETCH_GRID, key=lambda f: (statistics.median(abs(tabs[f][i]["error"]) for i in use), f))


def leave_one_out(tabs: dict[float, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each ZeRO-3 row predicted with the fetch cost fitted on the other looked-at ZeRO-3 rows only, never on
    itself nor on an untouched row: the honest error of a fitted constant. Rows without a ZeRO-3 option do not
    depend on it and keep their one prediction (``fetch_s`` None)."""
    base = tabs[FETCH_GRID[0]]
    zero3 = [i for i, row in enumerate(base) if row["zero3"] and row["looked_at"]]
    out = []
    for i, row in enumerate(base):
        fetch = fit_fetch(tabs, [j for j in zero3 if j != i]) if row["zero3"] else None
        out.append({**(tabs[fetch][i] if fetch is not None else row), "fetch_s": fetch})
    return out


def _exact_fetch(nominal: _Options, run: dict[str, Any], a: str, b: str, published: float) -> float | None:
    """The per-layer ZeRO-3 fetch cost at which the predicted ratio equals the published one (the ratio is a
    ratio of two sums linear in it, so two evaluations give it); None without a ZeRO-3 option, or below 0."""
    if 3 not in (_option(a)[0], _option(b)[0]):
        return None

    def gap(fetch: float) -> float:
        inputs = nominal.with_fetch(fetch).calibrated(run)
        return inputs.total(a) - published * inputs.total(b)

    g0, g1 = gap(0.0), gap(0.01)
    if g1 == g0:
        return None
    fetch = -g0 * 0.01 / (g1 - g0)
    return fetch if fetch >= 0 else None


def summary(table: list[dict[str, Any]], loo: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of ratio: rows, median and worst absolute error in-sample (the shipped fetch cost, fitted on
    every row), leave-one-out (each ZeRO-3 row predicted by a cost fitted without it), leave-one-out over the
    looked-at rows (``seen_median``: what ``steptime.MODEL_ERROR`` carries, a constant fitted on them like any
    other) and over the untouched rows alone (None where a kind has none): the honest figure, which tests it."""
    kinds: dict[str, dict[str, list[float]]] = {}
    for row, held in zip(table, loo):
        errs = kinds.setdefault(row["kind"], {"in": [], "loo": [], "seen": [], "untouched": []})
        errs["in"].append(abs(row["error"]))
        errs["loo"].append(abs(held["error"]))
        errs["seen" if row["looked_at"] else "untouched"].append(abs(held["error"]))
    return {k: {"rows": len(e["in"]), "median": statistics.median(e["in"]), "worst": max(e["in"]),
                "loo_median": statistics.median(e["loo"]), "loo_worst": max(e["loo"]),
                "seen_median": statistics.median(e["seen"]) if e["seen"] else None,
                "untouched_rows": len(e["untouched"]),
                "untouched_median": statistics.median(e["untouched"]) if e["untouched"] else None,
                "untouched_worst": max(e["untouched"]) if e["untouched"] else None} for k, e in kinds.items()}


def measure(data: dict[str, Any]) -> dict[str, Any]:
    """The whole bench: the fetch cost fitted on every looked-at ZeRO-3 row, the rows at the shipped cost,
    leave-one-out."""
    tabs = tables(data)
    fitted = fit_fetch(tabs, [i for i, row in enumerate(tabs[0.0]) if row["zero3"] and row["looked_at"]])
    table, loo = rows(data), leave_one_out(tabs)
    return {"fitted_fetch_s": fitted, "shipped_fetch_s": st.LAYER_FETCH_S, "rows": table, "leave_one_out": loo,
            "summary": summary(table, loo)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows and summary as JSON")
    args = parser.parse_args()
    result = measure(json.loads(DATA.read_text()))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'setup':<36}{'pair':<34}{'published':>10}{'predicted':>10}{'error':>8}{'held out':>10}"
          f"{'uncalib.':>10}{'exact fetch':>13}{'seen':>6}   one batch for both")
    for row, held in zip(result["rows"], result["leave_one_out"]):
        unc = f"{row['uncalibrated']:>10.2f}" if row["uncalibrated"] is not None else f"{'-':>10}"
        fetch = f"{row['exact_fetch_s'] * 1000:>10.1f} ms" if row["exact_fetch_s"] is not None else f"{'-':>13}"
        out = f"{held['error']:>+10.0%}" if held["fetch_s"] is not None else f"{'=':>10}"
        fixed = (f"   {row['fixed_batch']:.2f} ({row['fixed_batch_error']:+.0%}); largest micro-batches "
                 + " and ".join(f"{b:.0f}" for b in row["micro_batches"]) if row["micro_batches"] else "")
        print(f"{row['setup']:<36}{row['pair']:<34}{row['published']:>10.2f}{row['predicted']:>10.2f}"
              f"{row['error']:>+8.0%}{out}{unc}{fetch}{'yes' if row['looked_at'] else 'no':>6}{fixed}")
    print(f"(ZeRO-3 per-layer fetch: {result['fitted_fetch_s'] * 1000:.1f} ms fitted on every looked-at ZeRO-3 row"
          f" (least median error); the model ships {st.LAYER_FETCH_S * 1000:.1f} ms. 'held out': the row's error"
          f" with the cost fitted on the other rows only; '=': the row has no ZeRO-3 option and no fitted input;"
          f" 'one batch for both': where a row is priced at each option's largest micro-batch, the ratio and error"
          f" with both options at the row's micro_batch, and the two largest micro-batches;"
          f" 'seen': the row was looked at while the model was changed)")
    print()
    print(f"{'ratio':<45}{'rows':>5}{'in-sample median':>18}{'worst':>7}{'held-out median':>17}{'worst':>7}"
          f"{'untouched':>10}{'median':>8}{'worst':>7}")
    for name, k in result["summary"].items():
        goal = (f"  goal {GOAL:.0%} (held out): {'met' if k['loo_median'] <= GOAL else 'NOT met'}"
                if name in GOAL_KINDS else "")
        untouched = (f"{k['untouched_rows']:>10}{k['untouched_median']:>8.1%}{k['untouched_worst']:>7.0%}"
                     if k["untouched_rows"] else f"{0:>10}{'-':>8}{'-':>7}")
        print(f"{name:<45}{k['rows']:>5}{k['median']:>18.1%}{k['worst']:>7.0%}{k['loo_median']:>17.1%}"
              f"{k['loo_worst']:>7.0%}{untouched}{goal}")
    every = [abs(h["error"]) for r, h in zip(result["rows"], result["leave_one_out"]) if not r["looked_at"]]
    seen = [abs(h["error"]) for r, h in zip(result["rows"], result["leave_one_out"]) if r["looked_at"]]
    if every:
        print(f"all untouched rows: {len(every)}, median {statistics.median(every):.1%}, worst {max(every):.0%}; "
              f"the looked-at rows: {len(seen)}, median {statistics.median(seen):.1%}, worst {max(seen):.0%}")
    for name in GOAL_KINDS:
        if name not in result["summary"]:
            print(f"{name:<45} no published pair in the data file: not measured")
    return 0


def _option(key: str) -> tuple[int, str]:
    stage, offload = key.split("/")
    return int(stage), offload


class _Options:
    """A setup's inputs, each option at its own micro-batch: a source that ran an option at another micro-batch
    (``micro_batch_by_option``) kept the global batch, so that option's step holds the same tokens in fewer (or
    more) micro-steps. Compute is calibrated at ``calibrate_from``'s micro-steps; the others keep it."""

    def __init__(self, inputs: st.Inputs, setup: dict[str, Any]) -> None:
        self.inputs, self.setup = inputs, setup

    def calibrated(self, run: dict[str, Any]) -> _Options:
        return _Options(calibrate(self.inputs, run), self.setup)

    def with_fetch(self, fetch: float) -> _Options:
        return _Options(replace(self.inputs, layer_fetch_s=Figure(fetch, "assumed")), self.setup)

    def total(self, key: str) -> float:
        return st.predict(*_option(key), _at(self.inputs, self.setup, key)).total.value


def _at(inputs: st.Inputs, setup: dict[str, Any], key: str) -> st.Inputs:
    """``inputs`` with option ``key``'s micro-steps: the setup's per-GPU batch over that option's micro-batch."""
    micro = setup.get("micro_batch_by_option", {}).get(key) or setup["micro_batch"]
    if not micro or not setup["micro_batch"]:
        return inputs
    return replace(inputs, micro_steps=max(setup["micro_batch"] * (setup["grad_accum"] or 1) // micro, 1))


def _ratio(options: _Options, a: str, b: str) -> float:
    return options.total(a) / options.total(b)


if __name__ == "__main__":
    sys.exit(main())
