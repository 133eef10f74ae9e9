"""Report, check: a ``CheckReport`` → text for people (findings, DeepSpeed's verdict, memory plan) or JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from zerodoctor import __version__
from zerodoctor.config.memory_plan import ASSUMPTION
from zerodoctor.config.static import CheckReport
from zerodoctor.report.terminal import escape, wrap_width
from zerodoctor.report.text import finding_block


_PLURAL = {"error": "errors", "warning": "warnings", "info": "info"}


def to_json(report: CheckReport) -> dict[str, Any]:
    return {
        "zerodoctor": __version__,
        "config": report.path,
        "world_size": report.world_size,
        "world_size_from": report.world_size_from,
        "params": report.params,
        "gpu_mem_bytes": report.gpu_mem_bytes,
        "findings": [f.to_json() for f in report.findings],
        "unevaluated": [u.to_json() for u in report.unevaluated],
        "deepspeed": report.deepspeed.to_json() if report.deepspeed else None,
        "memory_plan": [r.to_json() for r in report.memory_plan],
        "recommendation": report.recommendation.to_json() if report.recommendation else None,
        "assumption": ASSUMPTION if report.recommendation or report.gpu_mem_bytes else None,
    }


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
            console.print(f"  [dim]{u.rule}: needs {', '.join(u.missing)}[/]")
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
    console.print(f"Model states per GPU, {report.params:.3g} parameters on {report.world_size} GPUs "
                  "(GB = 10^9 bytes; mixed-precision Adam, K = 12):")
    console.print(f"  {'stage':<6}{'offload':<17}{'ZeRO paper':>11}" + (f"{'DeepSpeed est.':>16}" if has_ds else "")
                  + ("   fits" if report.gpu_mem_bytes else ""))
    for (stage, offload), rows in by_source.items():
        paper, ds = rows.get("zero-paper"), rows.get("deepspeed-estimator")
        line = f"  {stage:<6}{offload:<17}{paper.model_states_bytes_per_gpu / 1e9:>8.2f} GB"
        if has_ds:
            line += f"{ds.model_states_bytes_per_gpu / 1e9:>13.2f} GB" if ds else " " * 16
        if paper.fits is not None:
            line += "   yes" if paper.fits else "   no"
        console.print(line)
    if has_ds:
        console.print("  [dim]DeepSpeed's estimators print these /2^30 and call it GB; ZeRO-3 rows leave out the "
                      "largest layer (4 bytes per parameter of it), which a config does not tell[/]")
    if report.gpu_mem_bytes:
        pick = report.recommendation
        console.print(f"  assumption: {ASSUMPTION}")
        if pick:
            console.print(f"[bold]Recommended:[/] ZeRO stage {pick.stage}, offload {pick.offload} "
                          f"({pick.model_states_bytes_per_gpu / 1e9:.2f} GB of {report.gpu_mem_bytes / 1e9:.0f} GB)")
        else:
            console.print("[bold red]No ZeRO option fits:[/] add GPUs or offload to NVMe")
