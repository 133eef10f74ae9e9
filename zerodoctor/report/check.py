"""Report, check: a ``CheckReport`` → text for people (findings, DeepSpeed's verdict, the plan of memory and step
time per ZeRO option) or JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from zerodoctor import __version__
from zerodoctor.config.memory_plan import (ASSUMPTION, ASSUMPTION_PRICED, HOST_BUFFER, NOT_PRICED, PlanRow,
                                           best_at_largest, margin, within_error)
from zerodoctor.config.static import CheckReport
from zerodoctor.deepspeed.steptime import Inputs, StepTime
from zerodoctor.report.terminal import escape, wrap_width
from zerodoctor.report.text import finding_block
from zerodoctor.report.units import label_of


_PLURAL = {"error": "errors", "warning": "warnings", "info": "info"}


def to_json(report: CheckReport) -> dict[str, Any]:
    return {
        "zerodoctor": __version__,
        "config": report.path,
        "world_size": report.world_size,
        "world_size_from": report.world_size_from,
        "params": report.params,
        "gpu_mem_bytes": report.gpu_mem_bytes,
        "host_mem_bytes": report.host_mem_bytes,
        "findings": [f.to_json() for f in report.findings],
        "unevaluated": [u.to_json() for u in report.unevaluated],
        "deepspeed": report.deepspeed.to_json() if report.deepspeed else None,
        "memory_plan": [r.to_json() for r in report.memory_plan],
        "recommendation": _pick_json(report) if report.recommendation else None,
        "assumption": assumption(report) if report.recommendation or report.gpu_mem_bytes else None,
        "step_time_inputs": _inputs_json(report.timing) if report.timing else None,
        "calibrated_from": report.calibrated_from,
        "activation_inputs": _workload_json(report) if report.workload else None,
    }


def assumption(report: CheckReport) -> str:
    return ASSUMPTION_PRICED if report.workload else f"{ASSUMPTION}; {NOT_PRICED}"


def margin_bytes(report: CheckReport, row: PlanRow) -> int | None:
    """GPU memory an option leaves unused under its budget: how far it is from not fitting."""
    return margin(row, report.gpu_mem_bytes) if report.gpu_mem_bytes else None


def _workload_json(report: CheckReport) -> dict[str, Any]:
    work = report.workload
    assert work is not None
    shape = work.shape
    return {"model": shape.source, "hidden_size": shape.hidden, "layers": shape.layers, "heads": shape.heads,
            "vocab_size": shape.vocab,
            **{name: {"value": f.value, "mark": f.mark, "source": f.source}
               for name, f in (("seq_len", work.seq_len), ("micro_batch", work.micro_batch))},
            "checkpointing": {"value": work.mode, "mark": work.checkpointing.mark,
                              "source": work.checkpointing.source}}


def _pick_json(report: CheckReport) -> dict[str, Any]:
    pick = report.recommendation
    assert pick is not None
    near = within_error(report.memory_plan, pick)
    rival = {"stage": near[0].stage, "offload": near[0].offload, "step_time_s": near[0].step.total.value,
             "model_error": near[1]} if near and near[0].step else None
    best = best_at_largest(report.memory_plan, pick)
    larger = {"stage": best[0].stage, "offload": best[0].offload, "max_micro_batch": best[0].largest.micro_batch,
              "samples_per_s": best[0].largest.samples_per_s.value, "mark": best[0].largest.samples_per_s.mark,
              "model_error": best[1]} if best and best[0].largest else None
    return {**pick.to_json(), "margin_bytes": margin_bytes(report, pick), "within_error_of": rival,
            "faster_at_largest_batch": larger}


def _inputs_json(timing: Inputs) -> dict[str, Any]:
    """Each rate the step times were priced on, with its mark and source."""
    figures = {"tokens_per_gpu": timing.tokens_per_gpu, "layers": timing.layers, "peak_flops": timing.peak_flops,
               "utilisation": timing.mfu, "intra_node_bytes_per_s": timing.intra_bw,
               "inter_node_bytes_per_s": timing.inter_bw, "pcie_bytes_per_s": timing.pcie_bw,
               "host_bytes_per_s": timing.host_bw,
               "cpu_adam_params_per_s": timing.cpu_adam, "layer_fetch_s": timing.layer_fetch_s}
    if timing.compute_s is not None:
        figures["compute_s"] = timing.compute_s
    return {name: {"value": f.value, "mark": f.mark, "source": f.source} for name, f in figures.items()}


def render(report: CheckReport, console: Console) -> None:
    for f in report.findings:
        console.print(finding_block(f, report.config, wrap_width(console)))
        console.print()
    verdict = report.deepspeed
    if report.deepspeed_skipped:
        console.print("[dim]DeepSpeed's own config parser: skipped (--no-deepspeed)[/]")
    elif verdict is None:
        console.print("[dim]DeepSpeed is not installed: its own config parser was not run[/]")
    else:
        console.print(escape(verdict.sentence()), style=None if verdict.accepted else "bold red")
    if report.memory_plan:
        console.print()
        _plan(report, console)
    if report.unevaluated:
        console.print("[dim]not judged (signal missing):[/]")
        for u in report.unevaluated:
            console.print(f"  [dim]{u.rule}: needs {escape(', '.join(map(label_of, u.missing)))}[/]")
    console.print(summary_line(report))


_WORLD = {"given": "", "batch": " (train_batch_size / (micro-batch × grad-accum); --world-size checks another)",
          "assumed": " (not given, and the batch values do not fix it: pass --world-size N)"}


def summary_line(report: CheckReport) -> str:
    """Findings by severity, DeepSpeed's rejection counted with them, and the world size judged at and why."""
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("error", "warning", "info")}
    summary = ", ".join(f"{n} {_PLURAL[s] if n > 1 else s}" for s, n in counts.items() if n) or "no findings"
    rejected = report.deepspeed is not None and not report.deepspeed.accepted
    return (f"[bold]{summary}[/] in {escape(report.path)} at world size {report.world_size}"
            f"{_WORLD[report.world_size_from]}" + (", and [bold red]DeepSpeed rejects it[/]" if rejected else ""))


def _plan(report: CheckReport, console: Console) -> None:
    by_source: dict[tuple[int, str], dict[str, Any]] = {}
    for row in report.memory_plan:
        by_source.setdefault((row.stage, row.offload), {})[row.source] = row
    has_ds = any(r.source == "deepspeed-estimator" for r in report.memory_plan)
    timed = any(r.step for r in report.memory_plan)
    console.print(f"Model states per GPU{' and step time' if timed else ''}, {report.params:.3g} parameters on "
                  f"{report.world_size} GPUs (GB = 10^9 bytes; mixed-precision Adam, K = 12):")
    priced = report.workload is not None
    console.print(f"  {'stage':<6}{'offload':<17}{'ZeRO paper':>11}" + (f"{'DeepSpeed est.':>16}" if has_ds else "")
                  + (f"{'activations':>14}" if priced else "") + (f"{'host/node':>12}" if report.host_mem_bytes else "")
                  + ("   fits" if report.gpu_mem_bytes else "")
                  + ("   step time" if timed else "")
                  + (f"{'':<12}samples/s   largest micro-batch" if priced and timed else ""))
    for (stage, offload), rows in by_source.items():
        paper, ds = rows.get("zero-paper"), rows.get("deepspeed-estimator")
        line = f"  {stage:<6}{offload:<17}{paper.model_states_bytes_per_gpu / 1e9:>8.2f} GB"
        if has_ds:
            line += f"{ds.model_states_bytes_per_gpu / 1e9:>13.2f} GB" if ds else " " * 16
        if paper.activations:
            line += f"{paper.activations.value / 1e9:>11.2f} GB"
        if report.host_mem_bytes:
            line += f"{paper.host_need_bytes / 1e9:>9.0f} GB"
        if paper.fits is not None:
            line += "   yes" if paper.fits else "   no "
        if paper.step:
            line += f"  {_step_cell(paper.step, _batch_cells(paper) if priced else '')}"
        console.print(line)
    if has_ds:
        console.print("  [dim]DeepSpeed's estimators print these /2^30 and call it GB; ZeRO-3 rows leave out the "
                      "largest layer (4 bytes per parameter of it), which a config does not tell[/]")
    if report.host_mem_bytes:
        console.print(f"  [dim]host/node: offloaded states of a node's {_node_ranks(report)} ranks × {HOST_BUFFER} "
                      f"(DeepSpeed's estimators' staging factor) against --host-mem "
                      f"{report.host_mem_bytes / 1e9:.0f} GB[/]")
    if report.timing:
        console.print(f"  [dim]{escape(inputs_line(report.timing, report.calibrated_from))}[/]")
    if report.workload:
        console.print(f"  [dim]{escape(activations_line(report))}[/]")
    if report.gpu_mem_bytes:
        pick = report.recommendation
        console.print(f"  assumption: {assumption(report)}")
        if pick:
            console.print(pick_line(report, pick))
            larger = larger_batch_line(report, pick)
            if larger:
                console.print(larger)
        else:
            host_bound = any(r.host_fits is False for r in report.memory_plan)
            console.print("[bold red]No ZeRO option fits:[/] add GPUs"
                          + (", nodes with more host memory" if host_bound else "") + ", offload to NVMe"
                          + (", or take a smaller micro-batch (the largest each option fits is above)"
                             if report.workload else ""))


def pick_line(report: CheckReport, pick: PlanRow) -> str:
    """The Recommended line: the option, its memory and margin, its step time, and, when a faster option is
    within the model's error of it, both named and why the simpler stands."""
    spare = margin_bytes(report, pick) or 0
    time = f"; {_seconds(pick.step.total.value)} a step, {pick.step.total.mark}" if pick.step else ""
    near = within_error(report.memory_plan, pick)
    how = ("the first option that fits, simplest first" if not pick.step
           else "the simpler option that fits" if near else "the fastest option that fits")
    line = (f"[bold]Recommended:[/] ZeRO stage {pick.stage}, offload {pick.offload}, {how} "
            f"({pick.model_states_bytes_per_gpu / 1e9:.2f} GB of {(report.gpu_mem_bytes or 0) / 1e9:.0f} GB, "
            f"{spare / 1e9:.2f} GB to spare{time})")
    if near and near[0].step:
        rival, error = near
        both = ((_option(pick, pick.offload != rival.offload), _option(rival, pick.offload != rival.offload))
                if pick.stage != rival.stage else (f"offload {pick.offload}", f"offload {rival.offload}"))
        line += (f": {both[0]} and {both[1]} are within the model's error ({error:.0%}; "
                 f"{_seconds(near[0].step.total.value)} a step); {both[0]} is simpler")
    if pick.host_bytes_per_node:
        line += (f". It puts {pick.host_need_bytes / 1e9:.0f} GB in each node's host memory (" + (
            f"of {report.host_mem_bytes / 1e9:.0f} GB)" if report.host_mem_bytes else "not checked: give --host-mem)"))
    return line


def _node_ranks(report: CheckReport) -> int:
    return report.timing.gpus_per_node if report.timing else 1


def _option(row: PlanRow, offload: bool) -> str:
    return f"stage {row.stage}" + (f" with offload {row.offload}" if offload else "")


_PARTS = (("comm", "collectives"), ("fetch", "layer fetch"), ("pcie", "PCIe"), ("optimizer", "CPU Adam"))


def _step_cell(step: StepTime, batch: str = "") -> str:
    """``10.03 s assumed  CPU Adam 7.00 s, PCIe 0.16 s``: the step, its mark, and what it holds beside compute;
    ``batch``, the throughput cells, between them."""
    extra = ", ".join(f"{word} {_seconds(getattr(step, part).value)}" for part, word in _PARTS
                      if getattr(step, part).value >= 0.005)
    return f"{_seconds(step.total.value):>9} {step.total.mark:<9}" + batch + (f" {extra}" if extra else "")


def _batch_cells(row: PlanRow) -> str:
    """`` 1.95/s  max 12: 3.41/s assumed``: samples/s at the configured micro-batch (marked as the step), the largest
    micro-batch that fits and the samples/s there, marked."""
    now = f"{row.samples_per_s.value:>10.3g}/s" if row.samples_per_s else f"{'':>12}"
    most = row.max_micro_batch
    if most is None:
        return now + f"{'':<30}"
    if not row.largest:
        return now + f"   {'none fits':<27}"
    cell = f"{most.value:.0f}: {row.largest.samples_per_s.value:.3g}/s {row.largest.samples_per_s.mark}"
    return now + f"   {cell:<27}"


def activations_line(report: CheckReport) -> str:
    """What the activations were priced on, each input marked, and which micro-batch fits under which option."""
    work = report.workload
    assert work is not None
    shape = work.shape
    text = (f"activations: Korthikanti et al. 2022 per layer, {shape.layers} layers of hidden size {shape.hidden}, "
            f"{shape.heads} heads" + (f", vocabulary {shape.vocab:,}" if shape.vocab else "")
            + f" ({shape.source}); {work.seq_len.value:,.0f} tokens a sample ({work.seq_len.mark}), micro-batch "
            f"{work.micro_batch.value:.0f} ({work.micro_batch.mark}), checkpointing {work.mode} "
            f"({work.checkpointing.mark})")
    short = [(r, r.max_micro_batch.value) for r in report.memory_plan
             if r.source == "zero-paper" and r.fits is False and r.max_micro_batch and r.max_micro_batch.value >= 1]
    if short:
        text += (f"; micro-batch {work.micro_batch.value:.0f} does not fit under "
                 + ", ".join(f"stage {r.stage} offload {r.offload} (largest {most:.0f})" for r, most in short))
    return text


def larger_batch_line(report: CheckReport, pick: PlanRow) -> str | None:
    """What a larger batch would buy: the pick at its largest micro-batch, and the option whose largest micro-batch
    runs the most samples a second, when that is another, with whether it beats the pick beyond the model's error."""
    if not pick.largest:
        return None
    mine = pick.largest
    line = (f"  at its largest micro-batch, {mine.micro_batch}, the pick runs {mine.samples_per_s.value:.3g} "
            f"samples/s ({mine.samples_per_s.mark})")
    best = best_at_largest(report.memory_plan, pick)
    if best and best[0].largest:
        rival, error = best
        big = rival.largest
        assert big is not None
        verdict = "beyond" if big.samples_per_s.value * (1 - error) > mine.samples_per_s.value else "within"
        line += (f"; stage {rival.stage} with offload {rival.offload} allows {big.micro_batch} a GPU at "
                 f"{big.samples_per_s.value:.3g} samples/s ({big.samples_per_s.mark}), {verdict} the model's error "
                 f"({error:.0%})")
    return line


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def inputs_line(timing: Inputs, calibrated_from: str | None) -> str:
    """Where the step times come from, each input with its mark, and what would replace the assumed ones."""
    if timing.compute_s is not None:
        compute = f"forward + backward {_seconds(timing.compute_s.value)} a step ({timing.compute_s.mark}"
        compute += f", from {calibrated_from})" if calibrated_from else ")"
    else:
        compute = (f"compute 6 × parameters × {timing.tokens_per_gpu.value:,.0f} tokens per GPU "
                   f"({timing.tokens_per_gpu.mark}) at {timing.peak_flops.value / 1e12:.0f} TFLOPS "
                   f"({timing.peak_flops.mark}) × {timing.mfu.value:.0%} ({timing.mfu.mark})")
    links = (f"links {timing.intra_bw.value / 1e9:.3g} GB/s in a node ({timing.intra_bw.mark}), "
             f"{timing.inter_bw.value / 1e9:.3g} GB/s out of it ({timing.inter_bw.mark}), "
             f"PCIe {timing.pcie_bw.value / 1e9:.3g} GB/s a GPU ({timing.pcie_bw.mark}), "
             f"{timing.host_bw.value / 1e9:.3g} GB/s a host ({timing.host_bw.mark})")
    adam = f"CPU Adam {timing.cpu_adam.value:.2g} parameters/s a node ({timing.cpu_adam.mark})"
    fetch = f"ZeRO-3 {_seconds(timing.layer_fetch_s.value)} per layer gather × {timing.layers.value:.0f} layers"
    text = f"step time: {compute}; {links}; {adam}; {fetch} ({worst_mark(timing)})"
    if not calibrated_from:
        text += "; --seq-len, --gpu, --gpus-per-node, --inter-node or --from RUN_OR_LOG replace what is assumed"
    return text


def worst_mark(timing: Inputs) -> str:
    return "assumed" if "assumed" in (timing.layers.mark, timing.layer_fetch_s.mark) else "nominal"
