"""CLI: one Typer app; each command parses options and calls the stages, nothing more.

Heavy modules (pydantic models, SQLAlchemy, and never torch or deepspeed) are imported
inside the commands, so ``zerodoctor --help`` and the daemon start fast on a login node.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(
    help="Why is my DeepSpeed ZeRO run failing or slow, and which config change fixes it?",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
rules_app = typer.Typer(help="List and explain the rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


def fail(message: str) -> typer.Exit:
    """Print a one-line error to stderr; the caller raises the returned exit (code 2)."""
    typer.echo(f"zerodoctor: error: {message}", err=True)
    return typer.Exit(2)


def _load_rules(extra: list[Path] | None):  # noqa: ANN202 - returns list[Rule], imported lazily
    from zerodoctor.diagnosis import rules_from
    from zerodoctor.rulebook.loader import RuleLoadError

    try:
        return rules_from(extra)
    except RuleLoadError as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise fail(f"{len(exc.errors)} error(s) in rule files") from None


def _version(value: bool) -> None:
    if value:
        from zerodoctor import __version__

        typer.echo(f"zerodoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """zerodoctor: findings with evidence and a config patch for each."""


@app.command()
def diagnose(
    paths: List[Path] = typer.Argument(..., help="Run directories (runs/<id>/) or events JSONL files."),
    db: Optional[str] = typer.Option(None, help="Store to use (SQLAlchemy URL or SQLite path); default: a scratch file."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    fmt: Format = typer.Option(Format.text, "--format", help="Output format."),
    fail_on: FailOn = typer.Option(FailOn.error, help="Exit 1 when a finding is at or above this severity."),
    input_format: Optional[str] = typer.Option(None, help="Force the input format instead of detecting it."),
) -> None:
    """Diagnose finished (or running) training from its events; exit 1 on findings at --fail-on."""
    from zerodoctor.diagnosis import InputError, diagnose as run_diagnosis
    from zerodoctor.rulebook.finding import SEVERITY_ORDER

    loaded = _load_rules(rules)
    try:
        report = run_diagnosis(paths, db=db, rules=loaded, input_format=input_format)
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    if fmt is Format.json:
        from zerodoctor.report.json import to_json

        typer.echo(json.dumps(to_json(report), indent=2))
    elif fmt is Format.markdown:
        from zerodoctor.report.markdown import to_markdown

        typer.echo(to_markdown(report))
    else:
        from rich.console import Console

        from zerodoctor.report.text import render

        render(report, Console(highlight=False, soft_wrap=True))
    if fail_on is not FailOn.never and any(
            SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER[fail_on.value] for f in report.findings):
        raise typer.Exit(1)


@rules_app.command("list")
def rules_list(
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    fmt: Format = typer.Option(Format.text, "--format", help="Output format (text or json)."),
) -> None:
    """List every rule: code, name, category, severity, status."""
    loaded = _load_rules(rules)
    if fmt is Format.json:
        typer.echo(json.dumps([{"code": r.code, "name": r.spec.name, "category": r.spec.category,
                                "severity": r.spec.severity, "status": r.spec.status,
                                "signals": r.condition.signals} for r in loaded], indent=2))
        return
    for r in loaded:
        typer.echo(f"{r.code}  {r.spec.name:<44} {r.spec.category:<18} {r.spec.severity:<8} {r.spec.status}")


@rules_app.command("show")
def rules_show(
    code: str = typer.Argument(..., help="Rule code, e.g. ZD201, or its name."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
) -> None:
    """Explain one rule: what it checks, why it matters, an example and the fix."""
    loaded = _load_rules(rules)
    match = [r for r in loaded if code.upper() == r.code or code == r.spec.name]
    if not match:
        raise fail(f"no rule '{code}' (see 'zerodoctor rules list')")
    r = match[0]
    typer.echo(f"# {r.code} {r.spec.name} ({r.spec.category}, {r.spec.severity}, {r.spec.status})\n")
    typer.echo(f"Condition: {r.condition.text}" + (f"  for {r.spec.hold} steps" if r.spec.hold else "") + "\n")
    typer.echo(r.spec.doc.rstrip())


def main() -> None:
    app(prog_name="zerodoctor")


if __name__ == "__main__":
    sys.exit(main())
