"""Plugins: the hooks. Each returns what its name says; the core registers through them too.

Hooks only ever gain arguments; an implementation may accept any subset of them, by name (pluggy passes
each the arguments it names): context reaches a plugin as named arguments, never through a factory's
signature that the core inspects.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pluggy

hookspec = pluggy.HookspecMarker("zerodoctor")
hookimpl = pluggy.HookimplMarker("zerodoctor")


class SettingsError(ValueError):
    """A plugin's settings are unusable (a hook raises it): the message names the setting, never a
    secret value, and the command exits 2 with it."""


@hookspec
def register_sources() -> list[tuple[str, str]]:
    """Return ``[(glob, format)]``: files of a run directory to read, preferred first."""


@hookspec
def register_parsers(run_id: str | None, path: Path | None) -> dict[str, Callable[[], Any]]:
    """Return ``{format: make() -> parser}`` for whole-file input formats, a parser for one file: the run's
    ``run_id`` and the file's ``path`` (each ``None`` when unknown)."""


@hookspec
def register_dialects() -> list[type]:
    """Return text-log dialect classes, built as ``cls(context)`` by the "text" parser."""


@hookspec
def register_signals() -> list[ModuleType | type]:
    """Return signal modules, each with ``SIGNALS`` and ``compute(run, values)``."""


@hookspec
def register_rules() -> list[Path]:
    """Return directories of YAML rule files."""


@hookspec
def register_notifiers() -> list[Any]:
    """Return notifiers: objects with a ``name`` and ``send(finding)``, called by ``watch`` once per new finding.

    Raise ``SettingsError`` when the plugin's settings cannot work.
    """


@hookspec
def register_commands(app: Any) -> None:
    """Add commands to the Typer ``app``."""
