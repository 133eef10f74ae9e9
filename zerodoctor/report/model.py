"""Report: what one diagnosis produced — inputs read, findings, rules not judged, lines kept aside."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.report.runfacts import facts_of
from zerodoctor.rulebook.finding import Finding, Judgement, Unevaluated
from zerodoctor.sources.rejects import Rejected
from zerodoctor.signals.plots import RunSeries


@dataclass
class InputSummary:
    path: str
    format: str
    events: int
    quarantined: int
    lines: int = 0  # lines read, for saying so when none was recognised (not in the findings JSON)


@dataclass
class Report:
    inputs: list[InputSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unevaluated: list[Unevaluated] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    world_sizes: dict[str, int | None] = field(default_factory=dict)  # as each run stated it; never guessed
    series: dict[str, RunSeries] = field(default_factory=dict)  # what the HTML page plots, per run
    set_aside: dict[str, str] = field(default_factory=dict)  # runs not judged: their view failed, and why
    paths: dict[str, list[str]] = field(default_factory=dict)  # per run, the inputs its events came from
    ignored: int = 0  # findings hidden by --select/--ignore (report/selection.py)
    dropped: dict[str, int] = field(default_factory=dict)  # per run, events its probe dropped (run_end)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # per run, what it was (report/runfacts.py)
    rules: dict[str, int] = field(default_factory=dict)  # per run, the rules it was judged by

    def add(self, judgement: Judgement) -> None:
        if judgement.set_aside is not None:
            self.set_aside[judgement.run] = judgement.set_aside
        self.findings += judgement.findings
        self.unevaluated += judgement.unevaluated
        self.configs[judgement.run] = judgement.config
        self.world_sizes[judgement.run] = judgement.world_size_stated
        self.facts[judgement.run] = facts_of(judgement.values)
        self.rules[judgement.run] = judgement.rules
        if judgement.values.get("run.dropped_events"):
            self.dropped[judgement.run] = judgement.values["run.dropped_events"]
