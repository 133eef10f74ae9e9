"""Plugins: the hooks. Each returns what its name says; the core registers through them too.

Hooks only ever gain arguments; an implementation may accept any subset of them.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("zerodoctor")
hookimpl = pluggy.HookimplMarker("zerodoctor")


class SettingsError(ValueError):
    """A plugin's settings are unusable (a hook raises it): the message names the setting, never a
    secret value, and the command exits 2 with it."""


@hookspec
def register_sources():
    """Return ``[(glob, format)]``: files of a run directory to read, preferred first."""


@hookspec
def register_parsers():
    """Return ``{format: factory(run_id) -> parser}`` for whole-file input formats."""


@hookspec
def register_dialects():
    """Return text-log dialect classes, built as ``cls(context)`` by the "text" parser."""


@hookspec
def register_signals():
    """Return signal modules, each with ``SIGNALS`` and ``compute(run, values)``."""


@hookspec
def register_rules():
    """Return directories of YAML rule files."""


@hookspec
def register_notifiers():
    """Return notifiers: objects with a ``name`` and ``send(finding)``, called by ``watch`` once per new finding.

    Raise ``SettingsError`` when the plugin's settings cannot work.
    """


@hookspec
def register_commands(app):
    """Add commands to the Typer ``app``."""
