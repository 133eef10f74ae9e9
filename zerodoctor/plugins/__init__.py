"""Plugins: the pluggy manager — built-ins first, then entry points of group ``zerodoctor``.

The core's own parsers, signals and rules load through the same hooks as a third-party
package (datasette's ``DEFAULT_PLUGINS``). A plugin that fails to import is reported once
and skipped; the rest keeps working. ``ZERODOCTOR_TRACE_HOOKS=1`` traces every hook call.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any

import pluggy

from zerodoctor.plugins import hookspecs

GROUP = "zerodoctor"
# each stage registers its own parts, sources before the signals that read them (as pytest's own plugins do)
DEFAULT_PLUGINS = ("zerodoctor.sources.plugin", "zerodoctor.signals.plugin", "zerodoctor.rulebook.plugin")
TRACE_ENV = "ZERODOCTOR_TRACE_HOOKS"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    origin: str  # "built-in", "<distribution> <version>", or "failed: <error>"
    hooks: tuple[str, ...]


@dataclass
class _State:
    manager: pluggy.PluginManager
    origins: dict[str, str]
    failures: list[PluginInfo]


@lru_cache(maxsize=1)
def _state() -> _State:
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    origins: dict[str, str] = {}
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
        origins[name] = "built-in"
    failures = []
    for ep in metadata.entry_points(group=GROUP):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else ep.value
        try:
            pm.register(ep.load(), name=ep.name)
            origins[ep.name] = dist
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the CLI down
            failures.append(PluginInfo(ep.name, f"failed: {type(exc).__name__}: {exc}", ()))
            print(f"zerodoctor: warning: plugin '{ep.name}' ({dist}) failed to load and is skipped: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
    if os.environ.get(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return _State(pm, origins, failures)


def hook() -> Any:
    """The hook caller: ``hook().register_signals()`` returns one result per plugin."""
    return _state().manager.hook


def collected(results: list[list[Any] | None]) -> list[Any]:
    """Flatten per-plugin list results, built-ins (registered first, called last by pluggy) first."""
    return [item for result in reversed(results) if result for item in result]


def merged(results: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Merge per-plugin dict results; a later plugin may add keys but not replace the core's."""
    out: dict[str, Any] = {}
    for result in reversed(results):
        for key, value in (result or {}).items():
            out.setdefault(key, value)
    return out


def listing() -> list[PluginInfo]:
    state = _state()
    infos = []
    for name, plugin in state.manager.list_name_plugin():
        hooks = tuple(sorted(h.name for h in state.manager.get_hookcallers(plugin) or ()))
        infos.append(PluginInfo(name, state.origins.get(name, "registered"), hooks))
    return infos + state.failures
