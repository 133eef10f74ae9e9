"""Rules: signal values of one run → findings, and the rules that could not be judged.

A plain condition sees each per-step signal as its summary. A rule with ``for: N steps``
is judged step by step and fires on the first N consecutive steps where it holds; it
probes every N-th step first, since any such streak must cover one of them, so a
healthy run costs 1/N of the evaluations.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from zerodoctor import signals
from zerodoctor.rulebook.expr import Condition, MissingSignal
from zerodoctor.rulebook.finding import Finding, Fix, Unevaluated
from zerodoctor.rulebook.hints import RunInputs, hint_for
from zerodoctor.rulebook.loader import Rule
from zerodoctor.rulebook.strength import evidence_strength
from zerodoctor.rulebook.template import Template, fill, plain
from zerodoctor.signals.base import StepSeries

if TYPE_CHECKING:
    from zerodoctor.signals.view import RunView


def judge_view(rules: list[Rule], view: RunView, modules: list[ModuleType], *,
               ranks: list[int] | None = None) -> tuple[list[Finding], list[Unevaluated], dict[str, Any]]:
    """One run's view → its signals → the rules' findings and what could not be judged, and the signals.

    The one judgement every command makes: ``diagnose`` and ``watch`` on a run's view
    (``Pipeline.judge``), ``check`` on a config made into the view of a run about to start
    (``config/static.py``; ``ranks=[]``: nothing ran).
    """
    values = signals.compute(view, modules)
    found, unevaluated = evaluate(rules, values, view.name, view.ranks() if ranks is None else ranks)
    return found, unevaluated, values


def evaluate(rules: list[Rule], values: dict[str, Any], run: str, ranks: list[int]) -> tuple[
        list[Finding], list[Unevaluated]]:
    findings: list[Finding] = []
    unevaluated: list[Unevaluated] = []
    summary = _resolver(values, None)
    inputs = RunInputs.of(values)
    for rule in rules:
        try:
            if rule.spec.hold:
                held = _holds(rule.condition, values, rule.spec.hold)
                if held is None:
                    continue
                steps: list[int] | None = list(held)
            else:
                if not rule.condition.evaluate(summary):
                    continue
                steps = None
        except MissingSignal:
            missing = tuple(s for s in rule.condition.signals if s not in values)
            unevaluated.append(_unevaluated(rule, missing or (rule.condition.signals[0],), run, inputs))
            continue
        unknown = tuple(s for s in rule.requires if values.get(s) is None)
        if unknown:
            unevaluated.append(_unevaluated(rule, unknown, run, inputs))
            continue
        message = rule.message if rule.spec.verdict is None else rule.messages.get(values[rule.spec.verdict])
        if message is None:
            continue  # a verdict this rule does not word: another rule's
        try:
            findings.append(_finding(rule, message, values, run, ranks, steps, summary))
        except MissingSignal:
            missing = tuple(s for s in rule.condition.signals if s not in values)
            unevaluated.append(_unevaluated(rule, missing or (rule.condition.signals[0],), run, inputs))
    return _without_needless_fallbacks(findings, {r.code for r in rules if r.spec.fallback}), unevaluated


def _unevaluated(rule: Rule, missing: tuple[str, ...], run: str, inputs: RunInputs) -> Unevaluated:
    declared = [rule.signals[s] for s in missing]
    return Unevaluated(rule.code, run, missing, hint_for(declared, inputs), inputs.lacks(declared), not inputs.probe,
                       inputs.unexplained(declared))


def _without_needless_fallbacks(findings: list[Finding], fallbacks: set[str]) -> list[Finding]:
    """A fallback finding stays only where no other rule found a warning or an error: a crash that a
    specific rule explains is told once, by that rule."""
    if any(f.rule not in fallbacks and f.severity in ("warning", "error") for f in findings):
        return [f for f in findings if f.rule not in fallbacks]
    return findings


def _holds(condition: Condition, values: dict[str, Any], hold: int) -> tuple[int, int] | None:
    """First and last step of the first streak of ``hold`` steps where ``condition`` is true."""
    series = [values[s] for s in condition.signals if isinstance(values.get(s), StepSeries)]
    if not series:
        # No per-step data: judged only if the condition is false whatever the series would say
        # (e.g. "run.zero_stage == 3 and …" on a stage-2 run); otherwise MissingSignal propagates.
        condition.evaluate(_resolver(values, None))
        return None
    steps = series[0].steps
    cache: dict[int, bool] = {}

    def true_at(i: int) -> bool:
        if i not in cache:
            try:
                cache[i] = condition.evaluate(_resolver(values, i))
            except MissingSignal:
                cache[i] = False  # a step without the value breaks the streak
        return cache[i]

    for probe in range(hold - 1, len(steps), hold):
        if not true_at(probe):
            continue
        lo = probe
        while lo > 0 and true_at(lo - 1):
            lo -= 1
        hi = probe
        while hi + 1 < len(steps) and true_at(hi + 1):
            hi += 1
        if hi - lo + 1 >= hold:
            return steps[lo], steps[hi]
    return None


def _resolver(values: dict[str, Any], index: int | None) -> Callable[[str], Any]:
    def resolve(name: str) -> Any:
        value = values.get(name)
        if isinstance(value, StepSeries):
            value = value.summary if index is None else value.values[index]
        if value is None:
            raise MissingSignal(name)
        return value

    return resolve


def _finding(rule: Rule, message: Template, values: dict[str, Any], run: str, ranks: list[int],
             steps: list[int] | None, resolve: Callable[[str], Any]) -> Finding:
    spec = rule.spec
    # Flags that merely gate a condition ("fp16.enabled") say nothing a person needs; numbers do. The
    # verdict is said by the message it picked.
    gated = [s for s in [*rule.condition.signals, *spec.requires] if not isinstance(values.get(s), bool)
             and s != spec.verdict]
    shown = list(dict.fromkeys([*gated, *spec.evidence]))
    evidence = {name: _plain(values[name]) for name in shown if values.get(name) is not None}
    if steps is None and spec.steps:
        bounds = [values.get(s) for s in spec.steps]
        steps = [int(b) for b in bounds] if all(isinstance(b, (int, float)) for b in bounds) else None
    implicated = values.get(spec.ranks) if spec.ranks else None
    fixes = []
    for fix in rule.fixes:
        if fix.when is not None:
            try:
                if not fix.when.evaluate(resolve):
                    continue
            except MissingSignal:
                continue
        try:
            fixes.append(Fix(
                title=fix.title.render(resolve),
                safety=fix.spec.safety,
                config_patch=fill(fix.config_patch, resolve),
                env=fill(fix.env, resolve),
                action=fill(fix.action, resolve),
            ))
        except MissingSignal:
            # A fix with a blank in it says nothing, or worse: in a merge patch a missing value
            # would be null, which deletes the key ("lr": null drops the user's learning rate).
            continue
    return Finding(
        rule=spec.code, name=spec.name, category=spec.category, severity=spec.severity,
        message=message.render(resolve), run=run, evidence=evidence, steps=steps,
        ranks=list(implicated) if implicated else ranks, fixes=fixes,
        evidence_strength=evidence_strength(shown, values),
    )


def _plain(value: Any) -> Any:
    """A JSON-friendly form: series → summary, then ``plain``."""
    return plain(value.summary if isinstance(value, StepSeries) else value)
