"""zerodoctor plugin: data scale — is the model far too large for the tokens it will see?"""

from __future__ import annotations

from pathlib import Path

from zerodoctor.plugins.hookspecs import hookimpl


@hookimpl
def register_signals() -> list:
    from zerodoctor_datascale import signals

    return [signals]


@hookimpl
def register_rules() -> list[Path]:
    return [Path(__file__).parent / "rules"]
