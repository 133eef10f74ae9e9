"""Rules as the core's own plugin: the rule files shipped in the package."""

from __future__ import annotations

from pathlib import Path

from zerodoctor.plugins.hookspecs import hookimpl


@hookimpl
def register_rules() -> list[Path]:
    from zerodoctor.rulebook.loader import builtin_rules_dir

    return [builtin_rules_dir()]
